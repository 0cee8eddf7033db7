"""MUNBa: weigh the retain and forget objectives by the Nash bargaining solution of their gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import ClipsGradientNorm, GradientMethod, SGDSettings, batches_in, random_labels
from unlearnbench.methods.gradients import flat_gradient
from unlearnbench.ranges import POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Categorical, Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode

#: The reference's weights (α_r, α_f) when bargaining fails.
FALLBACK = (1.0, 0.1)


def nash_bargaining(g_r: Tensor, g_f: Tensor, eps: float = 1e-8) -> tuple[float, float] | None:
    """Closed-form α > 0 with Gα = 1/α for G the Gram matrix of (g_r, g_f); None if not both positive.

    With g1 = ‖g_r‖², g2 = ⟨g_r, g_f⟩, g3 = ‖g_f‖² (in float64; ε as in the reference):
    α1 = sqrt((g1·g3 − g2·sqrt(g1·g3)) / (g1²·g3 − g1·g2² + ε)), α2 = (1 − g1·α1²) / (g2·α1 + ε).
    In exact arithmetic α = (1/sqrt(g1·(1+c)), 1/sqrt(g3·(1+c))) with c the gradients' cosine, so
    it fails (zero, negative or NaN) only for parallel gradients, orthogonal ones (when ε is
    negligible against the norms) and non-finite values.
    """
    g1, g2, g3 = torch.stack([g_r @ g_r, g_r @ g_f, g_f @ g_f]).double()
    alpha1 = torch.sqrt((g1 * g3 - g2 * torch.sqrt(g1 * g3)) / (g1 * g1 * g3 - g1 * g2 * g2 + eps))
    alpha2 = (1 - g1 * alpha1 * alpha1) / (g2 * alpha1 + eps)
    alpha1, alpha2 = alpha1.item(), alpha2.item()
    return (alpha1, alpha2) if alpha1 > 0 and alpha2 > 0 else None


def munba_weights(g_r: Tensor, g_f: Tensor) -> tuple[float, float]:
    """The bargaining weights, or the reference's fallback `FALLBACK` when bargaining fails."""
    return nash_bargaining(g_r, g_f) or FALLBACK


@METHODS.register("munba")
class MUNBa(ClipsGradientNorm, GradientMethod):
    """MUNBa: α_r·CE(retain) + α_f·CE(forget, random labels), α by Nash bargaining (Wu & Harandi, CVPR 2025).

    "MUNBa: Machine Unlearning via Nash Bargaining". Compared against JingWu321/MUNBa at 7038772 (2025-03-28),
    `Classification/unlearn/MUNBa.py` (its closed-form branch): per step the flattened gradients of both losses give α
    (see `nash_bargaining`), the combined loss is back-propagated and the gradient norm clipped at 1.0; random forget
    labels may hit the true class. lr 0.01, 10 epochs, batch 256, SGD momentum 0.9, weight decay 5e-4 as in its
    `arg_parser.py`. The reference zips the two loaders, so once the forget loader runs out it takes plain retain CE
    steps without clipping; that is `cycle_forget=False`. Our default (`cycle_forget=True`) cycles the forget batches.

    Args:
        cycle_forget: cycle the forget batches so every step bargains (false: the reference's zip).
        clip: gradient-norm clipping threshold.
    """

    batch_mode = BatchMode.PAIRED
    search_space = space(GRADIENT_SPACE, clip=Float(0.1, 10.0, log=True), cycle_forget=Categorical((True, False)))
    valid_ranges = ranges(clip=POSITIVE)

    def __init__(
        self,
        cycle_forget: bool = True,
        clip: float = 1.0,
        optim: SGDSettings = SGDSettings(),
    ):
        super().__init__(optim=optim)
        self.automatic_optimization = False
        self.forget_batches = 0

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.forget_batches = batches_in(len(request.forget), self.batch_size)

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
