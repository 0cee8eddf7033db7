"""Runner policies that keep the unlearning fit as fast as a bare PyTorch loop (benchmarks/perf.py P1)."""

from __future__ import annotations

import csv

from threadpoolctl import threadpool_info

from tests.conftest import tiny_config
from unlearnbench.methods.finetune import FineTune
from unlearnbench.runner import Runner


def _blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_numpy_blas_runs_single_threaded_during_a_run_and_is_restored(tmp_path, shared_store, monkeypatch):
    seen: list[set[int]] = []
    prepare = FineTune.prepare
    monkeypatch.setattr(FineTune, "prepare", lambda self, *a: (seen.append(_blas_threads()), prepare(self, *a))[1])
    before = _blas_threads()
    Runner.from_config(tiny_config(tmp_path, shared_store, "finetune", logger="none")).run()
    assert seen and all(threads == {1} for threads in seen)
    assert _blas_threads() == before


def test_manual_optimization_methods_log_their_step_loss(tmp_path, shared_store):
    result = Runner.from_config(tiny_config(tmp_path, shared_store, "scrub", requests=1)).run()
    rows = list(csv.DictReader((result.run_dir / "csv_logs" / "from_t001" / "metrics.csv").open()))
    losses = [float(row["train/loss"]) for row in rows if row["train/loss"]]
    assert len(losses) >= 2 and all(loss == loss for loss in losses)  # finite numbers, one per logged step
