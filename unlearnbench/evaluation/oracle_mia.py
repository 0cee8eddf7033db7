"""An oracle-referenced likelihood-ratio membership attack (offline LiRA / U-LiRA style).

Why the oracles are the right reference
---------------------------------------
The oracle of request s is trained from scratch on train minus F_1..F_s, so it never saw any sample
of F_1..F_s: for a sample of F_s, the oracles of requests s, s+1, …, T are exactly the *OUT* reference
models a likelihood-ratio attack needs (Carlini et al., "Membership Inference Attacks From First
Principles", 2022; Hayes et al., "Inexact Unlearning Needs More Careful Evaluations…" (U-LiRA), 2024;
Zarifzadeh et al., RMIA, 2024). Test samples were seen by no model, so every oracle is OUT for them
too.

What it computes
----------------
- Statistic per sample: the logit-scaled confidence of the true label,
  φ = log(p_y / (1 − p_y)) = z_y − logsumexp_{j≠y} z_j (computed from logits, numerically stable).
  LiRA uses it because it is close to Gaussian across models, unlike p_y itself.
- OUT distribution per sample from the K available OUT references:
  K = 1 (the live runner: for F_t after request t only oracle t is OUT): mean φ_out(x) with one
  global variance; a global variance does not change a ranking, so the score is φ_target(x) − φ_out(x).
  K ≥ 2 (recomputed from saved logits, where oracles t..T are OUT for F_t): per-sample mean and
  variance; the variance is shrunk towards the median over samples with one pseudo-observation so that two
  nearly equal references cannot produce a zero variance. Score z(x) = (φ_target(x) − μ_out(x)) / σ_out(x):
  how far above "what a model that never saw x would say" the target model is on x.
- Positives: F_t (samples the target model once trained on); negatives: test samples of the same
  classes (class-wise streams: the classes of F_t; random streams: the whole test set). Both sides are
  scored against the same OUT references. Reported: ROC AUC and TPR at 1% FPR (the fraction of forget
  samples flagged when only 1% of true non-members are; LiRA's headline number). With few negatives
  (a digits test class has ~36) TPR at 1% FPR is TPR at the lowest non-zero FPR the data allow.
- Direction: for an unlearning method the target is the oracle's value, i.e. chance (AUC 0.5,
  TPR@1%FPR ≈ 1%): higher means the forget set still looks like training data; *below* chance means
  the method over-forgot (the forget set is less confident than a never-trained model would be —
  itself a membership signal, the Streisand effect). The oracle cannot be scored in the live runner
  (it is its own reference: the score is identically 0), so its row holds None for these keys.
- Reference-free companions, computable for method and oracle alike: `phi_auc` (forget vs the same
  test negatives by raw φ, the global-threshold/LOSS attack) and `phi_retain_auc` (retain vs test by
  raw φ: how visible true membership is for this model, the attack's ceiling on this data).

Why it is stronger than the SVC attack
--------------------------------------
The SVC attack (DESIGN §3, `mia.py`) thresholds one global feature (p_y) learned on retain vs test:
it cannot tell an easy sample that every model classifies confidently from a sample the model
memorized, and it asks "does F_t look like retain?" rather than "does F_t look like it does to a
model that never saw it?". The likelihood ratio calibrates every sample by its own OUT distribution,
which removes per-sample difficulty; that is what makes it detect residual memorization at low
false-positive rates where global-threshold attacks are at chance (Carlini et al., 2022, Fig. 1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from sklearn.metrics import auc as area_under_curve
from sklearn.metrics import roc_curve

ATTACK_KEYS = ("lira_auc", "lira_tpr_at_1fpr")
PHI_KEYS = ("phi_auc", "phi_retain_auc")


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
    """(ROC AUC, TPR at `fpr`) of scores where positives should score higher; None if a side is empty."""
    if len(positive) == 0 or len(negative) == 0:
        return None, None
    labels = np.concatenate([np.ones(len(positive)), np.zeros(len(negative))])
    scores = np.concatenate([positive, negative])
    false_positive, true_positive, _ = roc_curve(labels, scores)  # one curve gives both numbers
    auc = float(area_under_curve(false_positive, true_positive))
    return auc, float(true_positive[false_positive <= fpr + 1e-12].max())


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
    """`lira_auc`, `lira_tpr_at_1fpr` of `target` (train logits, test logits) on F = `forget`.

    Every reference must be OUT for `forget` (an oracle that never saw it); test samples are OUT for all.
    """
    forget = np.asarray(forget)
    negatives = nonmember_indices(test_labels, train_labels[forget], classwise)
    positive = lira_scores(
        logit_confidence(target[0][forget], train_labels[forget]),
        np.stack([logit_confidence(ref[0][forget], train_labels[forget]) for ref in references]),
    )
    negative = lira_scores(
        logit_confidence(target[1][negatives], test_labels[negatives]),
        np.stack([logit_confidence(ref[1][negatives], test_labels[negatives]) for ref in references]),
    )
    auc, tpr = auc_and_tpr(positive, negative)
    return {"lira_auc": auc, "lira_tpr_at_1fpr": None if tpr is None else 100.0 * tpr}


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
    return {
        "phi_auc": auc_and_tpr(phi_train[forget], phi_test[negatives])[0],
        "phi_retain_auc": auc_and_tpr(phi_train[retain], phi_test[np.asarray(test_retain)])[0],
    }


def recompute_from_run_directory(path: Path) -> list[dict]:
    """The attack recomputed from a finished run saved with `--save-logits`, with every OUT oracle.

    Row t: `lira_auc`/`lira_tpr_at_1fpr` of the method after request t on F_t with the oracles
    t..T as OUT references (per-sample Gaussian when there are ≥ 2), and `lira_history[s]` the same
    for every F_s, s ≤ t (OUT references: the oracles s..T, every oracle that never saw F_s), which
    shows whether the attack sees re-memorization of earlier forget sets.
    """
    path = Path(path)
    manifest = json.loads((path / "manifest.json").read_text())
    labels = np.load(path / "labels.npz")
    train_labels, test_labels = labels["train"], labels["test"]
    classwise = manifest["requests"][0].get("forget_classes") is not None  # as live: the request names its classes
    forget_sets = [np.asarray(r["forget"], dtype=np.int64) for r in manifest["requests"]]
    T = len(forget_sets)
    logits = []
    for t in range(1, T + 1):
        file = path / "logits" / f"t{t:03d}.npz"
        if not file.exists():
            break
        with np.load(file) as arrays:
            logits.append({k: arrays[k] for k in arrays.files})
    done = len(logits)
    if done == 0 or "oracle_train" not in logits[0]:
        return []
    oracles = [(entry["oracle_train"], entry["oracle_test"]) for entry in logits]
    rows = []
    for t in range(1, done + 1):
        target = (logits[t - 1]["method_train"], logits[t - 1]["method_test"])
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


def request_attack(
    method_logits, oracle_logits, train_labels: np.ndarray, test_labels: np.ndarray, request
) -> tuple[dict, dict]:
    """(method keys, oracle keys) of the oracle-referenced attack on F_t of `request` (logits: `EvalLogits`).

    The oracle of request t is the one OUT reference the live runner has for F_t; the oracle itself
    is its own reference, so its keys are None.
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
    return method, dict.fromkeys(ATTACK_KEYS)


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
