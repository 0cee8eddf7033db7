"""Valid ranges of method hyperparameters: what a run accepts, refused before anything is loaded.

A method declares `valid_ranges = ranges(ratio=Range(0, 1, low_open=True))` beside its `__init__`;
the ranges of its base classes apply too (`GradientMethod` declares those of the SGD settings,
lr, epochs, batch_size, momentum and weight_decay, once for every gradient method). A group's field is named by
its path (`optim.lr`), as on the command line, in tuned files and in the run identity. Validity is not the search space
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
from collections.abc import Iterable, Mapping
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
    """The ranges a class and its bases declare (`valid_ranges` class attributes), nearest class first, and those its
    groups' classes declare, by path (`optim.lr`: `SGDSettings.valid_ranges` holds them once for every gradient
    method). A base's range of an argument the class does not take is left out (`UnlearningMethod`'s `batch_size`,
    which a gradient method takes as `optim.batch_size`)."""
    merged: dict[str, Range] = {}
    for klass in reversed(cls.__mro__):
        merged.update(klass.__dict__.get("valid_ranges") or {})
    for group, default in groups(cls).items():
        merged.update({f"{group}.{name}": valid for name, valid in valid_ranges(type(default)).items()})
    taken = parameters(cls)
    return {name: valid for name, valid in merged.items() if name in taken}


def groups(cls: type) -> dict[str, object]:
    """`cls`'s argument groups: name -> the class's default (a dataclass), e.g. {"optim": SGDSettings(lr=0.013)}."""
    return {
        name: p.default for name, p in inspect.signature(cls).parameters.items() if dataclasses.is_dataclass(p.default)
    }


def parameters(cls: type) -> dict[str, inspect.Parameter]:
    """`cls.__init__`'s parameters by path: a group (an argument whose default is a dataclass, a gradient method's
    `optim`) by its fields (`optim.lr`), each with the group default's value as its default."""
    named = {}
    for name, parameter in inspect.signature(cls).parameters.items():
        if not dataclasses.is_dataclass(parameter.default):
            named[name] = parameter
            continue
        for field in dataclasses.fields(parameter.default):
            default = getattr(parameter.default, field.name)
            named[f"{name}.{field.name}"] = inspect.Parameter(
                field.name, parameter.KEYWORD_ONLY, default=default, annotation=field.type
            )
    return named


def paths(arguments: Mapping[str, object], group_names: Iterable[str]) -> dict[str, object]:
    """A method's arguments by path: each group among `group_names` given as a mapping (or its dataclass) by its
    fields (`{"optim": {"lr": 0.1}}` -> `{"optim.lr": 0.1}`), any other argument as it is: what ranges and numbers are
    checked by."""
    named = {}
    for name, value in arguments.items():
        if name in group_names and (isinstance(value, Mapping) or dataclasses.is_dataclass(value)):
            fields = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
            named.update({f"{name}.{field}": v for field, v in fields.items()})
        else:
            named[name] = value
    return named


def nested(by_path: Mapping[str, object]) -> dict:
    """The inverse of `paths`: `{"optim.lr": 0.1, "ratio": 0.5}` -> `{"optim": {"lr": 0.1}, "ratio": 0.5}` (a search
    space's sample, whose names are paths, as the method's arguments)."""
    arguments: dict = {}
    for name, value in by_path.items():
        group, dot, field = name.partition(".")
        if dot:
            arguments.setdefault(group, {})[field] = value
        else:
            arguments[name] = value
    return arguments


def numeric_parameters(cls: type) -> list[str]:
    """Hyperparameters (paths) whose value is a number: a numeric default (a flag is no number) or a numeric type."""
    names = []
    for name, parameter in parameters(cls).items():
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
