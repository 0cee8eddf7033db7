"""Boundary Shrink: relabel each forget sample with the class its FGSM neighbour falls into, and fine-tune."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.adversarial import fgsm_labels
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.methods.distill import Teacher
from unlearnbench.ranges import FRACTION, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


@METHODS.register("boundary_shrink")
class BoundaryShrink(GradientMethod):
    """Boundary Shrink: CE of forget samples toward their FGSM neighbour's class (Chen et al., CVPR 2023).

    "Boundary Unlearning", as in OPTML-Group/Unlearn-Saliency `Classification/unlearn/boundary_sh.py` (commit
    3152cfeb): FGSM with bound 0.1 ("hard coding in the paper") against a frozen copy of the pre-request model in
    eval mode, in [0, 1] pixel space, clamped and rounded to 1/255; each (augmented) forget batch is relabelled
    with the copy's prediction there and trained on, forget set only. lr 1e-5 and 10 epochs are the paper's (the
    OPTML scripts pass `--unlearn_lr`), SGD momentum 0.9, weight decay 5e-4 and batch 256 OPTML's `arg_parser.py`.
    Our batches are normalized, so the step is taken on x·std + mean and normalized back (OPTML normalizes inside
    the model). Train mode on forget-only batches, as there, also moves BN's running statistics toward the forget
    set (at lr 1e-5 on digits, most of the effect).

    Args:
        bound: FGSM step in [0, 1] pixel space.
    """

    batch_mode = BatchMode.FORGET
    search_space = space(GRADIENT_SPACE, bound=Float(0.01, 0.5, log=True))
    valid_ranges = ranges(bound=FRACTION)

    def __init__(
        self,
        bound: float = 0.1,
        optim: SGDSettings = SGDSettings(lr=1e-5),
    ):
        super().__init__(optim=optim)
        self.frozen: Teacher | None = None
        self.normalization: tuple = ((), ())

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.frozen = Teacher(self.model)
        self.normalization = data.normalization

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        x, y = batch["forget"].x, batch["forget"].y
        labels = fgsm_labels(self.frozen.module.to(x.device), x, y, self.hparams.bound, self.normalization)
        return F.cross_entropy(self(x), labels)
