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
    """Three conv-BN-ReLU blocks, one or two max-pools, global average pooling, a linear head."""

    def __init__(self, num_classes: int, in_channels: int = 1, width: int = 32, pools: int = 1):
        super().__init__()
        if pools not in (1, 2):
            raise ValueError(f"smallcnn pools must be 1 or 2, got {pools}")
        self.num_classes = num_classes
        self.num_features = 4 * width
        first = [_conv_block(in_channels, width), nn.MaxPool2d(2)] if pools == 2 else [_conv_block(in_channels, width)]
        self.features = nn.Sequential(
            *first,
            _conv_block(width, 2 * width),
            nn.MaxPool2d(2),
            _conv_block(2 * width, 4 * width),
        )
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x: Tensor) -> Tensor:
        return self.features(x)


@ARCHS.register("smallcnn")
def smallcnn(num_classes: int, in_channels: int = 1, input_size: int = 8, width: int = 32, pools: int = 1) -> SmallCNN:
    """Small CNN (3 conv-BN-ReLU blocks of width, 2x and 4x width channels; ~0.1M parameters at width 32).

    Arch arguments (`--arch.width 16 --arch.pools 2`): compute grows with the square of `width`;
    `pools: 2` adds a max-pool after the first block, so the second and third blocks run at a half
    and a quarter of the input's side (4x less compute each) and see a 3x wider receptive field:
    on 28x28 images (Fashion-MNIST) one pool leaves each unit of the last block a third of the
    image, and global pooling over such local features underfits. Digits (8x8) keeps one pool.
    """
    return SmallCNN(num_classes, in_channels, width, pools)
