"""torchvision-compatible definitions (module names and shapes match torchvision)."""

from __future__ import annotations

import torch
from torch import nn


def randomize_batchnorm(module: nn.Module, seed: int) -> None:
    """Non-trivial running statistics, so folding BatchNorm is actually tested."""
    gen = torch.Generator().manual_seed(seed + 2)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None and m.running_var is not None:
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: ``conv1``/``bn1`` (3x3, strided), ``relu``,
    ``conv2``/``bn2`` (3x3), and an optional ``downsample`` on the shortcut."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        """``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut)``, the shortcut ``x`` or
        ``downsample(x)``: (N, planes, H / stride, W / stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """torchvision's (v1.5) strides the 3x3 conv; the original ResNet v1 (Caffe, MXNet,
    the Relay-era TVM tutorials) strides the first 1x1 conv."""

    expansion = 4
    stride_in_1x1 = False

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        first, second = (stride, 1) if self.stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, first, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, second, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        """1x1, 3x3 and 1x1 conv-BN stages (ReLU after the first two) to ``4 * planes``
        channels, plus ``x`` or ``downsample(x)``, then ReLU: (N, 4 * planes, H / stride, W / stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet: the stem ``conv1``/``bn1``/``relu``/``maxpool``,
    ``layer1``-``layer4`` of ``block`` (64 to 512 planes, strides 1, 2, 2, 2), ``avgpool``, ``fc``."""

    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        """Class logits (N, num_classes) of an (N, 3, H, W) image batch."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18():
    """ResNet-18 as torchvision's: BasicBlocks, [2, 2, 2, 2] per stage."""
    return ResNet(BasicBlock, [2, 2, 2, 2])


def resnet50():
    """ResNet-50 as torchvision's (v1.5): Bottlenecks striding their 3x3 conv, [3, 4, 6, 3] per stage."""
    return ResNet(Bottleneck, [3, 4, 6, 3])


class BottleneckV1(Bottleneck):
    """The ResNet v1 Bottleneck: strides its first 1x1 conv, not the 3x3; same names and
    parameter shapes as ``Bottleneck``."""

    stride_in_1x1 = True


def resnet50_v1():
    """ResNet-50 v1: the model of the Relay-era threads (same names and parameter shapes)."""
    return ResNet(BottleneckV1, [3, 4, 6, 3])


class VGG(nn.Module):
    """torchvision's VGG without batch norm: ``features`` from ``cfg`` (a 3x3 conv and ReLU
    per channel count, a 2x2 max pool per ``"M"``), ``avgpool`` to 7x7, and a
    ``classifier`` of three linear layers, ReLU and dropout between."""

    def __init__(self, cfg, num_classes=1000):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        """Class logits (N, num_classes) of an (N, 3, H, W) image batch."""
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg16():
    """VGG-16 (configuration D) as torchvision's ``vgg16``."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    return VGG(cfg)


class Conv2dNormActivation(nn.Sequential):
    """torchvision's Conv2dNormActivation as MobileNetV2 uses it: a bias-free conv padded
    to keep the size at stride 1, BatchNorm, and ReLU6 unless ``activation`` is false."""

    def __init__(self, cin, cout, kernel=3, stride=1, groups=1, activation=True):
        layers = [
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if activation:
            layers.append(nn.ReLU6(inplace=True))
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2's inverted residual block: ``conv`` is a 1x1 expansion (none when
    ``expand_ratio`` is 1), a 3x3 depthwise conv and a 1x1 linear projection with
    BatchNorm; a residual connection when the stride is 1 and the channels are kept."""

    def __init__(self, cin, cout, stride, expand_ratio):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = [] if expand_ratio == 1 else [Conv2dNormActivation(cin, hidden, 1)]
        layers += [
            Conv2dNormActivation(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        """``conv(x)``, plus ``x`` with a residual connection: (N, cout, H / stride, W / stride)."""
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 (width 1.0): ``features`` (a strided stem conv, 17
    inverted residual blocks, a 1x1 conv to 1280 channels) and ``classifier``
    (dropout, linear)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        settings = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        features: list[nn.Module] = [Conv2dNormActivation(3, 32, stride=2)]
        channels = 32
        for t, c, n, s in settings:
            for i in range(n):
                features.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                channels = c
        features.append(Conv2dNormActivation(channels, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        """Class logits (N, num_classes): features, global average pool, flatten, classifier."""
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2():
    """MobileNetV2 as torchvision's ``mobilenet_v2``, 1000 classes."""
    return MobileNetV2()
