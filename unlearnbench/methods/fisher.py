"""Fisher forgetting: Gaussian noise on every weight, scaled down where the retain set's Fisher is large."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from unlearnbench.methods.base import WeightEdit
from unlearnbench.methods.sample_gradients import fisher_diagonal
from unlearnbench.ranges import NON_NEGATIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, space


def noise_std(fisher: Tensor, alpha: float, max_std: float) -> Tensor:
    """σ = min(sqrt(α / F), max_std), element-wise."""
    return (alpha / fisher).sqrt().clamp(max=max_std)


@METHODS.register("fisher")
class Fisher(WeightEdit):
    """Fisher forgetting: θ += N(0, σ²), σ = min(sqrt(α/F_retain), 1e-3) (Golatkar et al., CVPR 2020).

    "Eternal Sunshine of the Spotless Net", as in OPTML-Group/Unlearn-Saliency `Classification/unlearn/fisher.py`,
    function `fisher` (commit 95766237): F is the diagonal Fisher of the retain set, the mean over samples of (∇θ log
    p(y|x) + 1e-8)² with the true label, in eval mode; α = 0.2 (`arg_parser.py` default `--alpha`). Like the reference,
    noise on a parameter whose last dimension equals the class count (there: `shape[-1] == 10`, which is the classifier
    bias, not its weight) is multiplied by `head_boost` = 10. The reference's `fisher_new` (per-row averaged variance, μ
    set to 0 for the forgotten class) is a different method and is not this one. The clamp at 1e-3 keeps the
    perturbation small; `max_std` makes it a setting. Per-sample gradients use `torch.func` (the reference loops over
    samples; `unlearnbench.methods.sample_gradients` factors linear layers' gradients, ~100x faster on the MLP). No optimizer is involved: `epochs`, `lr`, `momentum` and `weight_decay` are not taken.

    Args:
        alpha: α in σ = min(sqrt(α/F), max_std).
        max_std: largest noise standard deviation of a parameter.
        head_boost: noise multiplier of parameters whose last dimension is the class count.
        batch_size: samples per batch of the Fisher pass.
    """

    search_space = space(alpha=Float(1e-3, 10.0, log=True), max_std=Float(1e-4, 1.0, log=True))
    valid_ranges = ranges(alpha=NON_NEGATIVE, max_std=NON_NEGATIVE, head_boost=NON_NEGATIVE)

    def __init__(self, alpha: float = 0.2, max_std: float = 1e-3, head_boost: float = 10.0, batch_size: int = 64):
        super().__init__(batch_size=batch_size)

    def unlearn(self, fit: Callable[[int], None]) -> None:
        model, h = self.model.eval(), self.hparams
        fisher = fisher_diagonal(model, self.batches("retain"))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in fisher:
                    std = noise_std(fisher[name], h.alpha, h.max_std)
                    boost = h.head_boost if p.shape[-1] == self.num_classes else 1.0
                    p.add_(torch.randn_like(p) * std * boost)
