"""SCAR: pull forget embeddings toward the nearest other class (Mahalanobis), distil on surrogate data."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import AdamOptimizer, GradientMethod, SGDSettings, evaluating
from unlearnbench.methods.distill import KeepsTeacher
from unlearnbench.methods.gradients import on_device
from unlearnbench.methods.mahalanobis import ClassGaussians, surrogate_images
from unlearnbench.models.head import penultimate
from unlearnbench.ranges import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, Int, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


@METHODS.register("scar")
class SCAR(KeepsTeacher, AdamOptimizer, GradientMethod):
    """SCAR: Mahalanobis pull of forget embeddings to the nearest other class + KL distillation on surrogate data (Bonato et al., ECCV 2024).

    "Is Retain Set All You Need in Machine Unlearning? Restoring Performance of Unlearned Models with
    Out-of-Distribution Images". As the authors' `Mahalanobis` method (jackbntz/SCAR, `methods.py`; read through
    mirrored copies, so no commit is named) and a port with its constants inlined (an OPTML-style `unlearn/SCAR.py`: T =
    2, λ2 = 5, γ = 3, lr 5e-4, wd 0): class means and inverse covariances of Tukey-transformed (δ = 0.5) penultimate
    features, covariance shrunk twice (γ1 = γ2 = 3), normalized to a correlation matrix and pseudo-inverted; each forget
    sample's target is its nearest class other than its own, fixed with the pre-request model; loss = λ1·mean
    Mahalanobis distance to the target (λ1 = 1) + λ2·KL(teacher ‖ student) on a surrogate batch (T = 2 on both sides, no
    T²), Adam. Class-wise, the teacher's forget-class logits are set to its minimum and surrogate images it predicts as
    a forget class are dropped (the reference's "CR" mode). Surrogate data (never the retain set): no dataset here ships
    an out-of-distribution split a method may read, so the surrogate is `surrogate_size` smooth Gaussian-noise images
    drawn per request (`mahalanobis.surrogate_images`; digits 8×8: a 2×2 grid, CIFAR: 8×8), labelled by the pre-request
    model. Where we differ: the reference estimates class statistics on retain and distils on a real OOD dataset (a
    CIFAR-100 subset for CIFAR-10); both use the noise here, so classes the model never predicts on noise (fewer than 2
    images) cannot be targets. The reference takes batch_fgt_ret_ratio + 1 steps per forget batch and stops early at a
    forget-accuracy target; here one step per forget batch for `epochs` = 6 passes. Tukey's power is sign-preserving.

    Args:
        lambda_1: weight λ1 of the Mahalanobis term.
        lambda_2: weight λ2 of the distillation term.
        delta: power δ of the Tukey transform of the features.
        gamma1: shrinkage γ1 of the covariance's diagonal.
        gamma2: shrinkage γ2 of the covariance's off-diagonal.
        temperature: distillation temperature T.
        surrogate_size: noise images drawn per request as surrogate data.
    """

    batch_mode = BatchMode.FORGET

    search_space = space(
        optim={"lr": Float(1e-5, 1e-1, log=True), "epochs": Int(1, 10)},
        lambda_1=Float(0.1, 10.0, log=True),
        lambda_2=Float(0.5, 50.0, log=True),
        delta=Float(0.1, 1.0),
    )
    valid_ranges = ranges(
        lambda_1=NON_NEGATIVE,
        lambda_2=NON_NEGATIVE,
        delta=POSITIVE,
        gamma1=NON_NEGATIVE,
        gamma2=NON_NEGATIVE,
        temperature=POSITIVE,
        surrogate_size=AT_LEAST_ONE,
    )

    def __init__(
        self,
        lambda_1: float = 1.0,
        lambda_2: float = 5.0,
        delta: float = 0.5,
        gamma1: float = 3.0,
        gamma2: float = 3.0,
        temperature: float = 2.0,
        surrogate_size: int = 2048,
        optim: SGDSettings = SGDSettings(lr=5e-4, epochs=6, batch_size=128, weight_decay=0.0),
    ):
        super().__init__(optim=optim)
        self.surrogate = self.target_of = torch.zeros(0)
        self.gaussians: ClassGaussians | None = None
        self.forget_classes: list[int] = []

    @torch.no_grad()
    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        super().prepare(request, data)
        h, model, device = self.hparams, self.model, self.device
        self.forget_classes = list(request.forget_classes or ())
        self.target_of = torch.full((int(request.forget.max()) + 1,), -1, dtype=torch.long, device=device)
        with evaluating(model):
            shape = next(iter(data.loader("forget", batch_size=1))).x.shape[1:]
            images = surrogate_images(shape, h.surrogate_size, device)
            labels, z = model(images).argmax(1), penultimate(model, images)
            keep = ~torch.isin(labels, torch.tensor(self.forget_classes, device=device, dtype=labels.dtype))
            self.surrogate = images[keep] if keep.any() else images
            classes = [c for c in range(self.num_classes) if c not in self.forget_classes and (labels == c).sum() >= 2]
            self.gaussians = ClassGaussians.fit(z, labels, classes, h.delta, h.gamma1, h.gamma2)
            for batch in on_device(data.loader("forget", batch_size=self.batch_size), device) if classes else ():
                idx = batch.idx.to(device)
                self.target_of[idx] = self.gaussians.nearest_other(penultimate(model, batch.x), batch.y)

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        h, forget = self.hparams, batch["forget"]
        target = self.target_of[forget.idx.to(self.device)]
        pull = forget.x.new_zeros(())
        if (target >= 0).any():
            d = self.gaussians.distances(penultimate(self.model, forget.x[target >= 0]))
            pull = d.gather(1, target[target >= 0, None]).mean()
        surrogate = self.surrogate[torch.randint(len(self.surrogate), (self.batch_size,), device=self.device)]
        teacher = self.teacher(surrogate)
        if self.forget_classes:
            teacher[:, self.forget_classes] = teacher.min()
        student = F.log_softmax(self(surrogate) / h.temperature, dim=1)
        kl = F.kl_div(student, F.log_softmax(teacher / h.temperature, dim=1), reduction="batchmean", log_target=True)
        return h.lambda_1 * pull + h.lambda_2 * kl
