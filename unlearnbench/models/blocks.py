"""A model's blocks in input-to-output order, for methods that act on "the last k blocks" (CF-k, EU-k).

Every arch answers through timm's layer-group interface, `group_matcher(coarse=False)` (the one
timm uses for layer-wise learning-rate decay): timm models (ResNets, Swin, any `timm:` model) have
it, and our own archs implement it (`PooledLinearClassifier` for SmallCNN and VGG, `PreResNet`).
timm's `group_parameters` turns it into ordered groups of parameter names: a ResNet gives its stem,
each residual block and the classifier; Swin its patch embedding, each transformer block (the final
norm joins the last) and the head; SmallCNN and VGG each conv with its BN, then the head.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


def parameter_blocks(model: nn.Module) -> list[list[str]]:
    """Parameter names grouped by block, first block (stem) to last (the classifier)."""
    from timm.models import group_parameters  # here, not above: every run imports this module, few call it (0.7 s)

    groups = group_parameters(model, model.group_matcher(coarse=False))
    return [groups[ordinal] for ordinal in sorted(groups)]


def last_blocks(model: nn.Module, k: int) -> set[str]:
    """Names of the parameters in the last k blocks; refuses a k the model does not have."""
    blocks = parameter_blocks(model)
    if not 1 <= k <= len(blocks):
        raise ValueError(f"k must be between 1 and the model's {len(blocks)} blocks, got {k}")
    return {name for block in blocks[-k:] for name in block}


@contextmanager
def trainable_only(model: nn.Module, names: set[str]) -> Iterator[None]:
    """Inside the block only the parameters named in `names` train; after it every parameter that did trains again.

    Restored after the block, so the next request, the update vector and guards see every parameter.
    """
    frozen = [p for name, p in model.named_parameters() if name not in names and p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)
