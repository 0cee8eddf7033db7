"""A metric is one function and one registration: the scorer, the gaps, the console, the leaderboard, the
loggers and the docs all read `evaluation.keys.METRIC_KEYS`, so a metric registered here (and nowhere
else) reaches every one of them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tests.conftest import tiny_config
from unlearnbench.config import RunConfig
from unlearnbench.console import Reporter
from unlearnbench.evaluation.keys import (
    GAP,
    GAP_ACC,
    METRIC_KEYS,
    MetricKey,
    ScoringInputs,
    console_keys,
    gap_keys,
    metrics_table,
    register_metric,
    user_metric_code,
)
from unlearnbench.provenance import method_code
from unlearnbench.records import RunIdentity
from unlearnbench.registry import METHODS
from unlearnbench.report.leaderboard import build_leaderboard, column_keys
from unlearnbench.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
WANDB_ENV = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_SILENT", "WANDB_PROJECT")


def forget_confidence(inputs: ScoringInputs) -> float:
    """Mean softmax probability (%) of the true label on F_t: a metric the package does not have."""
    logits = inputs.logits.train[inputs.request.forget].astype(np.float64)
    labels = inputs.train_labels[inputs.request.forget]
    return 100.0 * float(np.mean(_softmax(logits)[np.arange(len(labels)), labels]))


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


DUMMY = MetricKey(
    "forget_confidence",
    "mean true-label probability (%) on F_t",
    False,
    True,
    digits=3,
    gaps=(GAP,),
    console=True,
    leaderboard="fconf",
    compute=forget_confidence,
)


@pytest.fixture
def dummy_metric(monkeypatch):
    monkeypatch.setitem(METRIC_KEYS, DUMMY.key, DUMMY)
    return DUMMY


def test_a_registered_metric_reaches_the_rows_gap_console_leaderboard_and_wandb(
    tmp_path, shared_store, dummy_metric, monkeypatch
):
    import wandb.sdk.wandb_run

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in WANDB_ENV:
        monkeypatch.delenv(name, raising=False)
    logged: list[dict] = []
    original_log = wandb.sdk.wandb_run.Run.log

    def log(self, data, *args, **kwargs):
        logged.append(dict(data))
        return original_log(self, data, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", log)
    console = Console(record=True, width=400, force_terminal=False)
    config = tiny_config(tmp_path / "runs", shared_store, "ga", logger="wandb", save_logits=True)
    result = Runner.from_config(config, reporter=Reporter(console=console)).run()

    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    train_labels = np.load(result.run_dir / "labels.npz")["train"]
    for row in rows:  # the value is the function's, on the saved logits, for the method and the oracle alike
        saved = np.load(result.run_dir / "logits" / f"t{row['t']:03d}.npz")
        forget = np.asarray(manifest["requests"][row["t"] - 1]["forget"])
        for side in ("method", "oracle"):
            probabilities = _softmax(saved[f"{side}_train"][forget].astype(np.float64))
            expected = 100.0 * float(np.mean(probabilities[np.arange(len(forget)), train_labels[forget]]))
            assert row[side]["forget_confidence"] == pytest.approx(expected, abs=1e-6)
        gap = [abs(row["method"][k] - row["oracle"][k]) for k in gap_keys(GAP) if k in row["method"]]
        assert "forget_confidence" in gap_keys(GAP) and "forget_confidence" not in gap_keys(GAP_ACC)
        assert row["method"]["gap"] == pytest.approx(np.mean(gap))

    text = console.export_text()
    assert "forget_confidence" in text and f"{rows[-1]['method']['forget_confidence']:.3f}" in text
    assert "forget_confidence" in console_keys()

    board = build_leaderboard(tmp_path / "runs", tmp_path / "board", plots=False)
    assert "forget_confidence" in column_keys()
    (group,) = board.groups
    assert group.columns[0].key == "gap_acc"  # the headline stays first
    (entry,) = group.entries
    assert entry.cells["forget_confidence"].mean == pytest.approx(rows[-1]["method"]["forget_confidence"])
    assert "fconf" in (tmp_path / "board" / "leaderboard.md").read_text()
    assert "forget_confidence_mean" in (tmp_path / "board" / "leaderboard.csv").read_text()

    requests = [data for data in logged if "request" in data]
    assert [data["request"] for data in requests] == [1, 2]
    for data, row in zip(requests, rows, strict=True):
        assert data["method/forget_confidence"] == pytest.approx(row["method"]["forget_confidence"])
        assert data["oracle/forget_confidence"] == pytest.approx(row["oracle"]["forget_confidence"])


def test_a_metric_key_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register_metric(MetricKey("forget_acc", "again", False, True))


def test_the_docs_metric_table_is_the_registry():
    """docs/reporting.md shows `metrics_table()` verbatim: a metric added to the registry is added to the docs."""
    assert metrics_table() in (ROOT / "docs" / "reporting.md").read_text()


def test_a_users_metric_in_a_gap_is_part_of_the_run_identity_and_one_outside_is_not(tmp_path, monkeypatch):
    """The gap it enters averages it: a run with it is another run (its own folder), never a resume or a row mixing
    two gap definitions. Built-in metrics alone leave the identity, and so every existing folder name, as it was."""
    config = RunConfig.from_options(method="finetune", out=tmp_path)

    def identity():
        return config.identity({"lr": 0.01}, {"epochs": 1}, 1)

    plain = identity()
    assert plain.metrics is None and "metrics" not in plain.to_json()
    monkeypatch.setitem(METRIC_KEYS, DUMMY.key, replace(DUMMY, gaps=()))
    assert identity() == plain
    monkeypatch.setitem(METRIC_KEYS, DUMMY.key, DUMMY)
    gapped = identity()
    assert gapped.metrics == {"forget_confidence": ["gap"]}
    assert config.run_path(gapped) != config.run_path(plain)
    assert RunIdentity.from_json(json.loads(json.dumps(gapped.to_json()))) == gapped


def test_a_users_metric_code_is_part_of_the_runs_recorded_code(monkeypatch):
    """Its function's module (here this test module) and its imports are hashed beside the method's: editing it refuses a
    resume."""
    plain = method_code(METHODS.get("finetune"), user_metric_code())
    monkeypatch.setitem(METRIC_KEYS, DUMMY.key, DUMMY)
    with_metric = method_code(METHODS.get("finetune"), user_metric_code())
    added = set(with_metric["modules"]) - set(plain["modules"])
    assert __name__ in added and all(name.startswith("tests.") for name in added)  # the module and what it imports
