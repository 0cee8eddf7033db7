"""Per-sample gradients kept as factors where a layer allows it: Fisher forgetting's and IU's statistics without
the B x d tensor.

A linear layer applied once to a (B, in) input has the per-sample weight gradient g_i = δ_i a_iᵀ, its output
gradient times its input (Goodfellow, "Efficient per-example gradient computations", 2015; the factorization
BackPACK's `SumGradSquared` and `BatchDotGrad` use). The statistics the methods need follow from a (B, in) and
δ (B, out) alone:

- Σ_i (g_i + ε)² = (δ²)ᵀ(a²) + 2ε·δᵀa + B·ε² (Fisher forgetting's diagonal, with its reference's ε);
- ⟨g_i, g_j⟩ = ⟨δ_i, δ_j⟩·⟨a_i, a_j⟩ (IU's Gram matrix), ⟨g_i, V⟩ = δ_iᵀ V a_i and Σ_i c_i g_i = (c·δ)ᵀ a.

`torch.func` materializes the B x out x in tensor instead, and on the memorizing tier's MLP (535,818 parameters)
that cost Fisher forgetting about 4 ms per retain sample on one thread: ~40 s for each request's 9,000 retain
images, a third of the tier's whole class-wise grid. Every other parameter (convolutions, norms, a linear layer
applied to a sequence or called twice, a weight shared with another module) is materialized by `torch.func` as
before, so the result is the same per-sample gradients for every model, only cheaper where the model is linear.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.gradients import per_sample_gradients, trainable


@dataclass(frozen=True)
class SampleGradients:
    """∇θ CE(f(x_i), y_i) of B samples over the trainable parameters, in `named_parameters` order.

    `factors` holds a weight's (δ (B, out), a (B, in)); `dense` holds every other parameter's (B, *shape).
    """

    shapes: dict[str, torch.Size]
    factors: dict[str, tuple[Tensor, Tensor]]
    dense: dict[str, Tensor]

    @property
    def samples(self) -> int:
        first = next(iter(self.factors.values()))[0] if self.factors else next(iter(self.dense.values()))
        return len(first)

    def squared_sum(self, eps: float = 0.0) -> dict[str, Tensor]:
        """Σ_i (g_i + ε)² per parameter name."""
        result = {}
        for name in self.shapes:
            if name in self.factors:
                delta, a = self.factors[name]
                result[name] = delta.pow(2).T @ a.pow(2) + 2 * eps * (delta.T @ a) + self.samples * eps**2
            else:
                result[name] = (self.dense[name] + eps).pow(2).sum(0)
        return result

    def gram(self) -> Tensor:
        """(B, B): ⟨g_i, g_j⟩ over every parameter."""
        total = 0
        for name in self.shapes:
            if name in self.factors:
                delta, a = self.factors[name]
                total = total + (delta @ delta.T) * (a @ a.T)
            else:
                g = self.dense[name].flatten(1)
                total = total + g @ g.T
        return total

    def dot(self, vector: Tensor) -> Tensor:
        """(B,): ⟨g_i, v⟩, `vector` flattened in parameter order."""
        total = 0
        for name, part in self._split(vector):
            if name in self.factors:
                delta, a = self.factors[name]
                total = total + ((delta @ part) * a).sum(1)
            else:
                total = total + self.dense[name].flatten(1) @ part.flatten()
        return total

    def combine(self, coefficients: Tensor) -> Tensor:
        """Σ_i c_i g_i, flattened in parameter order."""
        parts = []
        for name in self.shapes:
            if name in self.factors:
                delta, a = self.factors[name]
                parts.append(((delta * coefficients[:, None]).T @ a).flatten())
            else:
                parts.append(coefficients @ self.dense[name].flatten(1))
        return torch.cat(parts)

    def _split(self, vector: Tensor):
        offset = 0
        for name, shape in self.shapes.items():
            size = shape.numel()
            yield name, vector[offset : offset + size].view(shape)
            offset += size

    @staticmethod
    def cat(parts: list[SampleGradients]) -> SampleGradients:
        """The samples of several batches as one (each batch factored alike: one model, one input shape)."""
        first = parts[0]
        factors = {
            name: (torch.cat([p.factors[name][0] for p in parts]), torch.cat([p.factors[name][1] for p in parts]))
            for name in first.factors
        }
        dense = {name: torch.cat([p.dense[name] for p in parts]) for name in first.dense}
        return SampleGradients(first.shapes, factors, dense)


def shared_parameters(model: nn.Module) -> set[int]:
    """ids of the parameters that more than one module holds (tied weights): their gradient has several terms."""
    counts = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    return {key for key, count in counts.items() if count > 1}


def sample_gradients(model: nn.Module, x: Tensor, y: Tensor) -> SampleGradients:
    """The per-sample CE gradients of one batch; the model in eval mode (see `unlearnbench.methods.gradients`).

    One forward and one backward pass give each candidate linear layer's input a and output gradient δ (the loss
    summed over the batch, so row i of δ is sample i's own gradient). A forward hook returns a copy of the layer's
    output, so an in-place activation after it (the MLP's `ReLU(inplace=True)`) cannot change the tensor δ is
    taken against. A layer is factored when it ran exactly once, on a 2-D input; the rest go to `torch.func`.
    """
    params = trainable(model)
    shared = shared_parameters(model)
    candidates = {
        path: module
        for path, module in model.named_modules()
        if isinstance(module, nn.Linear) and module.weight.requires_grad and id(module.weight) not in shared
    }
    seen: dict[str, list[tuple[Tensor, Tensor]]] = {path: [] for path in candidates}

    def recorder(path: str):
        def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor:
            seen[path].append((inputs[0].detach(), output))
            return output.clone()

        return hook

    handles = [module.register_forward_hook(recorder(path)) for path, module in candidates.items()]
    try:
        with torch.enable_grad():
            loss = F.cross_entropy(model(x), y, reduction="sum")
            factored = {path: calls[0] for path, calls in seen.items() if len(calls) == 1 and calls[0][0].dim() == 2}
            deltas = torch.autograd.grad(loss, [output for _, output in factored.values()], allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
    factors, dense = {}, {}
    for (path, (a, output)), delta in zip(factored.items(), deltas, strict=True):
        delta = torch.zeros_like(output) if delta is None else delta.detach()
        prefix = f"{path}." if path else ""
        factors[f"{prefix}weight"] = (delta, a)
        bias = candidates[path].bias
        if bias is not None and bias.requires_grad and id(bias) not in shared:
            dense[f"{prefix}bias"] = delta
    rest = [name for name in params if name not in factors and name not in dense]
    if rest:  # torch.func over every parameter, the factored ones' few dense copies dropped
        dense.update({name: g for name, g in per_sample_gradients(model, x, y).items() if name in rest})
    return SampleGradients({name: p.shape for name, p in params.items()}, factors, dense)


def fisher_diagonal(model: nn.Module, batches: Iterable[Batch], eps: float = 1e-8) -> dict[str, Tensor]:
    """F = mean over samples of (∇θ log p(y|x) + eps)², from per-sample gradients (the reference's eps): the statistic
    of `unlearnbench.methods.gradients.diagonal_fisher`, which materializes them and is its tested reference."""
    total, count = None, 0
    for batch in batches:
        squared = sample_gradients(model, batch.x, batch.y).squared_sum(eps)
        total = squared if total is None else {name: total[name] + value for name, value in squared.items()}
        count += len(batch.y)
    return {name: value / count for name, value in total.items()}


def woodfisher_inverse_product(grads: SampleGradients, v: Tensor, n: int) -> Tensor:
    """H⁻¹v for H = I + (1/n)·Σ_m g_m g_mᵀ, g_m the per-sample gradients of `grads` (exact, float64 solve).

    H is what the reference's Sherman–Morrison recursion builds, one rank-1 update g gᵀ/n per
    sample from H₀ = I; those updates compose to the Woodbury identity used here,
    H⁻¹ = I − Gᵀ(nI + GGᵀ)⁻¹G, which costs one m×m solve instead of m sequential passes (and, with
    `SampleGradients`' factors, never forms G itself). `unlearnbench.methods.gradients.inverse_fisher_product` is
    the same on a materialized G, and its tested reference.
    """
    system = n * torch.eye(grads.samples, dtype=torch.float64, device=v.device) + grads.gram().double()
    coefficients = torch.linalg.solve(system, grads.dot(v).double())
    return v - grads.combine(coefficients.to(v.dtype))
