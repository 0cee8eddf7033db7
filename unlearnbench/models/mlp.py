"""A multilayer perceptron on the flattened image: the arch that memorizes its training set on a CPU."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

from torch import Tensor, nn

from unlearnbench.registry import ARCHS


class MLP(nn.Module):
    """Flatten, `depth` Linear-ReLU hidden layers (`blocks`), a linear head; timm's classifier interface.

    The penultimate features are the last hidden layer's activations, so `forward_features` returns
    them already flat (nothing to pool) and `forward_head(x, pre_logits=True)` is the identity: LOFT
    and the feature attacks see the last hidden layer. Each hidden layer is one block of
    `group_matcher` (CF-k, EU-k), the head the last.
    """

    def __init__(self, num_classes: int, in_features: int, widths: list[int]):
        super().__init__()
        sizes = [in_features, *widths]
        self.blocks = nn.Sequential(
            *(nn.Sequential(nn.Linear(a, b), nn.ReLU(inplace=True)) for a, b in pairwise(sizes))
        )
        self.num_classes = num_classes
        self.num_features = widths[-1]
        self.head = nn.Linear(self.num_features, num_classes)

    def get_classifier(self) -> nn.Linear:
        return self.head

    def group_matcher(self, coarse: bool = False) -> Callable[[str], tuple[float, ...]]:
        """Parameter name -> block ordinal: `blocks.<i>` is hidden layer i, everything else (the head) last."""

        def ordinal(name: str) -> tuple[float, ...]:
            prefix, _, rest = name.partition(".")
            return (float(rest.partition(".")[0]),) if prefix == "blocks" else (float("inf"),)

        return ordinal

    def forward_features(self, x: Tensor) -> Tensor:
        return self.blocks(x.flatten(1))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        return x if pre_logits else self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@ARCHS.register("mlp")
def mlp(num_classes: int, in_channels: int = 1, input_size: int = 28, width: int = 512, depth: int = 2) -> MLP:
    """MLP on the flattened image: `depth` ReLU hidden layers of width, width/2, ... (784-512-256-10 on 28x28 grey).

    Arch arguments (`--arch.width 1024 --arch.depth 3`): hidden layer i (from 0) has
    `max(1, width // 2**i)` units, halving as the classic MNIST MLPs narrow towards the head, so
    every pair of whole numbers >= 1 (all that `check_arch_args` lets through) builds a net.
    Without convolutions or pooling nothing is shared across pixels, so a wide MLP fits every
    training image of Fashion-MNIST (a memorizing model, docs/scale.md) at a fraction of a CNN's
    CPU cost. It takes square inputs of any size and channel count (Fashion-MNIST's 28x28 as they
    are), flattened to `in_channels * input_size**2` features.
    """
    return MLP(num_classes, in_channels * input_size * input_size, [max(1, width // 2**i) for i in range(depth)])
