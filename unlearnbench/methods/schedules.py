"""Step schedules of a method that takes its own optimizer steps (SFR-on): cosine decay and fast-slow weights.

Not a method (registers nothing). Lightning steps a schedule itself only under automatic optimization; a
`PairedManualMethod` steps `self.lr_schedulers()` and averages its weights in its own `training_step`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor


def cosine_decay(step: int, total: float) -> float:
    """(1 + cos(π·step/total))/2: 1 at step 0, 0 at `total`."""
    return (1 + math.cos(math.pi * step / total)) / 2


class CosineLR:
    """Mixin for a `GradientMethod`: its lr decays by a cosine over the fit's estimated optimizer steps, to 0."""

    def configure_optimizers(self):
        optimizer = super().configure_optimizers()
        steps = max(1, int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)}


@contextmanager
def fast_slow(params: list[Tensor], beta: float) -> Iterator[None]:
    """Fast-slow weights: after the block, θ ← β·θ + (1 − β)·θ_before for each of `params` (β = 1: off, no copy)."""
    before = [p.detach().clone() for p in params] if beta < 1 else None
    yield
    if before is not None:
        with torch.no_grad():
            for p, old in zip(params, before, strict=True):
                p.lerp_(old, 1 - beta)
