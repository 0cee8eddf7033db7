"""SSD: dampen the parameters that matter far more to the forget set than to the training data."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from unlearnbench.methods.base import WeightEdit, evaluating
from unlearnbench.methods.gradients import importances
from unlearnbench.ranges import NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, space


@torch.no_grad()
def dampen(model: nn.Module, data: dict[str, Tensor], forget: dict[str, Tensor], alpha: float, lam: float) -> None:
    """Where I_f > α·I_D, θ ← θ·min(λ·I_D / I_f, 1); every other parameter is left exactly as it is."""
    for name, p in model.named_parameters():
        selected = forget[name] > alpha * data[name]
        factor = (lam * data[name] / forget[name]).clamp(max=1)
        p.copy_(torch.where(selected, p * factor, p))


@METHODS.register("ssd")
class SSD(WeightEdit):
    """SSD: selective synaptic dampening, no training (Foster et al., AAAI 2024).

    "Fast Machine Unlearning Without Retraining Through Selective Synaptic Dampening". Compared against
    if-loops/selective-synaptic-dampening at cdfdc0e (2024-09-11), `src/ssd.py` (`ParameterPerturber`) and
    `src/forget_full_class_main.py`: importances are computed in eval mode, I_f over the forget set and I_D over the
    training data in batches of 64 (`-b`) without shuffling, retain first then forget (its `ConcatDataset`); here "the
    training data" is what the model is still trained on, retain ∪ the current forget set. α (selection) = 10 and λ
    (dampening) = 1 as in its ResNet settings. Because I_D contains the forget batches, I_D ≳ (|F|/|D|)·I_f: nothing can
    be selected once the forget set is 1/α of the data or more (one digits class is 10%), so α must be set below |D|/|F|
    there. No optimizer is involved, so SSD takes no optimizer settings.

    Args:
        alpha: selection α: a weight is dampened where its forget importance exceeds α times its data importance.
        lam: dampening λ: a selected weight is scaled by min(λ·I_D/I_f, 1).
        batch_size: samples per batch of the importance passes.
    """

    #: (model, batches) -> importance per parameter name; LFSSD swaps in a label-free one
    importance = staticmethod(importances)
    search_space = space(alpha=Float(0.1, 100.0, log=True), lam=Float(0.1, 10.0, log=True))
    valid_ranges = ranges(alpha=POSITIVE, lam=NON_NEGATIVE)

    def __init__(self, alpha: float = 10.0, lam: float = 1.0, batch_size: int = 64):
        super().__init__(batch_size=batch_size)

    def unlearn(self, fit: Callable[[int], None]) -> None:
        with evaluating(self.model) as model:
            forget = self.importance(model, self.batches("forget"))
            data = self.importance(model, (b for which in ("retain", "forget") for b in self.batches(which)))
            dampen(model, data, forget, self.hparams.alpha, self.hparams.lam)
