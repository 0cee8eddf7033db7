"""CoUn: fine-tune on retain with a contrastive term that keeps retain features clustered."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch, InMemoryLoader
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.methods.losses import info_nce
from unlearnbench.models.head import penultimate
from unlearnbench.ranges import NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest


@METHODS.register("coun")
class CoUn(GradientMethod):
    """CoUn: CE on retain + w·InfoNCE between penultimate features of two views (Khalil et al., 2025).

    "CoUn: Empowering Machine Unlearning via Contrastive Learning"; no reference code to compare with. View 1 is the
    stream's augmented retain batch, view 2 a fresh augmentation of it (own loader, own generator); features are the
    penultimate ones, L2-normalized. τ = 0.5 (SimCLR's CIFAR default), w = 1; lr 0.01, 10 epochs, SGD as FT (SalUn's).

    Args:
        temperature: InfoNCE temperature τ.
        contrastive_weight: weight w of the contrastive term.
    """

    search_space = space(
        GRADIENT_SPACE, temperature=Float(0.05, 1.0, log=True), contrastive_weight=Float(0.01, 10.0, log=True)
    )
    valid_ranges = ranges(temperature=POSITIVE, contrastive_weight=NON_NEGATIVE)

    def __init__(
        self,
        temperature: float = 0.5,
        contrastive_weight: float = 1.0,
        optim: SGDSettings = SGDSettings(),
    ):
        super().__init__(optim=optim)
        self.views: InMemoryLoader | None = None

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.views = data.loader("retain", batch_size=self.batch_size, augment=True)

    def contrastive(self, features: Tensor, retain: Batch) -> Tensor:
        second = self.views.batch(retain.idx.to(self.views.indices.device)).x.to(features.device)
        return info_nce(features, penultimate(self.model, second), self.hparams.temperature)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain = batch["retain"]
        features = penultimate(self.model, retain.x)
        ce = F.cross_entropy(self.model.get_classifier()(features), retain.y)
        return ce + self.hparams.contrastive_weight * self.contrastive(features, retain)
