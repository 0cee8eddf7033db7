"""Stream summaries against a numpy computation on a constructed stream of rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

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
