"""Shrink-and-perturb before each request (Ash & Adams, "On Warm-Starting Neural Network Training", NeurIPS 2020)."""

from __future__ import annotations

import torch
from torch import nn

from unlearnbench.guards import Guard, trainable
from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView


@GUARDS.register("shrink_perturb")
class ShrinkPerturb(Guard):
    """Shrink-and-perturb: θ ← shrink·θ + sigma·ε, ε ~ N(0, I), before each request's prepare.

    Applied to the trainable parameters (not BN statistics) before `prepare`, so a method's
    per-request set-up (SalUn's mask and frozen values) sees the perturbed model. The noise comes
    from the run's per-request seed. shrink=1, sigma=0 is the identity.
    """

    def __init__(self, shrink: float = 0.9, sigma: float = 0.001):
        self.shrink = shrink
        self.sigma = sigma

    @torch.no_grad()
    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        for p in trainable(method.model):
            p.mul_(self.shrink)
            if self.sigma:
                p.add_(torch.randn_like(p), alpha=self.sigma)
