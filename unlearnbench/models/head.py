"""The timm-style classifier interface our own CNNs share: global average pool + linear head."""

from __future__ import annotations

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

    def forward_features(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        x = self.global_pool(x).flatten(1)
        return x if pre_logits else self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))
