"""SCAR's feature-space geometry: Tukey-transformed class Gaussians with shrunk precisions, and its surrogate images.

Kept apart from the method so the distances can be tested against an explicit computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.divergence import DegenerateModelError


def surrogate_images(shape: tuple[int, ...], n: int, device) -> Tensor:
    """Smooth Gaussian noise: N(0, 1) on a (H/4 x W/4, at least 2 x 2) grid, bilinearly upsampled to H x W."""
    channels, height, width = shape
    coarse = torch.randn(n, channels, max(2, height // 4), max(2, width // 4), device=device)
    return F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)


def tukey(z: Tensor, delta: float) -> Tensor:
    return z.sign() * z.abs().pow(delta)


def shrunk_precision(samples: Tensor, gamma1: float, gamma2: float) -> Tensor:
    """pinv of the correlation matrix of Σ shrunk twice: Σ + γ1·mean(diag)·I + γ2·mean(offdiag)·(1 − I)."""
    cov, eye = torch.cov(samples.T), torch.eye(samples.shape[1], device=samples.device)
    for _ in range(2):
        off = cov * (1 - eye)
        cov = cov + gamma1 * cov.diagonal().mean() * eye + gamma2 * off.sum() / max((off != 0).sum(), 1) * (1 - eye)
    std = cov.diagonal().sqrt()
    correlation = cov / (std[:, None] * std[None, :])
    if not torch.isfinite(correlation).all():  # every feature constant (a collapsed model), or non-finite features
        raise DegenerateModelError("the features' covariance is not finite: the model has collapsed")
    try:
        return torch.linalg.pinv(correlation)
    except torch.linalg.LinAlgError:
        # MKL's SVD (torch 2.14) did not converge on one thread for a well-conditioned 256 x 256 correlation matrix
        # (eigenvalues 0.75 to 15.2) that it decomposes on two: SCAR, random stream, seed 1, request 23 of the
        # published grid. The matrix is symmetric, so its eigendecomposition gives the same pseudo-inverse (there, within
        # 4.1e-6 of the SVD's on two threads, entries up to 1.2); taken only where the SVD fails: no other number moves.
        return torch.linalg.pinv(correlation, hermitian=True)


def mahalanobis(z: Tensor, means: Tensor, precisions: Tensor, delta: float) -> Tensor:
    """(n x C) distances between L2-normalized Tukey-transformed embeddings and normalized class means."""
    diff = F.normalize(tukey(z, delta), dim=-1)[:, None, :] - F.normalize(means, dim=-1)[None]
    return torch.einsum("ncd,cde,nce->nc", diff, precisions, diff)


@dataclass
class ClassGaussians:
    """Mean and shrunk precision of each of `classes`, on Tukey-transformed features (SCAR's `Mahalanobis`)."""

    classes: list[int]
    means: Tensor
    precisions: Tensor | None
    delta: float

    @classmethod
    def fit(cls, z: Tensor, labels: Tensor, classes: list[int], delta: float, gamma1: float, gamma2: float):
        points = [tukey(z[labels == c], delta) for c in classes]
        means = torch.stack([p.mean(0) for p in points]) if classes else torch.zeros(0, z.shape[1])
        precisions = torch.stack([shrunk_precision(p, gamma1, gamma2) for p in points]) if classes else None
        return cls(classes, means, precisions, delta)

    def distances(self, z: Tensor) -> Tensor:
        return mahalanobis(z, self.means, self.precisions, self.delta)

    def nearest_other(self, z: Tensor, y: Tensor) -> Tensor:
        """Position in `classes` of each sample's nearest class other than its label `y`; −1 where there is none."""
        d = self.distances(z)
        d[torch.tensor(self.classes, device=z.device)[None, :] == y[:, None]] = float("inf")
        return torch.where(d.min(1).values.isfinite(), d.argmin(1), -1)
