"""MAS: an output-sensitivity penalty that holds each request's weights near the previous request's."""

from __future__ import annotations

from collections.abc import Iterable

import lightning as L
import torch
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.guards import Guard, pull_toward, trainable
from unlearnbench.guards.ewc import retain_batches
from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView


def mas_importance(model: nn.Module, batches: Iterable[Batch]) -> list[Tensor]:
    """Ω = (1/N) Σ_b |b|·|∇ mean_{x∈b} ‖f(x)‖₂|: no labels, as in FACIL's `mas.py`."""
    params = trainable(model)
    total, count = [torch.zeros_like(p) for p in params], 0
    for batch in batches:
        grads = torch.autograd.grad(model(batch.x).norm(p=2, dim=1).mean(), params, allow_unused=True)
        for t, g in zip(total, grads, strict=True):
            if g is not None:
                t += g.abs() * len(batch.x)
        count += len(batch.x)
    return [t / max(count, 1) for t in total]


@GUARDS.register("mas")
class MAS(Guard):
    """MAS: adds λ/2·Σ Ω (θ − θ_{t−1})² to every step's loss, Ω the output-norm sensitivity on retain (Aljundi et al., ECCV 2018).

    "Memory Aware Synapses". Defaults from Avalanche's `MASPlugin` (ContinualAI/avalanche,
    `avalanche/training/plugins/mas.py`, commit 2f59509; itself after FACIL's `mas.py`): λ = 1,
    penalty λ/2·Σ Ω (θ − θ*)², importance blended across requests Ω ← α·Ω_prev + (1 − α)·Ω_cur with
    α = 0.5 (Ω_prev = 0 before the first). Ω_cur is the gradient magnitude of the batch-mean L2 norm
    of the logits, weighted by batch size and divided by the sample count as in FACIL (Avalanche
    multiplies by `len(batch)`, the length of the (x, y, t) tuple, not the batch size). Where we
    differ: Avalanche computes Ω in train mode, which would move the served model's BatchNorm
    statistics; here it is eval mode. As for `ewc`, Ω_cur is measured on the current retain set
    R_t from θ_{t−1} at `before_request` and the anchor is θ_{t−1} only. The blended Ω is the
    guard's saved state.
    """

    def __init__(self, lambda_reg: float = 1.0, alpha: float = 0.5):
        self.lambda_reg = lambda_reg
        self.alpha = alpha
        self.importance: list[Tensor] = []  # the blended Ω of the last request served (saved)
        self.anchor: list[Tensor] = []
        self.coefficient: list[Tensor] = []

    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        model, was_training = method.model, method.model.training
        model.eval()
        current = mas_importance(model, retain_batches(method, data))
        model.train(was_training)
        previous = (
            [p.to(c) for p, c in zip(self.importance, current, strict=True)]
            if self.importance
            else [torch.zeros_like(c) for c in current]
        )
        blended = [self.alpha * p + (1 - self.alpha) * c for p, c in zip(previous, current, strict=True)]
        self.importance = [b.cpu() for b in blended]
        self.anchor = [p.detach().clone() for p in trainable(model)]
        self.coefficient = [self.lambda_reg * b for b in blended]

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        pull_toward(trainable(pl_module.model), self.anchor, self.coefficient)

    def after_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        self.anchor, self.coefficient = [], []

    def state_dict(self) -> dict[str, Tensor]:
        return {f"importance.{i}": value for i, value in enumerate(self.importance)}

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        self.importance = [state_dict[f"importance.{i}"] for i in range(len(state_dict))]
