"""CoUn + RL: CoUn's contrastive retain term added to random labeling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import SGDSettings, random_labels
from unlearnbench.methods.coun import CoUn
from unlearnbench.models.head import penultimate
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Categorical, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("coun_rl")
class CoUnRL(CoUn):
    """CoUn+RL: RL's CE on relabelled forget ∪ retain + w·InfoNCE on retain (CoUn paper; LOFT's table).

    CoUn combined with an existing method, as in its paper and the LOFT paper's comparison: the
    batches and loss of `rl` (one shuffled pass over forget ∪ retain, forget labels redrawn at
    random, lr 0.013, 10 epochs as SalUn's `RL.py`) plus CoUn's contrastive term on the retain
    part of each batch. `exclude_true` as in `rl`.

    Args:
        exclude_true: draw random forget labels only from the classes other than the true one.
    """

    batch_mode = BatchMode.MIXED
    search_space = space(CoUn.search_space, exclude_true=Categorical((False, True)))

    def __init__(
        self,
        temperature: float = 0.5,
        contrastive_weight: float = 1.0,
        exclude_true: bool = False,
        optim: SGDSettings = SGDSettings(lr=0.013),
    ):
        super().__init__(temperature=temperature, contrastive_weight=contrastive_weight, optim=optim)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        forget, retain = batch["forget"], batch["retain"]
        relabelled = random_labels(forget.y, self.num_classes, self.hparams.exclude_true)
        features = penultimate(self.model, torch.cat([forget.x, retain.x]))
        ce = F.cross_entropy(self.model.get_classifier()(features), torch.cat([relabelled, retain.y]))
        if len(retain.y) < 2:  # nothing to contrast with
            return ce
        return ce + self.hparams.contrastive_weight * self.contrastive(features[len(forget.y) :], retain)
