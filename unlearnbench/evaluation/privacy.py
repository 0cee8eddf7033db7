"""Privacy numbers that compare models: the NeurIPS 2023 challenge's ε score, offline RMIA, ToW.

ε score (NeurIPS 2023 Machine Unlearning Challenge; `google-deepmind/unlearning_evaluation`,
`metric.py` and `main.py`). N unlearned models and N retrained models (oracles) of one request.
For each forget example, φ = log p_y − log(1 − p_y) under each of the 2N models gives two samples
of N values; the side with the larger median is "positive". Two families of decision rules, each
on a grid of 100 thresholds per unit of φ, give (FPR, FNR) pairs:

- single threshold over [min, max] of both sides: "positive" when φ ≥ τ;
- double threshold (l, r): "positive" when l ≤ φ ≤ r, the peakier side (smaller range, ties to
  the second) named positive; r on [min + w − 2, max + 2] of the peakier side (w its range), l on
  400 points of [r − w − 2, r − w + 2].

Per rule, ε = max{log(1 − δ − FPR) − log FNR, log(1 − δ − FNR) − log FPR} (δ = 1e-5) clipped
below at 0; a rule with FPR = FNR = 0 (perfect separation) gives ε = ∞, one with exactly one of
them 0 is discarded (too few models to estimate it). The example's ε is the largest over rules,
clipped to [0, 50]; a side whose range is under 1% of the other's gives 50 outright (a peaky
unlearned distribution). ε falls in buckets of 0.5 worth 1, ½, ¼, …, the buckets stopping at
ceil(log(N − 1)); an ε beyond the last bucket is worth 0. F = mean points over the forget set;
score = F · (RA_u / RA_r) · (TA_u / TA_r), with RA/TA the retain/test accuracies averaged over the
N models of each side. Perfectly separated sides give F = 0.

What a perfect unlearning scores is *not* 1. The same models on both sides give F = 1, but two
independent samples of one distribution (N oracles against N other oracles) give far less: an
example's ε is the largest over hundreds of rules estimated from N values a side, so chance
alone finds a rule worth a bucket or more. `eps_floor(N)` is that value (`EPS_FLOOR`, by the
simulation `simulated_eps_floor`): 0.36 at N = 3, 0.26 at N = 4, 0.19 at N = 8, and it stays
near 0.2 up to the challenge's N = 512, since the buckets widen with N. It moves with the spread
of φ, the rules' grid and margins being in absolute units of φ (docs/privacy.md measures how
much). A method's F is read against the floor at its N, which is its target; the ratio of the
utilities then makes `eps_score`'s target the same number.

Departures, each because the reference would otherwise fail or clip: φ is computed exactly
(`oracle_mia.logit_confidence`, z_y − logsumexp of the others) where the reference adds 1e-45 to
both probabilities after a float32 exponential, which caps |φ| near 103.6; the rates are computed
by sorting (exact counts) rather than on a GPU grid of comparisons (the same numbers, tested
against a transcription). The reference's `assert thr_eps` tests the truth value of the NumPy
array of the surviving rules' ε: with two or more rules left (nearly every example) NumPy raises
ValueError ("the truth value of an array with more than one element is ambiguous"), with one it
fails when that ε is 0, and with none it fails too; so `metric.py` runs only with assertions
stripped (`python -O`), and what we transcribe is what it computes then. Under `-O` an example
for which every rule is discarded (both sides one and the same constant, e.g. N identical models)
stops at `np.nanmax` of an empty array; we give it ε = 0 (no rule tells the sides apart). N ≥ 3
is required: with N = 2 the buckets stop at ceil(log 1) = 0 and every F would be 0.

RMIA, offline (Zarifzadeh, Liu, Shokri, "Low-Cost High-Power Membership Inference Attacks",
ICML 2024; reference code `privacytrustlab/ml_privacy_meter`, `modules/mia/attacks/rmia.py`). The
signal is p_y, the softmax probability of the true label. With K reference models that never saw
x (our oracles: OUT), Pr(x) ≈ ½((1 + a)·mean_OUT p_y(x) + (1 − a)); LR(x) = p_y(x | target) / Pr(x);
the score of x is the fraction of population samples z with LR(x) / LR(z) > γ = 1 (the reference
code's γ). `a` = 0.3, the reference code's default `offline_a` (its `tune_offline_a` needs IN
models, which an unlearning benchmark does not train). Population: the whole test set (OUT for
every model); a test sample scored as a non-member is compared with every *other* population
sample, never with itself. Positives F_t, negatives the test samples of F_t's classes (class-wise)
or the whole test set (random), as `oracle_mia`. AUC, TPR at 1% FPR and the AUC's permutation null
band as `oracle_mia.auc_and_tpr`/`auc_null_band`. Target: the oracle's value, chance (0.5).

Departure: the reference compares LR(x) / LR(z) in probabilities; we compare log LR(x) > log LR(z),
with log p_y = −log(1 + e^−φ) from the exact φ of `oracle_mia.logit_confidence` (the same order,
without its rounding). Measured on the digits K = 8 suite: NegGrad+'s logit margins reach
4.6e4–4.4e6, p_y rounds to exactly 0 for every sample in float64 (and to exactly 1 above a
margin of ~37), every score tied and the AUC was exactly 0.500, the oracle's target, at a retain
accuracy of 12%. In logs the margins still order the samples. What is still tied (a model whose
outputs do not depend on its input) is degenerate: `rmia_auc` None and `rmia_auc_ties` the share of
pairs left undecided (`oracle_mia.attack_auc`), never 0.5.

ToW (Zhao et al., "What makes unlearning hard and what to do about it", NeurIPS 2024, "tug of
war"; `kairanzhao/RUM`, `surgical_plugins/analysis.py` and `analysis_mia.py` at fe2df07): Π over
forget, retain and test of (1 − |acc_u − acc_r| / 100), accuracies in %; 1 is a method identical to
its oracle on the three. ToW-MIA uses the SVC attack's member rate on F_t (`mia_member_rate`, the
attack every row reports for method and oracle alike) in place of the forget accuracy. RUM scores
the unlearned model of seed s against the model retrained with seed s and averages over seeds;
`chains.chain_privacy` likewise pairs chain i with oracle i, and the live row (one chain) uses
its own oracle, the first. Two retrained models of different seeds do not reach 1 against each
other: `chains.chain_privacy` reports that level beside the method's (`tow_oracles`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from unlearnbench.evaluation.oracle_mia import attack_auc, logit_confidence, nonmember_indices

DELTA = 1e-5
EPSILON_CAP = 50.0
THRESHOLDS_PER_UNIT = 100
#: Margin of φ (on both sides) of the double-threshold grid.
DOUBLE_THRESHOLD_BUFFER = 2.0
BUCKET_WIDTH = 0.5
#: RMIA's offline scaling of the OUT mean (ml_privacy_meter's default `offline_a`).
RMIA_OFFLINE_A = 0.3
EPS_KEYS = ("eps_forget_score", "eps_score")
RMIA_KEYS = ("rmia_auc", "rmia_auc_null_lo", "rmia_auc_null_hi", "rmia_auc_ties", "rmia_tpr_at_1fpr")
TOW_KEYS = ("tow", "tow_mia")
#: `eps_floor` by N: `simulated_eps_floor(N)` at its defaults, rounded (made by `benchmarks/eps_floor.py`).
EPS_FLOOR: dict[int, float] = {
    3: 0.357,
    4: 0.262,
    5: 0.246,
    6: 0.215,
    7: 0.195,
    8: 0.185,
    9: 0.179,
    10: 0.173,
    11: 0.173,
    12: 0.171,
    13: 0.172,
    14: 0.171,
    15: 0.172,
    16: 0.177,
    20: 0.177,
    24: 0.179,
    32: 0.182,
    48: 0.184,
    64: 0.186,
    128: 0.184,
    256: 0.184,
    512: 0.187,
}


def _fraction_at_least(sorted_values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    return 1.0 - np.searchsorted(sorted_values, thresholds, side="left") / len(sorted_values)


def _fraction_between(sorted_values: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    inside = np.searchsorted(sorted_values, right, side="right") - np.searchsorted(sorted_values, left, side="left")
    return np.maximum(inside, 0) / len(sorted_values)


def _single_threshold_rates(positive: np.ndarray, negative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, FNR) of "positive when φ ≥ τ" on the grid over both sides' range."""
    low, high = min(positive[0], negative[0]), max(positive[-1], negative[-1])
    thresholds = np.linspace(low, high, int(np.ceil((high - low) * THRESHOLDS_PER_UNIT)))
    return _fraction_at_least(negative, thresholds), 1.0 - _fraction_at_least(positive, thresholds)


def _double_threshold_rates(positive: np.ndarray, negative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, FNR) of "positive when l ≤ φ ≤ r", the peakier side named positive."""
    if positive[-1] - positive[0] >= negative[-1] - negative[0]:
        positive, negative = negative, positive
    width, buffer = positive[-1] - positive[0], DOUBLE_THRESHOLD_BUFFER
    low, high = positive[0] + width - buffer, positive[-1] + buffer
    right = np.linspace(low, high, int(np.ceil((high - low) * THRESHOLDS_PER_UNIT)))
    offsets = np.linspace(-buffer, buffer, int(np.ceil(2 * buffer * THRESHOLDS_PER_UNIT)))
    left = (right[:, None] - width + offsets[None, :]).ravel()
    right = np.repeat(right, len(offsets))
    return _fraction_between(negative, left, right), 1.0 - _fraction_between(positive, left, right)


def _example_epsilon(positive: np.ndarray, negative: np.ndarray) -> float:
    """ε of one forget example from its φ under the positive and the negative side's models."""
    positive, negative = np.sort(positive), np.sort(negative)
    ranges = sorted((positive[-1] - positive[0], negative[-1] - negative[0]))
    if ranges[1] > 0 and ranges[0] / ranges[1] < 0.01:
        return EPSILON_CAP
    rates = [_double_threshold_rates(positive, negative), _single_threshold_rates(positive, negative)]
    fpr = np.concatenate([r[0] for r in rates])
    fnr = np.concatenate([r[1] for r in rates])
    if np.any((fpr == 0) & (fnr == 0)):
        return EPSILON_CAP  # ε = ∞ for a perfectly separating rule, clipped
    usable = (fpr > 0) & (fnr > 0)
    if not usable.any():
        return 0.0  # both sides one constant: no rule tells them apart (the reference asserts here)
    fpr, fnr = fpr[usable], fnr[usable]
    with np.errstate(invalid="ignore", divide="ignore"):  # log of ≤ 0 when a rate is ~1: that bound is void
        bounds = np.fmax(np.log(1 - DELTA - fpr) - np.log(fnr), np.log(1 - DELTA - fnr) - np.log(fpr))
    bounds = bounds[~np.isnan(bounds)]
    return float(np.clip(max(bounds.max(initial=0.0), 0.0), 0.0, EPSILON_CAP))


def example_epsilons(unlearned_phi: np.ndarray, retrained_phi: np.ndarray) -> np.ndarray:
    """ε per forget example from φ arrays of shape (N models, examples), one per side."""
    unlearned_phi, retrained_phi = np.asarray(unlearned_phi, float), np.asarray(retrained_phi, float)
    retrained_positive = np.median(retrained_phi, axis=0) > np.median(unlearned_phi, axis=0)
    positive = np.where(retrained_positive, retrained_phi, unlearned_phi)
    negative = np.where(retrained_positive, unlearned_phi, retrained_phi)
    return np.array([_example_epsilon(positive[:, i], negative[:, i]) for i in range(positive.shape[1])])


def bucket_points(epsilon: float, models: int) -> float:
    """Points of one ε: 1, ½, ¼, … for buckets [0, 0.5), [0.5, 1), … up to ceil(log(models − 1)); else 0."""
    last = math.ceil(math.log(models - 1))
    bucket = math.floor(epsilon / BUCKET_WIDTH)
    return 0.5**bucket if (bucket + 1) * BUCKET_WIDTH <= last else 0.0


def forget_score(unlearned_phi: np.ndarray, retrained_phi: np.ndarray) -> float:
    """F: mean points of the examples' ε (N ≥ 3 models a side, the same N on both)."""
    unlearned_phi, retrained_phi = np.atleast_2d(unlearned_phi), np.atleast_2d(retrained_phi)
    if unlearned_phi.shape != retrained_phi.shape or unlearned_phi.shape[0] < 3:
        raise ValueError(
            f"the ε score needs the same N >= 3 models on both sides, got {unlearned_phi.shape[0]} unlearned and "
            f"{retrained_phi.shape[0]} retrained"
        )
    models = unlearned_phi.shape[0]
    return float(np.mean([bucket_points(e, models) for e in example_epsilons(unlearned_phi, retrained_phi)]))


#: Examples and seed of `simulated_eps_floor` behind `EPS_FLOOR`.
FLOOR_EXAMPLES, FLOOR_SEED = 3000, 0


def simulated_eps_floor(models: int, examples: int = FLOOR_EXAMPLES, seed: int = FLOOR_SEED) -> tuple[float, float]:
    """(F, its standard error) of two independent samples of one distribution, `models` values a side.

    Each of `examples` examples draws `models` "unlearned" and `models` "retrained" φ from one
    standard normal (seeded by (`seed`, `models`)): a perfect unlearning, whose unlearned models are
    distributed exactly like the retrained ones. Its F is the best an unlearning method can expect
    at this N, and what the oracles score against each other.
    """
    unlearned, retrained = np.random.default_rng([seed, models]).standard_normal((2, models, examples))
    points = [bucket_points(e, models) for e in example_epsilons(unlearned, retrained)]
    return float(np.mean(points)), float(np.std(points, ddof=1) / math.sqrt(examples))


def eps_floor(models: int) -> float:
    """The ε forget score F that N = `models` models a side score when both sides are one distribution: the
    oracle-versus-oracle value a method's F is read against (`EPS_FLOOR`, else simulated the same way)."""
    if models < 3:
        raise ValueError(f"the ε score needs N >= 3 models a side, got {models}")
    return EPS_FLOOR[models] if models in EPS_FLOOR else _simulated_floor(models)


@lru_cache(maxsize=8)
def _simulated_floor(models: int) -> float:
    return round(simulated_eps_floor(models)[0], 3)


def eps_score(
    unlearned_phi: np.ndarray,
    retrained_phi: np.ndarray,
    unlearned_accuracy: dict[str, Sequence[float]],
    retrained_accuracy: dict[str, Sequence[float]],
) -> dict:
    """`eps_forget_score` (F) and `eps_score` = F · (RA_u / RA_r) · (TA_u / TA_r).

    φ arrays are (N models, forget examples); the accuracies map `retain_acc` and `test_acc` to the
    N models' values (their means enter the ratio, as the challenge's `main.py`).
    """
    forget = forget_score(unlearned_phi, retrained_phi)
    utility = 1.0
    for key in ("retain_acc", "test_acc"):
        utility *= float(np.mean(unlearned_accuracy[key])) / float(np.mean(retrained_accuracy[key]))
    return {"eps_forget_score": forget, "eps_score": forget * utility}


def true_label_log_probability(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log p_y per row, exact at both ends: −log(1 + e^−φ) with φ = `oracle_mia.logit_confidence` (a float64
    softmax rounds p_y to 0 below e^−745 and to 1 within 2^−53 of it)."""
    return -np.logaddexp(0.0, -logit_confidence(logits, labels))


def rmia_scores(
    target_x: np.ndarray,
    reference_x: np.ndarray,
    target_z: np.ndarray,
    reference_z: np.ndarray,
    x_in_population: np.ndarray | None = None,
    offline_a: float = RMIA_OFFLINE_A,
) -> np.ndarray:
    """RMIA's score per x: the fraction of population samples z with LR(x) > LR(z) (see the module docstring).

    `target_*` hold log p_y under the target model, `reference_*` (K, ·) under the K OUT references;
    `x_in_population[i]`, when given, is the population index of x_i (-1 if none): x_i is then
    not compared with itself.
    """

    def log_ratio(target: np.ndarray, references: np.ndarray) -> np.ndarray:
        mean_out = np.exp(np.atleast_2d(references)).mean(axis=0)  # a reference's p_y rounding to 0 is harmless here
        return np.asarray(target) - np.log((1 + offline_a) / 2 * mean_out + (1 - offline_a) / 2)

    ratio_x, ratio_z = log_ratio(target_x, reference_x), log_ratio(target_z, reference_z)
    # |{z : LR(z) < LR(x)}| by sorting (memory O(|x| + |z|)); z = x itself has LR(z) = LR(x): never counted
    above = np.searchsorted(np.sort(ratio_z), ratio_x, side="left")
    population = np.full(len(ratio_x), len(ratio_z))
    if x_in_population is not None:
        population = population - (np.asarray(x_in_population) >= 0)
    return above / population


def rmia_attack(
    target: tuple[np.ndarray, np.ndarray],
    references: Sequence[tuple[np.ndarray, np.ndarray]],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    forget: np.ndarray,
    classwise: bool,
) -> dict:
    """`rmia_auc` (+ null band, `rmia_auc_ties`; None where degenerate) and `rmia_tpr_at_1fpr` (%) of `target`
    (train, test logits) on F = `forget`, the target's log p_y deciding which pairs it orders.

    Every reference (train, test logits) must be OUT for `forget`: an oracle that never saw it.
    """
    forget = np.asarray(forget)
    negatives = nonmember_indices(test_labels, train_labels[forget], classwise)
    test_p = [true_label_log_probability(logits[1], test_labels) for logits in (target, *references)]
    forget_p = [true_label_log_probability(logits[0][forget], train_labels[forget]) for logits in (target, *references)]
    positive = rmia_scores(forget_p[0], np.stack(forget_p[1:]), test_p[0], np.stack(test_p[1:]))
    negative = rmia_scores(
        test_p[0][negatives], np.stack([p[negatives] for p in test_p[1:]]), test_p[0], np.stack(test_p[1:]), negatives
    )
    result = attack_auc("rmia_auc", positive, negative, (forget_p[0], test_p[0][negatives]))
    result["rmia_tpr_at_1fpr"] = result.pop("tpr")
    return result


def tow(method: dict, oracle: dict, forget_key: str = "forget_acc") -> float | None:
    """Π over (`forget_key`, retain_acc, test_acc) of (1 − |method − oracle| / 100); None if one is missing."""
    product = 1.0
    for key in (forget_key, "retain_acc", "test_acc"):
        if method.get(key) is None or oracle.get(key) is None:
            return None
        product *= 1.0 - abs(method[key] - oracle[key]) / 100.0
    return product


def tow_scores(method: dict, oracle: dict) -> dict:
    """`tow` and `tow_mia` (the SVC member rate in place of the forget accuracy) of one request."""
    return {"tow": tow(method, oracle), "tow_mia": tow(method, oracle, "mia_member_rate")}


def request_privacy(
    method_logits,
    oracle_logits: Sequence,
    method_scores: dict,
    oracle_scores: dict,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    request,
) -> dict:
    """The method's keys the live runner adds after request t (logits: `EvalLogits`).

    RMIA with every oracle of the request (`--oracle-seeds` K) as OUT reference; ToW against the
    first oracle's scores (the row's oracle). The oracle is its own reference: its row holds None
    for `RMIA_KEYS` and `TOW_KEYS`.
    """
    rmia = rmia_attack(
        (method_logits.train, method_logits.test),
        [(logits.train, logits.test) for logits in oracle_logits],
        train_labels,
        test_labels,
        request.forget,
        request.forget_classes is not None,
    )
    return rmia | tow_scores(method_scores, oracle_scores)
