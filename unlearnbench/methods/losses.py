"""Loss functions of the methods (JiT, CoUn, SFR-on), apart from their glue so each is tested on its own inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def lipschitz_loss(model, x: Tensor, sigma: float, n_samples: int) -> Tensor:
    """(1/N) Σ_n Σ_i ‖f(x_i) − f(x'_i)‖₂ / ‖x_i − x'_i‖₂, x' = clamp(x + σε) to the batch's range; f(x') is a constant."""
    out, flat = model(x), x.flatten(1)
    low, high = x.min(), x.max()
    total = x.new_zeros(())
    for _ in range(n_samples):
        noisy = (x + sigma * torch.randn_like(x)).clamp(low, high)
        with torch.no_grad():
            noisy_out = model(noisy)
        total = total + ((out - noisy_out).norm(dim=1) / (flat - noisy.flatten(1)).norm(dim=1)).sum()
    return total / n_samples


def info_nce(z1: Tensor, z2: Tensor, temperature: float) -> Tensor:
    """SimCLR's NT-Xent: each view's positive is the other view of its sample, negatives all other 2n − 2."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    similarity = z @ z.T / temperature
    similarity.fill_diagonal_(float("-inf"))
    n = len(z1)
    positives = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(similarity, positives)


def adaptive_ce(logits: Tensor, labels: Tensor, lambd: float) -> Tensor:
    """Σ_i w_i·CE_i with w_i ∝ CE_i^(−λ) (detached, Σ w = 1): well-forgotten samples weigh less."""
    ce = F.cross_entropy(logits, labels, reduction="none")
    weight = 1 / (ce.detach().pow(lambd) + 1e-15)
    return (weight / weight.sum() * ce).sum()
