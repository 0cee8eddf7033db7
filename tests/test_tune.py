"""`unlearnbench tune`: search spaces, the validation stream, the study's storage, tuned runs."""

from __future__ import annotations

import contextlib
import math
import signal
import sqlite3
import subprocess
import sys
import time
import typing
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState

from tests.conftest import FAST_RECIPE, RunnerLifetimes, run_tiny, without_automatic_collection
from unlearnbench.cli import main
from unlearnbench.config import RunConfig
from unlearnbench.data.base import ImageSplit
from unlearnbench.data.cache import DatasetCache
from unlearnbench.data.validation import VALIDATION_FRACTION, validation_indices, validation_view
from unlearnbench.errors import ConfigError
from unlearnbench.grid import load_suite
from unlearnbench.hparams import hparams_path, load_tuned
from unlearnbench.methods.base import group_settings, method_arguments
from unlearnbench.ranges import groups, nested, parameters, paths
from unlearnbench.records import RequestRecord, legacy_method_args
from unlearnbench.registry import METHODS
from unlearnbench.report.leaderboard import build_leaderboard
from unlearnbench.rundir import RunDirectory, RunDirectoryMismatchError
from unlearnbench.runner import Runner
from unlearnbench.search_space import GRADIENT_SPACE, Categorical, Float, Int, space
from unlearnbench.tune import (
    WORST_GAP,
    TuneSpec,
    fail_unstarted_trials,
    make_objective,
    objective_values,
    open_study,
    redacted,
    suite_specs,
)

ROOT = Path(__file__).resolve().parent.parent
#: Arguments that span decades: their ranges must be sampled on a log scale.
LOG_SCALED = ("optim.lr", "optim.weight_decay")


def _accepts(annotation, distribution) -> bool:
    """The record's type fits the argument's annotation (float <- Float, int <- Int, bool/Literal <- Categorical)."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing))  # postponed annotations of `from __future__ import annotations`
    if isinstance(distribution, Categorical):
        if annotation is bool:
            return set(distribution.choices) <= {False, True}
        return typing.get_origin(annotation) is typing.Literal and set(distribution.choices) <= set(
            typing.get_args(annotation)
        )
    return annotation is (float if isinstance(distribution, Float) else int)


def check_search_space(method: str, cls) -> None:
    assert cls.search_space, f"method {method!r} declares no search_space (see unlearnbench/search_space.py)"
    named = parameters(cls)  # search spaces name a group's fields by path (optim.lr)
    for name, distribution in cls.search_space.items():
        assert name in named, f"{method}: {name} is not an argument of the method"
        assert isinstance(distribution, Float | Int | Categorical)
        assert _accepts(named[name].annotation, distribution), (method, name, named[name].annotation)
        assert distribution.contains(named[name].default), f"{method}: default {name} outside its range"
        if name in LOG_SCALED:
            assert distribution.log, f"{method}: {name} spans decades and must be log-scaled"


@pytest.mark.parametrize("method", METHODS.names())
def test_every_method_declares_a_typed_search_space_around_its_defaults(method):
    check_search_space(method, METHODS.get(method))


@pytest.mark.parametrize("method", METHODS.names())
def test_every_point_of_a_search_space_builds_the_method(method):
    cls = METHODS.get(method)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        values = {name: d.suggest(trial, name) for name, d in cls.search_space.items()}
        built = cls(**method_arguments(cls, nested(values)))
        for name, value in values.items():
            assert paths(built.hparams, groups(cls))[name] == value
            assert cls.search_space[name].contains(value)
        study.tell(trial, 0.0)


def test_a_method_without_a_space_fails_the_registry_test():
    class Bare(METHODS.get("finetune")):
        search_space = None

    with pytest.raises(AssertionError, match="declares no search_space"):
        check_search_space("bare", Bare)

    class Linear(METHODS.get("finetune")):
        search_space = space(GRADIENT_SPACE, optim={"lr": Float(1e-4, 1e-1)})

    with pytest.raises(AssertionError, match="log-scaled"):
        check_search_space("linear", Linear)


def test_epoch_cap_lowers_only_the_upper_end():
    assert Int(1, 10).capped(6) == Int(1, 6)
    assert Int(3, 10).capped(2) == Int(2, 2)
    assert Int(1, 4).capped(6) == Int(1, 4)


# ------------------------------------------------------------------------------------ the study and its runs


# A tuning command small enough for a test: one tuning stream of 2 requests, 1-epoch pretraining and oracles.
def tune_argv(out: Path, trials: int, *extra: str) -> list[str]:
    return [
        "tune", "--method", "finetune", "--requests", "2", "--trials", str(trials), "--tune-seeds", "100",
        "--recipe", '{"epochs": 1, "batch_size": 128, "lr": 0.1}', "--out", str(out), "--heartbeat", "1",
        "--accelerator", "cpu", "--quiet", *extra,
    ]  # fmt: skip


def study_trials(out: Path) -> list:
    summaries = optuna.get_all_study_summaries(f"sqlite:///{out / 'studies.db'}")
    if not summaries:  # the database exists a moment before its study does
        return []
    (summary,) = summaries
    return optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{out / 'studies.db'}").trials


def trial_states(out: Path) -> list[str]:
    """The study's trial states, read without Optuna: a worker may be creating the database's tables right now,
    and Optuna opening it alongside (it migrates the schema on open) can make that worker fail."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{out / 'studies.db'}?mode=ro", uri=True)) as db:
            return [state for (state,) in db.execute("SELECT state FROM trials")]
    except sqlite3.OperationalError:  # no file, or no table yet
        return []


def finished(trials: list) -> list:
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]


def cli_process(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "unlearnbench.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_a_killed_tune_resumes_its_study_with_the_same_command(tmp_path):
    """SIGKILLed at the start of its second trial's first request (`tests/crash_at.py`: the third `Runner.serve` of
    the process, each trial serving two), once that trial has drawn its values: deterministically, where polling the
    database for the moment missed it on a quiet machine, whose digits trials end within a second."""
    out = tmp_path / "tuned"
    argv = tune_argv(out, 3)
    crash = [
        sys.executable,
        str(Path(__file__).parent / "crash_at.py"),
        "unlearnbench.runner.Runner.serve",
        "3",
        "before",
    ]
    worker = subprocess.run([*crash, "--", *argv], capture_output=True, text=True)
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    killed = [t for t in study_trials(out) if t.state == TrialState.RUNNING]
    assert len(killed) == 1

    resumed = subprocess.run([sys.executable, "-m", "unlearnbench.cli", *argv], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "" and resumed.stderr == ""  # --quiet
    trials = study_trials(out)  # one study: the same command found it again
    assert len(finished(trials)) == 3
    (stale,) = [t for t in trials if t.number == killed[0].number]
    assert stale.state == TrialState.FAIL  # failed once its heartbeat went stale, then retried with its values
    assert any(t.params == stale.params and t.number > stale.number for t in finished(trials))
    tuned = yaml.safe_load((out / "digits-smallcnn-classwise-finetune.yaml").read_text())
    assert tuned["provenance"]["trials"] == 3 and tuned["provenance"]["complete"] + tuned["provenance"]["pruned"] == 3
    assert tuned["provenance"]["budget"] == {"trials": 3, "epochs_cap": 1, "recipe_epochs": 1, "epoch_fraction": 0.2}
    assert tuned["hparams"]["optim"]["epochs"] == 1  # capped at ceil(20%) of the 1-epoch recipe, written nested
    assert set(tuned["hparams"]) == {"optim"} and set(tuned["hparams"]["optim"]) == {"lr", "epochs", "weight_decay"}
    # a tuned file is published: its default database is named beside it, never by this machine's path
    assert tuned["provenance"]["storage"] == "studies.db" and str(tmp_path) not in yaml.safe_dump(tuned)


@pytest.mark.slow
# (SIGINT once left the process waiting for ever on Optuna's heartbeat thread: tests/test_signals.py, in-the-heartbeat-join)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_trial_stops_tune_with_one_line_and_128_plus_the_signal(signum, code, tmp_path):
    out = tmp_path / "tuned"
    worker = cli_process(tune_argv(out, 3))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if "RUNNING" in trial_states(out):
            break
        time.sleep(0.2)
    worker.send_signal(signum)
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == code, err
    assert err.count("\n") == 1 and err.startswith("unlearnbench: interrupted"), err
    assert "rerun the same command to resume" in err
    assert not list(out.glob("*.yaml")), "a tuned file was written by an interrupted study"


@pytest.mark.slow
def test_two_workers_on_one_sqlite_study_run_distinct_trials_and_the_exact_budget(tmp_path):
    out = tmp_path / "tuned"
    workers = [cli_process(tune_argv(out, 4)) for _ in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=1800)
        assert worker.returncode == 0, err
    trials = study_trials(out)
    evaluated = finished(trials)
    assert len(evaluated) == 4  # the budget, not 4 per worker
    assert len({t.number for t in evaluated}) == 4
    workers_seen = {t.user_attrs["worker"] for t in evaluated}
    assert len(workers_seen) == 2, workers_seen  # both worked, each on its own trials
    refused = [t for t in trials if t.user_attrs.get("over_budget")]
    assert all(t.state == TrialState.FAIL for t in refused)


# ------------------------------------------------------------------------ what the objective may read


class PoisonedTest(DatasetCache):
    """Datasets whose test split is garbage: shuffled labels and noise images."""

    def load(self, *args, **kwargs):
        dataset = super().load(*args, **kwargs)
        generator = torch.Generator().manual_seed(0)
        labels = dataset.test.labels[torch.randperm(len(dataset.test), generator=generator)]
        images = torch.randint(0, 256, dataset.test.images.shape, generator=generator, dtype=torch.uint8)
        return replace(dataset, test=ImageSplit(images, labels))


def small_spec(out: Path, store: Path, **overrides) -> TuneSpec:
    values = {"requests": 2, "trials": 1, "tune_seeds": (100,), "recipe": dict(FAST_RECIPE), "out": out, "store": store}
    return TuneSpec.from_options({"method": "finetune", "accelerator": "cpu", **values, **overrides})


def evaluate_once(spec: TuneSpec, datasets: DatasetCache, params: dict) -> float:
    study = optuna.create_study()
    study.enqueue_trial(params)
    return make_objective(spec, datasets)(study.ask())


def test_the_objective_never_reads_the_test_split(tmp_path, shared_store):
    params = {"optim.lr": 0.02, "optim.epochs": 1, "optim.weight_decay": 5e-4}
    clean = evaluate_once(small_spec(tmp_path / "a", shared_store), DatasetCache(), params)
    poisoned = evaluate_once(small_spec(tmp_path / "b", shared_store), PoisonedTest(), params)
    assert math.isfinite(clean) and clean > 0
    assert poisoned == clean


def test_a_finished_trials_runner_and_method_are_freed_before_the_next_trial_starts(
    tmp_path, shared_store, monkeypatch
):
    """A study's memory does not grow with its trials: each trial's runner and method (reference cycles with the
    model it fitted and its Trainers; 52 MB a trial of the memorizing tier, 4 trials against 16) are gone when the
    next trial starts, not left to a rare full collection."""
    from unlearnbench.console import Reporter
    from unlearnbench.tune import tune

    lifetimes = RunnerLifetimes()
    monkeypatch.setattr(Runner, "run", lifetimes.watched(Runner.run))
    with without_automatic_collection():
        tune(small_spec(tmp_path, shared_store, trials=3), Reporter(quiet=True))
    assert lifetimes.alive_at_start == [0, 0, 0]


def test_the_validation_view_holds_out_part_of_train_and_no_test_sample(digits):
    view = validation_view(digits)
    held = validation_indices(digits.train.labels.numpy())
    assert len(view.train) + len(view.test) == len(digits.train)
    assert torch.equal(view.test.labels, digits.train.labels[torch.as_tensor(held)])
    assert torch.equal(view.test.images, digits.train.images[torch.as_tensor(held)])
    counts = np.bincount(view.test.labels.numpy(), minlength=10) / np.bincount(digits.train.labels.numpy())
    assert np.allclose(counts, VALIDATION_FRACTION, atol=0.02)  # stratified: every class keeps 20% aside


def test_objective_values_mean_final_diverged_and_two_sides():
    oracle = {"forget_acc": 0.0, "retain_acc": 100.0, "test_acc": 90.0, "mia_member_rate": 0.0}
    rows = [
        RequestRecord(1, "ok", None, {**oracle, "forget_acc": 40.0}, oracle, None),
        RequestRecord(2, "ok", None, {**oracle, "retain_acc": 80.0}, oracle, None),
    ]
    assert objective_values([rows], "mean_gap", multi=False) == pytest.approx((10.0 + 5.0) / 2)
    assert objective_values([rows], "final_gap", multi=False) == pytest.approx(5.0)
    assert objective_values([rows, rows[:1]], "final_gap", multi=False) == pytest.approx((5.0 + 10.0) / 2)
    forget_side, utility_side = objective_values([rows], "mean_gap", multi=True)
    assert forget_side == pytest.approx((20.0 + 0.0) / 2) and utility_side == pytest.approx((0.0 + 10.0) / 2)
    diverged = [rows[0], RequestRecord(2, "diverged", None, {}, None, None)]
    assert objective_values([diverged], "final_gap", multi=False) == WORST_GAP


# ----------------------------------------------------------------------------- tuned runs and reports


def write_tuned(folder: Path, hparams: dict, method: str = "finetune") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = hparams_path(folder, "digits", "smallcnn", "classwise", method)
    provenance = {"study": "s-1", "objective": "mean_gap", "sampler": "tpe", "trials": 3, "best_value": 1.5}
    path.write_text(
        yaml.safe_dump({"method": method, "hparams": hparams, "provenance": provenance | {"tune_seeds": [100]}})
    )
    return folder


def finetune_config(out: Path, store: Path, method_args: dict, hparams: Path | None = None) -> RunConfig:
    return RunConfig.from_options(
        method="finetune",
        requests=2,
        recipe=dict(FAST_RECIPE),
        out=out,
        store=store,
        method_args=method_args,
        hparams=hparams,
    )


def test_hparams_loading_marks_the_identity_and_explicit_values_win(tmp_path, shared_store):
    folder = write_tuned(tmp_path / "tuned", {"optim": {"lr": 0.037, "epochs": 1}})
    tuned = Runner.from_config(finetune_config(tmp_path, shared_store, {}, folder))
    assert tuned.method.optim.lr == 0.037 and tuned.method.optim.epochs == 1
    assert tuned.identity.tuned == {
        "study": "s-1", "objective": "mean_gap", "sampler": "tpe", "trials": 3, "best_value": 1.5, "tune_seeds": [100]
    }  # fmt: skip
    assert "-tuned-" in tuned.run_dir.path.name
    explicit = Runner.from_config(finetune_config(tmp_path, shared_store, {"optim": {"lr": 0.5}}, folder))
    assert explicit.method.optim.lr == 0.5 and explicit.method.optim.epochs == 1
    default = Runner.from_config(finetune_config(tmp_path, shared_store, {}))
    assert "tuned" not in default.identity.to_json() and default.run_dir.path != tuned.run_dir.path


#: The repository's published tuned files.
TUNED = Path(__file__).parents[1] / "tuned"


def test_a_tuned_file_written_flat_loads_to_the_arguments_of_its_nested_twin(tmp_path):
    """A file `unlearnbench tune` wrote before the SGD settings were a group (`lr:` beside `ratio:`) still loads, to
    the method arguments its nested twin gives; a method's own argument of a setting's name (LOFT's lr) stays put."""
    flat = {"lr": 0.037, "epochs": 1, "weight_decay": 1e-3, "ratio": 0.4}
    nested = {"optim": {"lr": 0.037, "epochs": 1, "weight_decay": 1e-3}, "ratio": 0.4}
    old, new = write_tuned(tmp_path / "old", flat, "salun"), write_tuned(tmp_path / "new", nested, "salun")
    loaded = [load_tuned(folder, "digits", "smallcnn", "classwise", "salun")["hparams"] for folder in (old, new)]
    assert loaded[0] == loaded[1] == nested
    salun = METHODS.get("salun")
    assert method_arguments(salun, loaded[0]) == method_arguments(salun, nested)
    loft = write_tuned(tmp_path / "loft", {"lr": 0.5, "steps": 3}, "loft")
    assert load_tuned(loft, "digits", "smallcnn", "classwise", "loft")["hparams"] == {"lr": 0.5, "steps": 3}


def test_planning_a_run_reads_its_tuned_file_once(tmp_path, monkeypatch):
    """Validation, ranges, identity and the method's arguments all ask for the tuned values; the frozen config
    reads the file once, so every part of the plan uses the same values."""
    import unlearnbench.hparams
    from unlearnbench.plan import plan_run

    folder = write_tuned(tmp_path / "tuned", {"optim": {"lr": 0.037}, "ratio": 0.4}, "salun")
    reads = []
    monkeypatch.setattr(unlearnbench.hparams, "load_tuned", lambda *args: reads.append(args) or load_tuned(*args))
    plan = plan_run(RunConfig.from_options(method="salun", hparams=folder, out=tmp_path / "out"), require_recipe=False)
    assert len(reads) == 1 and plan.method.hparams["ratio"] == 0.4


@pytest.mark.parametrize("path", sorted(TUNED.glob("*/*.yaml")), ids=lambda path: path.name)
def test_each_published_tuned_file_is_nested_and_loads_to_what_its_flat_spelling_gave(path):
    """The repository's tuned files are written nested (`benchmarks/rekey_tuned.py` moved them once), and each gives
    the method the arguments its flat spelling of before gave it."""
    data = yaml.safe_load(path.read_text())
    cls = METHODS.get(data["method"])
    hparams = data["hparams"]
    assert not set(hparams) & {"lr", "epochs", "batch_size", "momentum", "weight_decay"} or "optim" not in groups(cls)
    flat = {k: v for name, value in hparams.items() for k, v in (value.items() if name == "optim" else [(name, value)])}
    assert method_arguments(cls, legacy_method_args(flat, group_settings(cls))) == method_arguments(cls, hparams)


def test_cli_hparams_sets_the_methods_defaults(tmp_path, monkeypatch):
    folder = write_tuned(tmp_path / "tuned", {"optim": {"lr": 0.037, "epochs": 1}})
    seen = {}

    def fake_run(self):
        seen["hparams"], seen["identity"] = dict(self.method.hparams), self.identity
        raise SystemExit(0)

    monkeypatch.setattr(Runner, "run", fake_run)
    with pytest.raises(SystemExit):
        main(
            [
                "run",
                "--method",
                "finetune",
                "--hparams",
                str(folder),
                "--finetune.optim.epochs",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
    assert (
        seen["hparams"]["optim"]["lr"] == 0.037 and seen["hparams"]["optim"]["epochs"] == 2
    )  # tuned value; the explicit one wins
    assert seen["identity"].tuned["study"] == "s-1"


def test_tuning_runs_never_enter_a_leaderboard_and_tuned_rows_sit_beside_default_ones(tmp_path, shared_store):
    runs = tmp_path / "runs"
    folder = write_tuned(tmp_path / "tuned", {"optim": {"lr": 0.03, "epochs": 1}})
    run_tiny(runs, shared_store, "finetune", method_args={"optim": {"epochs": 1}})
    run_tiny(runs, shared_store, "finetune", method_args={}, hparams=folder)
    validation = run_tiny(
        runs, shared_store, "finetune", method_args={"optim": {"epochs": 1}}, seed=100, split="validation"
    )
    assert (validation.run_dir / "metrics.jsonl").exists()
    board = build_leaderboard(runs, plots=False)
    (group,) = board.groups
    # each label names the hyperparameters that depart from finetune's defaults (the tiny runs' epochs)
    assert sorted(entry.label for entry in group.entries) == [
        "finetune (optim.epochs=1)",
        "finetune (tuned, optim.epochs=2)",
    ]
    assert all(run.identity.seed == 0 for entry in group.entries for run in entry.runs)
    assert {run["seed"] for run in board.provenance["runs"]} == {0}
    assert "seed100" not in board.files["csv"].read_text() and "validation" not in board.files["md"].read_text()


def test_a_trial_whose_worker_died_before_its_first_heartbeat_is_failed_not_waited_for(tmp_path):
    study = open_study(TuneSpec(RunConfig.from_options(method="finetune"), out=tmp_path, heartbeat=1))
    orphan = study.ask()  # RUNNING, with no heartbeat and no worker: as a worker killed right after `ask` leaves it
    live = study.ask()
    live.set_user_attr("worker", "host:1")  # the objective's first write
    assert fail_unstarted_trials(study, grace_s=2) == []  # too young to judge
    time.sleep(2.2)
    fresh = study.ask()
    assert fail_unstarted_trials(study, grace_s=2) == [orphan.number]
    states = {trial.number: trial.state for trial in study.get_trials()}
    assert states == {orphan.number: TrialState.FAIL, live.number: TrialState.RUNNING, fresh.number: TrialState.RUNNING}


# ------------------------------------------------------------------------------------------ bad input

BAD_TUNE_INPUT = [
    (["--method", "nope"], "unknown method 'nope'"),
    (["--method", "ga", "--tune-seeds", "1,100"], "tuning seed(s) [1] are evaluation seeds"),
    (["--method", "ga", "--sampler", "grid"], "unknown sampler 'grid'; choose one of: tpe, nsga2"),
    (["--method", "ga", "--objective", "test_acc"], "unknown objective 'test_acc'"),
    (["--method", "ga", "--trials", "0"], "--trials must be at least 1"),
    (["--method", "ga", "--requests", "10"], "requests x size < 10 classes"),
    (["--method", "ga", "--storage", "studies.db"], "--storage must be a database URL"),
    (["--method", "ga", "--recipe", '{"epochz": 1}'], "unknown recipe key(s) epochz"),
    (["--method", "ga", "--suite", "x.yaml"], "either --suite or --method"),
    ([], "tune needs --method"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_TUNE_INPUT, ids=[" ".join(a) for a, _ in BAD_TUNE_INPUT])
def test_bad_tune_input_is_one_line_exit_2_nothing_written(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", *argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("unlearnbench: error: "), err
    assert message in err, err
    assert not (tmp_path / "out").exists()


def test_run_with_a_missing_tuned_file_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "tuned").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "ga", "--hparams", str(tmp_path / "tuned"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tuned hyperparameters for ga on digits/smallcnn/classwise" in err
    assert not (tmp_path / "out").exists()


def test_storage_passwords_stay_out_of_the_tuned_file():
    assert (
        redacted("postgresql://bench:s3cret@db.example:5432/studies")
        == "postgresql://bench:***@db.example:5432/studies"
    )
    assert redacted("sqlite:///tuned/studies.db") == "sqlite:///tuned/studies.db"


def test_a_run_killed_while_initializing_its_directory_resumes_there(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    (folder / ".config.yaml.x1.tmp").write_text("method: fin")
    RunDirectory(folder).check({"method": "finetune"})  # leftovers of `initialize` before config.yaml
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryMismatchError, match="holds no run"):
        RunDirectory(folder).check({"method": "finetune"})


def test_the_cpu_tune_suite_covers_every_method_with_one_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    specs = suite_specs(load_suite(ROOT / "benchmarks" / "tune_cpu.yaml"))
    assert sorted(spec.run.method.name for spec in specs) == METHODS.names()  # `methods: all`: new methods join unasked
    assert len({(spec.trials, spec.tune_seeds, spec.run.stream.requests, spec.epoch_cap()) for spec in specs}) == 1
    assert specs[0].epoch_cap() == 6  # ceil(20% of digits' 30 epochs)
    for spec in specs:
        spec.validate()
    assert list(tmp_path.iterdir()) == []


def test_the_memorizing_tier_tune_suite_gives_every_method_20_trials_per_stream_it_serves(tmp_path, monkeypatch):
    """benchmarks/tune_fashionmnist_mlp.yaml tunes the published tier's setting (benchmarks/fashionmnist_mlp.yaml):
    every method on each stream kind it serves (unsir: class-wise alone), one budget of >= 20 trials, tuning
    seeds disjoint from the evaluation seeds."""
    monkeypatch.chdir(tmp_path)
    specs = suite_specs(load_suite(ROOT / "benchmarks" / "tune_fashionmnist_mlp.yaml"))
    evaluation = load_suite(ROOT / "benchmarks" / "fashionmnist_mlp.yaml")
    for stream in ("classwise", "random"):
        tuned = sorted(spec.run.method.name for spec in specs if spec.run.stream.kind == stream)
        served = [m for m in METHODS.names() if stream in (getattr(METHODS.get(m), "streams", None) or (stream,))]
        assert tuned == served
    assert "unsir" not in {spec.run.method.name for spec in specs if spec.run.stream.kind == "random"}
    assert len({(spec.trials, spec.tune_seeds, spec.run.stream.requests, spec.epoch_cap()) for spec in specs}) == 1
    assert specs[0].trials >= 20 and not set(specs[0].tune_seeds) & set(evaluation["seeds"])
    assert specs[0].epoch_cap() == 6  # ceil(20% of the tier recipe's 30 epochs)
    common = evaluation["common"]
    for spec in specs:
        assert (spec.run.data.name, spec.run.data.args, spec.run.arch.name) == (
            common["dataset"],
            common["dataset_args"],
            common["arch"],
        )
        spec.validate()
    assert list(tmp_path.iterdir()) == []


def test_a_tune_suite_that_names_a_method_on_a_stream_it_cannot_serve_is_refused(tmp_path):
    suite = {"methods": ["unsir"], "streams": [{"stream": "random"}]}
    with pytest.raises(ConfigError, match="serves only classwise"):
        suite_specs(suite, out=tmp_path)


def test_a_study_keeps_its_name_whether_its_size_is_written_1_or_parsed_1_0(tmp_path):
    """A study is named after its settings (`TuneSpec.study_name`), so that the same command resumes it. A tune suite's
    `size: 1` is parsed by `run`'s parser as 1.0, as `--size 1` is: both name the study as the suite's YAML integer
    always did, so a study tuned before keeps its database rows (the name pinned is the CPU tune suite's GA study)."""
    from unlearnbench.grid import load_suite
    from unlearnbench.tune import suite_specs, tune_specs
    from unlearnbench.tune_options import tune_parser

    specs = suite_specs(load_suite(ROOT / "benchmarks" / "tune_cpu.yaml"), out=tmp_path)
    (ga,) = [spec for spec in specs if spec.run.method.name == "ga"]
    assert ga.run.stream.size == 1.0 and ga.study_name() == "digits-smallcnn-classwise-ga-4d1cc191"
    argv = ["--method", "ga", "--size", "1", "--requests", "3", "--tune_seeds", "100", "--trials", "4"]
    (cli,) = tune_specs(tune_parser().parse_args([*argv, "--out", str(tmp_path)]))
    assert cli.study_name() == ga.study_name()


def test_dataset_and_arch_arguments_reach_every_trial_and_name_their_own_study(tmp_path):
    suite = {
        "common": {"dataset": "digits", "dataset_args": {"train_size": 800}, "arch_args": {"width": 8}},
        "methods": ["ga"],
        "streams": [{"stream": "classwise"}],
    }
    (subset,) = suite_specs(suite, out=tmp_path)
    config = subset.run_config(100, {})
    assert (config.data.args, config.arch.args) == ({"train_size": 800}, {"width": 8})
    whole = TuneSpec(RunConfig.from_options(method="ga"), out=tmp_path)
    assert whole.study_name() != subset.study_name()
    # a study of the whole dataset is named as before these arguments existed; the name changed once since, when the
    # space's names became paths (`optim.lr`): an Optuna study holds one name per parameter, so no study of `lr` resumes
    assert whole.study_name() == "digits-smallcnn-classwise-ga-94c20303"
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--method", "ga", "--dataset_args", '{"train_sise": 10}', "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and not (tmp_path / "o").exists()


def test_a_question_mark_in_out_keeps_the_study_database_inside_the_folder(tmp_path):
    """`?` (or `#`) in a folder's name started the SQLite URL's query: the database landed in the parent folder,
    shared by every study whose folder begins the same way."""
    from unlearnbench.tune import TuneSpec, open_study

    for name in ("a?b", "c#d", "e%3Ff"):
        out = tmp_path / name
        open_study(TuneSpec(RunConfig.from_options(method="finetune"), out=out, trials=2))
        assert (out / "studies.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a?b", "c#d", "e%3Ff"]


@pytest.mark.parametrize("damage", ["garbage", "folder", "unreachable"])
def test_a_study_database_that_cannot_be_opened_is_one_line(damage, tmp_path, capsys):
    out = tmp_path / "tuned"
    out.mkdir()
    argv = ["tune", "--method", "finetune", "--trials", "1", "--out", str(out), "--quiet"]
    if damage == "garbage":
        (out / "studies.db").write_bytes(b"this is not a database" * 100)
    elif damage == "folder":
        (out / "studies.db").mkdir()
    else:
        argv += ["--storage", f"sqlite:///{tmp_path / 'missing' / 'folder' / 'studies.db'}"]
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err
    assert code == (1 if damage == "unreachable" else 2), err
    assert err.count("\n") == 1 and err.startswith("unlearnbench: error: ") and "Traceback" not in err, err


def test_two_workers_with_one_sampler_seed_draw_different_values_and_each_trial_is_reproducible(tmp_path):
    """Two workers started with the same --sampler-seed drew the same values, so the same trial folder, and the
    second was refused: trial n's sampler is seeded by (seed, n), n being unique in the study."""
    from unlearnbench.search_space import sample
    from unlearnbench.tune import TuneSpec, open_study

    def first_values(out: Path) -> list[dict]:
        spec = TuneSpec(RunConfig.from_options(method="finetune"), out=out, trials=4, sampler_seed=7)
        workers = [open_study(spec) for _ in range(2)]  # two processes' studies, one storage
        return [sample(spec.space(), worker.ask()) for worker in workers]

    values = first_values(tmp_path / "a")
    assert values[0] != values[1]
    assert first_values(tmp_path / "b") == values  # the same seed: the same values, trial by trial
