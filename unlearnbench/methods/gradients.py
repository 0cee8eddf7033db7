"""Shared pieces of the methods that read gradients instead of following them (Fisher, IU, SSD, SalUn's mask,
MUNBa's bargaining weights).

Per-sample gradients come from `torch.func` (`vmap` of `grad` over a `functional_call`), one
batched pass instead of one backward pass per sample, as the reference code does. The model must
be in eval mode: batch norm then uses its running statistics, so a sample's gradient does not
depend on the other samples of its batch (and `vmap` allows no in-place batch statistics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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


def flat_gradient(loss: Tensor, params: list[Tensor], retain_graph: bool = False) -> Tensor:
    """∇θ loss over `params`, flattened in their order (zeros for a parameter the loss does not reach)."""
    gradients = torch.autograd.grad(loss, params, retain_graph=retain_graph, materialize_grads=True)
    return torch.cat([g.flatten() for g in gradients])


@torch.no_grad()
def add_flat_(params: Iterable[Tensor], vector: Tensor) -> None:
    """θ += vector, `vector` flattened in the order of `params`."""
    offset = 0
    for p in params:
        p.add_(vector[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


def accumulated_gradients(
    model: nn.Module, batches: Iterable[Batch], batch_loss: Callable[[Batch], Tensor], statistic=lambda g, batch: g
) -> tuple[dict[str, Tensor], int]:
    """(Σ over batches of statistic(∇θ batch_loss(b), b) per parameter name, number of batches).

    One backward pass per minibatch (not per sample): SSD's and EWC's Fisher, LFSSD's label-free
    importance, L2UL's MAS importance and SalUn's saliency all differ only in the loss and statistic.
    """
    parameters = dict(model.named_parameters())
    total = {name: torch.zeros_like(p) for name, p in parameters.items()}
    count = 0
    for batch in batches:
        model.zero_grad()
        batch_loss(batch).backward()
        for name, p in parameters.items():
            if p.grad is not None:
                total[name] += statistic(p.grad, batch)
        count += 1
    model.zero_grad()
    return total, count


def importances(model: nn.Module, batches: Iterable[Batch]) -> dict[str, Tensor]:
    """Diagonal Fisher estimate: the mean over minibatches of the squared gradient of the batch's CE."""
    total, count = accumulated_gradients(
        model, batches, lambda b: F.cross_entropy(model(b.x), b.y), lambda g, b: g.pow(2)
    )
    return {name: value / max(count, 1) for name, value in total.items()}


def on_device(batches: Iterable[Batch], device: torch.device) -> Iterator[Batch]:
    """`batches` with images and labels moved to `device` (indices stay where the loader keeps them)."""
    for b in batches:
        yield b._replace(x=b.x.to(device), y=b.y.to(device))


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


def nash_bargaining(g_r: Tensor, g_f: Tensor, eps: float = 1e-8) -> tuple[float, float] | None:
    """Nash bargaining: α > 0 with Gα = 1/α for G the Gram matrix of (g_r, g_f), closed form; None if not both > 0.

    With g1 = ‖g_r‖², g2 = ⟨g_r, g_f⟩, g3 = ‖g_f‖² (in float64; ε as in MUNBa's reference):
    α1 = sqrt((g1·g3 − g2·sqrt(g1·g3)) / (g1²·g3 − g1·g2² + ε)), α2 = (1 − g1·α1²) / (g2·α1 + ε).
    In exact arithmetic α = (1/sqrt(g1·(1+c)), 1/sqrt(g3·(1+c))) with c the gradients' cosine, so
    it fails (zero, negative or NaN) only for parallel gradients, orthogonal ones (when ε is
    negligible against the norms) and non-finite values.
    """
    g1, g2, g3 = torch.stack([g_r @ g_r, g_r @ g_f, g_f @ g_f]).double()
    alpha1 = torch.sqrt((g1 * g3 - g2 * torch.sqrt(g1 * g3)) / (g1 * g1 * g3 - g1 * g2 * g2 + eps))
    alpha2 = (1 - g1 * alpha1 * alpha1) / (g2 * alpha1 + eps)
    alpha1, alpha2 = alpha1.item(), alpha2.item()
    return (alpha1, alpha2) if alpha1 > 0 and alpha2 > 0 else None
