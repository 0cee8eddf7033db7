"""CoUn: fine-tune on retain with a contrastive term that keeps retain features clustered."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch, InMemoryLoader
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.ranges import NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


def info_nce(z1: Tensor, z2: Tensor, temperature: float) -> Tensor:
    """SimCLR's NT-Xent: each view's positive is the other view of its sample, negatives all other 2n − 2."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    similarity = z @ z.T / temperature
    similarity.fill_diagonal_(float("-inf"))
    n = len(z1)
    positives = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(similarity, positives)


@METHODS.register("coun")
class CoUn(UnlearningMethod):
    """CoUn: CE on retain + w·InfoNCE between penultimate features of two views (Khalil et al., 2025).

    "CoUn: Empowering Machine Unlearning via Contrastive Learning": contrastive and supervised
    learning on retain data only; forget samples drift toward the clusters of semantically similar
    retain classes. The first view is the stream's augmented retain batch, the second a fresh
    augmentation of the same samples; features are `forward_head(..., pre_logits=True)`,
    L2-normalized. We had no reference code to compare with: τ = 0.5 is SimCLR's CIFAR default,
    w = 1, and lr 0.01, 10 epochs, SGD as FT (SalUn's scripts).

    Args:
        temperature: InfoNCE temperature τ.
        contrastive_weight: weight w of the contrastive term.
    """

    batch_mode = BatchMode.RETAIN
    search_space = space(
        GRADIENT_SPACE, temperature=Float(0.05, 1.0, log=True), contrastive_weight=Float(0.01, 10.0, log=True)
    )
    valid_ranges = ranges(temperature=POSITIVE, contrastive_weight=NON_NEGATIVE)

    def __init__(
        self,
        temperature: float = 0.5,
        contrastive_weight: float = 1.0,
        lr: float = 0.01,
        epochs: int = 10,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ):
        super().__init__(lr, epochs, batch_size, momentum, weight_decay)
        self.views: InMemoryLoader | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        # Its own generator, so the second view's augmentation is independent of the first's.
        self.views = data.loader("retain", batch_size=self.hparams.batch_size, augment=True)

    def features(self, x: Tensor) -> Tensor:
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    def contrastive(self, features: Tensor, retain: Batch) -> Tensor:
        """InfoNCE between the retain batch's features and those of a second augmentation of it."""
        second = self.views.batch(retain.idx.to(self.views.indices.device)).x.to(features.device)
        return info_nce(features, self.features(second), self.hparams.temperature)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain = batch["retain"]
        features = self.features(retain.x)
        ce = F.cross_entropy(self.model.get_classifier()(features), retain.y)
        return ce + self.hparams.contrastive_weight * self.contrastive(features, retain)
