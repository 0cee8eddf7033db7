"""Gradient ascent (GA): maximize the loss on the forget set."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("ga")
class GradientAscent(GradientMethod):
    """GA: minimize −CE on the forget set only (Thudi et al., 2022; Graves et al., 2021).

    Compared against OPTML-Group/Unlearn-Saliency at a6e89fd (2026-02-28), `Classification/unlearn/GA.py` and
    `arg_parser.py` (SGD momentum 0.9, weight decay 5e-4, batch 256), with lr 1e-4 and 5 epochs from the GA command of
    OPTML-Group/Unlearn-Sparse at 80ba55d (2024-03-12), `README.MD`. GA has no retain term, so a larger step destroys
    the model; that is the point of the baseline.
    """

    batch_mode = BatchMode.FORGET
    search_space = space(GRADIENT_SPACE)

    def __init__(
        self,
        optim: SGDSettings = SGDSettings(lr=1e-4, epochs=5),
    ):
        super().__init__(optim=optim)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        forget = batch["forget"]
        return -F.cross_entropy(self(forget.x), forget.y)
