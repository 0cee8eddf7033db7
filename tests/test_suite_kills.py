"""A suite killed with SIGKILL at ten points drawn at random, then rerun with the same command, ends with the
numbers of an uninterrupted suite, and leaves no temp file or held lock behind: the next write of a file removes
what its killed writer left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from filelock import FileLock

from tests.crash_at import cli_killed_at
from tests.test_reliability import _results
from tests.test_suite import tiny_suite
from unlearnbench import io
from unlearnbench.cli import main

#: where a kill may land (as the code looks the function up), before or after its n-th call, n drawn in 1..most.
#: The first kill lands in pretraining; the others in what every stage calls (an uninterrupted suite here makes 35
#: atomic writes, 360 unlearning steps, 12 evaluations and 6 metric-row appends).
FIRST_KILL = ("unlearnbench.training.SupervisedClassifier.training_step", "before", 3)
KILL_TARGETS = [
    ("unlearnbench.io.os.replace", "before", 4),  # any atomic write: temp file written, not renamed
    ("unlearnbench.io.os.replace", "after", 4),
    ("unlearnbench.methods.base.UnlearningMethod.training_step", "before", 60),  # unlearning, counterfactuals
    ("unlearnbench.runner.compute_logits", "before", 3),
    ("unlearnbench.rundir._append_line", "after", 1),
]
KILLS = 10


def _suite_file(root: Path) -> Path:
    root.mkdir()
    path = root / "suite.yaml"
    suite = tiny_suite(root, methods=["finetune", "salun"], streams=[{"stream": "random", "size": 0.05}])
    path.write_text(yaml.safe_dump(suite | {"leaderboard": False}))
    return path


def _numbers(runs: Path) -> dict:
    return {run.name: _results(run) for run in sorted(runs.iterdir()) if (run / "summary.json").exists()}


@pytest.mark.slow
def test_a_suite_killed_at_ten_random_points_ends_as_an_uninterrupted_one(tmp_path):
    assert main(["suite", str(_suite_file(tmp_path / "uninterrupted")), "--quiet", "true"]) == 0
    expected = _numbers(tmp_path / "uninterrupted" / "runs")
    assert len(expected) == 2

    suite_file, rng, kills = _suite_file(tmp_path / "killed"), np.random.default_rng(0), []
    for i in range(KILLS):
        if i == 0:
            target, when, count = FIRST_KILL
        else:
            target, when, most = KILL_TARGETS[rng.integers(len(KILL_TARGETS))]
            count = int(rng.integers(1, most + 1))
        code = cli_killed_at(target, count, when, ["suite", str(suite_file), "--quiet", "true"])
        kills.append((target.rsplit(".", 1)[-1], count, when, code))
        assert code == -signal.SIGKILL, kills  # the point lies inside the work
    assert main(["suite", str(suite_file), "--quiet", "true"]) == 0

    assert _numbers(tmp_path / "killed" / "runs") == expected, kills
    leftovers = [path for path in (tmp_path / "killed").rglob("*") if path.name.endswith(".tmp")]
    assert not leftovers, (leftovers, kills)
    for lock in (tmp_path / "killed").rglob("*.lock"):  # a killed holder's lock is free (an OS lock dies with it)
        with FileLock(lock, timeout=0):
            pass
    cells = json.loads((tmp_path / "killed" / "runs" / "suite.json").read_text())["cells"]
    statuses = [cell["status"] for cell in cells]
    assert len(statuses) == 2 and set(statuses) <= {"complete", "already complete"}, cells


def _abandoned(path: Path, host: str, pid: int) -> Path:
    temp = path.parent / f".{path.name}.{host}-{pid}.x1y2.tmp"
    temp.write_bytes(b"half")
    return temp


def test_the_next_write_of_a_file_removes_the_temp_files_its_killed_writers_left(tmp_path):
    target = tmp_path / "summary.json"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process id that was this host's and is gone
    dead = _abandoned(target, io._HOST, child.pid)
    live = _abandoned(target, io._HOST, os.getpid())  # a writer still at work
    elsewhere = _abandoned(target, "0" * len(io._HOST), child.pid)  # another node's: its ids mean nothing here
    other_file = _abandoned(tmp_path / "history.csv", io._HOST, child.pid)
    io.write_json_atomic(target, {"t": 1})
    assert json.loads(target.read_text()) == {"t": 1}
    assert not dead.exists()
    assert live.exists() and elsewhere.exists() and other_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == sorted(
        p.name for p in (live, elsewhere, other_file)
    )
