"""SIGINT/SIGTERM delivered on purpose into the awkward places of `run`, `suite` and `tune` (`tests/signal_at.py`):
inside a weakref callback or a `__del__` (where Python drops the handler's exception), from Optuna's heartbeat
thread, inside Optuna's heartbeat join and Lightning's teardown, and a second signal during the first one's
clean-up. Each time: exactly one line on stderr, exit 128 + the first signal, and the same command resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST_RECIPE
from unlearnbench.cli import main
from unlearnbench.interrupt import Interrupted, interruptible, raise_if_interrupted

ROOT = Path(__file__).resolve().parent.parent
ONE_LINE = "unlearnbench: interrupted"
FIT_STEP = "unlearnbench.methods.base.UnlearningMethod.training_step"
TEARDOWN = "lightning.pytorch.trainer.trainer.Trainer._teardown"


def _run_argv(out: Path, store: Path) -> list[str]:
    return [
        "run", "--method", "finetune", "--requests", "2", "--finetune.optim.epochs", "1", "--recipe",
        json.dumps(FAST_RECIPE), "--out", str(out), "--store", str(store), "--quiet", "true",
    ]  # fmt: skip


def _tune_argv(out: Path) -> list[str]:
    return [
        "tune", "--method", "finetune", "--requests", "2", "--trials", "2", "--tune-seeds", "100",
        "--recipe", '{"epochs": 1, "batch_size": 128, "lr": 0.1}', "--out", str(out), "--heartbeat", "1",
        "--accelerator", "cpu", "--quiet",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The pretrained model and oracles of `_run_argv`, so that each signalled process reaches its fit in seconds."""
    base = tmp_path_factory.mktemp("signals")
    assert main(_run_argv(base / "out", base / "store")) == 0
    return base / "store"


def _signalled(points: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "signal_at.py"), *points, "--", *argv],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip


def _assert_one_line(result: subprocess.CompletedProcess, code: int) -> None:
    assert (result.returncode, result.stderr.count("\n")) == (code, 1), result.stderr[-3000:]
    assert result.stderr.startswith(ONE_LINE) and "rerun the same command to resume" in result.stderr


# (command, signal points, exit code): each point is TARGET:N:HOW:SIGNAL (tests/signal_at.py)
RUN_POINTS = [
    ("weakref-in-fit", [f"{FIT_STEP}:1:weakref:SIGTERM"], 143),
    ("del-in-evaluation", ["unlearnbench.runner.compute_logits:1:del:SIGINT"], 130),
    ("lightning-teardown", [f"{TEARDOWN}:1:call:SIGTERM"], 143),
    ("second-signal-in-teardown", [f"{FIT_STEP}:1:call:SIGINT", f"{TEARDOWN}:1:call:SIGTERM"], 130),
    ("weakref-in-teardown", [f"{TEARDOWN}:1:weakref:SIGINT"], 130),
]


@pytest.mark.slow
@pytest.mark.parametrize(("points", "code"), [p[1:] for p in RUN_POINTS], ids=[p[0] for p in RUN_POINTS])
def test_a_signal_anywhere_in_a_run_is_one_line_and_the_same_command_resumes(store, points, code, tmp_path):
    argv = _run_argv(tmp_path / "out", store)
    _assert_one_line(_signalled(points, argv, tmp_path), code)
    assert main(argv) == 0
    (run_dir,) = (tmp_path / "out").iterdir()
    assert [json.loads(row)["t"] for row in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.slow
def test_a_signal_in_a_weakref_callback_of_a_suite_cell_is_one_line(store, tmp_path):
    suite = {
        "out": "out",
        "store": str(store),
        "methods": [{"finetune": {"optim": {"epochs": 1}}}],
        "common": {"requests": 2, "recipe": FAST_RECIPE},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    result = _signalled([f"{FIT_STEP}:1:weakref:SIGTERM"], ["suite", "s.yaml", "--quiet", "true"], tmp_path)
    _assert_one_line(result, 143)
    assert "at cell 1/1" in result.stderr
    assert not (tmp_path / "out" / "suite.json").exists()


TUNE_POINTS = [
    # the heartbeat thread sends it: the main thread's handler runs wherever the trial is
    ("from-the-heartbeat-thread", ["optuna.storages._rdb.storage.RDBStorage.record_heartbeat:2:call:SIGTERM"], 143),
    # before the heartbeat's stop event is set: its non-daemon thread runs on, and the interpreter's exit waited for it
    ("in-the-heartbeat-join", ["optuna.storages._heartbeat.HeartbeatThread.join:1:call:SIGINT"], 130),
    ("weakref-in-a-trial", ["unlearnbench.tune.check_budget:1:weakref:SIGTERM"], 143),
    # SQLAlchemy's pool catches it while it resets a connection and logs it, with its traceback, before re-raising it
    ("in-a-connection-reset", ["sqlalchemy.pool.base._ConnectionFairy._reset:3:call:SIGTERM"], 143),
]


@pytest.mark.slow
@pytest.mark.parametrize(("points", "code"), [p[1:] for p in TUNE_POINTS], ids=[p[0] for p in TUNE_POINTS])
def test_a_signal_anywhere_in_tune_is_one_line(points, code, tmp_path):
    out = tmp_path / "tuned"
    _assert_one_line(_signalled(points, _tune_argv(out), tmp_path), code)
    assert not list(out.glob("*.yaml")), "a tuned file was written by an interrupted study"


# --------------------------------------------------------------------------- the module itself, in this process


class _Referent:
    pass


def _signal_in_a_weakref_callback(signum) -> None:
    import signal

    referent = _Referent()
    reference = weakref.ref(referent, lambda _: signal.raise_signal(signum))
    del referent
    assert reference() is None


def test_a_signal_dropped_in_a_weakref_callback_prints_nothing_and_the_next_safe_point_raises(monkeypatch):
    import signal

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    went_on = []
    with pytest.raises(Interrupted) as info, interruptible():
        _signal_in_a_weakref_callback(signal.SIGTERM)
        went_on.append(True)  # Python dropped the exception: the block went on to here
        raise_if_interrupted()
        went_on.append(False)
    assert went_on == [True] and info.value.exit_code == 143
    assert unraisable == [] and sys.unraisablehook == unraisable.append  # nothing printed; the hook came back


def test_other_unraisable_exceptions_still_reach_the_previous_hook(monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    class Failing:
        def __del__(self):
            raise ValueError("a real bug in a __del__")

    with interruptible():
        Failing()
    assert [type(u.exc_value) for u in unraisable] == [ValueError]


def test_only_the_first_signal_raises_so_clean_up_is_not_cut_short():
    import signal

    cleaned = []
    with pytest.raises(Interrupted) as info, interruptible():
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            signal.raise_signal(signal.SIGTERM)  # a second signal while the first is on its way up
            cleaned.append(True)
    assert cleaned == [True] and info.value.exit_code == 130


def test_an_exception_a_library_puts_in_place_of_the_signal_is_the_signal():
    """Lightning raises its own `SIGTERMException` (a SystemExit, code None: exit 0) at the next batch after
    a SIGTERM whose exception was dropped; whatever leaves the block after a signal exits 128 + the signal."""
    import signal

    with pytest.raises(Interrupted) as info, interruptible():
        _signal_in_a_weakref_callback(signal.SIGTERM)
        raise SystemExit
    assert info.value.exit_code == 143


def test_a_library_that_logs_the_signal_it_caught_prints_no_traceback_and_its_other_errors_as_ever(capfd):
    """SQLAlchemy's pool logs the exception that cut a connection's reset short ("Exception during reset or similar",
    the traceback) before raising it again; within the block that record is dropped where a record with no
    handler of its own is printed (`logging.lastResort`). Its other records, and that one after the block, print."""
    import logging
    import signal

    pool = logging.getLogger("a_library.pool")
    pool.propagate = False  # no handler on the way: `logging.lastResort` prints it, as it does in a run

    def reset_cut_short() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
        except BaseException:
            pool.error("Exception during reset or similar", exc_info=True)
            raise

    with pytest.raises(Interrupted), interruptible():
        pool.error("an error of its own")
        reset_cut_short()
    assert capfd.readouterr().err == "an error of its own\n"
    try:
        raise Interrupted(signal.SIGTERM)
    except Interrupted:
        pool.error("outside a block", exc_info=True)
    assert capfd.readouterr().err.startswith("outside a block\nTraceback")


def test_another_threads_exception_after_a_signal_is_not_printed_and_before_one_it_is(monkeypatch):
    """After SIGINT cut a SQLite transaction short in the main thread, Optuna's heartbeat thread found the database
    locked and its traceback was printed before the one line (tests/test_tune.py, SIGINT)."""
    import signal
    import threading

    printed = []
    monkeypatch.setattr(threading, "excepthook", printed.append)

    def fail() -> None:
        raise RuntimeError("database is locked")

    with interruptible():
        worker = threading.Thread(target=fail)
        worker.start()
        worker.join()
    assert [type(f.exc_value) for f in printed] == [RuntimeError]  # no signal: printed as ever
    with pytest.raises(Interrupted), interruptible():
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            worker = threading.Thread(target=fail)
            worker.start()
            worker.join()
    assert len(printed) == 1 and threading.excepthook == printed.append
