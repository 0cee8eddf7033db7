"""Fine-tuning (FT): keep training on the retain set and let catastrophic forgetting do the work."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("finetune")
class FineTune(GradientMethod):
    """FT: cross-entropy on the retain set only (Warnecke et al., 2023; SalUn's baseline).

    Compared against OPTML-Group/Unlearn-Saliency at a6e89fd (2026-02-28), `Classification/unlearn/FT.py` and
    `arg_parser.py` (SGD momentum 0.9, weight decay 5e-4, batch 256), with lr 0.01 and 10 epochs from the FT command of
    OPTML-Group/Unlearn-Sparse at 80ba55d (2024-03-12), `README.MD` (SalUn's code is adapted from it).
    """

    batch_mode = BatchMode.RETAIN
    search_space = space(GRADIENT_SPACE)

    def __init__(
        self,
        optim: SGDSettings = SGDSettings(),
    ):
        super().__init__(optim=optim)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain = batch["retain"]
        return F.cross_entropy(self(retain.x), retain.y)
