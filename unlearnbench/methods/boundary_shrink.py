"""Boundary Shrink: relabel each forget sample with the class its FGSM neighbour falls into, and fine-tune."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.methods.distill import Teacher
from unlearnbench.ranges import FRACTION, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


def fgsm_labels(model: nn.Module, x: Tensor, y: Tensor, bound: float, mean: Tensor, std: Tensor) -> Tensor:
    """`model`'s prediction on x + bound·sign(∇ₓCE), the step taken in [0, 1] pixel space, clamped and rounded to 1/255."""
    pixels = (x * std + mean).detach().requires_grad_(True)
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(F.cross_entropy(model((pixels - mean) / std), y), pixels)
    adversarial = torch.round((pixels + bound * gradient.sign()).clamp(0, 1) * 255) / 255
    with torch.no_grad():
        return model((adversarial - mean) / std).argmax(dim=1)


@METHODS.register("boundary_shrink")
class BoundaryShrink(UnlearningMethod):
    """Boundary Shrink: CE of forget samples toward their FGSM neighbour's class (Chen et al., CVPR 2023).

    "Boundary Unlearning", as in OPTML-Group/Unlearn-Saliency `Classification/unlearn/boundary_sh.py`
    (commit 3152cfeb): the attack runs on a frozen copy of the pre-request model in eval mode,
    FGSM with bound 0.1 ("hard coding in the paper") in [0, 1] pixel space, clamped and rounded to
    1/255; each (augmented) forget batch is relabelled with the copy's prediction there and the
    model trained on it, forget set only. lr 1e-5 and 10 epochs are the paper's ("a learning rate
    of 10⁻⁵ for 10 epochs"; the OPTML scripts pass `--unlearn_lr`), SGD momentum 0.9, weight decay
    5e-4 and batch 256 from OPTML's `arg_parser.py`. Our batches are normalized, so the step is
    taken on x·std + mean and normalized back (OPTML normalizes inside the model instead).
    Training in train mode on forget-only batches, as the reference does, also moves the BN running
    statistics toward the forget set: at lr 1e-5 on digits that, not the weight update, is most of
    the effect on forget accuracy.

    Args:
        bound: FGSM step in [0, 1] pixel space.
    """

    batch_mode = BatchMode.FORGET

    search_space = space(GRADIENT_SPACE, bound=Float(0.01, 0.5, log=True))
    valid_ranges = ranges(bound=FRACTION)

    def __init__(
        self,
        bound: float = 0.1,
        lr: float = 1e-5,
        epochs: int = 10,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ):
        super().__init__(lr, epochs, batch_size, momentum, weight_decay)
        self.frozen: Teacher | None = None
        self.mean = self.std = torch.zeros(0)

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.frozen = Teacher(self.model)
        self.mean, self.std = (torch.tensor(v).view(1, -1, 1, 1) for v in data.normalization)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        x, y = batch["forget"].x, batch["forget"].y
        mean, std = self.mean.to(x.device), self.std.to(x.device)
        labels = fgsm_labels(self.frozen.module.to(x.device), x, y, self.hparams.bound, mean, std)
        return F.cross_entropy(self(x), labels)
