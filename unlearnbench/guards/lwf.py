"""LwF: distil every retain batch toward the model the previous request left."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.guards import Guard, trainable
from unlearnbench.methods.distill import Teacher
from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView


def lwf_distillation(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """KL(teacher ‖ student) at temperature T, batch mean, no T² factor (Avalanche's `_distillation_loss`)."""
    log_student = F.log_softmax(student_logits / temperature, dim=1)
    return F.kl_div(log_student, F.softmax(teacher_logits / temperature, dim=1), reduction="batchmean")


@GUARDS.register("lwf")
class LwF(Guard):
    """LwF: adds α·KL(f_{t−1}(x) ‖ f(x)) at temperature T on each step's retain batch (Li & Hoiem, TPAMI 2017).

    "Learning without Forgetting". Defaults and loss from Avalanche's `LearningWithoutForgetting`
    (ContinualAI/avalanche, `avalanche/training/regularization.py`, commit 01d2739): α = 1, T = 2,
    `kl_div(..., reduction="batchmean")` without T². The teacher is a frozen copy of the model at
    `before_request` (θ_{t−1}; the pretrained model at request 1, which is the model before the first
    request as every earlier experience is in Avalanche), so it needs no saved state: a resumed run
    rebuilds it from the method's saved model. Where we differ: LwF distils on the new task's inputs
    and Avalanche on the current minibatch; here only the retain part of each step's batch is
    distilled (the forget samples are what should change), so with forget-only methods (GA) the
    guard does nothing. The term is added as its gradient before each optimizer step, which costs a
    second forward pass of the retain batch (in train mode, so BatchNorm sees it twice).
    """

    def __init__(self, alpha: float = 1.0, temperature: float = 2.0):
        self.alpha = alpha
        self.temperature = temperature
        self.teacher: Teacher | None = None
        self._retain: Batch | None = None

    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        self.teacher = Teacher(method.model)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self._retain = batch.get("retain") if isinstance(batch, dict) else None

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        retain = self._retain
        if self.teacher is None or retain is None or not len(retain.x):
            return
        params = trainable(pl_module.model)
        with torch.enable_grad():
            loss = self.alpha * lwf_distillation(pl_module.model(retain.x), self.teacher(retain.x), self.temperature)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        for p, g in zip(params, grads, strict=True):
            if g is not None:
                p.grad = g if p.grad is None else p.grad + g

    def after_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        self.teacher = self._retain = None
