"""Reliability: kills at any point, divergence, write failures, foreign run directories, parallel runs."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST_RECIPE, tiny_config
from unlearnbench import io as unlearnbench_io
from unlearnbench.cli import main
from unlearnbench.config import ConfigError
from unlearnbench.rundir import UntrustedCheckpointError
from unlearnbench.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ("rte_s", "prepare_s")


def _results(run_dir: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        for key in TIMINGS:
            row["method"].pop(key)
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in TIMINGS:
        summary["final"].pop(key)
    return rows, summary


def _argv(out: Path, store: Path) -> list[str]:
    return [
        "run", "--method", "salun", "--requests", "2", "--salun.epochs", "2", "--recipe", json.dumps(FAST_RECIPE),
        "--out", str(out), "--store", str(store), "--quiet", "true",
    ]  # fmt: skip


def _only_run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of the command every kill test repeats; its store is reused where it can be."""
    base = tmp_path_factory.mktemp("reference")
    assert main(_argv(base / "out", base / "store")) == 0
    return _results(_only_run_dir(base / "out")), base / "store"


# (target as the code looks it up, N-th call, before/after, needs a fresh store)
KILL_POINTS = [
    ("unlearnbench.training.SupervisedClassifier.training_step", 3, "before", True),  # pretraining
    ("unlearnbench.training.SupervisedClassifier.training_step", 60, "before", True),  # oracle 1 training
    ("unlearnbench.io.os.replace", 4, "before", True),  # store weights written to temp, not renamed
    ("unlearnbench.store.write_json_atomic", 1, "before", True),  # store weights in place, metadata not
    ("unlearnbench.methods.base.UnlearningMethod.training_step", 2, "before", False),  # unlearning request 1
    ("unlearnbench.methods.salun.SalUn.prepare", 2, "before", False),  # saliency mask of request 2
    ("unlearnbench.runner.compute_logits", 3, "before", False),  # evaluating the method after request 2
    ("unlearnbench.runner.compute_logits", 4, "before", False),  # evaluating oracle 2
    ("unlearnbench.rundir.RunDirectory.save_state", 2, "after", False),  # checkpoint 2 written, row not
    ("unlearnbench.rundir.RunDirectory.append_row", 2, "before", False),  # writing results of request 2
    ("unlearnbench.rundir.RunDirectory.append_row", 1, "after", False),  # row 1 committed, old state kept
    ("unlearnbench.rundir.RunDirectory.write_summary", 1, "before", False),  # all rows, no summary
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "count", "when", "fresh_store"),
    KILL_POINTS,
    ids=[f"{t.split('.')[-1]}-{n}-{w}" for t, n, w, _ in KILL_POINTS],
)
def test_killed_anywhere_the_same_command_resumes_to_the_same_result(
    tmp_path, reference, target, count, when, fresh_store
):
    (expected_rows, expected_summary), reference_store = reference
    store = tmp_path / "store"
    if not fresh_store:
        shutil.copytree(reference_store, store)
    argv = _argv(tmp_path / "out", store)
    killed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "crash_at.py"), target, str(count), when, "--", *argv],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert main(argv) == 0
    rows, summary = _results(_only_run_dir(tmp_path / "out"))
    assert rows == expected_rows
    assert summary == expected_summary
    assert len({row["t"] for row in rows}) == len(rows) == 2


def test_divergence_stops_the_run_and_is_recorded(tmp_path, shared_store, capsys):
    argv = [
        "run", "--method", "ga", "--requests", "3", "--ga.lr", "1e12", "--ga.epochs", "3", "--recipe",
        json.dumps(FAST_RECIPE), "--out", str(tmp_path), "--store", str(shared_store), "--quiet", "true",
    ]  # fmt: skip
    assert main(argv) == 3
    assert "diverged" in capsys.readouterr().err
    run_dir = _only_run_dir(tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["status"] == "diverged" and rows[-1]["t"] == 1 and len(rows) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_at"] == 1
    assert main(argv) == 3, "a rerun reports the same outcome and does not retry"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1


def test_a_write_failure_is_one_clear_error_and_earlier_results_stay(tmp_path, shared_store, monkeypatch, capsys):
    argv = _argv(tmp_path, shared_store)
    real_replace = unlearnbench_io.os.replace

    def failing_replace(source, destination):
        if str(destination).endswith("metrics.jsonl") and Path(destination).exists():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(source, destination)

    monkeypatch.setattr(unlearnbench_io.os, "replace", failing_replace)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "cannot write results" in err
    run_dir = _only_run_dir(tmp_path)
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["t"] == 1
    assert not list(run_dir.rglob("*.tmp")), "the failed write removed its temp file"
    monkeypatch.setattr(unlearnbench_io.os, "replace", real_replace)
    assert main(argv) == 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_run_directory_of_another_configuration_is_refused_before_writing(tmp_path, shared_store):
    run_dir = tmp_path / "mine"
    Runner(tiny_config(tmp_path, shared_store, "rl", run_dir=run_dir)).run()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"another configuration \(method: 'rl' there, 'finetune' now"):
        Runner(tiny_config(tmp_path, shared_store, "finetune", run_dir=run_dir))
    with pytest.raises(ConfigError, match="seed: 0 there, 1 now"):
        Runner(tiny_config(tmp_path, shared_store, "rl", run_dir=run_dir, seed=1))
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_tampered_checkpoint_is_refused_not_unpickled(tmp_path, shared_store):
    import pickle

    config = tiny_config(tmp_path, shared_store, "finetune", requests=2)
    runner = Runner(config)
    runner.run()
    first_row = runner.run_dir.metrics_path.read_text().splitlines()[0]
    runner.run_dir.metrics_path.write_text(first_row + "\n")
    (runner.run_dir.path / "state" / "t001.pt").write_bytes(pickle.dumps(Exception("would run")))
    with pytest.raises(UntrustedCheckpointError, match="not a weights-only checkpoint"):
        Runner(config).run()


@pytest.mark.slow
def test_two_processes_share_the_store_and_train_each_model_once(tmp_path):
    log = tmp_path / "trainings.log"
    script = (
        "import sys, unlearnbench.training as t\n"
        "original = t.train_from_scratch\n"
        "def logged(*a, **k):\n"
        f"    open({str(log)!r}, 'a').write('x\\n')\n"
        "    return original(*a, **k)\n"
        "t.train_from_scratch = logged\n"
        "import unlearnbench.runner as r; r.train_from_scratch = logged\n"
        "from unlearnbench.cli import main; raise SystemExit(main(sys.argv[1:]))\n"
    )
    common = ["--requests", "2", "--recipe", json.dumps(FAST_RECIPE), "--out", str(tmp_path / "out"), "--quiet", "true"]
    processes = [
        subprocess.Popen([sys.executable, "-c", script, "run", "--method", method, f"--{method}.epochs", "1", *common])
        for method in ("finetune", "rl")
    ]
    assert [p.wait(timeout=600) for p in processes] == [0, 0]
    assert len(log.read_text().splitlines()) == 1 + 2, "one pretrained model and two oracles, each trained once"
    run_dirs = sorted(p for p in (tmp_path / "out").iterdir() if p.name != "store")
    oracles = [
        [json.loads(line)["oracle"] for line in (d / "metrics.jsonl").read_text().splitlines()] for d in run_dirs
    ]
    assert len(run_dirs) == 2 and oracles[0] == oracles[1]
