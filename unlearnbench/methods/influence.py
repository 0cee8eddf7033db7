"""IU (influence unlearning): one Newton step with a WoodFisher inverse Hessian, toward higher forget loss."""

from __future__ import annotations

from collections.abc import Callable

from unlearnbench.methods.base import WeightEdit
from unlearnbench.methods.gradients import add_flat_, summed_gradient, trainable
from unlearnbench.methods.sample_gradients import SampleGradients, sample_gradients, woodfisher_inverse_product
from unlearnbench.ranges import AT_LEAST_ONE, NON_NEGATIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, space


@METHODS.register("influence")
class Influence(WeightEdit):
    """IU: θ += α·H⁻¹(∇L_forget − ∇L_retain), H a WoodFisher Hessian of retain (Jia et al., NeurIPS 2023).

    Influence unlearning (Koh & Liang, ICML 2017; the IU baseline of "Model Sparsity Can Simplify Machine Unlearning"),
    as in OPTML-Group/Unlearn-Saliency `Classification/unlearn/Wfisher.py` (commit 1ceff3f7), in eval mode with eval
    transforms: v = Σ_F ∇ℓ/(n_F+n_R) − (n_F/((n_F+n_R)·n_R))·Σ_R ∇ℓ, and H = I + (1/N)·Σ g gᵀ from the per-sample
    gradients of the first `samples` = N = 1000 retain samples in order (its unshuffled batch-1 loader); α = 0.2
    (`arg_parser.py` default `--alpha`; its scripts pass α per setting). Where we differ: the reference's recursion
    skips its first sample and keeps one running vector (`o_vec`) in place of H_{m−1}⁻¹g_m for every later sample,
    which is not the inverse of any H; here H⁻¹v is exact (tested against an explicit inverse), at the cost of
    storing N per-sample gradients (as factors where a layer is linear: `unlearnbench.methods.sample_gradients`).

    Args:
        alpha: step α along H⁻¹v.
        samples: retain samples the WoodFisher Hessian is built from.
        batch_size: samples per batch of the gradient passes.
    """

    search_space = space(alpha=Float(1e-3, 100.0, log=True))
    valid_ranges = ranges(alpha=NON_NEGATIVE, samples=AT_LEAST_ONE)

    def __init__(self, alpha: float = 0.2, samples: int = 1000, batch_size: int = 64):
        super().__init__(batch_size=batch_size)

    def unlearn(self, fit: Callable[[int], None]) -> None:
        model, h = self.model.eval(), self.hparams
        forget, n_f = summed_gradient(model, self.batches("forget"))
        retain, n_r = summed_gradient(model, self.batches("retain"))
        v = forget / (n_f + n_r) - retain * n_f / ((n_f + n_r) * n_r)
        hessian_batches = self.batches("retain", self.request.retain[: h.samples])
        grads = SampleGradients.cat([sample_gradients(model, b.x, b.y) for b in hessian_batches])
        step = h.alpha * woodfisher_inverse_product(grads, v, h.samples)
        add_flat_(trainable(model).values(), step)
