"""l1-sparse: fine-tune on retain with an l1 penalty that pushes the model toward sparsity."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.ranges import NON_NEGATIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.batches import BatchMode


def l1_weight(alpha: float, epoch: int, epochs: int) -> float:
    """α_t = α·(1 − t/E): linear decay from α at epoch 0 to 0 at the end of epoch E."""
    return alpha * (1 - epoch / epochs)


@METHODS.register("l1_sparse")
class L1Sparse(GradientMethod):
    """l1-sparse: CE on retain + α_t·‖θ‖₁, α_t decaying linearly (Jia et al., NeurIPS 2023).

    "Model Sparsity Can Simplify Machine Unlearning", reference `FT_l1` (Unlearn-Sparse, also
    reused by MUNBa's code): the penalty is the l1 norm of all parameters and its weight is set
    per epoch as α·(1 − epoch/epochs), so the last epoch still uses α/epochs and the weight
    reaches 0 when training ends. α = 1e-4, lr 0.01 and 10 epochs follow the authors' scripts.

    Args:
        alpha: initial weight α of the l1 penalty (decays linearly to 0).
    """

    batch_mode = BatchMode.RETAIN
    search_space = space(GRADIENT_SPACE, alpha=Float(1e-6, 1e-2, log=True))
    valid_ranges = ranges(alpha=NON_NEGATIVE)

    def __init__(
        self,
        alpha: float = 1e-4,
        optim: SGDSettings = SGDSettings(),
    ):
        super().__init__(optim=optim)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain = batch["retain"]
        weight = l1_weight(self.hparams.alpha, self.current_epoch, self.optim.epochs)
        l1 = torch.cat([p.flatten() for p in self.model.parameters()]).abs().sum()
        return F.cross_entropy(self(retain.x), retain.y) + weight * l1
