"""Importers that name each Relax binding after the layer it came from.

Each importer returns an ImportedModel: the IRModule plus, for every op binding of
``main``, the layer (torch module path, ONNX node name) and the source op.
"""

from .common import ImportedModel

__all__ = ["ImportedModel"]
