"""The oracle's and the pretrained model's scores are computed once per process (`evaluation.reference_scores`):
a run after another of the same setting reuses them and writes the numbers it writes alone; a run of another
setting computes its own."""

from __future__ import annotations

import numpy as np

from tests.conftest import run_tiny
from unlearnbench.evaluation import reference_scores
from unlearnbench.evaluation.reference_scores import digest
from unlearnbench.runner import Runner


def _reference_rows(result) -> list[tuple[dict, dict]]:
    return [(row.oracle, row.original) for row in result.rows]


def _untimed(scores: dict) -> dict:
    return {key: value for key, value in scores.items() if not key.endswith("_s")}


def _counting_scores(monkeypatch) -> list[int]:
    """Request t of every `Runner.score` call (the method's, the oracle's, the original's, a counterfactual's)."""
    calls, score = [], Runner.score

    def counted(self, logits, request):
        calls.append(request.t)
        return score(self, logits, request)

    monkeypatch.setattr(Runner, "score", counted)
    return calls


def test_a_run_after_another_of_its_setting_reuses_the_reference_scores_and_writes_the_same_numbers(
    tmp_path, monkeypatch
):
    shared_store = tmp_path / "store"  # its own: no counterfactual scores cached by another test
    alone = run_tiny(tmp_path / "alone", shared_store, "rl", stream="random")
    reference_scores.clear()
    calls = _counting_scores(monkeypatch)
    run_tiny(tmp_path / "warm", shared_store, "finetune", stream="random")
    cold_calls = len(calls)
    calls.clear()
    after = run_tiny(tmp_path / "warm", shared_store, "rl", stream="random")
    # finetune's run, the first of the process: the method's, the oracle's and the original's scores at each of the
    # 2 requests, and its counterfactual's at t = 2; rl's after it: its own only (its counterfactual's scores are
    # in the store since its first run)
    assert cold_calls == 2 * 3 + 1
    assert len(calls) == 2
    assert _reference_rows(after) == _reference_rows(alone)
    assert [_untimed(row.method) for row in after.rows] == [_untimed(row.method) for row in alone.rows]


def test_another_seed_or_protocol_computes_its_own(tmp_path, monkeypatch):
    shared_store = tmp_path / "store"
    run_tiny(tmp_path / "a", shared_store, "finetune", stream="random")
    calls = _counting_scores(monkeypatch)
    run_tiny(tmp_path / "b", shared_store, "finetune", stream="random", mia_protocol="loft")
    assert len(calls) == 2 * 3 + 1  # nothing reused: nor the counterfactual's store entry, keyed by protocol too
    calls.clear()
    run_tiny(tmp_path / "c", shared_store, "finetune", stream="random", seed=1)
    assert len(calls) == 2 * 3 + 1


def test_a_hit_is_a_copy_the_caller_may_change():
    key = digest("scores", np.arange(3))
    first = reference_scores.reference_scores(key, lambda: {"history": [1.0, 2.0]})
    first.pop("history")
    assert reference_scores.reference_scores(key, lambda: {}) == {"history": [1.0, 2.0]}


def test_the_digest_tells_arrays_apart_by_dtype_shape_and_values():
    values = np.arange(6, dtype=np.int64)
    assert digest(values) == digest(values.copy())
    assert len({digest(values), digest(values.astype(np.int32)), digest(values.reshape(2, 3)), digest(values + 1)}) == 4
    assert digest(values[::2]) == digest(np.array([0, 2, 4]))  # a view's values, not its memory
