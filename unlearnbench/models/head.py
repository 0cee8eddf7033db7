"""The timm-style classifier interface our own CNNs share: global average pool + linear head."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class PooledLinearClassifier(nn.Module):
    """Subclasses build `self.global_pool`, `self.head` and implement `forward_features`.

    `forward_head(forward_features(x), pre_logits=True)` gives the penultimate features that
    feature-space methods (LOFT) and attacks use, exactly as with a timm model.
    """

    global_pool: nn.Module
    head: nn.Linear

    def get_classifier(self) -> nn.Linear:
        return self.head

    def group_matcher(self, coarse: bool = False) -> Callable[[str], tuple[float, ...]]:
        """timm's layer-group interface (see `unlearnbench.models.blocks`): parameter name -> block ordinal.

        `features.<i>` joins the block opened by the last child at or before i that holds a conv
        (so a conv and the BN after it are one block, whether `features` nests them, as SmallCNN
        does, or lists them flat, as VGG does); everything else (the head) comes last.
        """
        opens = [any(isinstance(m, nn.Conv2d) for m in child.modules()) for child in self.features]

        def ordinal(name: str) -> tuple[float, ...]:
            prefix, _, rest = name.partition(".")
            if prefix != "features":
                return (float("inf"),)
            return (float(sum(opens[: int(rest.partition(".")[0]) + 1])),)

        return ordinal

    def forward_features(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        x = self.global_pool(x).flatten(1)
        return x if pre_logits else self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


def penultimate(model: nn.Module, x: Tensor) -> Tensor:
    """Penultimate features through the timm-style interface every arch here has."""
    return model.forward_head(model.forward_features(x), pre_logits=True)


def resized(linear: nn.Linear, width: int) -> nn.Linear:
    """A copy of `linear` with `width` outputs: existing rows kept, new rows as nn.Linear initializes them."""
    new = nn.Linear(linear.in_features, width, linear.bias is not None, linear.weight.device, linear.weight.dtype)
    rows = min(width, linear.out_features)
    with torch.no_grad():
        new.weight[:rows] = linear.weight[:rows]
        if linear.bias is not None:
            new.bias[:rows] = linear.bias[:rows]
    return new


def set_classifier(model: nn.Module, classifier: nn.Linear) -> None:
    """Put `classifier` where `model.get_classifier()` is (timm's interface names no setter)."""
    path = next(name for name, module in model.named_modules() if module is model.get_classifier())
    parent, _, attribute = path.rpartition(".")
    setattr(model.get_submodule(parent), attribute, classifier)
