"""CF-k: catastrophic forgetting of the last k blocks, by fine-tuning only them on the retain set."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import ClipsGradientNorm, GradientMethod, SGDSettings
from unlearnbench.models.blocks import last_blocks, trainable_only
from unlearnbench.ranges import AT_LEAST_ONE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Int, space


@METHODS.register("cf_k")
class CFk(ClipsGradientNorm, GradientMethod):
    """CF-k: CE on retain, only the last k blocks trained (Goel et al., "Towards Adversarial Evaluations for Inexact Machine Unlearning").

    Reference shash42/Evaluating-Inexact-Unlearning (commit e3154015), `src/methods.py` (`cat_forget_finetune` with K,
    `resetFinalResnet(reinit=False)`) and `src/learn.py` (`train_loop`): SGD momentum 0.9, weight decay 5e-5, batch 64,
    gradient-norm clip 10, max lr 0.1; k = 1 (its smallest, `scripts/unlearn.sh --minL-rf=1`), 30 epochs
    (`--epochs-ft=30`). Where we differ: a block is the arch's layer group (`unlearnbench.models.blocks`), not a single
    conv/linear layer counted from the output; the lr is constant (there: cosine warm restarts from 0.1 to 0.005).
    Frozen blocks' BN statistics still follow the retain batches, as there.

    Args:
        k: the last k blocks (the arch's layer groups) are trained, the rest frozen.
        clip: gradient-norm clipping threshold.
    """

    # Goel et al. train for tens of epochs
    search_space = space(GRADIENT_SPACE, k=Int(1, 3), optim={"epochs": Int(1, 64)})
    valid_ranges = ranges(k=AT_LEAST_ONE, clip=POSITIVE)

    def __init__(
        self,
        k: int = 1,
        clip: float = 10.0,
        optim: SGDSettings = SGDSettings(lr=0.1, epochs=30, batch_size=64, weight_decay=5e-5),
    ):
        super().__init__(optim=optim)

    def reset(self, names: set[str]) -> None:
        """What happens to the last k blocks before training: nothing for CF-k."""

    def unlearn(self, fit: Callable[[int], None]) -> None:
        chosen = last_blocks(self.model, self.hparams.k)
        self.reset(chosen)
        with trainable_only(self.model, chosen):
            fit(self.optim.epochs)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        return F.cross_entropy(self(batch["retain"].x), batch["retain"].y)
