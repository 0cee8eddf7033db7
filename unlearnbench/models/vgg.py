"""VGG-16 with batch normalization, CIFAR-style: 13 conv-BN-ReLU layers, global pooling, a linear head.

As in the CIFAR VGG of the seed papers' code (SalUn, l1-sparse, pytorch-classification), the
classifier is one linear layer on the 512 channels of the last conv block. Global average
pooling makes 32x32 and 64x64 (Tiny-ImageNet) inputs both work; a max-pool that would shrink a
1x1 map is left out, so even the 8x8 digits run through it.
"""

from __future__ import annotations

from torch import Tensor, nn

from unlearnbench.models.head import PooledLinearClassifier
from unlearnbench.registry import ARCHS

VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(PooledLinearClassifier):
    """Conv-BN-ReLU stacks and max-pools from `config`, global average pooling, a linear head."""

    def __init__(self, num_classes: int, in_channels: int = 3, input_size: int = 32, config=VGG16):
        super().__init__()
        layers: list[nn.Module] = []
        channels, size = in_channels, input_size
        for entry in config:
            if entry == "M":
                if size > 1:
                    layers.append(nn.MaxPool2d(2))
                    size //= 2
                continue
            layers += [nn.Conv2d(channels, entry, 3, padding=1), nn.BatchNorm2d(entry), nn.ReLU(inplace=True)]
            channels = entry
        self.features = nn.Sequential(*layers)
        self.num_classes = num_classes
        self.num_features = channels
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(module.bias)

    def forward_features(self, x: Tensor) -> Tensor:
        return self.features(x)


@ARCHS.register("vgg16_bn")
def vgg16_bn(num_classes: int, in_channels: int = 3, input_size: int = 32) -> VGG:
    """VGG-16-BN, CIFAR-style (global pooling, 512-wide linear head; ~15M parameters)."""
    return VGG(num_classes, in_channels, input_size)
