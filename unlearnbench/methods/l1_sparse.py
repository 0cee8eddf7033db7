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

    "Model Sparsity Can Simplify Machine Unlearning". Compared against OPTML-Group/Unlearn-Saliency at a6e89fd
    (2026-02-28), `Classification/unlearn/FT.py` (`FT_l1`, run as `FT_prune`; SGD momentum 0.9, weight decay 5e-4, batch
    256): the penalty is the l1 norm of all parameters, weighted per epoch by α·(1 − epoch/epochs) (`--no-l1-epochs` 0),
    so the last epoch still uses α/epochs. lr 0.01, 10 epochs: OPTML-Group/Unlearn-Sparse at 80ba55d, `README.MD`. No
    README fixes α (`--alpha ${alpha}`; the parser's 0.2 is Fisher's noise scale); 1e-4 is what MUNBa's authors pass
    (JingWu321/Scissorhands at 73ae065, `Classification/sh/main_0.1_cifar10.sh`).

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
