"""The user's names (issue 44): a model's own forward ops are layers named after the
user's ``torch.export`` program, one per line of code; a symbolic dim the user named
``seq`` is ``seq`` in every output; the compare summary counts each kind of row as
what it is."""

import json
import re
from pathlib import Path

import pytest

import relaytrace
from relaytrace.model.numerics import FUSED, NO_OUTPUT, NOT_COMPARABLE, WITHIN
from relaytrace.model.origin import OP

torch = pytest.importorskip("torch")
FIXTURE = Path(__file__).parent / "fixtures" / "own_forward.py"
TORCH_SYMBOL = re.compile(r"(?<![\w.])s\d+(?!\w)")  # torch's own names for symbolic dims: s0, s27


@pytest.fixture(scope="module")
def mixer():
    """The fixture model, its example and dynamic_shapes, the user's own export of it
    and relaytrace's fused build of it: (module, example, dynamic, graph, executable, lineage)."""
    from relaytrace.frontends.torch import from_torch
    from tests.fixtures.own_forward import make

    module, example, dynamic = make()
    graph = torch.export.export(module, example, dynamic_shapes=dynamic).graph
    executable, lineage = relaytrace.build(from_torch(module, example, name="mixer", dynamic_shapes=dynamic), "llvm")
    return module, example, dynamic, graph, executable, lineage


def _root_layers(lineage, graph):
    """The layers that are no module of the user's: ops of the root module's forward."""
    modules = {path for n in graph.nodes for path, _ in (n.meta.get("nn_module_stack") or {}).values()}
    return {layer for layer in lineage.layers() if layer.split("@")[0] not in modules}


def test_every_layer_is_named_in_the_users_own_export(mixer):
    """Each layer is a module path or a node of ``torch.export.export(module, args)``'s
    graph (not of the decomposed one TVM imports: no ``permute_1`` for a ``permute``,
    no ``mm``/``view_3`` for a ``@``); the ops of one line of forward are one layer."""
    module, _, _, graph, _, lineage = mixer
    nodes = {n.name for n in graph.nodes}
    roots = _root_layers(lineage, graph)
    assert {"emb", "proj", "norm"} <= set(lineage.layers())
    assert roots and roots <= nodes, roots - nodes
    lines = FIXTURE.read_text().splitlines()
    sources = lineage.sources()
    made = {}
    for layer in roots:
        (where,) = sources[layer]  # one line of the user's code per layer
        path, line = where.rsplit(":", 1)
        assert Path(path) == FIXTURE
        made[int(line)] = layer
    assert len(made) == len(roots) == 4  # one layer per line: four lines of forward hold ops of their own
    (matmul,) = [n.name for n in graph.nodes if n.target is torch.ops.aten.matmul.default]
    assert made[next(i for i, text in enumerate(lines, 1) if " @ " in text)] == matmul
    ops = {o.short_op for o in lineage.origins.values() if o.kind == OP and o.layer == matmul}
    assert {"strided_slice", "add", "matmul"} <= ops  # the slices, the add and the @ of that one line


def test_a_dim_the_user_named_is_named_so_in_every_output(mixer, tmp_path, capsys):
    """``Dim("seq")`` is ``seq``, never torch's ``s27``: in the Relax module, the
    lineage's shapes, every file ``profile`` writes and the CLI's messages."""
    from relaytrace import cli

    _, _, _, graph, _, lineage = mixer
    shapes = {d for o in lineage.origins.values() for s in o.input_shapes + o.output_shapes for d in s}
    assert "seq" in shapes and not any(TORCH_SYMBOL.fullmatch(str(d)) for d in shapes)
    out = tmp_path / "out"
    model = f"{FIXTURE}:make"
    assert (
        cli.main(["--quiet", "profile", model, "--input-shape", "tokens:1x9", "--repeat", "1", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    for name in ("lineage.json", "report.html", "layers.svg"):
        text = (out / name).read_text()
        assert re.search(r"\bseq\b", text) and not TORCH_SYMBOL.search(text), name
    for path in out.iterdir():
        assert not TORCH_SYMBOL.search(path.read_text()), path.name
    assert not TORCH_SYMBOL.search(printed)
    layers = {row.split(",")[0] for row in (out / "layers.csv").read_text().splitlines()[1:]}
    named = {n.name for n in graph.nodes} | {
        path for n in graph.nodes for path, _ in (n.meta.get("nn_module_stack") or {}).values()
    }
    assert layers <= named and layers & _root_layers(lineage, graph), layers - named
    assert json.loads((out / "profile.json").read_text())["inputs"] == [["tokens", [1, 9], "int64"]]
    assert cli.main(["profile", model, "--input-shape", "tokens:2x9", "--out", str(tmp_path / "bad")]) == 1
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "seq" in message and "tokens" in message and not TORCH_SYMBOL.search(message), message


def test_the_compare_summary_counts_each_kind_of_row_as_what_it_is(mixer):
    """A layer whose only op was folded away has no output: the summary says so, and
    says "not comparable" only of rows that are; its counts add up to the layers."""
    import numpy as np

    from relaytrace.analysis.comparison import compare

    module, _, dynamic, _, executable, lineage = mixer
    tokens = np.random.default_rng(0).integers(0, 32, (1, 9))
    result = compare(executable, lineage, module, [tokens], dynamic_shapes=dynamic)
    eliminated = set(lineage.journal.eliminated_by)
    folded = {
        layer
        for layer in lineage.layers()
        if all(o.id in eliminated for o in lineage.origins.values() if o.kind == OP and o.layer == layer)
    }
    assert folded and {e.layer for e in result.layers if e.status == NO_OUTPUT} == folded
    counts = result.counts()
    first = result.summary().splitlines()[0]
    assert f"{counts[NO_OUTPUT]} with no output" in first and "not comparable" not in first
    assert counts[NOT_COMPARABLE] == 0 and counts[WITHIN] >= 3
    said = [int(n) for n in re.findall(r"(\d+) (?:within|beyond|fused|with no output|not comparable)", first)]
    assert sum(said) == len(result.layers) and f"{counts[FUSED]} fused" in first
