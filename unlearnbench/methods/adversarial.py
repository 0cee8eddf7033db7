"""Adversarial inputs that methods build against the model (Boundary Shrink's FGSM, L2UL's L2 PGD, UNSIR's noise)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fgsm_labels(model: nn.Module, x: Tensor, y: Tensor, bound: float, normalization: tuple) -> Tensor:
    """`model`'s prediction on x + bound·sign(∇ₓCE), the step taken in [0, 1] pixel space, clamped and rounded to 1/255.

    `normalization`: the (mean, std) per channel that `x` was normalized with (the stream view's).
    """
    mean, std = (torch.tensor(v).view(1, -1, 1, 1).to(x.device) for v in normalization)
    pixels = (x * std + mean).detach().requires_grad_(True)
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(F.cross_entropy(model((pixels - mean) / std), y), pixels)
    adversarial = torch.round((pixels + bound * gradient.sign()).clamp(0, 1) * 255) / 255
    with torch.no_grad():
        return model((adversarial - mean) / std).argmax(dim=1)


def targeted_l2_pgd(model: nn.Module, x: Tensor, target: Tensor, eps: float, step: float, iters: int) -> Tensor:
    """Targeted L2 PGD (as advertorch's `L2PGDAttack`, random start): minimize CE to `target` within ‖δ‖₂ ≤ eps."""

    def project(delta: Tensor, radius: float) -> Tensor:
        norms = delta.flatten(1).norm(dim=1).clamp(min=1e-12).view(-1, *[1] * (delta.dim() - 1))
        return delta * (radius / norms).clamp(max=1)

    delta = project(torch.empty_like(x).uniform_(-1, 1), eps)
    for _ in range(iters):
        delta.requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(model(x + delta), target), delta)
        grad_norm = grad.flatten(1).norm(dim=1).clamp(min=1e-12).view(-1, *[1] * (x.dim() - 1))
        delta = project(delta.detach() - step * grad / grad_norm, eps)
    return (x + delta).detach()


def error_maximizing_noise(model: nn.Module, labels: Tensor, shape: tuple, steps: int, lr: float, l2: float) -> Tensor:
    """One image per label, from N(0, 1), by Adam steps on −CE(f(N), labels) + l2·mean_i ‖N_i‖² (model fixed)."""
    noise = torch.randn(len(labels), *shape, device=labels.device, requires_grad=True)
    optimizer = torch.optim.Adam([noise], lr=lr)
    for _ in range(steps):
        loss = -F.cross_entropy(model(noise), labels) + l2 * noise.pow(2).flatten(1).sum(1).mean()
        (noise.grad,) = torch.autograd.grad(loss, noise)
        optimizer.step()
    return noise.detach()
