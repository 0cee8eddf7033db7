"""The validation view of a dataset: its train split cut in two, the test split left out entirely.

`unlearnbench tune` scores hyperparameters on this view (`RunConfig.split = "validation"`): a
stratified `VALIDATION_FRACTION` of the train split takes the test split's place, the rest is the
view's train split (pretraining, the stream's forget/retain sets, the oracles). The real test
split is not in the view at all, so no tuning objective can read a test logit or a test label,
whatever metric it is built from. The cut is part of the view's definition (a fixed seed, one
cut per dataset), like the datasets' own train/test splits. Normalization constants stay the
dataset's (pixel mean and std over its whole train split, which holds the validation part).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

VALIDATION_FRACTION = 0.2
VALIDATION_SEED = 0


def view_train_size(num_train: int) -> int:
    """The view's train part of a train split of `num_train`, as the stream checks count it before any data is
    loaded (`TuneSpec.validate`, and `tune`'s check before torch is imported)."""
    return num_train - round(VALIDATION_FRACTION * num_train)


def validation_indices(labels: np.ndarray, fraction: float = VALIDATION_FRACTION) -> np.ndarray:
    """Sorted train indices of the validation part: `fraction` of each class (at least one sample)."""
    rng = np.random.default_rng(VALIDATION_SEED)
    held = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        held.append(rng.choice(members, size=max(1, round(fraction * len(members))), replace=False))
    return np.sort(np.concatenate(held))


def validation_view(dataset):
    """`dataset` with train = train minus the validation part and test = the validation part."""
    labels = dataset.train.labels.cpu().numpy()
    held = validation_indices(labels)
    kept = np.setdiff1d(np.arange(len(labels)), held)
    return replace(dataset, train=dataset.train.subset(kept), test=dataset.train.subset(held))
