"""Reference models with torchvision's module names and parameter shapes.

torchvision does not install beside the pinned torch here, so the definitions are
our own; a torchvision state_dict loads into them. Weights are seeded random.

Modules:

- ``generated``: seeded random torch models from the layers TVM users meet, for finding
  attribution bugs
- ``group_quant``: MLC-LLM's q4f16_1 group quantization (4-bit weights packed in
  uint32, float16 scales), for the zoo's quantized Llama
- ``mlc_llama``: a Llama written the way MLC-LLM writes its models for TVM
- ``mlc_pipeline``: a Relax pipeline written the way MLC-LLM writes its own (``mlc_style``)
- ``models``: torchvision-compatible definitions (module names and shapes match
  torchvision)
- ``nn_decoder``: a small decoder written with TVM's own frontend,
  ``tvm.relax.frontend.nn``, as LLM deployments write theirs
- ``relax_models``: small models written directly in Relax
"""

from __future__ import annotations

from ..errors import RelaytraceError, require

MODELS = ("resnet18", "resnet50", "resnet50_v1", "vgg16", "mobilenet_v2")


def get(name: str, seed: int = 0, batch: int = 1, image: int = 224):
    """(torch module in eval mode, example input of shape batch x 3 x image x image)."""
    if name not in MODELS:
        raise RelaytraceError(f"unknown zoo model {name!r}: choose one of {', '.join(MODELS)}")
    torch = require("torch", "torch")
    from . import models

    torch.manual_seed(seed)
    module = getattr(models, name)()
    models.randomize_batchnorm(module, seed)
    example = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(seed + 1))
    return module.eval(), example
