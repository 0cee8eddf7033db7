"""Class-wise stream: each request forgets every train sample of k classes (seeded class order)."""

from __future__ import annotations

import numpy as np

from unlearnbench.registry import STREAMS
from unlearnbench.streams.kinds import ForgetSet, StreamError


@STREAMS.register("classwise")
class Classwise:
    """k whole classes per request (size = k, default 1), class order drawn from the seed."""

    default_size = 1
    size_meaning = "classes per request"
    class_based = True

    def describe_size(self, size: float) -> str:
        return f"{size:g} {'class' if size == 1 else 'classes'} per request"

    def validate(self, num_train: int, num_classes: int, num_requests: int, size: float) -> None:
        if size != int(size) or size < 1:
            raise StreamError(f"classwise size is a whole number of classes per request >= 1, got {size}")
        if num_requests * int(size) >= num_classes:
            raise StreamError(
                f"classwise stream needs requests x size < {num_classes} classes so that some classes are "
                f"retained, got {num_requests} x {int(size)}"
            )

    def build(
        self,
        train_labels: np.ndarray,
        num_classes: int,
        num_requests: int,
        size: float,
        rng: np.random.Generator,
    ) -> list[ForgetSet]:
        order = rng.permutation(num_classes)
        k = int(size)
        forget_sets = []
        for t in range(num_requests):
            classes = tuple(sorted(int(c) for c in order[t * k : (t + 1) * k]))
            forget_sets.append(ForgetSet(np.flatnonzero(np.isin(train_labels, classes)), classes))
        return forget_sets
