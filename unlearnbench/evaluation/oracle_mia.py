"""An oracle-calibrated confidence attack: each sample's φ under the target minus its φ under the oracle.

What it is, and what it is not
------------------------------
The oracle of request s is trained from scratch on train minus F_1..F_s, so it never saw F_1..F_s:
for a sample of F_s the oracles of requests s, s+1, …, T are models that did not train on it, the
*OUT* side of a likelihood-ratio attack (Carlini et al., "Membership Inference Attacks From First
Principles", 2022). The attack borrows LiRA's statistic and offline (OUT-only) calibration, hence the
`lira_*` keys, but it is much weaker than LiRA and should be read as such:

- live (K = 1): one OUT model per sample, so there is no per-sample OUT *distribution*: the score is
  the difference φ_target(x) − φ_oracle(x), a per-sample reference confidence, not a likelihood ratio;
- recomputed (K ≥ 2, `recompute_from_run_directory`): oracles t..T are OUT for F_t, but they share
  the seed and the initialisation and differ only by the data later removed, so their spread
  understates a real OUT distribution;
- there are no trained-then-unlearned shadow models, so this is not U-LiRA (Hayes et al., 2024).

Every AUC (`lira_auc`, `phi_auc`, `phi_retain_auc`) comes with its null band `<key>_null_lo`/`_hi`:
the 2.5% and 97.5% quantiles of the same AUC with the member/non-member labels permuted (1000
seeded permutations of the same scores). An AUC inside its band is indistinguishable from chance
at these sample sizes: with the ~36 test images of one digits class as negatives (and ~145
positives) the band is [0.39, 0.61] on the default class-wise stream, wide enough to hold a model
that still remembers F_t a little.

Degenerate inputs are flagged, never scored as chance
-----------------------------------------------------
A (member, non-member) pair the target model cannot order (its own signal, φ here and log p_y
for RMIA, equal on both) or the attack's score does not order (a tie, worth ½) is *undecided*.
`<auc>_ties` is the share of such pairs. When breaking them one way or the other could put the AUC
anywhere from its null band's low end to its high end, the AUC says nothing about the target: it
and the TPR are None (degenerate), and `<auc>_ties` says why. The case that needs it: a model
destroyed into input-independent outputs (every φ of a class equal) would otherwise score exactly
the oracle's 0.5, or whatever the references alone say.

What it computes
----------------
- Statistic per sample: the logit-scaled confidence of the true label,
  φ = log(p_y / (1 − p_y)) = z_y − logsumexp_{j≠y} z_j (computed from logits, numerically stable).
- Score: K = 1, φ_target(x) − φ_out(x); K ≥ 2, (φ_target(x) − μ_out(x)) / σ_out(x) with the
  per-sample variance shrunk towards the median over samples by one pseudo-observation.
- Positives: F_t (samples the target model once trained on); negatives: test samples of the same
  classes (class-wise streams: the classes of F_t; random streams: the whole test set). Reported: ROC
  AUC and the TPR at 1% FPR, the latter only when the negatives allow one false positive at that
  rate (at least 100 negatives); otherwise None, since with fewer it would be the TPR at FPR 0.
- Direction: for an unlearning method the target is the oracle's value, i.e. chance (AUC 0.5):
  higher means the forget set still looks more confident than under a never-trained model; *below*
  chance means over-forgetting (itself a membership signal). The oracle cannot be scored in the live
  runner (it is its own reference), so its row holds None for these keys.
- Reference-free companions, computable for method and oracle alike: `phi_auc` (forget vs the same
  test negatives by raw φ, the global-threshold/LOSS attack) and `phi_retain_auc` (retain vs test by
  raw φ: how visible true membership is for this model, the attack's ceiling on this data).

Why calibrate per sample at all: a global threshold (the SVC attack, `mia.py`) cannot tell an easy
sample every model classifies confidently from one the model memorized; subtracting what a model
that never saw the sample says removes per-sample difficulty (Carlini et al., 2022, Fig. 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from scipy.stats import rankdata
from sklearn.metrics import auc as area_under_curve
from sklearn.metrics import roc_curve

from unlearnbench.rundir import RunDirectory

ATTACK_KEYS = ("lira_auc", "lira_auc_null_lo", "lira_auc_null_hi", "lira_auc_ties", "lira_tpr_at_1fpr")
PHI_KEYS = ("phi_auc", "phi_retain_auc")
#: Permutations behind every null band, and the band's coverage.
NULL_PERMUTATIONS, NULL_LEVEL = 1000, 0.95


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """φ = log(p_y / (1 − p_y)) per row, from logits, in float64 (finite even for p_y ≈ 1)."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels)
    rows = np.arange(len(labels))
    true = logits[rows, labels]
    others = logits.copy()
    others[rows, labels] = -np.inf
    return true - logsumexp(others, axis=1)


def lira_scores(target_phi: np.ndarray, out_phi: np.ndarray) -> np.ndarray:
    """Membership score per sample: high = the target is more confident than the OUT models.

    `out_phi` is (K, n) for K OUT references. K = 1: φ_target − φ_out (global variance, which does
    not change a ranking). K ≥ 2: (φ_target − μ)/σ with per-sample μ and a per-sample variance
    shrunk towards the median variance over samples by one pseudo-observation.
    """
    out_phi = np.atleast_2d(np.asarray(out_phi, dtype=np.float64))
    target_phi = np.asarray(target_phi, dtype=np.float64)
    K = out_phi.shape[0]
    mean = out_phi.mean(axis=0)
    if K == 1:
        return target_phi - mean
    squares = ((out_phi - mean) ** 2).sum(axis=0)
    global_variance = max(float(np.median(squares / (K - 1))), 1e-12)
    variance = (squares + global_variance) / K
    return (target_phi - mean) / np.sqrt(variance)


def auc_and_tpr(positive: np.ndarray, negative: np.ndarray, fpr: float = 0.01) -> tuple[float | None, float | None]:
    """(ROC AUC, TPR at `fpr`) of scores where positives should score higher; None if a side is empty.

    The TPR is None when `fpr` · (number of negatives) < 1: no threshold then has a false-positive
    rate in (0, fpr], and the number would be the TPR at FPR 0.
    """
    if len(positive) == 0 or len(negative) == 0:
        return None, None
    labels = np.concatenate([np.ones(len(positive)), np.zeros(len(negative))])
    scores = np.concatenate([positive, negative])
    false_positive, true_positive, _ = roc_curve(labels, scores)  # one curve gives both numbers
    auc = float(area_under_curve(false_positive, true_positive))
    if fpr * len(negative) < 1:
        return auc, None
    return auc, float(true_positive[false_positive <= fpr + 1e-12].max())


def auc_null_band(
    positive: np.ndarray, negative: np.ndarray, permutations: int = NULL_PERMUTATIONS, level: float = NULL_LEVEL
) -> tuple[float | None, float | None]:
    """(low, high) quantiles of the AUC of these scores under random member/non-member labels.

    Rank form of the AUC (Mann-Whitney, ties at half rank): AUC = (Σ ranks of the positives −
    n_p(n_p+1)/2) / (n_p·n_n); each permutation draws which n_p of the pooled scores are positives.
    Seeded (0), so a band is reproducible.
    """
    n_p, n_n = len(positive), len(negative)
    if n_p == 0 or n_n == 0:
        return None, None
    ranks = rankdata(np.concatenate([positive, negative]))
    drawn, are_positives = _permuted_draws(permutations, n_p, n_p + n_n)
    drawn_sums = ranks[drawn].sum(axis=1)  # half-integers: every partial sum is exact, in any order
    rank_sums = drawn_sums if are_positives else ranks.sum() - drawn_sums
    aucs = (rank_sums - n_p * (n_p + 1) / 2) / (n_p * n_n)
    tail = (1 - level) / 2
    return float(np.quantile(aucs, tail)), float(np.quantile(aucs, 1 - tail))


@lru_cache(maxsize=2)
def _permuted_draws(permutations: int, positives: int, total: int) -> tuple[np.ndarray, bool]:
    """Which `positives` of `total` pooled scores each of the seeded (0) permutations labels positive: the indices
    of the smaller side, and whether that side is the positives (else it is the negatives, the complement).

    The draws depend on the sizes alone, never on the scores, so they are drawn once per size, not per band: sorting
    `permutations` × `total` random numbers was most of a request's scoring time. A request's bands share two sizes:
    F_t pooled with the test negatives (φ of the method and of the oracle, LiRA and RMIA) and the retain set pooled
    with `test_retain` (both φ_retain bands). The retain set shrinks at every request of a random stream, so that
    size is drawn anew per request (measured on the memorizing tier, FT, random, T = 6: 60 draws asked for, 7
    sizes, 7 drawn). Kept as int32 indices of the smaller side (a retain pool's negatives are its test samples):
    8 MB for a 10,000-image retain set, not 80. Read-only, as it is shared.
    """
    rng = np.random.default_rng(0)
    # the positives are the `positives` smallest of a row's numbers; a partition finds them (or their complement)
    # without the full sort, a third of the time at a retain pool's sizes; the set, all a rank sum reads, is the same
    order = np.argpartition(rng.random((permutations, total)), positives - 1, axis=1)
    are_positives = positives <= total - positives
    drawn = order[:, :positives] if are_positives else order[:, positives:]
    drawn = drawn.astype(np.int32)  # a copy, not a view of the whole order
    drawn.flags.writeable = False
    return drawn, are_positives


def _with_band(key: str, positive: np.ndarray, negative: np.ndarray) -> dict:
    low, high = auc_null_band(positive, negative)
    return {f"{key}_null_lo": low, f"{key}_null_hi": high}


def undecided_pairs(
    positive: np.ndarray, negative: np.ndarray, signal_positive: np.ndarray, signal_negative: np.ndarray
) -> tuple[float, float]:
    """(share, credit) of the (positive, negative) pairs the target leaves undecided: its signal equal on both,
    or the attack's score equal. `share`: their share of all pairs; `credit`: what they add to the AUC (½ per
    score tie, 1 per signal tie whose scores the references order the positive's way).

    By sorting, O((n_p + n_n) log n_n): the pairs are (score, signal) couples compared in
    lexicographic order (NumPy orders complex numbers so), never enumerated.
    """
    pairs = len(positive) * len(negative)
    score_ties = _equal_count(negative, positive)
    signal_ties = _equal_count(signal_negative, signal_positive)
    keys = np.sort(np.asarray(signal_negative, float) + 1j * np.asarray(negative, float))
    wanted = np.asarray(signal_positive, float) + 1j * np.asarray(positive, float)
    both = np.searchsorted(keys, wanted, side="right") - np.searchsorted(keys, wanted, side="left")
    lowest = wanted.real.astype(complex)
    lowest.imag = -np.inf  # (signal, −∞): before every score of that signal (1j * inf would make a NaN)
    below = np.searchsorted(keys, wanted, side="left") - np.searchsorted(keys, lowest, side="left")
    share = (score_ties.sum() + signal_ties.sum() - both.sum()) / pairs
    return float(share), float((score_ties.sum() / 2 + below.sum()) / pairs)


def _equal_count(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted`, how many of `values` equal it."""
    values = np.sort(values)
    return np.searchsorted(values, wanted, side="right") - np.searchsorted(values, wanted, side="left")


def attack_auc(key: str, positive: np.ndarray, negative: np.ndarray, signal: tuple[np.ndarray, np.ndarray]) -> dict:
    """`key` (ROC AUC of scores where positives should score higher), its null band, `<key>_ties` and its TPR at
    1% FPR (%, under `tpr`), the target model's own `signal` (positives, negatives) deciding which pairs it orders.

    Degenerate (AUC and TPR None, `<key>_ties` the reason) when the undecided pairs (`undecided_pairs`)
    could put the AUC anywhere across its null band: AUC − credit ≤ low and AUC − credit + share ≥ high.
    """
    auc, tpr = auc_and_tpr(positive, negative)
    band = _with_band(key, positive, negative)
    if auc is None:
        return {key: None, **band, f"{key}_ties": None, "tpr": None}
    share, credit = undecided_pairs(positive, negative, *signal)
    if auc - credit <= band[f"{key}_null_lo"] and auc - credit + share >= band[f"{key}_null_hi"]:
        auc = tpr = None
    return {key: auc, **band, f"{key}_ties": share, "tpr": None if tpr is None else 100.0 * tpr}


def nonmember_indices(test_labels: np.ndarray, forget_labels: np.ndarray, classwise: bool) -> np.ndarray:
    """Test samples used as non-members: those of F_t's classes for class-wise streams, else all."""
    if classwise:
        return np.flatnonzero(np.isin(test_labels, np.unique(forget_labels)))
    return np.arange(len(test_labels))


def oracle_referenced_attack(
    target: tuple[np.ndarray, np.ndarray],
    references: Sequence[tuple[np.ndarray, np.ndarray]],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    forget: np.ndarray,
    classwise: bool,
) -> dict:
    """`lira_auc` (+ null band, `lira_auc_ties`; None where degenerate), `lira_tpr_at_1fpr` of `target` (train
    logits, test logits) on F = `forget`, the target's φ deciding which pairs it orders (`attack_auc`).

    Every reference must be OUT for `forget` (an oracle that never saw it); test samples are OUT for all.
    """
    forget = np.asarray(forget)
    negatives = nonmember_indices(test_labels, train_labels[forget], classwise)
    signal = (
        logit_confidence(target[0][forget], train_labels[forget]),
        logit_confidence(target[1][negatives], test_labels[negatives]),
    )
    positive = lira_scores(
        signal[0], np.stack([logit_confidence(ref[0][forget], train_labels[forget]) for ref in references])
    )
    negative = lira_scores(
        signal[1], np.stack([logit_confidence(ref[1][negatives], test_labels[negatives]) for ref in references])
    )
    result = attack_auc("lira_auc", positive, negative, signal)
    result["lira_tpr_at_1fpr"] = result.pop("tpr")
    return result


def reference_free_attack(
    train_logits: np.ndarray,
    test_logits: np.ndarray,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    forget: np.ndarray,
    retain: np.ndarray,
    test_retain: np.ndarray,
    classwise: bool,
) -> dict:
    """`phi_auc` (F vs the test negatives) and `phi_retain_auc` (retain vs `test_retain`) by raw φ."""
    forget, retain = np.asarray(forget), np.asarray(retain)
    negatives = nonmember_indices(test_labels, train_labels[forget], classwise)
    phi_train = logit_confidence(train_logits, train_labels)
    phi_test = logit_confidence(test_logits, test_labels)
    forget_sides = (phi_train[forget], phi_test[negatives])
    retain_sides = (phi_train[retain], phi_test[np.asarray(test_retain)])
    return {
        "phi_auc": auc_and_tpr(*forget_sides)[0],
        **_with_band("phi_auc", *forget_sides),
        "phi_retain_auc": auc_and_tpr(*retain_sides)[0],
        **_with_band("phi_retain_auc", *retain_sides),
    }


def recompute_from_run_directory(path: Path) -> list[dict]:
    """The attack recomputed from a finished run saved with `--save-logits`, with every OUT oracle.

    Row t: `lira_auc`/`lira_tpr_at_1fpr` of the method after request t on F_t with the oracles
    t..T as OUT references (per-sample Gaussian when there are ≥ 2), and `lira_history[s]` the same
    for every F_s, s ≤ t (OUT references: the oracles s..T, every oracle that never saw F_s), which
    shows whether the attack sees re-memorization of earlier forget sets.
    """
    run_dir = RunDirectory(path)
    manifest = run_dir.manifest()
    labels = run_dir.labels()
    train_labels, test_labels = labels.train, labels.test
    classwise = manifest["requests"][0].get("forget_classes") is not None  # as live: the request names its classes
    forget_sets = [np.asarray(r["forget"], dtype=np.int64) for r in manifest["requests"]]
    T = len(forget_sets)
    logits = []
    for t in range(1, T + 1):
        saved = run_dir.saved_logits(t)
        if saved is None:
            break
        logits.append(saved)
    done = len(logits)
    if done == 0 or not logits[0].oracles:
        return []
    oracles = [(entry.oracles[0]["train"], entry.oracles[0]["test"]) for entry in logits]
    rows = []
    for t in range(1, done + 1):
        target = (logits[t - 1].method["train"], logits[t - 1].method["test"])
        history = []
        for s in range(1, t + 1):
            result = oracle_referenced_attack(
                target, oracles[s - 1 :], train_labels, test_labels, forget_sets[s - 1], classwise
            )
            history.append(result["lira_auc"])
        current = oracle_referenced_attack(
            target, oracles[t - 1 :], train_labels, test_labels, forget_sets[t - 1], classwise
        )
        rows.append({"t": t, "references": done - t + 1, **current, "lira_history": history})
    return rows


def request_attack(method_logits, oracle_logits, train_labels: np.ndarray, test_labels: np.ndarray, request) -> dict:
    """The method's keys of the oracle-referenced attack on F_t of `request` (logits: `EvalLogits`).

    The oracle of request t is the one OUT reference the live runner has for F_t; the oracle itself
    is its own reference, so its row holds None for `ATTACK_KEYS`.
    """
    classwise = request.forget_classes is not None
    method = oracle_referenced_attack(
        (method_logits.train, method_logits.test),
        [(oracle_logits.train, oracle_logits.test)],
        train_labels,
        test_labels,
        request.forget,
        classwise,
    )
    return method


def request_phi(logits, train_labels: np.ndarray, test_labels: np.ndarray, request) -> dict:
    """The reference-free companions (`phi_auc`, `phi_retain_auc`) of one model after `request`."""
    return reference_free_attack(
        logits.train,
        logits.test,
        train_labels,
        test_labels,
        request.forget,
        request.retain,
        request.test_retain,
        request.forget_classes is not None,
    )
