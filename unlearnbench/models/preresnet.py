"""Pre-activation ResNet for CIFAR-sized inputs (He et al., 2016), as in pytorch-classification.

`preresnet110` uses bottleneck blocks: depth = 9n + 2 with n = 12 blocks in each of three stages
of 16, 32 and 64 bottleneck widths (64, 128, 256 output channels), a 3x3 stem, and a final
BN-ReLU before global pooling (part of `forward_features`, so features are post-activation).
Projection shortcuts act on the block's raw input, as in the reference code.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.models.head import PooledLinearClassifier
from unlearnbench.registry import ARCHS


class PreActBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1):
        super().__init__()
        out_channels = width * self.expansion
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        out = self.conv3(F.relu(self.bn3(out)))
        return out + (x if self.shortcut is None else self.shortcut(x))


class PreResNet(PooledLinearClassifier):
    """Stem, three stages of pre-activation bottlenecks, BN-ReLU, global average pooling, linear head."""

    def __init__(self, num_classes: int, depth: int = 110, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 9:
            raise ValueError(f"bottleneck PreResNet depth must be 9n+2 (e.g. 110, 164), got {depth}")
        blocks = (depth - 2) // 9
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        channels, stages = 16, []
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            layers = []
            for i in range(blocks):
                layers.append(PreActBottleneck(channels, width, stride if i == 0 else 1))
                channels = width * PreActBottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.bn = nn.BatchNorm2d(channels)
        self.num_classes = num_classes
        self.num_features = channels
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def group_matcher(self, coarse: bool = False) -> dict:
        """timm's layer groups: the stem conv, each bottleneck (the final BN joins the last), the head."""
        return {"stem": r"^conv1", "blocks": [(r"^layer(\d+)\.(\d+)", None), (r"^bn\.", (99999,))]}

    def forward_features(self, x: Tensor) -> Tensor:
        x = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        return F.relu(self.bn(x))


@ARCHS.register("preresnet110")
def preresnet110(num_classes: int, in_channels: int = 3, input_size: int = 32) -> PreResNet:
    """PreResNet-110 with bottleneck blocks (3 stages x 12, 256-wide head; ~1.7M parameters)."""
    return PreResNet(num_classes, 110, in_channels)
