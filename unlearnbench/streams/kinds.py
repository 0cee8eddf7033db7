"""The contract a stream kind implements: validate its size, then draw the forget sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StreamError(ValueError):
    """A stream that cannot exist for this dataset (raised before anything is written)."""


@dataclass(frozen=True)
class ForgetSet:
    """What one request asks to forget: train indices and, for class-wise kinds, the classes."""

    indices: np.ndarray
    classes: tuple[int, ...] | None = None


class StreamKind(Protocol):
    """A registered stream kind; `build` must be a pure function of its arguments."""

    default_size: float
    size_meaning: str

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None: ...

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
    ) -> list[ForgetSet]: ...
