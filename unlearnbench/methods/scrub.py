"""SCRUB: a student that moves away from its teacher on forget and stays close to it on retain."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import PairedManualMethod, SGDSettings
from unlearnbench.methods.distill import KeepsTeacher, distill_kl
from unlearnbench.ranges import NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, Int, space


@METHODS.register("scrub")
class SCRUB(KeepsTeacher, PairedManualMethod):
    """SCRUB: max-steps on forget, min-steps on retain against the pre-request model (Kurmanji et al., NeurIPS 2023).

    "Towards Unbounded Machine Unlearning". A max-step maximizes KL(teacher ‖ student) on a forget batch, a min-step
    minimizes γ·CE + α·KL on a retain batch. Compared against `large_scale_unlearning.ipynb` of meghdadk/SCRUB at
    98ffb11: T = 4, msteps = 2, γ = 0.99, α = 0.001, 3 epochs, SGD lr 5e-4, momentum 0.9, weight decay 5e-4 (lr decay at
    epochs 3, 5, 9 never triggers), SWA off (`smoothing = 0`). Where we differ: per epoch it runs a forget pass (batch
    512), then a retain pass (batch 256; `sgda_batch_size` 128 and `del_batch_size` 32 unused); here batch 128 serves
    both, and an epoch's first ⌈|F|/batch⌉ steps each do a max-step then a min-step (the paper's SGDA reading).

    Args:
        temperature: KL temperature T.
        msteps: epochs (from the first) that take max-steps on forget.
        gamma: weight γ of CE in a min-step.
        alpha: weight α of KL in a min-step.
    """

    search_space = space(
        GRADIENT_SPACE,
        optim={"epochs": Int(1, 5)},
        msteps=Int(1, 5),
        temperature=Float(1.0, 8.0, log=True),
        gamma=Float(0.1, 1.0),
        alpha=Float(1e-4, 1.0, log=True),
    )
    valid_ranges = ranges(temperature=POSITIVE, msteps=NON_NEGATIVE, gamma=NON_NEGATIVE, alpha=NON_NEGATIVE)

    def __init__(
        self,
        temperature: float = 4.0,
        msteps: int = 2,
        gamma: float = 0.99,
        alpha: float = 0.001,
        optim: SGDSettings = SGDSettings(lr=5e-4, epochs=3, batch_size=128),
    ):
        super().__init__(optim=optim)

    def training_step(self, batch: dict[str, Batch], batch_idx: int) -> Tensor:
        forget, retain, h = batch["forget"], batch["retain"], self.hparams
        if self.current_epoch < h.msteps and batch_idx < self.forget_batches:
            self.manual_step(-distill_kl(self(forget.x), self.teacher(forget.x), h.temperature))
        logits, target = self(retain.x), self.teacher(retain.x)
        loss = h.gamma * F.cross_entropy(logits, retain.y) + h.alpha * distill_kl(logits, target, h.temperature)
        return self.manual_step(loss)
