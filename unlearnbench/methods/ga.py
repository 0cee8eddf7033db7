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

    Defaults from SalUn's reference scripts (Fan et al., ICLR 2024): lr 1e-4, 5 epochs. GA has no
    retain term, so a larger step destroys the model; that is the point of the baseline.
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
