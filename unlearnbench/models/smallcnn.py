"""A small convolutional network sized for 8x8 to 32x32 inputs: the default arch for digits."""

from __future__ import annotations

from torch import Tensor, nn

from unlearnbench.models.head import PooledLinearClassifier
from unlearnbench.registry import ARCHS


def _conv_block(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallCNN(PooledLinearClassifier):
    """Three conv-BN-ReLU blocks, one max-pool, global average pooling, a linear head."""

    def __init__(self, num_classes: int, in_channels: int = 1, width: int = 32):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = 4 * width
        self.features = nn.Sequential(
            _conv_block(in_channels, width),
            _conv_block(width, 2 * width),
            nn.MaxPool2d(2),
            _conv_block(2 * width, 4 * width),
        )
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x: Tensor) -> Tensor:
        return self.features(x)


@ARCHS.register("smallcnn")
def smallcnn(num_classes: int, in_channels: int = 1, input_size: int = 8, width: int = 32) -> SmallCNN:
    """Small CNN (3 conv-BN-ReLU blocks of width, 2x and 4x width channels; ~0.1M parameters at width 32).

    `width` is an arch argument (`--arch.width 16`): compute grows with its square, so a CPU
    benchmark on 28x28 images (Fashion-MNIST) can trade capacity for time.
    """
    return SmallCNN(num_classes, in_channels, width)
