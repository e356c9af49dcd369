"""Small models written directly in Relax: the demo's default and the test bed for
tracking without any frontend. Weights are seeded, so builds are reproducible."""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax import op as R


class _Weights:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def __call__(self, *shape, scale: float = 0.1):
        return relax.const((self.rng.standard_normal(shape) * scale).astype("float32"))


def resnet_style(blocks: int = 2, width: int = 16, image: int = 32, classes: int = 10, seed: int = 0):
    """stem conv+bias+relu, maxpool, ``blocks`` residual blocks (the first projects with
    a strided 1x1 conv when ``blocks`` > 1), global average pool, dense."""
    w = _Weights(seed)
    bb = relax.BlockBuilder()
    data = relax.Var("data", relax.TensorType((1, 3, image, image), "float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            x = _conv_bias(bb, w, data, 3, width, 3, 1, "stem")
            x = bb.emit(R.nn.relu(x), name_hint="stem_relu")
            x = bb.emit(R.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2)), name_hint="maxpool")
            channels = width
            for i in range(blocks):
                out_ch = channels * 2 if (i == 1 and blocks > 1) else channels
                x = _block(bb, w, x, channels, out_ch, f"layer{i}")
                channels = out_ch
            x = bb.emit(R.mean(x, axis=[2, 3], keepdims=False), name_hint="avgpool")
            x = bb.emit(R.matmul(x, w(channels, classes)), name_hint="fc")
            x = bb.emit(R.add(x, w(classes)), name_hint="fc_bias")
            out = bb.emit_output(x)
        bb.emit_func_output(out)
    return bb.get()


def _conv_bias(bb, w, x, cin, cout, k, stride, name):
    x = bb.emit(R.nn.conv2d(x, w(cout, cin, k, k), strides=stride, padding=k // 2), name_hint=f"{name}_conv")
    return bb.emit(R.add(x, w(1, cout, 1, 1)), name_hint=f"{name}_bias")


def _block(bb, w, x, cin, cout, name):
    stride = 1 if cin == cout else 2
    y = _conv_bias(bb, w, x, cin, cout, 3, stride, f"{name}_conv1")
    y = bb.emit(R.nn.relu(y), name_hint=f"{name}_relu1")
    y = _conv_bias(bb, w, y, cout, cout, 3, 1, f"{name}_conv2")
    if cin != cout:
        x = _conv_bias(bb, w, x, cin, cout, 1, stride, f"{name}_downsample")
    y = bb.emit(R.add(y, x), name_hint=f"{name}_add")
    return bb.emit(R.nn.relu(y), name_hint=f"{name}_relu2")


def deep_chain(bindings: int = 2000, width: int = 8, image: int = 8, seed: int = 0):
    """A long residual chain of small ops, for measuring cost per binding."""
    w = _Weights(seed)
    bb = relax.BlockBuilder()
    data = relax.Var("data", relax.TensorType((1, width, image, image), "float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            x = data
            for i in range(bindings // 5):
                y = _conv_bias(bb, w, x, width, width, 1, 1, f"b{i}")
                y = bb.emit(R.nn.relu(y), name_hint=f"b{i}_relu")
                y = bb.emit(R.add(y, x), name_hint=f"b{i}_add")
                x = bb.emit(R.multiply(y, relax.const(np.float32(0.5))), name_hint=f"b{i}_scale")
            out = bb.emit_output(x)
        bb.emit_func_output(out)
    return bb.get()
