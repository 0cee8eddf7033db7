"""Shared pieces of the methods that read gradients instead of following them (Fisher, IU).

Per-sample gradients come from `torch.func` (`vmap` of `grad` over a `functional_call`), one
batched pass instead of one backward pass per sample, as the reference code does. The model must
be in eval mode: batch norm then uses its running statistics, so a sample's gradient does not
depend on the other samples of its batch (and `vmap` allows no in-place batch statistics).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from unlearnbench.data.base import Batch


def trainable(model: nn.Module) -> dict[str, Tensor]:
    """The trainable parameters by name, in `named_parameters` order (the order of every flat vector)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def per_sample_gradients(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, Tensor]:
    """∇θ CE(f(x_i), y_i) for each sample i: name -> (B, *shape) of every trainable parameter."""
    params = {name: p.detach() for name, p in trainable(model).items()}
    buffers = dict(model.named_buffers())

    def sample_loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    return vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)


def flat(gradients: dict[str, Tensor]) -> Tensor:
    """(B, d): per-sample gradients flattened in parameter order."""
    return torch.cat([g.flatten(1) for g in gradients.values()], dim=1)


def summed_gradient(model: nn.Module, batches: Iterable[Batch]) -> tuple[Tensor, int]:
    """(Σ_i ∇θ CE(f(x_i), y_i) flattened, number of samples) over `batches`."""
    params = list(trainable(model).values())
    total, count = torch.zeros(sum(p.numel() for p in params), device=params[0].device), 0
    for batch in batches:
        loss = F.cross_entropy(model(batch.x), batch.y, reduction="sum")
        total += torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
        count += len(batch.y)
    return total, count


def on_device(batches: Iterable[Batch], device: torch.device) -> Iterable[Batch]:
    return (Batch(b.x.to(device), b.y.to(device), b.idx) for b in batches)


def diagonal_fisher(model: nn.Module, batches: Iterable[Batch], eps: float = 1e-8) -> dict[str, Tensor]:
    """F = mean over samples of (∇θ log p(y|x) + eps)², from per-sample gradients (the reference's eps)."""
    total, count = None, 0
    for batch in batches:
        squared = {name: (g + eps).pow(2).sum(0) for name, g in per_sample_gradients(model, batch.x, batch.y).items()}
        total = squared if total is None else {name: total[name] + value for name, value in squared.items()}
        count += len(batch.y)
    return {name: value / count for name, value in total.items()}


def inverse_fisher_product(grads: Tensor, v: Tensor, n: int) -> Tensor:
    """H⁻¹v for H = I + (1/n)·Σ_m g_m g_mᵀ, g_m the rows of `grads` (exact, float64 solve).

    H is what the reference's Sherman–Morrison recursion builds, one rank-1 update g gᵀ/n per
    sample from H₀ = I; those updates compose to the Woodbury identity used here,
    H⁻¹ = I − Gᵀ(nI + GGᵀ)⁻¹G, which costs one m×m solve instead of m sequential passes.
    """
    gram = (grads @ grads.T).double()
    system = n * torch.eye(len(grads), dtype=torch.float64, device=grads.device) + gram
    coefficients = torch.linalg.solve(system, (grads @ v).double())
    return v - grads.T @ coefficients.to(grads.dtype)
