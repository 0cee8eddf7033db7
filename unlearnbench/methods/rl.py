"""Random labeling (RL): relabel the forget set at random and train on it together with retain."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import UnlearningMethod, random_labels
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Categorical, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("rl")
class RandomLabel(UnlearningMethod):
    """RL: CE on forget ∪ retain with forget labels drawn at random (Golatkar et al., CVPR 2020).

    As in SalUn's reference `RL.py` (Fan et al., ICLR 2024): one shuffled pass over the
    concatenation of the relabelled forget set and the retain set, labels redrawn every epoch;
    lr 0.013, 10 epochs. `exclude_true` draws only from the other classes (off by default, as in
    the reference, which can draw the true label).
    """

    batch_mode = BatchMode.MIXED
    search_space = space(GRADIENT_SPACE, exclude_true=Categorical((False, True)))

    def __init__(
        self,
        exclude_true: bool = False,
        lr: float = 0.013,
        epochs: int = 10,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ):
        super().__init__(lr, epochs, batch_size, momentum, weight_decay)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        forget, retain = batch["forget"], batch["retain"]
        relabelled = random_labels(forget.y, self.num_classes, self.hparams.exclude_true)
        x = torch.cat([forget.x, retain.x])
        return F.cross_entropy(self(x), torch.cat([relabelled, retain.y]))
