"""Orthogonal update projection: keep request t's update off the subspace earlier requests moved in."""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn

from unlearnbench.guards import Guard, flat, trainable
from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView


def top_subspace(updates: Tensor, rank: int, tol: float = 1e-10) -> Tensor | None:
    """Orthonormal d x r basis of the top-r left singular vectors of [u_1 … u_k] (rows of `updates`).

    Computed from the k x k Gram matrix (never d x d): UᵀU = VΛVᵀ, Q = U V_r Λ_r^{-1/2}.
    """
    if len(updates) == 0 or rank < 1:
        return None
    U = updates.double()
    eigenvalues, V = torch.linalg.eigh(U @ U.T)
    eigenvalues, V = eigenvalues.flip(0), V.flip(1)
    r = min(rank, int((eigenvalues > tol * max(float(eigenvalues[0]), tol)).sum()))
    if r == 0:
        return None
    return (U.T @ V[:, :r] / eigenvalues[:r].sqrt()).float()


@GUARDS.register("orthogonal")
class OrthogonalProjection(Guard):
    """Orthogonal update projection: request t's gradients are projected off the top-`rank` subspace of u_1..u_{t−1}.

    From the plasticity-collapse paper's outlook: the updates of a stream share a low-dimensional
    subspace W; keeping later updates orthogonal to it should stop them re-using (and undoing) it.
    The guard keeps u_s = θ_s − θ_{s−1} (trainable parameters, float32) of every request it served,
    measured from `before_request` to `after_request`, and projects the gradient before every
    optimizer step. The optimizer's own weight decay is added after this projection, so the update
    is exactly orthogonal to W only with weight_decay 0 (momentum keeps it orthogonal).
    """

    def __init__(self, rank: int = 3):
        self.rank = rank
        self.updates = torch.zeros(0, 0)  # k x d: u_1..u_k
        self.basis: Tensor | None = None  # d x r, on the training device during a request
        self._start: Tensor | None = None

    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        self._start = flat(method.model)
        self.basis = top_subspace(self.updates, self.rank)

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        if self.basis is None:
            return
        params = trainable(pl_module.model)
        g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        self.basis = self.basis.to(g)
        g -= self.basis @ (self.basis.T @ g)
        offset = 0
        for p in params:
            p.grad = g[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    def after_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        update = flat(method.model) - self._start
        self.updates = torch.cat([self.updates.reshape(-1, len(update)), update[None]])
        self.basis = self._start = None

    def state_dict(self) -> dict[str, Tensor]:
        return {"updates": self.updates}

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        self.updates = state_dict.get("updates", torch.zeros(0, 0))
