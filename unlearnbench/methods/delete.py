"""DELETE: distill the pre-request model into itself with the true class masked out."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.methods.distill import Teacher
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, Int, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


def masked_target(teacher_logits: Tensor, labels: Tensor) -> Tensor:
    """The teacher's softmax with the true class's logit set to −inf: all mass moves to the other classes."""
    masked = teacher_logits.clone()
    masked[range(len(labels)), labels] = float("-inf")
    return F.softmax(masked, dim=1)


@METHODS.register("delete")
class Delete(GradientMethod):
    """DELETE: KL to the pre-request model's masked softmax on forget only (Zhou et al., CVPR 2025).

    "Decoupled Distillation to Erase": the teacher is a frozen copy of the model before the request;
    the target is its softmax with the true class removed, which keeps the "dark knowledge" about
    the other classes; the loss is KL(batchmean) from the student's log-softmax. The reference
    (`method/delete.py`) masks with −1e10 where we use −inf (both give exactly zero mass), uses SGD
    with momentum 0.9, no weight decay, batch 128; lr 1e-3 is its recommended CIFAR-10 setting
    (`scripts.sh`), 20 epochs its config. Its `disable_bn` option (off by default) is not exposed.
    """

    batch_mode = BatchMode.FORGET
    search_space = space(lr=Float(1e-4, 1e-1, log=True), epochs=Int(1, 20))

    def __init__(
        self,
        optim: SGDSettings = SGDSettings(lr=1e-3, epochs=20, batch_size=128, weight_decay=0.0),
    ):
        super().__init__(optim=optim)
        self.teacher: Teacher | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.teacher = Teacher(self.model)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        forget = batch["forget"]
        target = masked_target(self.teacher(forget.x), forget.y)
        return F.kl_div(F.log_softmax(self(forget.x), dim=1), target, reduction="batchmean")
