"""One damaged file lists one run as damaged, never more, never less, and the rerun of the same command repairs it
or refuses it in one line: every file a finished run directory holds × every kind of damage (missing, empty,
garbage, wrong type or shape)."""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import tiny_config
from tests.test_reliability import UB, _one_error_line, _only_run_dir, _snapshot
from unlearnbench.cli import main
from unlearnbench.records import MeasuredCost
from unlearnbench.report.leaderboard import _md_escape, build_leaderboard, collect_runs
from unlearnbench.rundir import REBUILT_FILES, RunDirectory
from unlearnbench.runner import Runner

#: The files the loggers write (`csv_logs/`, `logger.json`): their readers tolerate anything and no table reads them.
LOGGER_FILES = ("csv_logs", "logger.json")


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _torch_list() -> bytes:
    buffer = io.BytesIO()
    torch.save([1, 2], buffer)
    return buffer.getvalue()


def _swap_logits(run_dir: Path) -> None:
    """Request 1's logits in request 2's place and back: each file reads, but holds another request's numbers."""
    one, two = run_dir / "logits" / "t001.npz", run_dir / "logits" / "t002.npz"
    first = one.read_bytes()
    one.write_bytes(two.read_bytes())
    two.write_bytes(first)


def _other_runs_logits(run_dir: Path) -> None:
    """Request 2's logits from another run (the same request, another seed's numbers)."""
    path = run_dir / "logits" / "t002.npz"
    with np.load(path) as saved:
        arrays = {name: saved[name] for name in saved.files}
    arrays["run"] = np.str_("0badc0de")
    path.write_bytes(_npz(**arrays))


def _cell(path: Path, old: str, new: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(old, new, 1) if old in lines[1] else new + lines[1][len(new) :]
    path.write_text("".join(lines))


#: Each file of a finished run (run with `--save-logits`) -> its damage of the wrong type or shape: a file that
#: reads as its format but is not what the run wrote.
WRONG = {
    "config.yaml": lambda d: (d / "config.yaml").write_text("- finetune\n- 2\n"),
    "manifest.json": lambda d: (d / "manifest.json").write_text('{"requests": 5}\n'),
    "labels.npz": lambda d: (d / "labels.npz").write_bytes(_npz(train=np.zeros((2, 2)), test=np.zeros(3))),
    "metrics.jsonl": lambda d: _cell(d / "metrics.jsonl", '"t": 2', '"t": "2"'),
    "history.csv": lambda d: _cell(d / "history.csv", ",", ",abc,"),
    "summary.json": lambda d: (d / "summary.json").write_text('{"requests_done": 1, "status": "complete"}\n'),
    "provenance.json": lambda d: (d / "provenance.json").write_text("[1, 2]\n"),
    "state/t002.pt": lambda d: (d / "state" / "t002.pt").write_bytes(_torch_list()),
    "logits/t001.npz": _swap_logits,
    "logits/t002.npz": _other_runs_logits,
    "updates.f32": lambda d: (d / "updates.f32").write_bytes((d / "updates.f32").read_bytes() + b"\0\0\0\0"),
    "updates.json": lambda d: (d / "updates.json").write_text('{"d": "x", "T": 2, "rows": [1, 2], "parameters": []}'),
    "geometry.csv": lambda d: _cell(d / "geometry.csv", ",", ",abc,"),
}
DAMAGE = {
    "missing": lambda path: path.unlink(),
    "empty": lambda path: path.write_bytes(b""),
    "garbage": lambda path: path.write_bytes(b"\x00\xff garbage \xfe\n" * 7),
}
CASES = [(name, kind) for name in WRONG for kind in (*DAMAGE, "wrong")]
#: What is not damage: a finished run's checkpoint is what a resume would start from, needed for no number, and
#: published run directories leave the weights out.
NOT_DAMAGE = {("state/t002.pt", "missing")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished T=2 run that saved its logits, and its store; each test damages its own copy."""
    base = tmp_path_factory.mktemp("finished")
    argv = [*UB, "--save-logits", "true", "--out", str(base / "out"), "--store", str(base / "store"), "--quiet", "true"]
    assert main(argv) == 0
    return _only_run_dir(base / "out"), base / "store"


def test_the_cases_cover_every_file_a_finished_run_holds(finished):
    held = {str(p.relative_to(finished[0])) for p in finished[0].rglob("*") if p.is_file() and p.name != ".lock"}
    held = {name for name in held if not name.startswith(LOGGER_FILES)}
    assert held == set(WRONG)


def _damage(run_dir: Path, name: str, kind: str) -> None:
    if kind == "wrong":
        WRONG[name](run_dir)
    else:
        DAMAGE[kind](run_dir / name)


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[f"{kind} {name}" for name, kind in CASES])
def test_one_damaged_file_is_one_damaged_run_and_the_rerun_repairs_or_refuses_it(
    finished, name, kind, tmp_path, capsys
):
    source, store = finished
    runs = tmp_path / "runs"
    sound, damaged = runs / "a" / source.name, runs / "b" / source.name
    shutil.copytree(source, sound)
    shutil.copytree(source, damaged)
    good = _snapshot(damaged)
    _damage(damaged, name, kind)

    statuses = {run.path: run.status_detail() for run in collect_runs(runs)}
    if (name, kind) in NOT_DAMAGE:
        assert sorted(statuses.values()) == ["complete", f"duplicate of {sound}: counted once"], statuses
        assert main([*UB, "--run-dir", str(damaged), "--store", str(store), "--quiet", "true"]) == 0
        return
    assert statuses == {sound: "complete", damaged: statuses[damaged]}, statuses
    assert statuses[damaged].startswith("damaged: "), statuses[damaged]
    file = "logits" if name.startswith("logits") else "state" if name.startswith("state") else name.split(".")[0]
    assert file in statuses[damaged] or (name.startswith("updates") and "updates" in statuses[damaged])
    board = build_leaderboard(runs, plots=False)  # the whole leaderboard is written: one row, the sound run in it
    ((entry,),) = [group.entries for group in board.groups]
    assert entry.n == 1 and _md_escape(statuses[damaged]) in board.files["md"].read_text()

    damaged_files = _snapshot(damaged)
    argv = [*UB, "--save-logits", "true", "--run-dir", str(damaged), "--out", str(tmp_path / "out")]
    argv += ["--store", str(store), "--quiet", "true"]
    capsys.readouterr()
    if name in REBUILT_FILES:
        assert main(argv) == 0
        repaired = _snapshot(damaged)
        if name == "labels.npz":  # an npz's zip entries carry the time they were written
            labels, expected = RunDirectory(damaged).labels(), RunDirectory(source).labels()
            assert np.array_equal(labels.train, expected.train) and np.array_equal(labels.test, expected.test)
            repaired.pop(name), good.pop(name)
        assert repaired == good
        assert [run.status for run in collect_runs(runs)] == ["complete", "duplicate"]
    else:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = _one_error_line(capsys)
        assert "Traceback" not in err and (file in err or "updates" in err) and str(damaged) in err, err
        assert _snapshot(damaged) == damaged_files


def test_each_row_records_what_its_request_cost_and_the_leaderboard_adds_them_up(tmp_path, shared_store):
    """A row's cost runs from the previous row (or the session's start) to its own: the rows of a run add up to
    the run's time as measured around it, every second of it bar the summary at the end, and the leaderboard's
    provenance states their sum and each run's CPU seconds."""
    runner = Runner.from_config(tiny_config(tmp_path / "out", shared_store, "finetune", requests=3))
    wall, cpu = time.perf_counter(), time.process_time()
    runner.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    costs = [row.cost for row in RunDirectory(runner.run_dir.path).rows()]
    assert len(costs) == 3 and all(cost["wall_s"] > 0 and cost["cpu_s"] > 0 for cost in costs)
    assert 0.5 * wall < sum(cost["wall_s"] for cost in costs) <= wall
    assert 0.5 * cpu < sum(cost["cpu_s"] for cost in costs) <= cpu
    board = build_leaderboard(tmp_path / "out", tmp_path / "board")
    measured = MeasuredCost.of(RunDirectory(runner.run_dir.path).rows())
    markdown = board.files["md"].read_text()
    assert f"Their finished requests cost {measured.describe()} (" in markdown
    assert f"| {measured.cpu_s:.0f} |" in markdown.split("## Provenance")[1]
