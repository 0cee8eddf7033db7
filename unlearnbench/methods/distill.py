"""Shared pieces of the distillation-based methods (SCRUB, Bad Teacher, DELETE, SCAR)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.streams.base import StreamView, UnlearningRequest


class Teacher:
    """A frozen copy of a model, held outside `nn.Module` registration.

    Not being a submodule keeps it out of the method's `state_dict()` (a resumed run rebuilds it in
    `prepare`), out of the optimizer, and out of Lightning's `train()`: it stays in eval mode and its
    parameters never change. It follows the device of the inputs it is called on.
    """

    def __init__(self, model: nn.Module):
        self.module = copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def __call__(self, x: Tensor) -> Tensor:
        return self.module.to(x.device)(x)


class KeepsTeacher:
    """Mixin: `self.teacher`, a `Teacher` of the model as the request found it, made in `prepare` (SCRUB, SCAR, DELETE)."""

    teacher: Teacher | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        super().prepare(request, data)
        self.teacher = Teacher(self.model)


def reinitialized(model: nn.Module) -> nn.Module:
    """A copy of `model` with freshly initialized weights (every module's own `reset_parameters`)."""
    fresh = copy.deepcopy(model)
    for module in fresh.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return fresh


def distill_kl(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0, t_squared: bool = True
) -> Tensor:
    """KL(teacher ‖ student) on temperature-softened outputs, batch mean; times T² (Hinton et al., 2015) if `t_squared`.

    Bad Teacher's reference leaves out the T² factor (its temperature is 1 by default).
    """
    log_student = F.log_softmax(student_logits / temperature, dim=1)
    teacher = F.softmax(teacher_logits / temperature, dim=1)
    kl = F.kl_div(log_student, teacher, reduction="batchmean")
    return kl * temperature**2 if t_squared else kl
