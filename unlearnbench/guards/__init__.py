"""Plasticity guards: Lightning callbacks that compose with any gradient-trained unlearning method.

A guard is a `Guard` (a Lightning `Callback`) registered in `GUARDS`. The runner builds the guards
a run names (`--guard orthogonal,shrink_perturb`, or `guards: [...]` in a config), passes them to
every unlearning Trainer (never to pretraining or oracle training), calls `before_request` right
before the method's `prepare` and `after_request` right after its `unlearn`, in the order given, and
saves each guard's `state_dict` with the method's state after every request, so a resumed run
continues with the same guard state. Both hooks get the request's `StreamView` (what a method may
see: the current retain and forget sets), which the continual-learning guards (EWC, MAS, LwF) read
to weigh or distil on the retain set. A method that does not train by Lightning fits (not a `FitMethod`: LOFT, the
weight edits) refuses guards.
"""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from unlearnbench.registry import GUARDS
from unlearnbench.streams.base import StreamView

__all__ = ["GUARDS", "Guard", "build_guards", "pack_state", "pull_toward", "trainable", "unpack_state"]

STATE_PREFIX = "guard:"


class Guard(Callback):
    """Base class: typed `__init__` arguments (the CLI reads them), no-op request hooks, no state."""

    name = ""  # the registry name, set by `build_guards`

    def before_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        """Called before the method's `prepare` for request t."""

    def after_request(self, method: nn.Module, data: StreamView | None = None) -> None:
        """Called after the method's `unlearn` for request t."""

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        pass


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters a guard acts on: the model's trainable ones (never BN buffers)."""
    return [p for p in model.parameters() if p.requires_grad]


def flat(model: nn.Module) -> Tensor:
    """Trainable parameters as one float32 CPU vector (the order of `trainable`)."""
    return torch.cat([p.detach().flatten().float().cpu() for p in trainable(model)])


@torch.no_grad()
def pull_toward(params: list[nn.Parameter], anchor: list[Tensor], coefficient: list[Tensor]) -> None:
    """grad += c ⊙ (θ − θ*): the gradient of the quadratic penalty ½ Σ c (θ − θ*)² (EWC, MAS)."""
    for p, a, c in zip(params, anchor, coefficient, strict=True):
        pull = c * (p - a)
        p.grad = pull if p.grad is None else p.grad + pull


def build_guards(names: list[str], args: dict[str, dict]) -> list[Guard]:
    guards = []
    for name in names:
        guard = GUARDS.get(name)(**args.get(name, {}))
        guard.name = name
        guards.append(guard)
    return guards


def pack_state(guards: list[Guard]) -> dict[str, Tensor]:
    """Every guard's state under `guard:NAME:KEY`, to be saved beside the method's state dict."""
    return {f"{STATE_PREFIX}{g.name}:{key}": value for g in guards for key, value in g.state_dict().items()}


def unpack_state(state: dict[str, Tensor], guards: list[Guard]) -> dict[str, Tensor]:
    """Load the guards' parts of a saved state; returns the rest (the method's state dict)."""
    for guard in guards:
        prefix = f"{STATE_PREFIX}{guard.name}:"
        guard.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    return {k: v for k, v in state.items() if not k.startswith(STATE_PREFIX)}
