"""LFSSD: SSD whose importances need no labels (the gradient of the output norm)."""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.gradients import accumulated_gradients
from unlearnbench.methods.ssd import SSD
from unlearnbench.registry import METHODS


def output_norm_importances(model: nn.Module, batches: Iterable[Batch]) -> dict[str, Tensor]:
    """Mean over minibatches of |∇ mean_{x∈b} ‖f(x)‖₂²|: no labels are read."""
    total, count = accumulated_gradients(
        model, batches, lambda b: model(b.x).norm(p=2, dim=1).pow(2).mean(), lambda g, b: g.abs()
    )
    return {name: value / max(count, 1) for name, value in total.items()}


@METHODS.register("lfssd")
class LFSSD(SSD):
    """LFSSD: SSD with label-free importances |∇‖f(x)‖₂²| in place of the Fisher (Foster et al., "Loss-Free Machine Unlearning", ICLR 2024 Tiny Papers).

    Everything but the importance is SSD's (selection α = 10, dampening λ = 1, batches of 64, eval mode, I_D over retain
    ∪ forget). The importance follows the authors' label-free `calc_importance` (jwf40/Information-Theoretic-Unlearning,
    `src/lipschitz.py`, commit f207655): per minibatch the gradient of the batch mean of the squared L2 norm of the
    logits, accumulated as its absolute value (not squared) and averaged over minibatches. Where paper and code differ:
    the paper writes the importance as the gradient of the l2 norm of the output (MAS's form); the code squares the norm
    and takes |∇| rather than ∇², and we follow the code. Because both I_f and I_D use the same label-free quantity,
    LFSSD selects the same way on class-wise and random streams and needs no labels of the forget set.
    """

    importance = staticmethod(output_norm_importances)
