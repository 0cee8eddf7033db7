"""The SVC membership-inference attack of SalUn's evaluation (Fan et al., ICLR 2024), and its own validity.

Feature: the softmax probability of the true label ("confidence"). The attack is fit on a seeded
random subset of the retain set (members) against non-members of equal size, then asked about the
forget set; `member_rate` is the % it calls member. SalUn's "MIA-Efficacy" is 100 − member_rate.

Two protocols pick the non-members it is fit on (`--mia-protocol`, part of a run's identity):

- `salun` (default): test samples of retained classes (`test_retain`), as SalUn's
  `Classification/main_forget.py` (OPTML-Group/Unlearn-Saliency at a6e89fd), whose test loader
  drops the forgotten classes in class-wise unlearning;
- `loft`: the whole test set, forgotten classes' test images included, as LOFT's release does
  (`get_SVC_MIA(shadow_train=retain sample, shadow_test=sample of the full test set)`).
  For a random stream the two are the same.

Why the attack needs a validity number: on data a model fits well (digits) the fitted SVC is one
threshold on p_y near its top, which calls most *unseen* test samples members too; its member rate
then re-measures "classified correctly and confidently", not membership. `svc_attack` therefore also
reports (with an independent seeded split, so `member_rate` keeps the papers' exact procedure):

- `validity`: balanced accuracy (%) of the same SVC procedure fit on a random half A of (members,
  non-members) and scored on the other half B (equal sizes on both sides, so balanced accuracy is
  plain accuracy and its 95% Clopper-Pearson interval `validity_lo`/`validity_hi` is binomial);
  an interval that contains 50 means the attack cannot tell members from non-members at all;
- `advantage`: member rate (of that half-A SVC) on F_t minus its member rate on never-trained
  samples of the same classes not used to fit it: class-wise, the test images of F_t's classes
  (minus half A under `loft`); random, half B of the test non-members. For any model that never saw
  F_t (the oracle) both are unseen samples of the same classes, so the target is 0 whatever the
  stream kind; > 0 is residual membership, < 0 over-forgetting.
- `advantage_null_lo`/`_hi`: its 95% null interval, the exact permutation test's. Under the null
  (a model that never saw F_t) F_t and the unseen samples are exchangeable given the fitted attack,
  so relabelling which of the pooled samples are "F_t" gives the difference's null distribution;
  the attack's calls are 0/1, so the number of F_t samples called member under relabelling is
  hypergeometric (pool size, members called in the pool, |F_t|), and the interval is that law's
  2.5% and 97.5% quantiles mapped to the difference: exact, with no sampling, keeping both groups'
  sizes and the pooled member rate. Not a binomial interval per group: the two rates share the
  pool, and a one-threshold SVC often calls 0% or 100%, where binomial approximations fail.
  Without any membership signal the difference spreads widely at our sizes (±12.6 points at the
  digits class-wise sizes, −19/+16 at the random ones; the intervals of `benchmarks/fidelity.py`'s
  runs span about −19 to +20 where the attack calls some samples members), so an advantage inside
  its interval is no evidence of membership either way.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax
from scipy.stats import binomtest, hypergeom
from sklearn.svm import SVC

PROTOCOLS = ("salun", "loft")
#: What `svc_validity_and_advantage` writes.
VALIDITY_KEYS = (
    "mia_validity",
    "mia_validity_lo",
    "mia_validity_hi",
    "mia_advantage",
    "mia_advantage_null_lo",
    "mia_advantage_null_hi",
)


def true_label_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    probabilities = softmax(logits.astype(np.float64), axis=1)
    return probabilities[np.arange(len(labels)), labels]


def _fit_svc(members: np.ndarray, nonmembers: np.ndarray) -> SVC:
    features = np.concatenate([members, nonmembers])[:, None]
    labels = np.concatenate([np.ones(len(members)), np.zeros(len(nonmembers))])
    return SVC(C=3, gamma="auto", kernel="rbf").fit(features, labels)


def _member_rate(attack: SVC, confidence: np.ndarray) -> float | None:
    return float(attack.predict(confidence[:, None]).mean() * 100.0) if len(confidence) else None


def _rate_difference(called_target: float, n_target: int, called_unseen: float, n_unseen: int) -> float:
    """Member rate (%) of the target samples minus that of the unseen ones, from the numbers called member (one
    formula for the advantage and its interval's ends, so that an advantage at an end compares equal to it)."""
    return called_target / n_target * 100.0 - called_unseen / n_unseen * 100.0


def advantage_null_interval(target_members: np.ndarray, unseen_members: np.ndarray) -> tuple[float, float]:
    """(low, high), in points, of the 95% exact permutation interval of member rate(target) − member rate(unseen)
    under relabelling of the pooled samples; the arguments are the attack's 0/1 member calls (both non-empty)."""
    n_target, n_unseen = len(target_members), len(unseen_members)
    called = int(np.sum(target_members) + np.sum(unseen_members))
    null = hypergeom(n_target + n_unseen, called, n_target)  # members among the samples labelled "F_t"
    low, high = null.ppf(0.025), null.ppf(0.975)
    return (
        _rate_difference(low, n_target, called - low, n_unseen),
        _rate_difference(high, n_target, called - high, n_unseen),
    )


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
    return _member_rate(_fit_svc(members, nonmembers), target_confidence)


def svc_validity_and_advantage(
    member_confidence: np.ndarray,
    nonmember_confidence: np.ndarray,
    nonmember_index: np.ndarray,
    target_confidence: np.ndarray,
    unseen_index: np.ndarray | None,
    unseen_confidence: np.ndarray,
    rng: np.random.Generator,
) -> dict:
    """`mia_validity` (+ `_lo`/`_hi`) and `mia_advantage` (+ `_null_lo`/`_null_hi`) of the SVC procedure (see the
    module docstring).

    `nonmember_index` names the non-member samples (test indices) so that `unseen_index` (test indices
    of never-trained samples of F_t's classes, with `unseen_confidence`) can leave out those the SVC
    was fit on; `unseen_index=None` means "half B of the non-members" (random streams).
    """
    m = min(len(member_confidence), len(nonmember_confidence)) // 2
    if m == 0:
        return dict.fromkeys(VALIDITY_KEYS)
    members = rng.permutation(len(member_confidence))
    nonmembers = rng.permutation(len(nonmember_confidence))
    half_a = (member_confidence[members[:m]], nonmember_confidence[nonmembers[:m]])
    half_b = (member_confidence[members[m : 2 * m]], nonmember_confidence[nonmembers[m : 2 * m]])
    attack = _fit_svc(*half_a)
    correct = int((attack.predict(half_b[0][:, None]) == 1).sum() + (attack.predict(half_b[1][:, None]) == 0).sum())
    interval = binomtest(correct, 2 * m).proportion_ci(confidence_level=0.95, method="exact")
    if unseen_index is None:
        unseen = half_b[1]
    else:
        fitted = np.isin(unseen_index, np.asarray(nonmember_index)[nonmembers[:m]])
        unseen = unseen_confidence[~fitted]
    validity = {
        "mia_validity": 100.0 * correct / (2 * m),
        "mia_validity_lo": 100.0 * interval.low,
        "mia_validity_hi": 100.0 * interval.high,
    }
    if len(target_confidence) == 0 or len(unseen) == 0:
        return validity | dict.fromkeys(VALIDITY_KEYS[3:])
    target_members, unseen_members = attack.predict(target_confidence[:, None]), attack.predict(unseen[:, None])
    low, high = advantage_null_interval(target_members, unseen_members)
    return validity | {
        "mia_advantage": _rate_difference(
            float(target_members.sum()), len(target_members), float(unseen_members.sum()), len(unseen_members)
        ),
        "mia_advantage_null_lo": low,
        "mia_advantage_null_hi": high,
    }
