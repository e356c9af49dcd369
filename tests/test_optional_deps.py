"""`import relaytrace` works without torch and onnx; the frontends say what to install."""

import subprocess
import sys
import textwrap


def test_import_without_torch_or_onnx():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('torch', 'onnx', 'networkx'):
                    raise ImportError('blocked ' + name)
        sys.meta_path.insert(0, Block())
        import relaytrace
        from relaytrace.frontends import torch as rt_torch, onnx as rt_onnx
        from relaytrace.model.lineage import Lineage
        from relaytrace.model.build_facts import BuildFacts
        graph = Lineage(BuildFacts('m', 'llvm', 'user'), {}).graph
        for fn, args in ((rt_torch.from_torch, (None, ())), (rt_onnx.from_onnx, ('x.onnx',)), (graph, ())):
            try:
                fn(*args)
            except relaytrace.RelaytraceError as exc:
                print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'relaytrace[torch]'" in out
    assert "pip install 'relaytrace[onnx]'" in out
    assert "pip install 'relaytrace[graph]'" in out
