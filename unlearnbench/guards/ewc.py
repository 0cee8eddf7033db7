"""EWC: a diagonal-Fisher penalty that holds each request's weights near the previous request's."""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn

from unlearnbench.guards import Guard, pull_toward, trainable
from unlearnbench.methods.gradients import importances
from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView


def retain_batches(method: nn.Module, data: StreamView):
    """The current retain set in eval-transform minibatches of the method's batch size, on the model's device."""
    device = next(method.model.parameters()).device
    for batch in data.loader("retain", batch_size=method.batch_size):
        yield batch._replace(x=batch.x.to(device), y=batch.y.to(device))


@GUARDS.register("ewc")
class EWC(Guard):
    """EWC: adds λ·Σ F (θ − θ_{t−1})² to every step's loss, F the diagonal Fisher on the retain set (Kirkpatrick et al., PNAS 2017).

    Importance as in Avalanche's `EWCPlugin.compute_importances` (ContinualAI/avalanche,
    `avalanche/training/plugins/ewc.py`, commit 050ccd8): model in eval mode, the mean over
    minibatches of the squared minibatch CE gradient; the penalty is λ·Σ F (θ − θ*)² without the
    paper's ½, as there. Avalanche has no default λ; 0.4 is the value its example scripts use.
    Where we differ: Avalanche's default `separate` mode sums a penalty toward the weights after
    *every* earlier experience, each with the Fisher of that experience's data. In an unlearning
    stream every earlier θ_s still holds the classes forgotten after s, so anchoring to it would pull
    them back: here the anchor is the previous request's model only (θ_{t−1}, as the guards before
    this one leave it), weighted by its Fisher on the current retain set R_t, the data it must keep.
    Both are recomputed from the model at `before_request`, so nothing is saved (the method's state
    holds θ_{t−1}) and a resumed run recomputes the same penalty. Applied as a gradient term before
    every optimizer step, so it composes with manual-optimization methods too.
    """

    def __init__(self, ewc_lambda: float = 0.4):
        self.ewc_lambda = ewc_lambda
        self.anchor: list[Tensor] = []
        self.coefficient: list[Tensor] = []  # 2λF: the penalty's gradient is 2λF ⊙ (θ − θ*)

    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        model, was_training = method.model, method.model.training
        model.eval()
        fisher = importances(model, retain_batches(method, data))
        model.train(was_training)
        names = [name for name, p in model.named_parameters() if p.requires_grad]
        self.anchor = [p.detach().clone() for p in trainable(model)]
        self.coefficient = [2 * self.ewc_lambda * fisher[name] for name in names]

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        pull_toward(trainable(pl_module.model), self.anchor, self.coefficient)

    def after_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        self.anchor, self.coefficient = [], []

    @staticmethod
    def penalty(model: nn.Module, anchor: list[Tensor], coefficient: list[Tensor]) -> Tensor:
        """½ Σ c (θ − θ*)²: the loss whose gradient `pull_toward` adds (λ·Σ F (θ − θ*)² for EWC)."""
        terms = [(c * (p - a).pow(2)).sum() for p, a, c in zip(trainable(model), anchor, coefficient, strict=True)]
        return 0.5 * torch.stack(terms).sum()
