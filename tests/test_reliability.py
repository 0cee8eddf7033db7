"""Reliability: kills at any point, divergence, write failures, foreign run directories, parallel runs,
bad input and damaged files (one line, exit 2, nothing written or lost), signals, the run-directory lock,
the store's key binding, and what the leaderboard makes of damaged runs."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import FAST_RECIPE, measured_rows, tiny_config
from tests.crash_at import cli_killed_at, exit_code, fork_cli, pause_at
from unlearnbench import rundir as rundir_module
from unlearnbench import runner as runner_module
from unlearnbench.cli import main
from unlearnbench.config import ConfigError
from unlearnbench.divergence import DegenerateModelError
from unlearnbench.evaluation.keys import TIMING_KEYS
from unlearnbench.interrupt import Interrupted, interruptible
from unlearnbench.methods.base import WeightEdit
from unlearnbench.methods.finetune import FineTune
from unlearnbench.registry import METHODS
from unlearnbench.report.leaderboard import build_leaderboard, collect_runs
from unlearnbench.rundir import RunDirectory, RunDirectoryBusyError, UntrustedCheckpointError
from unlearnbench.runner import Runner
from unlearnbench.store import ModelSpec, ModelStore, TrainingDivergedError, sha256_bytes
from unlearnbench.training import ORACLE_REFITS

ROOT = Path(__file__).resolve().parent.parent


def _results(run_dir: Path) -> tuple[list[dict], dict]:
    rows = measured_rows(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in TIMING_KEYS:
        summary["final"].pop(key)
    return rows, summary


def _argv(out: Path, store: Path) -> list[str]:
    return [
        "run", "--method", "salun", "--requests", "2", "--salun.optim.epochs", "2", "--recipe", json.dumps(FAST_RECIPE),
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
    ("unlearnbench.runner.Runner.single_shot_fit", 1, "before", False),  # the single-shot counterfactual of request 2
    ("unlearnbench.rundir._append_line", 2, "after", False),  # row 2 appended, its history.csv line not
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
    if not fresh_store:  # its models, not its cached single-shot scores: the killed run serves those again
        shutil.copytree(reference_store, store, ignore=shutil.ignore_patterns("single_shot"))
    argv = _argv(tmp_path / "out", store)
    assert cli_killed_at(target, count, when, argv) == -signal.SIGKILL
    assert main(argv) == 0
    rows, summary = _results(_only_run_dir(tmp_path / "out"))
    assert rows == expected_rows
    assert summary == expected_summary
    assert len({row["t"] for row in rows}) == len(rows) == 2


def test_divergence_stops_the_run_and_is_recorded(tmp_path, shared_store, capsys):
    argv = [
        "run", "--method", "ga", "--requests", "3", "--ga.optim.lr", "1e12", "--ga.optim.epochs", "3", "--recipe",
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


def _register_overflowing_head(monkeypatch, overflow_on_call: int) -> None:
    """A weight edit (`overflow_head`) that, on its `overflow_on_call`-th request served, sets the last linear layer
    to the largest finite float32: every weight stays finite, the logits overflow to inf."""
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))
    calls = []

    @METHODS.register("overflow_head")
    class OverflowHead(WeightEdit):
        def __init__(self, batch_size: int = 64):
            super().__init__(batch_size=batch_size)

        def unlearn(self, fit) -> None:
            calls.append(None)
            if len(calls) == overflow_on_call:
                head = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear)][-1]
                with torch.no_grad():
                    head.weight.fill_(torch.finfo(torch.float32).max)
                    head.bias.fill_(torch.finfo(torch.float32).max)


def test_finite_weights_with_overflowing_logits_diverge_the_request_not_the_process(
    tmp_path, shared_store, monkeypatch
):
    """Found tuning GA on the memorizing tier: the weights stayed finite, the logits did not, and the attacks'
    classifier raised on them. Such a request diverged: recorded as such, the run stops there, no traceback."""
    _register_overflowing_head(monkeypatch, overflow_on_call=2)
    result = Runner.from_config(tiny_config(tmp_path, shared_store, "overflow_head", requests=3)).run()
    assert result.diverged and result.summary.diverged_at == 2
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["status"] for row in rows] == ["ok", "diverged"]


def test_a_method_that_finds_the_model_degenerate_diverges_the_request_not_the_process(
    tmp_path, shared_store, monkeypatch
):
    """A method that cannot serve a request on a degenerate model (SCAR's class correlations once every feature is
    constant: 0/0) raises `DegenerateModelError`: the request is recorded as diverged, not a failed cell with a
    traceback."""
    from unlearnbench.methods.mahalanobis import shrunk_precision

    with pytest.raises(DegenerateModelError, match="the model has collapsed"):
        shrunk_precision(torch.zeros(50, 8), gamma1=2.0, gamma2=2.0)  # every feature constant: 0/0 correlations
    prepare = FineTune.prepare
    served = []

    def degenerate_at_second(self, request, data):
        served.append(request.t)
        if len(served) == 2:
            raise DegenerateModelError("the features' covariance is not finite: the model has collapsed")
        prepare(self, request, data)

    monkeypatch.setattr(FineTune, "prepare", degenerate_at_second)
    result = Runner.from_config(tiny_config(tmp_path, shared_store, "finetune", requests=3)).run()
    assert result.diverged and result.summary.diverged_at == 2
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["status"] for row in rows] == ["ok", "diverged"]


def test_a_single_shot_counterfactual_with_overflowing_logits_is_recorded_diverged_without_a_gain(
    tmp_path, shared_store, monkeypatch
):
    """Calls 1 and 2 serve requests 1 and 2 continually; call 3 is request 2's single-shot counterfactual."""
    _register_overflowing_head(monkeypatch, overflow_on_call=3)
    result = Runner.from_config(tiny_config(tmp_path, shared_store, "overflow_head", single_shot_every=1)).run()
    assert not result.diverged
    row = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert row["single_shot"]["diverged"] is True and "forget_acc" not in row["single_shot"]
    assert row["method"]["forward_gain"] is None


def test_a_write_failure_is_one_clear_error_and_earlier_results_stay(tmp_path, shared_store, monkeypatch, capsys):
    argv = _argv(tmp_path, shared_store)
    real_append = rundir_module._append_line

    def failing_append(path, line):  # the disk fills up when request 2's row is appended
        if path.name == "metrics.jsonl" and path.exists():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(path, line)

    monkeypatch.setattr(rundir_module, "_append_line", failing_append)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "cannot write results" in err
    run_dir = _only_run_dir(tmp_path)
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["t"] == 1
    assert not list(run_dir.rglob("*.tmp")), "the failed write removed its temp file"
    monkeypatch.setattr(rundir_module, "_append_line", real_append)
    assert main(argv) == 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_full_disk_when_the_updates_file_is_made_is_one_line_exit_1_not_sigbus(tmp_path, monkeypatch, capsys):
    """updates.f32 is written through a memory map: a sparse file on a full disk would kill the run with SIGBUS
    (exit 135, no message). It is allocated whole when it is made, so the full disk is an OSError there."""

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    argv = [*UB, "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store"), "--quiet", "true"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write results" in err and "No space left on device" in err, err
    run_dir = _only_run_dir(tmp_path / "out")
    assert not (run_dir / "updates.f32").exists() and not (run_dir / "metrics.jsonl").exists()
    monkeypatch.undo()
    assert main(argv) == 0  # room again: the same command runs through


def test_a_run_directory_of_another_configuration_is_refused_before_writing(tmp_path, shared_store):
    run_dir = tmp_path / "mine"
    Runner.from_config(tiny_config(tmp_path, shared_store, "rl", run_dir=run_dir)).run()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"another configuration \(method: 'rl' there, 'finetune' now"):
        Runner.from_config(tiny_config(tmp_path, shared_store, "finetune", run_dir=run_dir))
    with pytest.raises(ConfigError, match="seed: 0 there, 1 now"):
        Runner.from_config(tiny_config(tmp_path, shared_store, "rl", run_dir=run_dir, seed=1))
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_tampered_checkpoint_is_refused_not_unpickled(tmp_path, shared_store):
    import pickle

    config = tiny_config(tmp_path, shared_store, "finetune", requests=2)
    runner = Runner.from_config(config)
    runner.run()
    _keep_first_row(runner.run_dir.path)  # the run as after request 1: it resumes from state/t001.pt
    (runner.run_dir.path / "state" / "t001.pt").write_bytes(pickle.dumps(Exception("would run")))
    with pytest.raises(UntrustedCheckpointError, match="not a weights-only checkpoint"):
        Runner.from_config(config).run()


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
        subprocess.Popen(
            [sys.executable, "-c", script, "run", "--method", method, f"--{method}.optim.epochs", "1", *common]
        )
        for method in ("finetune", "rl")
    ]
    assert [p.wait(timeout=600) for p in processes] == [0, 0]
    assert len(log.read_text().splitlines()) == 1 + 2, "one pretrained model and two oracles, each trained once"
    run_dirs = sorted(p for p in (tmp_path / "out").iterdir() if p.name != "store")
    oracles = [
        [json.loads(line)["oracle"] for line in (d / "metrics.jsonl").read_text().splitlines()] for d in run_dirs
    ]
    assert len(run_dirs) == 2 and oracles[0] == oracles[1]


# ------------------------------------------------------------------------------ bad input: one line, exit 2

NO_GPU = int(not (torch.cuda.is_available() or torch.backends.mps.is_available()))
#: `unlearnbench run` with the cheapest settings; every case below adds what makes it bad.
UB = ["run", "--method", "finetune", "--requests", "2", "--finetune.optim.epochs", "1", "--recipe", '{"epochs": 1}']

# (case, extra arguments, config file text or None, what the one line must say)
BAD_RUNS = [
    (
        "method epochs -1",
        ["--finetune.optim.epochs", "-1"],
        None,
        "method 'finetune' argument optim.epochs must be >= 1, got -1",
    ),
    ("method epochs 0", ["--finetune.optim.epochs", "0"], None, "argument optim.epochs must be >= 1, got 0"),
    ("recipe epochs -1", ["--recipe", '{"epochs": -1}'], None, "recipe key epochs must be >= 1, got -1"),
    (
        "method batch_size 0",
        ["--finetune.optim.batch_size", "0"],
        None,
        "argument optim.batch_size must be >= 1, got 0",
    ),
    ("recipe batch_size 0", ["--recipe", '{"batch_size": 0}'], None, "recipe key batch_size must be >= 1, got 0"),
    ("recipe epochs ten", ["--recipe", '{"epochs": "ten"}'], None, "recipe key epochs must be a whole number"),
    ("recipe lr nan", ["--recipe", '{"lr": .nan}'], None, "recipe key lr must be finite, got nan"),
    ("precision fp7", ["--precision", "fp7"], None, "unknown precision 'fp7'; choose one of: "),
    ("accelerator tpu9", ["--accelerator", "tpu9"], None, "unknown accelerator 'tpu9'; choose one of: auto, gpu"),
    ("devices 0", ["--devices", "0"], None, "devices must be a count >= 1, -1 (all), auto"),
    # Lightning alone raised this after the data was loaded, with a traceback (found on a GPU-less machine).
    *[("accelerator gpu, none here", ["--accelerator", "gpu"], None, "accelerator 'gpu' is not available")][:NO_GPU],
    ("strategy nonsense", ["--strategy", "nonsense"], None, "unknown strategy 'nonsense'; choose one of: auto, ddp"),
    ("num_nodes 0", ["--num_nodes", "0"], None, "num_nodes must be a whole number >= 1, got 0"),
    ("seed -1", ["--seed", "-1"], None, "seed must be a whole number >= 0, got -1"),
    ("size .inf", ["--size", ".inf"], None, "size must be a finite number > 0, got inf"),
    ("size 0", ["--stream", "random", "--size", "0"], None, "size must be a finite number > 0, got 0"),
    ("size 1e-9", ["--stream", "random", "--size", "1e-9"], None, "less than one sample per request; use size >= "),
    (
        "config lr .nan",
        ["--config", "c.yaml"],
        "finetune:\n  optim: {lr: .nan}\n",
        "argument optim.lr must be finite, got nan",
    ),
    ("config not YAML", ["--config", "c.yaml"], "method: [unclosed\n", "cannot read config c.yaml"),
    ("config run: 5", ["--config", "c.yaml"], "run: 5\n", "`run` in config c.yaml must be a mapping"),
    ("config guards: 5", ["--config", "c.yaml"], "guards: 5\n", "`guards` in config c.yaml must be a list of guard"),
    ("config a list", ["--config", "c.yaml"], "- finetune\n", "config c.yaml must be a YAML mapping"),
    ("config not UTF-8", ["--config", "c.yaml"], b"method: \xff\xfe\n", "cannot read config c.yaml"),
]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("unlearnbench: error: "), err
    return err


@pytest.mark.parametrize(("extra", "config", "message"), [c[1:] for c in BAD_RUNS], ids=[c[0] for c in BAD_RUNS])
def test_bad_run_input_is_one_line_exit_2_before_data_is_loaded(extra, config, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if config is not None:
        (tmp_path / "c.yaml").write_bytes(config if isinstance(config, bytes) else config.encode())

    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the input was checked")

    monkeypatch.setattr("unlearnbench.data.cache.DatasetCache.load", no_data)
    with pytest.raises(SystemExit) as exit_info:
        main([*UB, *extra, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in _one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["c.yaml"] if config is not None else [])


def test_leaderboard_out_that_is_a_file_is_refused_before_writing(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "file")])
    assert exit_info.value.code == 2
    assert "is not a directory" in _one_error_line(capsys)
    assert list((tmp_path / "runs").iterdir()) == [] and (tmp_path / "file").read_text() == "x"


BAD_SUITE_FILES = [
    ("leaderboard is a file", {"leaderboard": "FILE"}, "exists and is not a directory"),
    ("leaderboard is a number", {"leaderboard": 5}, "`leaderboard` must be a folder, or false for none, got 5"),
    ("seeds [-1]", {"seeds": [-1]}, "seed must be a whole number >= 0, got -1"),
    ("epochs -1", {"methods": [{"finetune": {"optim": {"epochs": -1}}}]}, "argument optim.epochs must be >= 1, got -1"),
    ("ssd epochs", {"methods": [{"ssd": {"epochs": 1}}]}, "method 'ssd' has no argument(s) epochs"),  # no gradient step
    ("recipe batch_size 0", {"common": {"recipe": {"epochs": 1, "batch_size": 0}}}, "batch_size must be >= 1"),
    ("precision fp7", {"common": {"precision": "fp7"}}, "unknown precision 'fp7'"),
]


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
@pytest.mark.parametrize(("changes", "message"), [c[1:] for c in BAD_SUITE_FILES], ids=[c[0] for c in BAD_SUITE_FILES])
def test_suite_and_its_check_refuse_what_run_refuses(changes, message, check, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("x")
    suite = {
        "out": "out",
        "methods": [{"finetune": {"optim": {"epochs": 1}}}],
        "common": {"requests": 2, "recipe": {"epochs": 1}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite | changes))
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", "s.yaml", *(["--check"] if check else [])])
    assert exit_info.value.code == 2
    assert message in _one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE", "s.yaml"]


def test_wandb_online_without_a_key_is_refused_at_once(tmp_path, monkeypatch, capsys):
    for name in ("WANDB_API_KEY", "NETRC", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("WANDB_MODE", "online")
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        main([*UB, "--logger", "wandb", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and time.perf_counter() - start < 30
    assert "needs a W&B key (WANDB_API_KEY or `wandb login`); unset WANDB_MODE to log offline" in _one_error_line(
        capsys
    )
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------- damaged files of a run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished T=2 run of the cheapest command and its store; each test damages its own copy."""
    base = tmp_path_factory.mktemp("finished")
    argv = [*UB, "--out", str(base / "out"), "--store", str(base / "store"), "--quiet", "true"]
    assert main(argv) == 0
    return _only_run_dir(base / "out"), base / "store"


def _copy(finished, tmp_path) -> tuple[Path, list[str]]:
    """A copy of the finished run, and the command that reruns that copy."""
    source, store = finished
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    return run_dir, [*UB, "--run-dir", str(run_dir), "--out", str(tmp_path), "--store", str(store), "--quiet", "true"]


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory but its lock (which names the last process that held it)."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"
    }


def _keep_first_row(run_dir: Path) -> None:
    """The run as it was after request 1 (so that a rerun resumes at request 2), whose checkpoint is state/t001.pt:
    one row, its history line, no summary or geometry table (written once the run is finished)."""
    for name in ("metrics.jsonl", "history.csv"):
        lines = (run_dir / name).read_text().splitlines(keepends=True)
        (run_dir / name).write_text("".join(lines[: 2 if name == "history.csv" else 1]))
    for name in ("summary.json", "geometry.csv"):
        (run_dir / name).unlink()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# (case, damage, what the one line must say)
DAMAGED = [
    (
        "torn metrics line",
        lambda d: (d / "metrics.jsonl").write_text(_half_second_line(d)),
        "line 2 is not a metrics row",
    ),
    ("repeated metrics line", lambda d: _repeat_first_row(d), "line 2 holds request 1 where request 2 belongs"),
    ("missing state/t001.pt", _keep_first_row, "state/t001.pt is missing, so the run cannot resume after request 1"),
    ("truncated updates.f32", lambda d: (_keep_first_row(d), _truncate(d / "updates.f32")), "updates.f32 holds"),
    ("deleted updates.f32", lambda d: (_keep_first_row(d), (d / "updates.f32").unlink()), "updates.f32 is missing"),
    ("deleted updates.json", lambda d: (_keep_first_row(d), (d / "updates.json").unlink()), "updates.json is missing"),
    ("config.yaml not YAML", lambda d: (d / "config.yaml").write_text("method: [x\n"), "config.yaml is not readable"),
]


def _half_second_line(run_dir: Path) -> str:
    first, second = (run_dir / "metrics.jsonl").read_text().splitlines()
    return f"{first}\n{second[: len(second) // 2]}\n"


def _repeat_first_row(run_dir: Path) -> None:
    first = (run_dir / "metrics.jsonl").read_text().splitlines()[0]
    (run_dir / "metrics.jsonl").write_text(f"{first}\n{first}\n")


@pytest.mark.parametrize(("damage", "message"), [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_run_file_is_named_with_its_fix_and_nothing_changes(finished, damage, message, tmp_path, capsys):
    run_dir, argv = _copy(finished, tmp_path)
    damage(run_dir)
    before = _snapshot(run_dir)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = _one_error_line(capsys)
    assert message in err and f"delete {run_dir}" in err, err
    assert _snapshot(run_dir) == before


def test_derived_files_are_rebuilt_from_metrics_when_they_disagree(finished, tmp_path):
    run_dir, argv = _copy(finished, tmp_path)
    good = _snapshot(run_dir)
    history = run_dir / "history.csv"
    history.write_text("".join(history.read_text().splitlines(keepends=True)[:2]))  # killed before the last row
    (run_dir / "summary.json").write_text('{"requests_done": 1, "sta')
    assert main(argv) == 0
    assert _snapshot(run_dir) == good


def test_a_finished_run_rerun_changes_no_file(finished, tmp_path):
    run_dir, argv = _copy(finished, tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


# ---------------------------------------------------------------------------------------------- the lock


def test_a_run_directory_held_by_a_process_is_refused_naming_it(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    busy = pytest.raises(RunDirectoryBusyError, match=f"run directory .* in use by pid {os.getpid()};")
    with run_dir.lock(), busy, run_dir.lock():  # a second open file description: flock refuses it, as for a process
        pass
    with run_dir.lock():  # released when the holder is done
        pass
    assert [p.name for p in run_dir.path.iterdir()] == [".lock"]
    run_dir.check({"method": "ga"})  # the lock alone does not make the folder someone else's


@pytest.mark.slow
def test_two_identical_commands_give_one_run_and_one_clean_refusal(tmp_path):
    argv = [*UB, "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store"), "--quiet", "true"]
    release = tmp_path / "release"  # the first command holds its run directory, paused in pretraining, until then
    first = fork_cli(argv, lambda: pause_at("unlearnbench.training.SupervisedClassifier.training_step", 1, release))
    try:
        while not list((tmp_path / "out").glob("*/.lock")):
            time.sleep(0.05)
        second = exit_code(fork_cli(argv, stderr=tmp_path / "second.err"))
    finally:
        release.touch()
        first_code = exit_code(first)
    assert second == 2, (tmp_path / "second.err").read_text()
    assert first_code == 0
    refusal = (tmp_path / "second.err").read_text()
    assert refusal.count("\n") == 1 and f"in use by pid {first};" in refusal, refusal
    rows = (_only_run_dir(tmp_path / "out") / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["t"] for row in rows] == [1, 2]


# ------------------------------------------------------------------------------------------------ signals


def test_a_signal_inside_interruptible_raises_interrupted_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info, interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.exit_code == 143 and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_run_stops_it_with_one_line_and_128_plus_the_signal(
    finished, signum, code, tmp_path, monkeypatch, capsys
):
    original = Runner.serve

    def serve(self, request):
        if request.t == 2:
            os.kill(os.getpid(), signum)
            time.sleep(5)
        return original(self, request)

    monkeypatch.setattr(Runner, "serve", serve)
    argv = [*UB, "--out", str(tmp_path / "out"), "--store", str(finished[1]), "--quiet", "true"]
    assert main(argv) == code
    assert capsys.readouterr().err == ("unlearnbench: interrupted at request 2; rerun the same command to resume\n")
    run_dir = _only_run_dir(tmp_path / "out")
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1 and not (run_dir / "summary.json").exists()


def test_a_signal_during_a_suite_never_exits_0(finished, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def serve(self, request):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(Runner, "serve", serve)
    suite = {
        "out": "out",
        "store": str(finished[1]),
        "methods": [{"finetune": {"optim": {"epochs": 1}}}, {"rl": {"optim": {"epochs": 1}}}],
        "common": {"requests": 2, "recipe": {"epochs": 1}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    assert main(["suite", "s.yaml", "--quiet", "true"]) == 143
    err = capsys.readouterr().err
    assert err == "unlearnbench: interrupted at cell 1/2, request 1; rerun the same command to resume\n", err
    assert not (tmp_path / "out" / "suite.json").exists() and not (tmp_path / "out" / "leaderboard").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_inside_a_lightning_fit_exits_128_plus_the_signal(signum, code, tmp_path):
    """Lightning answers SIGTERM by ending the fit early and returning: without our handler this exited 0."""
    argv = [*UB, "--recipe", '{"epochs": 30}', "--out", str(tmp_path / "out"), "--quiet", "true"]
    process = subprocess.Popen(
        [sys.executable, "-m", "unlearnbench.cli", *argv],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stderr=subprocess.PIPE,
        text=True,
    )
    while not list((tmp_path / "out").glob("*/config.yaml")):  # pretraining is under way
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.2)
    time.sleep(2)
    process.send_signal(signum)
    assert process.wait(timeout=120) == code
    assert process.stderr.read().splitlines() == [
        "unlearnbench: interrupted at request 1; rerun the same command to resume"
    ]
    assert not list((tmp_path / "out").glob("store/*.pt")), "the half-trained model was not stored"


# -------------------------------------------------------------------------------------------------- store


def _state(value: float = 1.0) -> dict[str, torch.Tensor]:
    return {"weight": torch.full((3,), value), "steps": torch.tensor(4)}


def test_another_entrys_files_copied_over_an_entry_are_not_taken_for_it(tmp_path):
    store = ModelStore(tmp_path)
    one, two = (ModelSpec("digits", "smallcnn", {"epochs": 1}, 0, excluded) for excluded in ((1,), (2,)))
    store.get_or_train(one, lambda: _state(1.0))
    store.get_or_train(two, lambda: _state(2.0))
    for suffix in (".pt", ".json"):  # oracle 1's files over oracle 2's: both hashes match their files
        shutil.copy(tmp_path / f"{one.key()}{suffix}", tmp_path / f"{two.key()}{suffix}")
    assert store.load(two) is None
    assert torch.equal(store.get_or_train(two, lambda: _state(2.0))["weight"], _state(2.0)["weight"])
    assert torch.equal(store.load(one)["weight"], _state(1.0)["weight"])


@pytest.mark.parametrize("metadata", [b"[]", b"\xff\xfe not utf-8", b'{"sha256": 5}', b"null"])
def test_damaged_store_metadata_is_retrained_not_a_traceback(tmp_path, metadata):
    store = ModelStore(tmp_path)
    spec = ModelSpec("digits", "smallcnn", {"epochs": 1}, 0)
    store.get_or_train(spec, _state)
    (tmp_path / f"{spec.key()}.json").write_bytes(metadata)
    assert store.load(spec) is None
    assert torch.equal(store.get_or_train(spec, _state)["weight"], _state()["weight"]) and store.trained == 2


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_model_is_never_stored(tmp_path, value):
    store = ModelStore(tmp_path)
    spec = ModelSpec("digits", "smallcnn", {"lr": 1e9}, 0)
    with pytest.raises(TrainingDivergedError, match=r"training the pretrained model of digits/smallcnn diverged"):
        store.get_or_train(spec, lambda: _state(value))
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".lock"]
    # A non-finite entry written by hand (or by an older version) is not loaded either.
    buffer = io.BytesIO()
    torch.save(_state(value), buffer)
    (tmp_path / f"{spec.key()}.pt").write_bytes(buffer.getvalue())
    (tmp_path / f"{spec.key()}.json").write_text(
        json.dumps({"key": spec.key(), "sha256": sha256_bytes(buffer.getvalue())})
    )
    assert store.load(spec) is None


def test_pretraining_that_diverges_is_one_line_exit_2(tmp_path, capsys):
    argv = [*UB, "--recipe", '{"epochs": 1, "lr": 1e12}', "--out", str(tmp_path / "out"), "--quiet", "true"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "diverged (non-finite weights)" in _one_error_line(capsys)
    assert not list((tmp_path / "out" / "store").glob("*.pt"))


def _diverging_below(monkeypatch, lr_that_trains: float) -> list[tuple[int, float]]:
    """`train_from_scratch` as the runner calls it, its weights made NaN where it leaves samples out at an lr above
    `lr_that_trains`; returns the (samples kept, lr) of every fit."""
    fits, real = [], runner_module.train_from_scratch

    def fit(dataset, arch, recipe, indices, *args, **kwargs):
        fits.append((len(indices), recipe.lr))
        model = real(dataset, arch, recipe, indices, *args, **kwargs)
        if recipe.lr > lr_that_trains and len(indices) < len(dataset.train):
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
        return model

    monkeypatch.setattr(runner_module, "train_from_scratch", fit)
    return fits


def test_an_oracle_fit_that_diverges_is_refitted_at_half_the_lr_with_one_warning(tmp_path, monkeypatch, caplog):
    runner = Runner.from_config(tiny_config(tmp_path / "runs", tmp_path / "store", "finetune", requests=1))
    lr = runner.recipe.lr
    runner.pretrained_model()
    fits = _diverging_below(monkeypatch, lr / 3)  # lr and lr/2 diverge, lr/4 trains
    oracle = runner.oracle(runner.stream.select(1), 0)
    assert [fit_lr for _, fit_lr in fits] == [lr, lr / 2, lr / 4]
    assert all(torch.isfinite(p).all() for p in oracle.parameters())
    warnings = [r.getMessage() for r in caplog.records if "diverged" in r.getMessage()]
    assert warnings == [
        f"oracle 1/1 (retraining) diverged at lr {lr:g}; refitting it from the same start at lr {lr / 2:g}",
        f"oracle 1/1 (retraining) diverged at lr {lr / 2:g}; refitting it from the same start at lr {lr / 4:g}",
    ]
    # the refitted oracle is the one stored: a second runner loads it without a fit
    fits.clear()
    again = Runner.from_config(tiny_config(tmp_path / "runs", tmp_path / "store", "finetune", requests=1))
    loaded = again.oracle(again.stream.select(1), 0)
    assert fits == [] and all(torch.equal(a, b) for a, b in zip(oracle.parameters(), loaded.parameters(), strict=True))


def test_an_oracle_that_diverges_at_every_refit_is_refused_by_the_store(tmp_path, monkeypatch):
    runner = Runner.from_config(tiny_config(tmp_path / "runs", tmp_path / "store", "finetune", requests=1))
    runner.pretrained_model()
    fits = _diverging_below(monkeypatch, 0.0)
    with pytest.raises(TrainingDivergedError, match=r"an oracle \(\d+ samples left out\)"):
        runner.oracle(runner.stream.select(1), 0)
    assert len(fits) == 1 + ORACLE_REFITS
    assert not list((tmp_path / "store").glob("*.pt"))[1:]  # the pretrained model alone


# ------------------------------------------------------------------------------------ leaderboard damage


def _edit_lr(run_dir: Path) -> None:
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["method_args"]["optim"]["lr"] = 0.5
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))


# (case, damage, the run's status in the leaderboard)
LEADERBOARD_DAMAGE = [
    ("repeated last row", lambda d: _append_last_row(d), "damaged: metrics.jsonl line 3 holds request 2"),
    ("torn middle row", lambda d: _tear_first_row(d), "damaged: metrics.jsonl line 1 is not a metrics row"),
    ("edited config.yaml", _edit_lr, "damaged: config.yaml does not match its folder"),
    ("missing manifest.json", lambda d: (d / "manifest.json").unlink(), "damaged: manifest.json is missing"),
]


def _append_last_row(run_dir: Path) -> None:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join([*lines, lines[-1]]) + "\n")


def _tear_first_row(run_dir: Path) -> None:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join([lines[0][:40], *lines[1:]]) + "\n")


@pytest.mark.parametrize(
    ("damage", "status"), [c[1:] for c in LEADERBOARD_DAMAGE], ids=[c[0] for c in LEADERBOARD_DAMAGE]
)
def test_a_damaged_run_is_listed_with_its_problem_and_not_averaged(finished, damage, status, tmp_path):
    sound = tmp_path / "runs" / "a" / finished[0].name
    shutil.copytree(finished[0], sound)
    damaged = tmp_path / "runs" / "b" / finished[0].name
    shutil.copytree(finished[0], damaged)
    damage(damaged)
    runs = {run.path: run for run in collect_runs(tmp_path / "runs")}
    assert runs[sound].status == "complete"
    assert runs[damaged].status_detail().startswith(status), runs[damaged].status_detail()
    board = build_leaderboard(tmp_path / "runs", plots=False)
    (entry,) = [e for g in board.groups for e in g.entries if e.runs[0].identity.method_args["optim"]["lr"] != 0.5]
    assert entry.n == 1  # the sound run is published, the damaged one is not averaged in
    assert "damaged" in board.files["md"].read_text()


def test_unreadable_symlinked_and_escaped_runs(finished, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(finished[0], tmp_path / "elsewhere" / finished[0].name)
    runs.mkdir()
    (runs / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (runs / "broken").mkdir()
    (runs / "broken" / "config.yaml").write_bytes(b"\xff\xfe")
    odd = runs / "odd"
    shutil.copytree(finished[0], odd)  # a --run-dir name: no hash to compare
    config = yaml.safe_load((odd / "config.yaml").read_text())
    (odd / "config.yaml").write_text(yaml.safe_dump(config | {"dataset": "<b>digits</b>\n| x"}))
    (runs / "loop").symlink_to(runs, target_is_directory=True)  # a loop: every folder visited once
    assert main(["leaderboard", str(runs), "--plots", "false"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("3 run(s) in 2 table(s)")
        and "not published: broken: damaged: config.yaml is not readable" in out
    )
    markdown = (runs / "leaderboard" / "leaderboard.md").read_text()
    assert "<b>" not in markdown and "&lt;b&gt;digits&lt;/b&gt; \\| x" in markdown
    assert f"| {finished[0].name} |" in markdown and "| broken |" in markdown


def _entries(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.suffix == ".pt")


@pytest.mark.parametrize("damage", ["wrong shapes", "a folder"])
def test_a_store_entry_of_other_shapes_or_a_folder_is_retrained_with_one_warning(
    finished, damage, tmp_path, capsys, caplog
):
    """An entry with the right metadata and sha256 but tensors of another shape (an arch changed under one name), or
    a folder in an entry's place, is retrained by the rerun with one warning line, never a traceback or exit 1."""
    store = tmp_path / "store"
    shutil.copytree(finished[1], store)
    pretrained = _entries(store)[0]  # any of the run's models: each is retrained where it is unusable
    if damage == "wrong shapes":
        state = {
            name: torch.zeros(2, *tensor.shape) for name, tensor in torch.load(pretrained, weights_only=True).items()
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        pretrained.write_bytes(buffer.getvalue())
        meta = pretrained.with_suffix(".json")
        meta.write_text(json.dumps(json.loads(meta.read_text()) | {"sha256": sha256_bytes(buffer.getvalue())}))
    else:
        pretrained.unlink()
        pretrained.mkdir()
        (pretrained / "x").write_text("")
    argv = [*UB, "--out", str(tmp_path / "out"), "--store", str(store), "--quiet", "true"]
    capsys.readouterr()
    assert main(argv) == 0
    warned = [r.getMessage() for r in caplog.records if r.name == "unlearnbench.store" and r.levelname == "WARNING"]
    assert (
        len(warned) == 1
        and warned[0].startswith(f"model store entry {pretrained} is unusable: ")
        and "\n" not in (warned[0])
    )
    # --quiet prints nothing on stdout; the problem worked around is one line on stderr, as the errors are
    assert capsys.readouterr() == ("", f"unlearnbench: warning: {warned[0]}\n")
    assert pretrained.is_file() and torch.load(pretrained, weights_only=True).keys() == state_keys(finished[1])
    caplog.clear()
    assert main(argv) == 0 and not caplog.records  # retrained once, for good
    assert capsys.readouterr() == ("", "")


def state_keys(store: Path):
    return torch.load(_entries(store)[0], weights_only=True).keys()
