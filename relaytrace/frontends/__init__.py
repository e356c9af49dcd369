"""Importers that name each Relax binding after the layer it came from: each returns an
``ImportedModel``, the IRModule plus, for every op binding, its layer (torch module
path, ONNX node name) and source op.

Modules:

- ``common``: what every frontend returns
- ``loader``: one model loader for every form a model comes in, for build(), the CLI and
  tools
- ``nn``: TVM's own frontend, ``tvm.relax.frontend.nn`` (what LLM deployments build
  with), into an ``ImportedModel`` whose ops are named after the ``nn.Module`` path they
  ran in
- ``onnx``: ONNX → Relax, layers named by torch module path for models torch exported,
  else by ONNX node name
- ``torch``: PyTorch → Relax, with torch module paths as layers
"""

from .common import ImportedModel

__all__ = ["ImportedModel"]
