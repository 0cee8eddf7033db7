"""Weight masks of the saliency methods (SalUn, SFR-on): which weights training may change, and holding the rest.

Both score every weight on the forget set, keep those past a threshold, and confine training to them: SalUn masks the
gradient or restores the others (and their momentum) after every step (`HoldsOutsideMask`), SFR-on masks its forget
step's gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def top_fraction(scores: dict[str, Tensor], ratio: float) -> dict[str, Tensor]:
    """True for the weights whose |score| is among the top `ratio` of all weights (one global threshold, ties kept)."""
    magnitudes = torch.cat([g.abs().flatten() for g in scores.values()])
    keep = max(1, int(ratio * magnitudes.numel()))
    threshold = torch.topk(magnitudes, keep, sorted=True).values[-1]
    return {name: g.abs() >= threshold for name, g in scores.items()}


def saliency_mask(
    forget_fisher: dict[str, Tensor], retain_fisher: dict[str, Tensor], gamma: float
) -> dict[str, Tensor]:
    """(F_f + ε) / (F_r + ε) ≥ γ: weights that matter more to forget than to retain."""
    return {n: (forget_fisher[n] + 1e-15) / (retain_fisher[n] + 1e-15) >= gamma for n in forget_fisher}


@torch.no_grad()
def hold_outside_(model: nn.Module, masks: dict[str, Tensor], values: dict[str, Tensor], optimizer) -> None:
    """Weights outside `masks` back to `values`, their SGD momentum zeroed: they and their optimizer state stay fixed."""
    for name, p in model.named_parameters():
        mask = masks[name]
        p.copy_(torch.where(mask, p, values[name]))
        buffer = optimizer.state.get(p, {}).get("momentum_buffer")
        if buffer is not None:
            buffer.mul_(mask)


def mask_gradients_(model: nn.Module, masks: dict[str, Tensor]) -> None:
    """Gradients outside `masks` set to zero."""
    for name, p in model.named_parameters():
        if p.grad is not None:
            p.grad.mul_(masks[name])


class HoldsOutsideMask:
    """Mixin of a `GradientMethod` whose steps change only the weights in `masks` (set with `frozen_values` by `prepare`).

    `hparams.hold` says how the others are kept: `gradient`, their gradient is zeroed before every step, so SGD's weight
    decay (and the momentum it builds) still shrinks them; `weights`, after every step they are restored to
    `frozen_values` and their momentum zeroed, so they stay exactly fixed.
    """

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.hparams.hold == "gradient":
            mask_gradients_(self.model, self.masks)

    def after_step(self) -> None:
        if self.hparams.hold == "weights":
            hold_outside_(self.model, self.masks, self.frozen_values, self.optimizers().optimizer)
