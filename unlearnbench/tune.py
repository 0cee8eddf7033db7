"""`unlearnbench tune`: each method's hyperparameters chosen by Optuna on validation streams, with equal budgets.

A trial is the method run by the ordinary `Runner` on the tuning seeds' streams over the
dataset's validation view (`unlearnbench.data.validation`: the test split replaced by a held-out
part of train), so the objective is computed from forget, retain and validation logits only;
the test split is not loaded into the trial's dataset at all. The tuning seeds are refused if
they overlap the evaluation seeds, and the leaderboard never reports validation runs, so the
numbers a tuned method is reported with come from streams the tuning never saw.

Objectives (lower is better): `mean_gap`, the Avg.Gap to the oracle averaged over every request
of every tuning stream (the continual setting: a method must stay close to retraining along the
whole stream, not only at its end); `final_gap`, the gap after the last request. With
`--sampler nsga2` the study has two objectives, the forget-side gap (forget accuracy, MIA,
forgotten classes' validation accuracy) and the utility-side gap (retain and validation
accuracy), and the chosen trial is the Pareto-optimal one with the smallest sum. A request that
diverges scores 100, the largest gap there is, so the sampler learns to avoid its region.

Budget: every method gets the same number of trials (`--trials`), and its `epochs` range is
capped at ⌈20%⌉ of the pretraining recipe's epochs, DeepUnlearn's rule (xcadet/deepunlearn,
`munl/hpsearch/suggestor.py`, `get_num_epochs_suggestion`, at d3dacb6; DeepUnlearn runs 100 TPE
trials per method, a single request each). Oracles and pretrained models of the tuning streams come from the model store, trained
once and shared by every trial and every method tuned into the same store.

The study lives in an RDB storage (SQLite in the tune directory unless `--storage` names a
PostgreSQL/MySQL URL), with heartbeats: running the same command again resumes it; a trial whose
worker was killed is failed once its heartbeat is stale and retried with the same values, and
its run directory (named by those values) resumes at its first unfinished request. Trials are
numbered by the storage, so two workers never evaluate the same trial, and a trial that would
exceed the budget (counting every earlier trial that did not fail) is refused, so the budget is
exact however many workers share the study.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import shutil
import socket
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

import yaml
from filelock import FileLock

from unlearnbench import __version__
from unlearnbench.config import ConfigError, DamagedFileError, RunConfig, size_key
from unlearnbench.console import Reporter
from unlearnbench.data.validation import view_train_size
from unlearnbench.early_checks import check_data_dir, check_names, check_recipe, check_stream_size
from unlearnbench.evaluation.keys import GAP, gap_keys
from unlearnbench.evaluation.scoring import avg_gap
from unlearnbench.hparams import hparams_path
from unlearnbench.interrupt import raise_if_interrupted
from unlearnbench.io import write_text_atomic
from unlearnbench.ranges import nested
from unlearnbench.recipe import Recipe
from unlearnbench.records import RequestRecord
from unlearnbench.registry import DATASETS, METHODS, STREAMS
from unlearnbench.run_options import config_of_options
from unlearnbench.search_space import Distribution, Int, sample
from unlearnbench.tune_options import DEFAULT_TUNE_SEEDS, check_study_settings, tune_parser, tune_seeds

#: The unlearning epochs cap as a fraction of the pretraining recipe's epochs (DeepUnlearn's rule).
EPOCH_FRACTION = 0.2
#: The study database's name in the tune directory when `--storage` names none.
DEFAULT_DATABASE = "studies.db"
#: The worst Avg.Gap possible (accuracies and member rates are percentages): a diverged request's score.
WORST_GAP = 100.0
FORGET_SIDE = ("forget_acc", "mia_member_rate", "forget_test_acc")
UTILITY_SIDE = ("retain_acc", "test_acc")


class OverBudgetError(Exception):
    """The study already holds its budget of trials (finished or running): this one is not evaluated."""


#: What every trial's run is, whatever the study: no logger, no counterfactual fits (the objective reads the gap
#: only), the validation split. A study's run is parsed and checked with them (`TuneSpec.from_options`).
TRIAL_OPTIONS = {"logger": "none", "single_shot_every": 0, "split": "validation"}


@dataclass
class TuneSpec:
    """One study: the run its trials share, and how it is tuned.

    `run` is a partial run (`RunConfig`: method, stream, data, arch, stream length, recipe, model store, hardware),
    each trial's runs that run with a tuning seed, the sampled values, the validation split and the study's folder
    (`run_config`); the other fields are the study's own.
    """

    run: RunConfig
    trials: int = 30
    tune_seeds: tuple[int, ...] = DEFAULT_TUNE_SEEDS
    objective: str = "mean_gap"
    sampler: str = "tpe"
    pruner: str = "median"
    #: the tune directory: tuned files, the default study database and model store, the trials' runs
    out: Path = Path("tuned")
    storage: str | None = None
    heartbeat: int = 60
    sampler_seed: int | None = None

    @classmethod
    def from_options(cls, options: Mapping) -> TuneSpec:
        """A study from options by name (a tune suite's, or the command line's): the study's own fields, and the run's
        (run options by name, hardware keys among them, parsed by `run`'s parser: `run_options.config_of_options`)."""
        own = {spec.name for spec in fields(cls)} - {"run"}
        run = config_of_options({key: value for key, value in options.items() if key not in own} | TRIAL_OPTIONS)
        return cls(run=run, **{key: options[key] for key in own if key in options})

    def validate(self) -> None:
        """Everything that can be checked without loading data; ConfigError (one line) otherwise."""
        method = self.run.method.name
        if method not in METHODS:
            raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(METHODS.names())}")
        if not METHODS.get(method).search_space:
            raise ConfigError(f"method {method!r} declares no search_space; it cannot be tuned")
        check_study_settings(self.objective, self.sampler, self.pruner, self.trials, self.heartbeat, self.tune_seeds)
        storage = self.storage_url
        if "://" not in storage:
            raise ConfigError(f"--storage must be a database URL (sqlite:///path, postgresql://...), got {storage!r}")
        check_recipe(self.run.arch.recipe)  # before anything reads the recipe's epochs
        check_data_dir(self.run.data.dir, download=False)
        for seed in self.tune_seeds:
            self.run_config(seed, {}).validate()  # names, output folders
        known = getattr(DATASETS.get(self.run.data.name), "known_size", None)
        if known is not None:  # the stream fits the validation view's train part (a folder dataset: when loaded)
            stream = self.run.stream
            check_stream_size(
                STREAMS.get(stream.kind), known, stream.requests, stream.size, view_train_size(known.num_train)
            )

    @property
    def storage_url(self) -> str:
        """`--storage`, else the SQLite file in the tune directory, its path escaped: a `?` or `#` in a folder's name
        would otherwise start the URL's query, and the database would land outside the folder (shared with others)."""
        if self.storage:
            return self.storage
        from sqlalchemy.engine import URL

        return URL.create("sqlite", database=str((self.out / DEFAULT_DATABASE).resolve())).render_as_string(False)

    def recipe_epochs(self) -> int:
        return replace(Recipe.for_setting(self.run.data.name, self.run.arch.name), **self.run.arch.recipe).epochs

    def epoch_cap(self) -> int:
        return max(1, math.ceil(EPOCH_FRACTION * self.recipe_epochs()))

    def space(self) -> dict[str, Distribution]:
        """The method's declared space, its `optim.epochs` range capped by the budget."""
        space = dict(METHODS.get(self.run.method.name).search_space)
        if isinstance(space.get("optim.epochs"), Int):
            space["optim.epochs"] = space["optim.epochs"].capped(self.epoch_cap())
        return space

    def study_name(self) -> str:
        """Same command, same study (so it resumes); any setting the objective depends on changes the name."""
        settings = {
            "requests": self.run.stream.requests,
            "size": size_key(self.run.stream.size),
            "recipe": self.run.arch.recipe,
            "tune_seeds": list(self.tune_seeds),
            "objective": self.objective,
            "sampler": self.sampler,
            "space": {name: repr(d) for name, d in self.space().items()},
        }
        # only where given, so the studies of the whole dataset and default arch keep their names
        settings |= {
            name: args
            for name, args in (("dataset_args", self.run.data.args), ("arch_args", self.run.arch.args))
            if args
        }
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
        return "-".join([*self.run.setting, self.run.method.name, digest])

    def run_config(self, seed: int, values: dict) -> RunConfig:
        """A trial's run on tuning stream `seed`: the study's run with the sampled `values` (paths such as `optim.lr`)
        as the method's arguments, on the validation split, in the study's folder, with no counterfactual fits (the
        objective reads the gap only)."""
        return self.run.replace(
            seed=seed,
            method_args=nested(values),
            out=self.out / "trials" / self.study_name(),
            store=self.run.output.store if self.run.output.store is not None else self.out / "store",
            **TRIAL_OPTIONS,
        )


def objective_values(
    rows_by_seed: list[list[RequestRecord]], objective: str, multi: bool
) -> float | tuple[float, float]:
    """The trial's value(s) from the scored rows of each tuning stream (rows of the validation view)."""

    def per_row(row: RequestRecord, keys: tuple[str, ...]) -> float:
        if row.status != "ok" or not row.oracle:
            return WORST_GAP
        return avg_gap(row.method, row.oracle, keys)

    sides = (FORGET_SIDE, UTILITY_SIDE) if multi else (gap_keys(GAP),)
    values = []
    for keys in sides:
        per_stream = []
        for rows in rows_by_seed:
            scored = [per_row(row, keys) for row in rows] or [WORST_GAP]
            per_stream.append(scored[-1] if objective == "final_gap" else sum(scored) / len(scored))
        values.append(sum(per_stream) / len(per_stream))
    return tuple(values) if multi else values[0]


class TrialReporter(Reporter):
    """Silent during a trial's runs; after each request it reports the running objective to the pruner."""

    def __init__(self, trial, spec: TuneSpec, seed_index: int, earlier: list[list[RequestRecord]]):
        super().__init__(quiet=True)
        self.trial, self.spec, self.seed_index, self.earlier, self.rows = trial, spec, seed_index, earlier, []

    def request(self, row: RequestRecord, num_requests: int) -> None:
        import optuna

        self.rows.append(row)
        if self.spec.sampler == "nsga2" or self.spec.pruner == "none":
            return  # Optuna prunes single-objective studies only
        step = self.seed_index * self.spec.run.stream.requests + row.t - 1
        self.trial.report(objective_values([*self.earlier, self.rows], "mean_gap", multi=False), step)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"request {row.t} of tuning seed {self.spec.tune_seeds[self.seed_index]}")


def make_objective(spec: TuneSpec, datasets):
    import optuna

    space = spec.space()

    def objective(trial: optuna.Trial):
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # first: it marks the trial started
        check_budget(trial, spec.trials)
        start = time.process_time()
        values = sample(space, trial)
        from unlearnbench.runner import Runner

        rows_by_seed: list[list[RequestRecord]] = []
        for i, seed in enumerate(spec.tune_seeds):
            reporter = TrialReporter(trial, spec, i, rows_by_seed)
            runner = Runner.from_config(spec.run_config(seed, values), reporter, datasets)
            trial.set_user_attr(f"run_dir_seed{seed}", str(runner.run_dir.path))
            try:
                result = runner.run()
            finally:  # pruned or done: the values are in the study (a killed worker's directory stays, to resume)
                shutil.rmtree(runner.run_dir.path, ignore_errors=True)
            rows_by_seed.append(result.rows)
            # CPU seconds of this process (all threads), pretraining and oracles excluded when the store had them
            trial.set_user_attr("cpu_s", round(time.process_time() - start, 2))
            trial.set_user_attr("trained_models", trial.user_attrs.get("trained_models", 0) + runner.store.trained)
        return objective_values(rows_by_seed, spec.objective, multi=spec.sampler == "nsga2")

    return objective


def check_budget(trial, budget: int) -> None:
    """Refuse a trial numbered past the budget: trial numbers are unique per study, so exactly
    `budget` trials that did not fail are evaluated, however many workers ask at once."""
    import optuna

    earlier = [
        t
        for t in trial.study.get_trials(deepcopy=False)
        if t.number < trial.number and t.state != optuna.trial.TrialState.FAIL
    ]
    if len(earlier) >= budget:
        trial.set_user_attr("over_budget", True)
        raise OverBudgetError(f"the study already holds {budget} trials")


def open_study(spec: TuneSpec):
    import optuna

    # Heartbeats and fail_stale_trials are flagged experimental; the warning says nothing about the study.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec.out.mkdir(parents=True, exist_ok=True)
    if spec.storage is None and (spec.out / DEFAULT_DATABASE).is_dir():
        raise ConfigError(f"{spec.out / DEFAULT_DATABASE} is a folder, not a study database; move it away")
    try:
        return _open_study(spec, optuna)
    except sqlalchemy_errors().DatabaseError as error:
        if "not a database" not in str(error):
            raise
        raise DamagedFileError(
            f"{redacted(spec.storage_url)} is not a study database (damaged or another file); move it away to start "
            "the study anew"
        ) from None


def sqlalchemy_errors():
    """`sqlalchemy.exc` (Optuna's storage raises its errors), imported where a study is opened."""
    from sqlalchemy import exc

    return exc


def _open_study(spec: TuneSpec, optuna):
    # Two workers opening a new SQLite study at once both create its schema, and one fails on
    # `UNIQUE constraint failed: alembic_version` (seen in CI): the first opening is serialized.
    with FileLock(spec.out / "studies.lock"):
        storage = optuna.storages.RDBStorage(
            spec.storage_url,
            heartbeat_interval=spec.heartbeat,
            grace_period=2 * spec.heartbeat,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3),
        )
    if spec.sampler == "nsga2":
        population = max(2, min(50, spec.trials // 2))

        def make_sampler(seed):
            return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)

        directions = ["minimize", "minimize"]
    else:
        startup = max(1, min(10, spec.trials // 3))

        def make_sampler(seed):
            return optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed)

        directions = ["minimize"]
    if spec.sampler_seed is None:  # each worker's sampler draws its own entropy
        sampler = make_sampler(None)
    else:  # workers coordinate through the study's trial numbers, not through the seed (`trial_seeds`)
        from unlearnbench.trial_seeds import TrialSeededSampler

        sampler = TrialSeededSampler(make_sampler, spec.sampler_seed)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1) if spec.pruner == "median" else None
    with FileLock(spec.out / "studies.lock"):  # likewise the study's first creation
        return optuna.create_study(
            study_name=spec.study_name(),
            storage=storage,
            sampler=sampler,
            pruner=pruner or optuna.pruners.NopPruner(),
            directions=directions,
            load_if_exists=True,
        )


#: The least age at which a running trial that never reached the objective is judged orphaned: its worker's first
#: write can wait behind other workers' writes to a busy SQLite file, and an orphan costs only this wait.
UNSTARTED_GRACE_S = 60


def fail_unstarted_trials(study, grace_s: float) -> list[int]:
    """Fail the running trials that never reached the objective and began more than `grace_s` ago; their numbers.

    A worker killed between Optuna's `ask` and the trial's first heartbeat leaves a RUNNING trial with no
    heartbeat, which `fail_stale_trials` never fails (it judges heartbeats only): the study would count it
    as running for ever, and `tune` would wait for it when it is the last of the budget. The objective's
    first write is the trial's `worker` attribute, milliseconds after `ask`, so a trial without it after
    the heartbeat's own grace period has no live worker.
    """
    import optuna

    now = datetime.datetime.now()  # Optuna stamps `datetime_start` with the local naive time too
    unstarted = [
        trial.number
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if "worker" not in trial.user_attrs and (now - trial.datetime_start).total_seconds() > grace_s
    ]
    for number in unstarted:
        study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    return unstarted


def tune(spec: TuneSpec, reporter: Reporter, datasets=None) -> Path:
    """Run (or resume) the study until it holds `spec.trials` finished trials; write and return the YAML."""
    import optuna

    from unlearnbench.data.cache import DatasetCache

    study = open_study(spec)
    datasets = datasets or DatasetCache()
    objective = make_objective(spec, datasets)
    states = optuna.trial.TrialState
    progress = TuneProgress(reporter, spec)
    with progress:
        while True:
            raise_if_interrupted()  # a safe point between trials, and while the last ones run elsewhere
            optuna.storages.fail_stale_trials(study)  # a killed worker's trial, once its heartbeat is stale
            fail_unstarted_trials(study, grace_s=max(2 * spec.heartbeat, UNSTARTED_GRACE_S))
            trials = study.get_trials(deepcopy=False)
            finished = sum(t.state in (states.COMPLETE, states.PRUNED) for t in trials)
            running = sum(t.state == states.RUNNING for t in trials)
            waiting = sum(t.state == states.WAITING for t in trials)
            progress.update(study, finished)
            if finished >= spec.trials:
                break
            if waiting or finished + running < spec.trials:
                # A trial's runner is a web of reference cycles (the Trainers and the modules they fit refer to each
                # other), which only a full collection frees; Python runs one rarely: without it, a study's memory
                # grew by 52 MB a trial of the memorizing tier (1.25 GB at 4 trials, 1.88 GB at 16; 1.19 with it).
                study.optimize(objective, n_trials=1, catch=(OverBudgetError,), gc_after_trial=True)
            else:  # the last trials run elsewhere (or belong to a killed worker, failed once stale)
                time.sleep(min(5, spec.heartbeat))
    path = write_result(spec, study)
    reporter.message(f"{spec.run.method.name}: {path}")
    return path


class TuneProgress:
    """A rich bar of finished trials with the best value so far (plain lines without a terminal)."""

    def __init__(self, reporter: Reporter, spec: TuneSpec):
        self.reporter, self.spec, self.task, self.last = reporter, spec, None, -1

    def __enter__(self):
        self.reporter.progress.__enter__()
        if not self.reporter.progress.disable:
            self.task = self.reporter.progress.add_task(f"tuning {self.spec.run.method.name}", total=self.spec.trials)
        return self

    def __exit__(self, *exc):
        if self.task is not None:
            self.reporter.progress.remove_task(self.task)
        self.reporter.progress.__exit__(*exc)

    def update(self, study, finished: int) -> None:
        if finished == self.last:
            return
        self.last = finished
        best = best_trial(study)
        text = "—" if best is None else ", ".join(f"{v:.2f}" for v in best.values)
        description = f"tuning {self.spec.run.method.name} (best {self.spec.objective} {text})"
        if self.task is not None:
            self.reporter.progress.update(self.task, completed=finished, description=description)
        elif not self.reporter.quiet:
            self.reporter.message(f"{description}: {finished}/{self.spec.trials} trials")


def best_trial(study):
    """The best complete trial; for two objectives, the Pareto-optimal one with the smallest sum."""
    import optuna

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        return None
    candidates = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    return min(candidates, key=lambda t: sum(t.values))


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else round((values[middle - 1] + values[middle]) / 2, 2)


def redacted(url: str) -> str:
    """A storage URL without its password (the file is meant to be shared)."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


def write_result(spec: TuneSpec, study) -> Path:
    """The tuned hyperparameter file (`unlearnbench.hparams`) with the study's provenance."""
    import optuna

    states, stream = optuna.trial.TrialState, spec.run.stream
    trials = study.get_trials(deepcopy=False)
    best = best_trial(study)
    if best is None:
        raise RuntimeError(f"no trial of study {spec.study_name()} completed (all pruned or failed)")
    provenance = {
        "study": spec.study_name(),
        # the default database by its name beside this file: a tuned file is published, a machine's path is not
        "storage": redacted(spec.storage) if spec.storage else DEFAULT_DATABASE,
        "sampler": spec.sampler,
        "pruner": spec.pruner,
        "objective": spec.objective if spec.sampler == "tpe" else "forget_gap+utility_gap (pareto, smallest sum)",
        "trials": spec.trials,
        "complete": sum(t.state == states.COMPLETE for t in trials),
        "pruned": sum(t.state == states.PRUNED for t in trials),
        "failed": sum(t.state == states.FAIL and not t.user_attrs.get("over_budget") for t in trials),
        "best_trial": best.number,
        # CPU seconds per finished trial that trained no model (the trial's own cost, pretraining and oracles aside)
        "cpu_s_per_trial": _median(
            [
                t.user_attrs["cpu_s"]
                for t in trials
                if "cpu_s" in t.user_attrs and not t.user_attrs.get("trained_models")
            ]
        ),
        "best_value": [round(v, 4) for v in best.values] if len(best.values) > 1 else round(best.value, 4),
        "budget": {
            "trials": spec.trials,
            "epochs_cap": spec.epoch_cap(),
            "recipe_epochs": spec.recipe_epochs(),
            "epoch_fraction": EPOCH_FRACTION,
        },
        "tune_seeds": list(spec.tune_seeds),
        "requests": stream.requests,
        "size": size_key(stream.size if stream.size is not None else STREAMS.get(stream.kind).default_size),
        "recipe": dict(spec.run.arch.recipe),
        "split": "validation",
        "search_space": {name: repr(d) for name, d in spec.space().items()},
        "version": {"unlearnbench": __version__, "optuna": optuna.__version__},
    }
    data = {
        "dataset": spec.run.data.name,
        "arch": spec.run.arch.name,
        "stream": stream.kind,
        "method": spec.run.method.name,
        "hparams": nested(best.params),
        "provenance": provenance,
    }
    path = hparams_path(spec.out, *spec.run.setting, spec.run.method.name)
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))
    return path


def suite_specs(suite: dict, out: Path | None = None, storage: str | None = None) -> list[TuneSpec]:
    """Every study of a tune suite, in order (stream-major, then method; `grid.study_options`: the schema and the
    merge order); ConfigError for a bad file.

    `methods: all` tunes every registered method on every stream kind it serves (a method's `streams`), so a
    method added later joins the suite unasked and a class-wise-only method (unsir) is left out of the random
    studies; a method named in a list is tuned on every stream, and one that cannot serve it is refused.
    """
    from unlearnbench.grid import study_options

    specs = []
    for options in study_options(suite, out, storage):
        check_names(options)  # a listed method's name, before its class is asked what it serves
        served = getattr(METHODS.get(options["method"]), "streams", None)
        if suite.get("methods") == "all" and served is not None and options.get("stream", "classwise") not in served:
            continue
        specs.append(TuneSpec.from_options(options))
    return specs


def tune_specs(args) -> list[TuneSpec]:
    """The studies the parsed options ask for: every method of a tune suite, or the one `--method`."""
    if args.suite is not None:
        if args.method is not None:
            raise ConfigError("give either --suite or --method, not both")
        from unlearnbench.grid import load_suite

        return suite_specs(load_suite(args.suite), args.out, args.storage)
    if args.method is None:
        raise ConfigError(f"tune needs --method (one of: {', '.join(METHODS.names())}) or --suite FILE")
    from unlearnbench.grid import TUNE_COMMON_KEYS

    run = {name: getattr(args, name) for name in (*TUNE_COMMON_KEYS, "stream", "store")}  # as a tune suite's study
    run |= {name: dict(run[name]) for name in ("dataset_args", "arch_args", "recipe")}
    study = {spec.name: getattr(args, spec.name) for spec in fields(TuneSpec) if spec.name != "run"}
    study |= {"tune_seeds": tune_seeds(args.tune_seeds), "out": args.out or Path("tuned")}
    return [TuneSpec.from_options({"method": args.method, **run, **study})]


def tune_command(argv: list[str]) -> int:
    """`unlearnbench tune --method M [...]` or `unlearnbench tune --suite FILE`; ConfigError for bad input."""
    from jsonargparse import ArgumentError

    from unlearnbench.console import quiet_lightning_info
    from unlearnbench.data.cache import DatasetCache

    try:
        args = tune_parser().parse_args(argv)
    except ArgumentError as error:
        raise ConfigError(str(error)) from error
    warnings.filterwarnings(
        "ignore", message=r".*module\(s\) in eval mode.*"
    )  # Lightning: on_train_start sets train mode
    specs = tune_specs(args)
    for spec in specs:  # every study checked before anything is loaded or written
        spec.validate()
    quiet_lightning_info()
    reporter = Reporter(quiet=args.quiet)
    datasets = DatasetCache()
    for spec in specs:
        try:
            tune(spec, reporter, datasets)
        except (RuntimeError, OSError) as error:  # no trial completed; storage or disk errors
            print(f"unlearnbench: error: {spec.run.method.name}: {error}", file=sys.stderr)
            return 1
        except sqlalchemy_errors().SQLAlchemyError as error:  # a read-only, locked or unreachable database
            reason = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
            print(
                f"unlearnbench: error: {spec.run.method.name}: study database {redacted(spec.storage_url)}: {reason}",
                file=sys.stderr,
            )
            return 1
    return 0
