"""NegGrad+: descend on retain and ascend on forget in the same step."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("neggrad_plus")
class NegGradPlus(UnlearningMethod):
    """NegGrad+: α·CE(retain) − (1−α)·CE(forget) over paired batches (Kurmanji et al., NeurIPS 2023).

    As in the SCRUB reference code, each step pairs one retain batch with one forget batch and the
    forget loader is cycled when it is the shorter one; α = 0.999 weighs the ascent term lightly
    because CE on forget is unbounded above. lr 0.01 and 5 epochs follow the same code.
    """

    batch_mode = BatchMode.PAIRED
    search_space = space(GRADIENT_SPACE, alpha=Float(0.5, 0.9999))

    def __init__(
        self,
        alpha: float = 0.999,
        lr: float = 0.01,
        epochs: int = 5,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ):
        super().__init__(lr, epochs, batch_size, momentum, weight_decay)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain, forget = batch["retain"], batch["forget"]
        alpha = self.hparams.alpha
        return alpha * F.cross_entropy(self(retain.x), retain.y) - (1 - alpha) * F.cross_entropy(
            self(forget.x), forget.y
        )
