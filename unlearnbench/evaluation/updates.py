"""u_t = θ_t − θ_{t−1}: the flat parameter update of one request, the input of the geometry (ER/CO).

Kept apart from `geometry`, which needs numpy only: the ER/CO of a finished run (`updates.f32`) can
be recomputed, and a 10M-parameter stream analysed, in a process that never imports torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def _sources(method: nn.Module) -> tuple[list[tuple[str, torch.Tensor | None]], bool]:
    """(named tensors, whether to keep only `requires_grad` ones) that make up θ for `method`."""
    custom = getattr(method, "geometry_parameters", None)
    if callable(custom):
        return list(custom()), False
    return list(getattr(method, "model", method).named_parameters()), True


def snapshot(method: nn.Module) -> dict[str, torch.Tensor]:
    """θ before a request: a float32 CPU copy of every parameter of the method's model (or of what
    its `geometry_parameters()` returns), trainable or not."""
    named, _ = _sources(method)
    return {name: p.detach().float().cpu().clone() for name, p in named if p is not None}


def parameter_update(
    before: dict[str, torch.Tensor], method: nn.Module
) -> tuple[list[tuple[str, tuple[int, ...]]], np.ndarray]:
    """(layout, u_t): the parameters trainable after the request and their change, float32, flat.

    A parameter absent from `before` (created during the request) or whose shape changed counts
    from zero.
    """
    named, trainable_only = _sources(method)
    layout, pieces = [], []
    for name, p in named:
        if p is None or (trainable_only and not p.requires_grad):
            continue
        after = p.detach().float().cpu()
        previous = before.get(name)
        if previous is None or previous.shape != after.shape:
            previous = torch.zeros_like(after)
        layout.append((name, tuple(after.shape)))
        pieces.append((after - previous).flatten())
    vector = torch.cat(pieces).numpy() if pieces else np.zeros(0, dtype=np.float32)
    return layout, np.ascontiguousarray(vector, dtype=np.float32)
