"""Random stream: each request forgets a fraction of the original train set, drawn from the rest."""

from __future__ import annotations

import numpy as np

from unlearnbench.registry import STREAMS
from unlearnbench.streams.kinds import ForgetSet, StreamError


@STREAMS.register("random")
class RandomSamples:
    """A fraction of the original train set per request (size, default 0.01), never re-drawn."""

    default_size = 0.01
    size_meaning = "fraction of the original train set per request"
    class_based = False

    def describe_size(self, size: float) -> str:
        return f"{100 * size:g}% of train per request"

    def _count(self, num_train: int, size: float) -> int:
        return round(size * num_train)

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None:
        if not 0 < size < 1:
            raise StreamError(f"random size is a fraction in (0, 1), got {size}")
        if self._count(num_train, size) < 1:  # never silently one sample: the user asked for less
            raise StreamError(
                f"random size {size} of {num_train} train samples is less than one sample per request; "
                f"use size >= {1 / num_train:.2g}"
            )
        if num_requests * size >= 1 or num_requests * self._count(num_train, size) >= num_train:
            raise StreamError(
                f"random stream needs requests x size < 1 so that some samples are retained, "
                f"got {num_requests} x {size}"
            )

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
    ) -> list[ForgetSet]:
        remaining = np.arange(len(train_labels))
        forget_sets = []
        for _ in range(num_requests):
            chosen = np.sort(rng.choice(remaining, self._count(len(train_labels), size), replace=False))
            remaining = np.setdiff1d(remaining, chosen, assume_unique=True)
            forget_sets.append(ForgetSet(chosen))
        return forget_sets
