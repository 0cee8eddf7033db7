"""The SVC membership-inference attack of SalUn's evaluation (Fan et al., ICLR 2024).

Feature: the softmax probability of the true label ("confidence"). The attack is fit on a seeded
random subset of the retain set (members) against test samples of retained classes (non-members)
of equal size, then asked about the forget set; `member_rate` is the % it calls member.
SalUn's "MIA-Efficacy" is 100 − member_rate.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax
from sklearn.svm import SVC


def true_label_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    probabilities = softmax(logits.astype(np.float64), axis=1)
    return probabilities[np.arange(len(labels)), labels]


def svc_member_rate(
    member_confidence: np.ndarray,
    nonmember_confidence: np.ndarray,
    target_confidence: np.ndarray,
    rng: np.random.Generator,
) -> float:
    """% of targets classified as members by `SVC(C=3, gamma="auto", kernel="rbf")`."""
    n = min(len(member_confidence), len(nonmember_confidence))
    members = rng.choice(member_confidence, n, replace=False)
    nonmembers = rng.choice(nonmember_confidence, n, replace=False)
    features = np.concatenate([members, nonmembers])[:, None]
    labels = np.concatenate([np.ones(n), np.zeros(n)])
    attack = SVC(C=3, gamma="auto", kernel="rbf").fit(features, labels)
    return float(attack.predict(target_confidence[:, None]).mean() * 100.0)
