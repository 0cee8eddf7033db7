"""Request metrics from one set of evaluation logits, for the method and the oracle alike."""

from __future__ import annotations

import math

import numpy as np

from unlearnbench.evaluation.evaluator import EvalLogits
from unlearnbench.evaluation.keys import GAP, ScoringInputs, accuracy, computed_scores, gap_keys
from unlearnbench.evaluation.mia import svc_member_rate, svc_validity_and_advantage, true_label_confidence
from unlearnbench.records import SINGLE_SHOT_FIELDS, RequestRecord
from unlearnbench.streams.base import Request


def request_scores(
    logits: EvalLogits,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    request: Request,
    requests: list[Request],
    num_classes: int,
    mia_seed: int,
    mia_protocol: str = "salun",
) -> dict:
    """The registered metrics of one model after `request` (`keys.computed_scores`: the accuracies, and any
    metric a user registers), the SVC attack and the history row.

    `mia_protocol` picks the SVC's non-members (`evaluation/mia.py`): `salun`, test samples of
    retained classes; `loft`, the whole test set.
    """
    scores = computed_scores(ScoringInputs(logits, train_labels, test_labels, request, num_classes))
    train_confidence = true_label_confidence(logits.train, train_labels)
    test_confidence = true_label_confidence(logits.test, test_labels)
    nonmembers = request.test_retain if mia_protocol == "salun" else np.arange(len(test_labels))
    scores["mia_member_rate"] = svc_member_rate(
        train_confidence[request.retain],
        test_confidence[nonmembers],
        train_confidence[request.forget],
        np.random.default_rng(mia_seed),
    )
    unseen = None
    if request.forget_classes is not None:  # never-trained samples of F_t's classes: their test images
        unseen = np.flatnonzero(np.isin(test_labels, request.forget_classes))
    scores |= svc_validity_and_advantage(
        train_confidence[request.retain],
        test_confidence[nonmembers],
        nonmembers,
        train_confidence[request.forget],
        unseen,
        test_confidence[unseen] if unseen is not None else np.zeros(0),
        np.random.default_rng([mia_seed, 1]),
    )
    scores["history"] = [
        accuracy(logits.train[other.forget], train_labels[other.forget], num_classes) for other in requests
    ]
    return scores


def avg_gap(method: dict, oracle: dict, keys: tuple[str, ...] | None = None) -> float:
    """Avg.Gap: mean |method − oracle| over the `keys` both sides report (default `gap_keys(GAP)`; those of
    `GAP_ACC` give `gap_acc`)."""
    keys = gap_keys(GAP) if keys is None else keys
    gaps = [abs(method[k] - oracle[k]) for k in keys if method.get(k) is not None and oracle.get(k) is not None]
    return float(np.mean(gaps)) if gaps else math.nan


def forward_gain(continual: dict, single_shot: dict) -> float | None:
    """forward_gain_t = forget_acc(continual, F_t) − forget_acc(single-shot, F_t).

    The plasticity-collapse paper's "gain": how much worse request t is forgotten by the method that
    served t − 1 requests before it than by the same method serving it first, on the same forget set.
    """
    if continual.get("forget_acc") is None or single_shot.get("forget_acc") is None:
        return None
    return continual["forget_acc"] - single_shot["forget_acc"]


def stream_summary(rows: list[RequestRecord], rememorization_threshold: float = 10.0) -> dict:
    """Forward/backward failure, forget drift and mean gap over a finished (or partial) stream of scored requests
    (`RunSummary.scores`).

    Forward failure is the plasticity-collapse paper's table: at the last request T, the forget
    accuracy of the single-task counterfactual (`single_shot_forget_acc`, the "single-task
    baseline": F_T alone from the pretrained model, retain = train minus F_T), of the continual
    method (`continual_forget_acc`, "continual last-task") and their difference `forward_failure`
    (= forward_gain_T); `forward_failure_mean` is the gain averaged over the requests t >= 2 that
    have a counterfactual (`single_shot_requests` of them: at t = 1 the continual fit is the
    single-shot one, so its gain is 0 by construction and would only dilute the mean). The same
    keys with `_cumulative` after `single_shot`/`forward_failure` measure against the counterfactual
    whose retain set is request t's (`--single-shot-baseline cumulative` or `both`). `forget_drift`
    is forget_acc at T minus at 1 (two different forget sets: the method's decline mixed with their
    difficulty), and `forget_drift_vs_oracle` that minus the oracle's own drift, when oracles exist
    at 1 and T.

    Oracles may be scheduled (`--oracle-every`): `mean_gap`/`mean_gap_acc` average over the requests
    with an oracle (`oracle_requests` of them), `final_oracle` exists when T has one, and nothing is
    carried over from another request. `final_original` is the pretrained model on request T's sets
    (and `mean_gap_acc_original`/`mean_gap_original` its gaps to the oracles: what unlearning has to close);
    `original_history` its accuracy on every F_s (the t = 0 row of the history matrix).

    Backward failure comes in two named forms: `backward_failure_max`/`_mean`, the raw
    history[t][s] − history[s][s] (moving toward the oracle's accuracy counts as re-memorization on
    a random stream, where the oracle itself generalizes to F_s), and, where rows have the oracle,
    `backward_failure_vs_oracle_max`/`_mean`: history[t][s] − the oracle's history[t][s] over those t,
    how far above a model that never saw F_s the method is on it at t (0 for the oracle by construction).

    Also: `rememorization_events`, the number of pairs (t, s), s < t, with
    history[t][s] − history[s][s] > `rememorization_threshold` (accuracy points; the pair counts
    once per request t at which F_s is above its own post-request accuracy by more than that),
    `rememorized_sets` (distinct s with at least one event), and `forget_acc_auc`, the area under
    forget_acc(t) for t = 1..T normalized by T (= its mean over the stream, in %; `_oracle` beside it
    when every request has an oracle).

    Knowledge erosion and forgetting reversal are the continual-unlearning failures SAFER names (Park, Shin and
    Woo, "Robust Continual Unlearning against Knowledge Erosion and Forgetting Reversal", arXiv:2604.19108, 2026):
    "the accuracy on retain data progressively degrades over unlearning phases" and "previously forgotten samples
    become recognizable again in later phases". Their abstract gives no formula (their tables report accuracies per
    phase), so ours are defined here, against the oracle, which moves too (its retain set shrinks; on a random stream
    it generalizes to F_s). `_erosion_summary` says how.
    """
    method = [row.method for row in rows]
    summary = {"final": _without_history(method[-1])}
    summary["forget_drift"] = method[-1]["forget_acc"] - method[0]["forget_acc"]
    for field in SINGLE_SHOT_FIELDS.values():
        summary |= _forward_summary(rows, field)
    summary["forget_acc_auc"] = float(np.mean([scores["forget_acc"] for scores in method]))
    summary |= _oracle_summary(rows, summary["forget_drift"])
    summary |= _original_summary(rows)
    summary |= _backward_summary(rows, rememorization_threshold)
    summary |= _erosion_summary(rows, rememorization_threshold)
    return summary | _age_summary(rows)  # last: the keys before keep their order


def _forward_summary(rows: list[RequestRecord], field: str) -> dict:
    """`stream_summary`'s forward failure against the counterfactuals in the rows' `field` (`SINGLE_SHOT_FIELDS`)."""
    suffix = field.removeprefix("single_shot")
    gain = f"forward_gain{suffix}"
    gains = [row.method[gain] for row in rows if row.t >= 2 and row.method.get(gain) is not None]
    summary: dict = {}
    if gains:
        summary[f"forward_failure{suffix}_mean"] = float(np.mean(gains))
        summary[f"single_shot{suffix}_requests"] = len(gains)
    last = rows[-1]
    if getattr(last, field) and last.method.get(gain) is not None:
        summary[f"single_shot{suffix}_forget_acc"] = getattr(last, field)["forget_acc"]
        summary["continual_forget_acc"] = last.method["forget_acc"]
        summary[f"forward_failure{suffix}"] = last.method[gain]
    return summary


def _original_summary(rows: list[RequestRecord]) -> dict:
    """`stream_summary`'s numbers of the pretrained model (rows written before it was recorded have none)."""
    if not rows[-1].original:
        return {}
    summary = {"final_original": _without_history(rows[-1].original)}
    if rows[0].original and "history" in rows[0].original:  # `Runner.original_scores` keeps it at t = 1 only
        summary["original_history"] = rows[0].original["history"]
    with_oracle = [row.original for row in rows if row.oracle and row.original]
    for key in ("gap", "gap_acc"):
        gaps = [scores.get(key) for scores in with_oracle]
        if gaps and all(gap is not None for gap in gaps):
            summary[f"mean_{key}_original"] = float(np.mean(gaps))
    return summary


def _oracle_summary(rows: list[RequestRecord], forget_drift: float) -> dict:
    """`stream_summary`'s numbers against the oracles, over the requests that have them."""
    summary: dict = {}
    oracle = [row.oracle for row in rows]
    if oracle[-1]:
        summary["final_oracle"] = _without_history(oracle[-1])
    if oracle[0] and oracle[-1]:
        summary["forget_drift_vs_oracle"] = forget_drift - (oracle[-1]["forget_acc"] - oracle[0]["forget_acc"])
    with_oracle = [row for row in rows if row.oracle]
    if with_oracle:
        summary["oracle_requests"] = len(with_oracle)
        summary["mean_gap"] = float(np.mean([row.method["gap"] for row in with_oracle]))
        if all(row.method.get("gap_acc") is not None for row in with_oracle):
            summary["mean_gap_acc"] = float(np.mean([row.method["gap_acc"] for row in with_oracle]))
    if all(oracle):
        summary["forget_acc_auc_oracle"] = float(np.mean([scores["forget_acc"] for scores in oracle]))
    return summary


def _erosion_summary(rows: list[RequestRecord], threshold: float) -> dict:
    """`stream_summary`'s knowledge erosion and forgetting reversal (SAFER's names, our definitions).

    - `retain_drift`: retain_acc at T minus at 1 (negative: retain accuracy lost over the stream);
      `knowledge_erosion` (oracles at 1 and T): the oracle's retain drift minus the method's, the retain accuracy
      points the method lost over the stream beyond what retraining from scratch loses as the retain set shrinks
      (0 for the oracle by construction; negative: it lost less).
    - `forgetting_reversal_events` (where the rows with oracles hold their history): the pairs (t, s), s < t, both
      with an oracle, where F_s was forgotten at its request (history[s][s] at most `threshold` points above the
      oracle's accuracy on F_s then) and is recognized again at t: history[t][s] exceeds both history[s][s] and the
      oracle's history[t][s] by more than `threshold`; `forgetting_reversal_sets`, the distinct s among them. How
      they differ from `rememorization_events`, the raw form (history[t][s] − history[s][s] > threshold, every pair):
      a set never forgotten cannot be reversed, and a return to a never-trained model's own accuracy on F_s (a
      random stream's oracle generalizes to it) is not a reversal.
    """
    method, oracle = [row.method for row in rows], [row.oracle for row in rows]
    summary: dict = {}
    if _both_have(method[0], method[-1], "retain_acc"):
        summary["retain_drift"] = method[-1]["retain_acc"] - method[0]["retain_acc"]
        if oracle[0] and oracle[-1] and _both_have(oracle[0], oracle[-1], "retain_acc"):
            oracle_drift = oracle[-1]["retain_acc"] - oracle[0]["retain_acc"]
            summary["knowledge_erosion"] = oracle_drift - summary["retain_drift"]
    with_oracle = [t for t in range(len(rows)) if oracle[t]]
    if with_oracle and all(oracle[t].get("history") is not None for t in with_oracle):
        reversed_pairs = [
            (t, s)
            for t in with_oracle
            for s in with_oracle
            if s < t
            and method[s]["history"][s] - oracle[s]["history"][s] <= threshold
            and method[t]["history"][s] - method[s]["history"][s] > threshold
            and method[t]["history"][s] - oracle[t]["history"][s] > threshold
        ]
        summary["forgetting_reversal_events"] = len(reversed_pairs)
        summary["forgetting_reversal_sets"] = len({s for _, s in reversed_pairs})
    return summary


def _age_summary(rows: list[RequestRecord]) -> dict:
    """How the ability to forget evolves with the model's age, on an interleaved stream (rows with `age`: the learning
    steps on new data taken before request t; `streams.interleaved`). Least-squares slopes over age, in points per
    learning step, where at least two ages have the values:

    - `age_slope_forget_acc`: of forget_acc on F_t (every request);
    - `age_slope_forget_gap`: of the forget gap, forget_acc − the oracle's forget_acc on F_t (the requests with an
      oracle): positive, the method leaves F_t further above what retraining on everything seen minus everything
      deleted gives as the model ages (it forgets less well); 0, age does not matter;
    - `age_slope_gap`: of Avg.Gap (the requests with an oracle).

    The oracle of request t moves with age too (it is trained on the data released by t), so the forget gap, not the
    raw forget accuracy, is the ability to forget.
    """
    if any(row.method.get("age") is None for row in rows):
        return {}
    summary = {"final_age": rows[-1].method["age"]}
    series = {
        "age_slope_forget_acc": [(row.method["age"], row.method.get("forget_acc")) for row in rows],
        "age_slope_forget_gap": [
            (row.method["age"], row.method.get("forget_acc") - row.oracle["forget_acc"])
            for row in rows
            if row.oracle and row.oracle.get("forget_acc") is not None and row.method.get("forget_acc") is not None
        ],
        "age_slope_gap": [(row.method["age"], row.method.get("gap")) for row in rows if row.oracle],
    }
    for key, points in series.items():
        points = [(age, value) for age, value in points if value is not None and math.isfinite(value)]
        if len({age for age, _ in points}) >= 2:
            ages, values = np.array(points, dtype=np.float64).T
            summary[key] = float(np.polyfit(ages, values, 1)[0])
    return summary


def _backward_summary(rows: list[RequestRecord], rememorization_threshold: float) -> dict:
    """`stream_summary`'s backward failure (raw and against the oracle) and re-memorization events."""
    method, oracle = [row.method for row in rows], [row.oracle for row in rows]
    pairs = [(t, s) for t in range(len(rows)) for s in range(t)]
    regressions = [method[t]["history"][s] - method[s]["history"][s] for t, s in pairs]
    summary = {
        "backward_failure_max": max(regressions) if regressions else None,
        "backward_failure_mean": float(np.mean(regressions)) if regressions else None,
    }
    if any(oracle) and all(row.oracle.get("history") is not None for row in rows if row.oracle):
        corrected = [method[t]["history"][s] - oracle[t]["history"][s] for t, s in pairs if oracle[t]]
        summary["backward_failure_vs_oracle_max"] = max(corrected) if corrected else None
        summary["backward_failure_vs_oracle_mean"] = float(np.mean(corrected)) if corrected else None
    events = [pair for pair, value in zip(pairs, regressions, strict=True) if value > rememorization_threshold]
    summary["rememorization_threshold"] = rememorization_threshold
    summary["rememorization_events"] = len(events)
    summary["rememorized_sets"] = len({s for _, s in events})
    return summary


def _both_have(first: dict, last: dict, key: str) -> bool:
    return first.get(key) is not None and last.get(key) is not None


def _without_history(scores: dict) -> dict:
    return {key: value for key, value in scores.items() if key != "history"}
