"""The seeds a run derives from its seed parts: each random stream of a run has its function here.

A derived seed is a draw from numpy's `SeedSequence` of its parts, so streams whose parts differ are
independent; two consumers with the same parts would share one stream, which is why every derivation
that more than one module repeats lives here and nowhere else.
"""

from __future__ import annotations

import numpy as np

#: The salt that sets each three-part stream `(seed part, t, salt)` apart. One table, so that two streams can
#: share a salt only by a visible edit: the SVC attack's subsampling once shared salt 1 with the forget set's
#: batch order, and with `--unlearn-seed` left at `--seed` the two drew the same numbers.
SALTS = {
    "other_batch_order": 0,
    "forget_batch_order": 1,
    "retain_batch_order": 2,
    "attack": 3,
    "relearn": 4,
    "learning": 5,
}


def derived_seed(*parts: int) -> int:
    """A 31-bit seed from `parts` (a seed and the salts that set one stream apart from the others)."""
    return int(np.random.default_rng(list(parts)).integers(2**31))


def attack_seed(seed: int, t: int) -> int:
    """The SVC attack's subsampling after request t, from the run's `--seed` (not one of its parts): the runner
    scores a request's rows with it and `evaluation.chains` rescores the saved oracles with it."""
    return derived_seed(seed, t, SALTS["attack"])


def batch_order_seed(unlearn_seed: int, t: int, batches: str = "other") -> int:
    """The order (and augmentation) of request t's batches of one set (`batches`: forget, retain or other)."""
    return derived_seed(unlearn_seed, t, SALTS[f"{batches}_batch_order"])


def relearn_seed(seed: int, t: int) -> int:
    """The relearning attack after request t (`evaluation.relearn`): its split of F_1..F_t, its global seed and its
    batch order. From the run's `--seed`, as the SVC attack's, so that the method's and the oracle's attacks (and
    those of every method of a setting) use one split and one batch order."""
    return derived_seed(seed, t, SALTS["relearn"])


def learning_seed(train_seed: int, t: int) -> int:
    """The learning step before request t of an interleaved stream (`Runner.learn`): its replayed samples, global seed
    and batch order. From the train seed, as pretraining is: learning new data is training, and every method of a
    setting then learns from the same samples in the same order."""
    return derived_seed(train_seed, t, SALTS["learning"])
