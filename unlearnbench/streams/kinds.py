"""The contract a stream kind implements: validate its size, then draw the forget sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StreamError(ValueError):
    """A stream that cannot exist for this dataset (raised before anything is written)."""


@dataclass(frozen=True)
class ForgetSet:
    """What one request asks to forget: train indices and, for class-wise kinds, the classes; for a kind whose train
    data arrive over the stream (`streams.interleaved`), the train indices not yet released when it is made."""

    indices: np.ndarray
    classes: tuple[int, ...] | None = None
    #: None: every train sample was learned before the stream began (every kind whose data do not arrive later)
    unseen: np.ndarray | None = None


class StreamKind(Protocol):
    """A registered stream kind; `build` must be a pure function of its arguments."""

    default_size: float
    size_meaning: str
    #: Whether a request forgets whole classes: then the test images of those classes are "forgotten"
    #: too (forget_test_acc) and retained-class test images are the non-members of the attacks.
    class_based: bool

    def describe_size(self, size: float) -> str:
        """`size` in words, as a table title says it (`1 class per request`)."""
        ...

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None: ...

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
    ) -> list[ForgetSet]: ...
