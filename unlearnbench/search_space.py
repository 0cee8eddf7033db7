"""Typed search-space records: what `unlearnbench tune` may vary for a method, declared beside its defaults.

A method lists `search_space = space(GRADIENT_SPACE, alpha=Float(0.5, 0.9999))` as a
class attribute; each key is an `__init__` argument, a group's field by its path (`optim.lr`, the
Optuna parameter's name too), and each record maps onto one of Optuna's
`trial.suggest_float/int/categorical` (duck-typed here, so importing a method never imports
Optuna). Learning rates, weight decays and loss coefficients that span decades are `log=True`:
TPE then samples 1e-4 as often as 1e-2. `GRADIENT_SPACE` is the part every SGD method shares:
DeepUnlearn's ranges (xcadet/deepunlearn, `munl/settings.py` at d3dacb6: lr and weight decay
log-uniform in [1e-5, 1e-1], epochs an integer from 1 to a cap that `unlearnbench tune` sets at
20% of the pretraining epochs). The method-specific ranges are ours: each brackets the method's
reference default by about a decade on either side, or its valid interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Float:
    low: float
    high: float
    log: bool = False

    def suggest(self, trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log)

    def contains(self, value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Int:
    low: int
    high: int
    log: bool = False

    def suggest(self, trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, log=self.log)

    def contains(self, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high

    def capped(self, high: int) -> Int:
        """The same range with its upper end lowered to `high` (the tuning budget's epoch cap)."""
        top = max(1, min(self.high, high))
        return Int(min(self.low, top), top, self.log)


@dataclass(frozen=True)
class Categorical:
    choices: tuple

    def suggest(self, trial, name: str):
        return trial.suggest_categorical(name, list(self.choices))

    def contains(self, value) -> bool:
        return value in self.choices


Distribution = Float | Int | Categorical

#: lr, epochs and weight decay of an SGD method's `optim` group; `optim.epochs` is capped by the tuning budget.
GRADIENT_SPACE: Mapping[str, Distribution] = MappingProxyType(
    {
        "optim.lr": Float(1e-5, 1e-1, log=True),
        "optim.epochs": Int(1, 10),
        "optim.weight_decay": Float(1e-5, 1e-1, log=True),
    }
)


def sample(distributions: Mapping[str, Distribution], trial) -> dict:
    """One point of the space, suggested through `trial` (an Optuna trial, or anything with its suggest_*)."""
    return {name: distribution.suggest(trial, name) for name, distribution in distributions.items()}


def space(
    *bases: Mapping[str, Distribution], **distributions: Distribution | Mapping[str, Distribution]
) -> Mapping[str, Distribution]:
    """A method's search space: `bases` merged in order, then `distributions` (which override them), a group's as a
    mapping of its fields (`optim={"epochs": Int(1, 5)}` is `optim.epochs`); read-only."""
    merged: dict[str, Distribution] = {}
    for base in bases:
        merged.update(base)
    for name, distribution in distributions.items():
        if isinstance(distribution, Mapping):
            merged.update({f"{name}.{field}": d for field, d in distribution.items()})
        else:
            merged[name] = distribution
    return MappingProxyType(merged)
