"""Feature-subspace math shared by LOFT and continual LOFT: features, covariances, the objective.

Not a method (registers nothing). The backbone is frozen, so penultimate features are computed once
per model and cached by the model's content hash; covariances are mean-centred, accumulated in
float64 and divided by N−1; U ∈ St(d, s) is optimized full batch by geoopt's RiemannianAdam.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import geoopt
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def model_hash(model: nn.Module) -> str:
    """Content hash of every parameter and buffer (names, dtypes, shapes, values)."""
    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class ProjectedModel(nn.Module):
    """A frozen timm-style backbone whose penultimate features are projected: logits = head(UUᵀz).

    `projection` (P = UUᵀ, d x d) is the only trainable parameter; it starts at the identity, so
    the wrapped model equals the backbone until the first request is served. With `fuse`, P is
    folded into the head's weights (W P), the deployable zero-cost form, which gives the same logits.
    """

    def __init__(self, backbone: nn.Module, fuse: bool = False):
        super().__init__()
        self.backbone = backbone.requires_grad_(False)
        self.fuse = fuse
        d = backbone.get_classifier().in_features
        self.projection = nn.Parameter(torch.eye(d, device=backbone.get_classifier().weight.device))

    def get_classifier(self) -> nn.Linear:
        return self.backbone.get_classifier()

    def forward_features(self, x: Tensor) -> Tensor:
        return self.backbone.forward_features(x)

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        z = self.backbone.forward_head(x, pre_logits=True)
        head = self.get_classifier()
        if self.fuse:
            return z @ self.projection if pre_logits else F.linear(z, head.weight @ self.projection, head.bias)
        z = z @ self.projection  # P is symmetric: (P z)ᵀ = zᵀ P
        return z if pre_logits else head(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))

    def fused_classifier(self) -> nn.Linear:
        """A plain linear head with UUᵀ folded in: backbone pre-logits -> the projected logits."""
        head = self.get_classifier()
        fused = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
        with torch.no_grad():
            fused.weight.copy_(head.weight @ self.projection)
            if head.bias is not None:
                fused.bias.copy_(head.bias)
        return fused.to(head.weight.device)


class FeatureCache:
    """Penultimate features (eval mode) by train index, for one model: a changed model rebuilds it."""

    def __init__(self):
        self.key: str | None = None
        self.features: Tensor | None = None
        self.known = torch.zeros(0, dtype=torch.bool)
        self.passes = 0  # forward passes done, for tests and diagnostics

    @torch.no_grad()
    def get(self, model: nn.Module, data, which: str, indices: np.ndarray, batch_size: int) -> Tensor:
        key = model_hash(model)
        if key != self.key:
            self.key, self.features, self.known = key, None, torch.zeros(0, dtype=torch.bool)
        index = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        if len(index) and int(index.max()) >= len(self.known):
            self.known = torch.cat([self.known, torch.zeros(int(index.max()) + 1 - len(self.known), dtype=torch.bool)])
        missing = index[~self.known[index]] if len(index) else index
        if len(missing):
            was_training = model.training
            model.eval()
            device = next(model.parameters()).device
            for batch in data.loader(which, indices=missing.numpy(), batch_size=batch_size):
                z = model.forward_head(model.forward_features(batch.x.to(device)), pre_logits=True).float().cpu()
                if self.features is None or len(self.features) < len(self.known):
                    grown = torch.zeros(len(self.known), z.shape[1])
                    if self.features is not None:
                        grown[: len(self.features)] = self.features
                    self.features = grown
                self.features[batch.idx.cpu()] = z
                self.known[batch.idx.cpu()] = True
                self.passes += 1
            model.train(was_training)
        return self.features[index]


@dataclass
class Moments:
    """n, mean and mean-centred covariance (/(n−1)) of a set of features, in float64."""

    n: int
    mean: Tensor
    cov: Tensor

    @classmethod
    def of(cls, features: Tensor) -> Moments:
        x = features.double()
        mean = x.mean(0)
        centred = x - mean
        return cls(len(x), mean, centred.T @ centred / max(len(x) - 1, 1))

    def to(self, device: torch.device | str) -> Moments:
        return Moments(self.n, self.mean.to(device), self.cov.to(device))


def pooled(moments: list[Moments]) -> Moments:
    """Moments of the union of the sets, exactly (within-set scatter + between-set mean shifts)."""
    n = sum(m.n for m in moments)
    mean = sum(m.n * m.mean for m in moments) / n
    scatter = sum((m.n - 1) * m.cov + m.n * torch.outer(m.mean - mean, m.mean - mean) for m in moments)
    return Moments(n, mean, scatter / max(n - 1, 1))


def history_terms(
    earlier: list[Moments], forget: Moments, history: str, lambda_hist: float
) -> list[tuple[float, Tensor]]:
    """Continual LOFT's (weight, covariance) pairs of the forget part of J, from the current and earlier forget sets.

    `history="pooled"`: one term, the covariance of their union; `"weighted"`: the current set's term, then each
    earlier set's with weight `lambda_hist` / (number of earlier sets).
    """
    device = forget.cov.device
    if history == "pooled":
        return [(1.0, pooled([*(m.to(device) for m in earlier), forget]).cov)]
    weight = lambda_hist / max(len(earlier), 1)
    return [(1.0, forget.cov)] + [(weight, m.cov.to(device)) for m in earlier]


def history_state(history: dict[int, Moments], d: int) -> dict[str, Tensor]:
    """Moments by request t (continual LOFT's earlier forget sets) as CPU tensors for a method's extra state."""
    ts = sorted(history)
    return {
        "past_t": torch.tensor(ts, dtype=torch.long),
        "past_n": torch.tensor([history[s].n for s in ts], dtype=torch.long),
        "past_mean": torch.stack([history[s].mean.cpu() for s in ts]) if ts else torch.zeros(0, d),
        "past_cov": torch.stack([history[s].cov.cpu() for s in ts]) if ts else torch.zeros(0, d, d),
    }


def history_from_state(state: dict) -> dict[int, Moments]:
    """The moments by request t that `history_state` saved in `state`."""
    rows = zip(state["past_t"].tolist(), state["past_n"].tolist(), state["past_mean"], state["past_cov"], strict=True)
    return {t: Moments(n, mean, cov) for t, n, mean, cov in rows}


def explained_rank(cov: Tensor, fraction: float = 0.95) -> int:
    """Smallest k whose top-k eigenvalues of `cov` hold at least `fraction` of its trace."""
    eigenvalues = torch.linalg.eigvalsh(cov.double()).flip(0).clamp_min(0)
    ratios = torch.cumsum(eigenvalues, 0) / eigenvalues.sum()
    return int(torch.searchsorted(ratios, torch.tensor(fraction - 1e-9, dtype=ratios.dtype, device=ratios.device))) + 1


def top_eigenvectors(cov: Tensor, k: int) -> Tensor:
    """Orthonormal d x k basis of the top-k principal directions of `cov` (PCA start for U)."""
    return torch.linalg.eigh(cov.double()).eigenvectors.flip(1)[:, :k].contiguous()


def random_orthonormal(d: int, s: int, generator: torch.Generator | None = None) -> Tensor:
    """A d x s frame uniform on St(d, s) (Haar): Q of the QR of a Gaussian matrix, signs fixed by R's diagonal."""
    Q, R = torch.linalg.qr(torch.randn(d, s, generator=generator, dtype=torch.float64))
    return Q * torch.sign(torch.diagonal(R))


def captured(U: Tensor, cov: Tensor) -> Tensor:
    """tr(UᵀΣU) / tr Σ: the share of Σ's variance inside span(U)."""
    return (U * (cov @ U)).sum() / torch.trace(cov)


def loft_objective(U: Tensor, forget: list[tuple[float, Tensor]], retain: Tensor) -> Tensor:
    """Σ_i w_i (tr(UᵀΣ_{f,i}U)/tr Σ_{f,i})² + (tr(Σ_r − UUᵀΣ_rUUᵀ)/tr Σ_r)².

    On St(d, s), tr(UUᵀΣUUᵀ) = tr(UᵀΣU), so the retain term is (1 − captured(U, Σ_r))².
    """
    forget_term = sum(weight * captured(U, cov) ** 2 for weight, cov in forget)
    return forget_term + (1 - captured(U, retain)) ** 2


def optimize_stiefel(
    U0: Tensor, objective, steps: int, lr: float, stabilize: int | None = None
) -> tuple[Tensor, list[float]]:
    """Full-batch RiemannianAdam on St(d, s) from U0; returns U and the objective before each step.

    `stabilize`: every that many steps geoopt projects U back onto the manifold (None: never, as
    geoopt's default and LOFT's reference).
    """
    U = geoopt.ManifoldParameter(U0.clone(), manifold=geoopt.Stiefel())
    optimizer = geoopt.optim.RiemannianAdam([U], lr=lr, stabilize=stabilize)
    trace = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = objective(U)
        loss.backward()
        optimizer.step()
        trace.append(float(loss.detach()))
    with torch.no_grad():
        trace.append(float(objective(U)))
    return U.detach().clone(), trace
