"""Shared fixtures: the digits dataset, a fast recipe, and a tiny run helper used across tests."""

from __future__ import annotations

import functools
import gc
import inspect
import json
import os
import weakref
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from unlearnbench.config import RunConfig
from unlearnbench.evaluation import reference_scores
from unlearnbench.evaluation.keys import TIMING_KEYS
from unlearnbench.methods.base import NO_STAGE, StagedMethod, method_arguments
from unlearnbench.ranges import groups
from unlearnbench.registry import DATASETS, METHODS
from unlearnbench.runner import Runner

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `-n 2`: two workers share the cores, one torch thread each; the commands a test starts in a
    # subprocess inherit the same count, so their numbers compare bit for bit with the worker's own.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

#: Seconds each file's slow tests take (`pytest -m slow --durations 0`, summed per file; 2-core machine, two
#: workers). The slow run hands whole files to two workers (`--dist loadfile`); handed out longest first, the
#: last file to finish is a short one (xdist's own order, by number of tests, left a long file running alone for
#: 35-56 s of a 433-499 s run). Only the order reads them: a file missing here runs last, a stale number costs
#: balance, never a result.
SLOW_FILE_SECONDS = {
    "test_reliability.py": 101,
    "test_fashionmnist_e2e.py": 96,
    "test_ddp.py": 89,
    "test_signals.py": 78,
    "test_privacy.py": 76,
    "test_plugin_day.py": 62,
    "test_suite_kills.py": 53,
    "test_gpu_smoke.py": 53,
    "test_tune.py": 50,
    "test_plugins.py": 32,
    "test_cli.py": 28,
    "test_leaderboard.py": 28,
    "test_seeds.py": 19,
    "test_robustness_tables.py": 10,
}


def pytest_configure(config: pytest.Config) -> None:
    # xdist's own reordering of files (by number of tests) would undo `pytest_collection_modifyitems`'s order.
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests longest file first (`SLOW_FILE_SECONDS`); the sort is stable, so each file's tests keep their
    order, and the fast tests (no slow marker) keep theirs."""
    items.sort(key=lambda item: -SLOW_FILE_SECONDS.get(item.path.name, 0) if item.get_closest_marker("slow") else 0)


#: Pretraining/oracle recipe small enough for tests, still well above chance on digits.
FAST_RECIPE = {"epochs": 4, "batch_size": 128, "lr": 0.1}


@pytest.fixture(autouse=True)
def cold_reference_scores():
    """Each test scores oracles and pretrained models as a fresh process does: a memoized score from another
    test's run would hide what the test exercises (tests/test_reference_scores.py tests the memo itself)."""
    reference_scores.clear()


@pytest.fixture(scope="session")
def digits():
    return DATASETS.get("digits")()


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory) -> Path:
    """One model store for the session: pretrained models and oracles are trained once."""
    return tmp_path_factory.mktemp("store")


def tiny_config(out: Path, store: Path, method: str, stream: str = "classwise", **overrides) -> RunConfig:
    """A 2-request run with a fast recipe and a short unlearning schedule (a gradient method's `optim.epochs` 2, and
    its stages' where it serves a request by stages: RUM's).

    `method_args` nested, as a method takes them (`{"optim": {"epochs": 1}}`), merged over that schedule by
    `method_arguments`."""
    cls = METHODS.get(method)
    short = {"optim": {"epochs": 2}} if "optim" in groups(cls) else {}  # not a gradient loop (LOFT, SSD): none
    if issubclass(cls, StagedMethod):  # its stages are registered methods with schedules of their own: as short
        stages = inspect.signature(cls).parameters["stages"].default
        short["stage_args"] = {stage: {"optim": {"epochs": 2}} for stage in stages if stage != NO_STAGE}
    method_args = method_arguments(cls, short, overrides.pop("method_args", {}))
    values = {"requests": 2, "recipe": dict(FAST_RECIPE), "size": 1 if stream == "classwise" else 0.05}
    values.update(overrides)
    return RunConfig.from_options(method=method, stream=stream, out=out, store=store, method_args=method_args, **values)


def measured_rows(run_dir: Path) -> list[dict]:
    """A run's `metrics.jsonl` rows without what two sessions of the same run measure differently: each row's
    `cost` and the timings (`TIMING_KEYS`) of every scored side."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [
        {
            field: {k: v for k, v in value.items() if k not in TIMING_KEYS} if isinstance(value, dict) else value
            for field, value in row.items()
            if field != "cost"
        }
        for row in rows
    ]


def run_tiny(out: Path, store: Path, method: str, stream: str = "classwise", **overrides):
    return Runner.from_config(tiny_config(out, store, method, stream, **overrides)).run()


class RunnerLifetimes:
    """How many earlier runners (and their methods) are still alive as each runner starts, for the tests that a suite's
    or a study's memory does not grow with its cells or trials: `watched(run)` wraps a function called with a runner
    first, and `alive_at_start` holds 0 for each call where everything before it was freed. Run the suite or study
    `without_automatic_collection()`: Python's own full collections come when they come, and must not be waited for."""

    def __init__(self):
        self.alive_at_start: list[int] = []
        self._finished: list[weakref.ref] = []

    def watched(self, run):
        def watched_run(runner, *args, **kwargs):
            self.alive_at_start.append(sum(ref() is not None for ref in self._finished))
            try:
                return run(runner, *args, **kwargs)
            finally:
                self._finished.extend((weakref.ref(runner), weakref.ref(runner.method)))

        return watched_run


@contextmanager
def without_automatic_collection():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def no_datasets(monkeypatch):
    """Registered datasets that raise when loaded; their static attributes (`known_size`) stay."""
    original = DATASETS.get

    def get(name: str):
        factory = original(name)

        def load(*args, **kwargs):
            raise AssertionError(f"dataset {name} was loaded")

        return functools.update_wrapper(load, factory)

    monkeypatch.setattr(DATASETS, "get", get)


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch) -> Path:
    """A fresh current directory: the suites' relative `out`, `store` and `data_dir` land here, if anywhere."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def suite_cwd(empty_cwd) -> Path:
    """`empty_cwd` with the published tuned values (`tuned/`) beside it, as from the repository's root, where the
    shipped suites are run and name them (`hparams: tuned/...`): a test asserts nothing else is written there."""
    (empty_cwd / "tuned").symlink_to(Path(__file__).resolve().parent.parent / "tuned")
    return empty_cwd


class SimulatedCrashError(Exception):
    """Stands in for a kill at a chosen point of a run."""


def crash_before_request(patch: pytest.MonkeyPatch, t: int) -> None:
    """`Runner.serve` raises `SimulatedCrashError` at request `t`, where a kill would stop the run: requests 1..t − 1
    served and recorded, t not begun."""
    original = Runner.serve

    def serve(self, request):
        if request.t == t:
            raise SimulatedCrashError
        return original(self, request)

    patch.setattr(Runner, "serve", serve)
