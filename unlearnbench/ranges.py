"""Valid ranges of method hyperparameters: what a run accepts, refused before anything is loaded.

A method declares `valid_ranges = ranges(ratio=Range(0, 1, low_open=True))` beside its `__init__`;
the ranges of its base classes apply too (`GradientMethod` declares those of the SGD settings,
lr, epochs, batch_size, momentum and weight_decay, once for every gradient method). Ranges name a
group's fields flat (`lr`, not `optim.lr`), as tuned files and the run identity do. Validity is not the search space
(`search_space.py`): `--salun.ratio 0.95` is a valid run that `unlearnbench tune` never proposes,
while `--salun.ratio 1.5` is no SalUn at all (it crashed at request 1, after pretraining, before
ranges existed). A registry-wide test checks that every numeric hyperparameter of every method has
a range, that every default lies in it and that every search space lies inside it. `run --help`
prints each range after the hyperparameter's description.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from unlearnbench.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """low <= x <= high (strict where `*_open`); a missing end is unbounded. `None` values are never checked:
    a hyperparameter whose default is None means "choose for me" (LOFT's `s`)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self, name: str) -> str:
        """`0 < ratio <= 1`, `k >= 1`: the range as the refusal and `--help` print it."""
        low = "" if self.low is None else f"{_number(self.low)} {'<' if self.low_open else '<='} "
        high = "" if self.high is None else f" {'<' if self.high_open else '<='} {_number(self.high)}"
        if self.low is not None and self.high is None:
            return f"{name} {'>' if self.low_open else '>='} {_number(self.low)}"
        return f"{low}{name}{high}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e6 else f"{value:g}"


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
FRACTION = Range(0, 1, low_open=True)  # a share of something: none of it is no share
PROBABILITY = Range(0, 1)


def ranges(**declared: Range) -> Mapping[str, Range]:
    """A class's `valid_ranges` (read-only): `valid_ranges = ranges(ratio=FRACTION)`."""
    return MappingProxyType(declared)


def valid_ranges(cls: type) -> dict[str, Range]:
    """The ranges a class and its bases declare (`valid_ranges` class attributes), nearest class first."""
    merged: dict[str, Range] = {}
    for klass in reversed(cls.__mro__):
        merged.update(klass.__dict__.get("valid_ranges") or {})
    return merged


def groups(cls: type) -> dict[str, object]:
    """`cls`'s argument groups: name -> the class's default (a dataclass), e.g. {"optim": SGDSettings(lr=0.013)}."""
    return {
        name: p.default for name, p in inspect.signature(cls).parameters.items() if dataclasses.is_dataclass(p.default)
    }


def flat_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """`cls.__init__`'s parameters by flat name: a group (an argument whose default is a dataclass, a gradient
    method's `optim`) is replaced by its fields, each with the group default's value as its default."""
    flat = {}
    for name, parameter in inspect.signature(cls).parameters.items():
        if not dataclasses.is_dataclass(parameter.default):
            flat[name] = parameter
            continue
        for field in dataclasses.fields(parameter.default):
            default = getattr(parameter.default, field.name)
            flat[field.name] = inspect.Parameter(
                field.name, parameter.KEYWORD_ONLY, default=default, annotation=field.type
            )
    return flat


def numeric_parameters(cls: type) -> list[str]:
    """Hyperparameters (flat names) whose value is a number: a numeric default (a flag is no number) or a numeric type."""
    names = []
    for name, parameter in flat_parameters(cls).items():
        default, annotation = parameter.default, str(parameter.annotation)
        numeric_default = isinstance(default, int | float) and not isinstance(default, bool)
        if numeric_default or (default is None and any(kind in annotation for kind in ("int", "float"))):
            names.append(name)
    return names


def check_ranges(ranges: Mapping[str, Range], values: Mapping[str, object], what: str) -> None:
    """ConfigError naming the range for the first value outside `ranges` (a class's `valid_ranges`, or a built-in's
    as `known_arguments` holds them before it is imported); types are `early_checks.check_numbers`' job."""
    for name, value in values.items():
        valid = ranges.get(name)
        if valid is None or value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value) and not valid.contains(value):
            raise ConfigError(f"{what} {name} must satisfy {valid.describe(name)}, got {value!r}")
