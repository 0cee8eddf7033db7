"""CF-k: catastrophic forgetting of the last k blocks, by fine-tuning only them on the retain set."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.models.blocks import last_blocks
from unlearnbench.ranges import AT_LEAST_ONE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Int, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("cf_k")
class CFk(UnlearningMethod):
    """CF-k: CE on retain, only the last k blocks trained (Goel et al., "Towards Adversarial Evaluations for Inexact Machine Unlearning").

    Reference shash42/Evaluating-Inexact-Unlearning (commit e3154015): `src/methods.py` (`cat_forget_finetune` with K,
    `resetFinalResnet(reinit=False)`) and `src/learn.py` (`train_loop`): SGD momentum 0.9, weight decay 5e-5, batch 64,
    gradient-norm clipping at 10, max lr 0.1; k = 1 is its smallest setting (`scripts/unlearn.sh`, `--minL-rf=1`) and 30
    epochs its fine-tuning length (`--epochs-ft=30`). Where we differ: a block is the arch's layer group
    (`unlearnbench.models.blocks`: a residual block, a conv with its BN, a transformer block, the classifier), where the
    reference counts single conv/linear layers from the output; and the lr is constant, where the reference anneals it
    from 0.1 to 0.005 with cosine warm restarts. Frozen blocks' BN running statistics still follow the retain batches,
    as there.

    Args:
        k: the last k blocks (the arch's layer groups) are trained, the rest frozen.
        clip: gradient-norm clipping threshold.
    """

    batch_mode = BatchMode.RETAIN

    search_space = space(
        GRADIENT_SPACE, k=Int(1, 3), epochs=Int(1, 64)
    )  # Goel et al. train k blocks for tens of epochs
    valid_ranges = ranges(k=AT_LEAST_ONE, clip=POSITIVE)

    def __init__(
        self,
        k: int = 1,
        lr: float = 0.1,
        epochs: int = 30,
        batch_size: int = 64,
        momentum: float = 0.9,
        weight_decay: float = 5e-5,
        clip: float = 10.0,
    ):
        super().__init__(lr, epochs, batch_size, momentum, weight_decay)

    def reset(self, names: set[str]) -> None:
        """What happens to the last k blocks before training: nothing for CF-k."""

    def unlearn(self, fit: Callable[[int], None]) -> None:
        chosen = last_blocks(self.model, self.hparams.k)
        self.reset(chosen)
        frozen = [p for name, p in self.model.named_parameters() if name not in chosen and p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
        try:
            fit(self.hparams.epochs)
        finally:  # trainable again: the next request, the update vector and guards see every parameter
            for p in frozen:
                p.requires_grad_(True)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain = batch["retain"]
        return F.cross_entropy(self(retain.x), retain.y)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        self.clip_gradients(optimizer, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")
