"""`tune --sampler-seed S` with several workers on one study: trial n draws from a sampler seeded by (S, n).

Seeding each worker's sampler with S made two workers started together draw the same values for
their first trials, so both asked for the same trial folder (named by the values) and the second was
refused. Trial numbers are unique in a study (the storage assigns them), so a sampler made afresh for
each trial from (S, n) keeps the workers apart through the study, and a study stays reproducible
trial by trial. Samplers keep what they learn in the study's storage, not in the object, so a fresh
one per trial samples as the long-lived one would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import optuna


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial `number`'s sampler: a hash of (seed, number), so that nearby seeds share no trials."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:4], "little")


class TrialSeededSampler(optuna.samplers.BaseSampler):
    """Delegates every call to `make(trial_seed(seed, n))`, made as trial n begins (`before_trial`)."""

    def __init__(self, make: Callable[[int], optuna.samplers.BaseSampler], seed: int):
        self._make, self._seed = make, seed
        self._sampler = make(seed)

    def before_trial(self, study, trial) -> None:
        self._sampler = self._make(trial_seed(self._seed, trial.number))
        self._sampler.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._sampler.reseed_rng()
