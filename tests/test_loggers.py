"""Loggers: offline W&B stays inside the run directory, a resumed run keeps its W&B id, CSV logs are written."""

from __future__ import annotations

import csv
import json
import os

import pytest

from tests.conftest import SimulatedCrashError, crash_before_request, tiny_config
from unlearnbench.cli import main
from unlearnbench.loggers import STATE_FILE
from unlearnbench.loggers.wandb import WANDB_DIRS
from unlearnbench.runner import Runner

WANDB_ENV = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_SILENT", "WANDB_PROJECT", *WANDB_DIRS)


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    """HOME (and the XDG folders) point to an empty folder; W&B's own variables are unset."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))  # matplotlib's font cache is not W&B's
    for name in WANDB_ENV:
        monkeypatch.delenv(name, raising=False)
    return home


def test_offline_wandb_writes_only_inside_the_run_dir(tmp_path, shared_store, empty_home):
    result = Runner.from_config(tiny_config(tmp_path / "runs", shared_store, "ga", logger="wandb")).run()
    run_id = json.loads((result.run_dir / STATE_FILE).read_text())["wandb_id"]
    (offline,) = (result.run_dir / "wandb").glob("offline-run-*")
    assert offline.name.endswith(f"-{run_id}")
    assert (offline / f"run-{run_id}.wandb").stat().st_size > 0
    media = {p.parent.name for p in offline.rglob("*") if p.is_file() and "media" in p.parts}
    assert media >= {"history"}  # the heatmap image and the wandb.Table
    assert list(empty_home.rglob("*")) == []
    assert all(name not in os.environ for name in WANDB_ENV)  # restored after the run


@pytest.mark.parametrize("kind", ["wandb", "csv"])
def test_a_resumed_run_continues_its_logger(tmp_path, shared_store, empty_home, monkeypatch, kind):
    config = tiny_config(tmp_path / "runs", shared_store, "finetune", logger=kind)
    with monkeypatch.context() as patch:
        crash_before_request(patch, 2)
        runner = Runner.from_config(config)
        with pytest.raises(SimulatedCrashError):
            runner.run()
        runner.run_logger.finish(failed=True)  # what the process's exit does for a killed run
    state = json.loads((runner.run_dir.path / STATE_FILE).read_text())
    Runner.from_config(config).run()
    resumed = json.loads((runner.run_dir.path / STATE_FILE).read_text())
    if kind == "wandb":
        assert resumed["wandb_id"] == state["wandb_id"]
        runs = sorted((runner.run_dir.path / "wandb").glob("offline-run-*"))
        # offline-run-<time>-<id>, with "-1" appended when both sessions started within one second
        assert len(runs) == 2 and all(f"-{state['wandb_id']}" in run.name for run in runs)
    else:
        first, second = (runner.run_dir.path / "csv_logs" / v / "metrics.csv" for v in ("from_t001", "from_t002"))
        steps_before = [int(r["step"]) for r in csv.DictReader(first.open()) if r.get("train/loss")]
        steps_after = [int(r["step"]) for r in csv.DictReader(second.open()) if r.get("train/loss")]
        assert steps_before and steps_after and min(steps_after) > max(steps_before)  # steps count over the stream
    assert resumed["global_step"] > state["global_step"]
    assert list(empty_home.rglob("*")) == []


def test_csv_logger_writes_losses_and_request_metrics(tmp_path, shared_store):
    result = Runner.from_config(
        tiny_config(tmp_path / "runs", shared_store, "rl", requests=2)
    ).run()  # csv is the default
    rows = list(csv.DictReader((result.run_dir / "csv_logs" / "from_t001" / "metrics.csv").open()))
    losses = [r for r in rows if r["train/loss"]]
    requests = [r for r in rows if r["request"]]
    assert len(losses) >= 2 and [int(r["step"]) for r in losses] == sorted(int(r["step"]) for r in losses)
    assert [int(float(r["request"])) for r in requests] == [1, 2]
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    for logged, row in zip(requests, metrics, strict=True):
        assert float(logged["method/forget_acc"]) == pytest.approx(row["method"]["forget_acc"])
        assert float(logged["oracle/retain_acc"]) == pytest.approx(row["oracle"]["retain_acc"])
    assert not (result.run_dir / "wandb").exists()


def test_logger_none_writes_no_log(tmp_path, shared_store):
    result = Runner.from_config(
        tiny_config(tmp_path / "runs", shared_store, "finetune", requests=1, logger="none")
    ).run()
    assert not (result.run_dir / "csv_logs").exists() and not (result.run_dir / "wandb").exists()


def test_unknown_logger_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "ga", "--logger", "tensorboard", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "unknown logger 'tensorboard'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
