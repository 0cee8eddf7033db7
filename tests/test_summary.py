"""Stream summaries against a numpy computation on a constructed stream of rows."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from rich.console import Console

from tests.conftest import run_tiny
from unlearnbench.console import Reporter
from unlearnbench.evaluation.scoring import stream_summary
from unlearnbench.records import RequestRecord

# history[t][s]: accuracy on F_s after request t (T = 4)
HISTORY = np.array(
    [
        [5.0, 90.0, 95.0, 97.0],
        [12.0, 8.0, 90.0, 96.0],
        [30.0, 9.0, 20.0, 93.0],
        [40.0, 25.0, 31.0, 50.0],
    ]
)
GAPS = [1.0, 2.0, 4.0, 9.0]
ORACLE_FORGET = [3.0, 2.0, 4.0, 5.0]


def _rows(with_oracle: bool = True) -> list[RequestRecord]:
    return [
        RequestRecord(
            t=t + 1,
            status="ok",
            forget_classes=None,
            method={"forget_acc": HISTORY[t, t], "history": HISTORY[t].tolist(), "gap": GAPS[t]},
            oracle={"forget_acc": ORACLE_FORGET[t]} if with_oracle else None,
            single_shot=None,
        )
        for t in range(4)
    ]


def test_summary_against_numpy():
    summary = stream_summary(_rows())
    diagonal = np.diag(HISTORY)
    assert summary["forget_drift"] == pytest.approx(diagonal[-1] - diagonal[0])  # 50 − 5
    assert summary["forget_drift_vs_oracle"] == pytest.approx(45.0 - (5.0 - 3.0))
    regressions = np.array([HISTORY[t, s] - HISTORY[s, s] for t in range(4) for s in range(t)])
    # (1,0): 7  (2,0): 25  (2,1): 1  (3,0): 35  (3,1): 17  (3,2): 11
    assert summary["backward_failure_max"] == pytest.approx(regressions.max()) == pytest.approx(35.0)
    assert summary["backward_failure_mean"] == pytest.approx(regressions.mean())
    assert summary["rememorization_events"] == int(np.sum(regressions > 10.0)) == 4
    assert summary["rememorized_sets"] == 3  # F_1, F_2, F_3
    assert summary["forget_acc_auc"] == pytest.approx(diagonal.mean())
    assert summary["forget_acc_auc_oracle"] == pytest.approx(np.mean(ORACLE_FORGET))
    assert summary["mean_gap"] == pytest.approx(np.mean(GAPS))


def test_threshold_and_missing_oracle():
    summary = stream_summary(_rows(with_oracle=False), rememorization_threshold=20.0)
    assert summary["rememorization_events"] == 2 and summary["rememorized_sets"] == 1
    assert "forget_drift_vs_oracle" not in summary and "forget_acc_auc_oracle" not in summary
    single = stream_summary(_rows()[:1])
    assert single["backward_failure_max"] is None and single["rememorization_events"] == 0


#: Single-shot forget accuracies on F_2 and F_4 (the scheduled requests), as the runner records them.
SINGLE_SHOT_FORGET = {2: 1.0, 4: 6.0}


def _scheduled_rows() -> list[RequestRecord]:
    """Oracles at t = 2, 4 (`--oracle-every 2`, T = 4) and single-shot counterfactuals at the same requests."""
    rows = []
    for row in _rows():
        if row.t not in SINGLE_SHOT_FORGET:
            del row.method["gap"]
            rows.append(replace(row, oracle=None, single_shot=None))
            continue
        row.method["forward_gain"] = row.method["forget_acc"] - SINGLE_SHOT_FORGET[row.t]
        rows.append(replace(row, single_shot={"forget_acc": SINGLE_SHOT_FORGET[row.t]}))
    return rows


def test_forward_failure_is_the_gain_over_the_single_shot_counterfactual():
    summary = stream_summary(_scheduled_rows())
    assert summary["single_shot_forget_acc"] == 6.0 and summary["continual_forget_acc"] == HISTORY[3, 3]
    assert summary["forward_failure"] == pytest.approx(50.0 - 6.0)
    assert summary["forward_failure_mean"] == pytest.approx(np.mean([8.0 - 1.0, 50.0 - 6.0]))
    assert summary["single_shot_requests"] == 2
    assert summary["forget_drift"] == pytest.approx(50.0 - 5.0)  # the old quantity, under its own name


def test_the_mean_gain_leaves_out_t1_whose_gain_is_zero_by_construction():
    rows = _scheduled_rows()
    rows[0] = replace(rows[0], single_shot={"forget_acc": HISTORY[0, 0]})
    rows[0].method["forward_gain"] = 0.0  # the continual fit at t = 1 is the single-shot one
    summary = stream_summary(rows)
    assert summary["forward_failure_mean"] == pytest.approx(np.mean([8.0 - 1.0, 50.0 - 6.0]))
    assert summary["single_shot_requests"] == 2


def test_sparse_oracles_are_averaged_where_they_exist_and_never_carried_over():
    summary = stream_summary(_scheduled_rows())
    assert summary["oracle_requests"] == 2
    assert summary["mean_gap"] == pytest.approx(np.mean([GAPS[1], GAPS[3]]))
    assert summary["final_oracle"] == {"forget_acc": ORACLE_FORGET[3]}
    # no oracle at t = 1: the drift against it, and the AUC over every t, would need one there
    assert "forget_drift_vs_oracle" not in summary and "forget_acc_auc_oracle" not in summary


# The oracle's history (its accuracy on every F_s after request t) and both sides' retain accuracy, for SAFER's
# knowledge erosion and forgetting reversal.
ORACLE_HISTORY = np.array(
    [
        [3.0, 90.0, 94.0, 96.0],
        [4.0, 2.0, 91.0, 95.0],
        [5.0, 3.0, 12.0, 94.0],
        [6.0, 30.0, 5.0, 5.0],
    ]
)
RETAIN = [98.0, 95.0, 93.0, 90.0]
ORACLE_RETAIN = [97.0, 96.5, 96.0, 95.0]


def _safer_rows() -> list[RequestRecord]:
    rows = []
    for row in _rows():
        t = row.t - 1
        row.method["retain_acc"] = RETAIN[t]
        oracle = {"forget_acc": ORACLE_FORGET[t], "retain_acc": ORACLE_RETAIN[t], "history": ORACLE_HISTORY[t].tolist()}
        rows.append(replace(row, oracle=oracle))
    return rows


def test_knowledge_erosion_and_forgetting_reversal_against_a_direct_computation():
    """Erosion: the oracle's retain drift (95 − 97 = −2) minus the method's (90 − 98 = −8) = 6 points lost beyond
    retraining's. Reversal, pair by pair: F_s forgotten at s (within 10 of the oracle then) and at t more than 10
    above both its own accuracy at s and the oracle's at t."""
    summary = stream_summary(_safer_rows())
    assert summary["retain_drift"] == pytest.approx(RETAIN[-1] - RETAIN[0])
    assert summary["knowledge_erosion"] == pytest.approx((ORACLE_RETAIN[-1] - ORACLE_RETAIN[0]) - (90.0 - 98.0))
    expected = [
        (t, s)
        for t in range(4)
        for s in range(t)
        if HISTORY[s, s] - ORACLE_HISTORY[s, s] <= 10
        and HISTORY[t, s] - HISTORY[s, s] > 10
        and HISTORY[t, s] - ORACLE_HISTORY[t, s] > 10
    ]
    # (2,0): 30 vs 5 at s, oracle 5 at t: yes; (3,0): 40: yes; (3,1): 25 − 8 = 17 but the oracle is at 30: no;
    # (3,2): F_3 at 20 vs the oracle's 12 at s, then 31 − 20 = 11 and 31 − 5 = 26: yes. The raw form also counts (3,1): 4 re-memorization events.
    assert expected == [(2, 0), (3, 0), (3, 2)]
    assert summary["forgetting_reversal_events"] == len(expected) == 3
    assert summary["forgetting_reversal_sets"] == 2  # F_1 and F_3
    assert summary["rememorization_events"] == 4


def test_a_set_never_forgotten_cannot_be_reversed():
    """F_1 left 20 points above the oracle at its request: its later rise is re-memorization, not reversal."""
    rows = _safer_rows()
    rows[0].oracle["history"][0] = HISTORY[0, 0] - 20.0  # the method was 20 points above a never-trained model
    summary = stream_summary(rows)
    assert summary["forgetting_reversal_events"] == 1 and summary["forgetting_reversal_sets"] == 1  # (3, 2) alone
    assert summary["rememorization_events"] == 4


def test_erosion_and_reversal_need_the_oracle_where_they_read_it():
    summary = stream_summary([replace(row, oracle=None) for row in _safer_rows()])
    assert summary["retain_drift"] == pytest.approx(-8.0)
    assert "knowledge_erosion" not in summary and "forgetting_reversal_events" not in summary
    scheduled = [row if row.t in (2, 4) else replace(row, oracle=None) for row in _safer_rows()]
    summary = stream_summary(scheduled)  # no oracle at t = 1: no erosion; reversal over the pairs with oracles only
    assert "knowledge_erosion" not in summary
    assert summary["forgetting_reversal_events"] == 0  # (3, 1): F_2 at 8 vs the oracle's 2, then 25 vs 30


def test_erosion_and_reversal_reach_summary_json_and_the_console_from_the_rows(tmp_path, shared_store):
    """A tiny run: summary.json's new keys equal the computation from its metrics.jsonl rows, and the console's
    summary prints them."""
    result = run_tiny(tmp_path, shared_store, "finetune", "random", logger="none", requests=3, single_shot_every=0)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    method, oracle = [row["method"] for row in rows], [row["oracle"] for row in rows]
    retain_drift = method[-1]["retain_acc"] - method[0]["retain_acc"]
    events = [
        (t, s)
        for t in range(3)
        for s in range(t)
        if method[s]["history"][s] - oracle[s]["history"][s] <= 10
        and method[t]["history"][s] - max(method[s]["history"][s], oracle[t]["history"][s]) > 10
    ]
    written = json.loads((result.run_dir / "summary.json").read_text())
    assert written["retain_drift"] == pytest.approx(retain_drift)
    assert written["knowledge_erosion"] == pytest.approx(
        oracle[-1]["retain_acc"] - oracle[0]["retain_acc"] - retain_drift
    )
    assert written["forgetting_reversal_events"] == len(events)
    console = Console(record=True, width=100, force_terminal=False)
    Reporter(console=console).summary(result.rows, result.summary, result.run_dir)
    text = console.export_text()
    assert f"knowledge erosion (the oracle's retain drift − the method's): {written['knowledge_erosion']:.2f}" in text
    assert f"forgetting reversal: {len(events)} events" in text
