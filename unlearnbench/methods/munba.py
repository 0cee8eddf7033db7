"""MUNBa: weigh the retain and forget objectives by the Nash bargaining solution of their gradients."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import ClipsGradientNorm, PairedManualMethod, SGDSettings, random_labels
from unlearnbench.methods.gradients import flat_gradient, nash_bargaining
from unlearnbench.ranges import POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Categorical, Float, space

#: The reference's weights (α_r, α_f) when bargaining fails.
FALLBACK = (1.0, 0.1)


def munba_weights(g_r: Tensor, g_f: Tensor) -> tuple[float, float]:
    """The bargaining weights, or the reference's fallback `FALLBACK` when bargaining fails."""
    return nash_bargaining(g_r, g_f) or FALLBACK


@METHODS.register("munba")
class MUNBa(ClipsGradientNorm, PairedManualMethod):
    """MUNBa: α_r·CE(retain) + α_f·CE(forget, random labels), α by Nash bargaining (Wu & Harandi, CVPR 2025).

    "MUNBa: Machine Unlearning via Nash Bargaining". Compared against JingWu321/MUNBa at 7038772 (2025-03-28),
    `Classification/unlearn/MUNBa.py` (its closed-form branch): per step the flattened gradients of both losses give α
    (see `gradients.nash_bargaining`), the combined loss is back-propagated and the gradient norm clipped at 1.0; random
    forget labels may hit the true class. lr 0.01, 10 epochs, batch 256, SGD momentum 0.9, weight decay 5e-4 as in its
    `arg_parser.py`. The reference zips the two loaders, so once the forget loader runs out it takes plain retain CE
    steps without clipping; that is `cycle_forget=False`. Our default (`cycle_forget=True`) cycles the forget batches.

    Args:
        cycle_forget: cycle the forget batches so every step bargains (false: the reference's zip).
        clip: gradient-norm clipping threshold.
    """

    search_space = space(GRADIENT_SPACE, clip=Float(0.1, 10.0, log=True), cycle_forget=Categorical((True, False)))
    valid_ranges = ranges(clip=POSITIVE)

    def __init__(self, cycle_forget: bool = True, clip: float = 1.0, optim: SGDSettings = SGDSettings()):
        super().__init__(optim=optim)

    def training_step(self, batch: dict[str, Batch], batch_idx: int) -> Tensor:
        forget, retain = batch["forget"], batch["retain"]
        loss_r = F.cross_entropy(self(retain.x), retain.y)
        if not (self.hparams.cycle_forget or batch_idx < self.forget_batches):
            self.manual_step(loss_r)
            return loss_r
        loss_f = F.cross_entropy(self(forget.x), random_labels(forget.y, self.num_classes, exclude_true=False))
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        g_r, g_f = (flat_gradient(part, parameters, retain_graph=True) for part in (loss_r, loss_f))
        alpha_r, alpha_f = munba_weights(g_r, g_f)
        loss = alpha_r * loss_r + alpha_f * loss_f
        self.manual_step(loss, self.clip_gradient_norm)
        return loss
