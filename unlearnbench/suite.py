"""`unlearnbench suite SUITE.yaml`: a grid of runs (settings x streams x seeds x methods), then the leaderboard.

The suite file (every key optional except `methods`; relative paths are relative to the current
directory, as on the command line):

```yaml
out: runs/cpu              # folder of the run directories (default: runs)
store: null                # model store shared by every cell (default: OUT/store)
leaderboard: null          # where the leaderboard goes (default: OUT/leaderboard); false: none
common:                    # any `unlearnbench run` option, for every cell
  dataset: digits
  arch: smallcnn
  data_dir: null           # where on-disk datasets live (default $UNLEARNBENCH_DATA or ./data)
  download: false          # fetch a missing dataset into data_dir (CIFAR, Tiny-ImageNet)
  requests: 3
  oracle: retrain
  recipe: {epochs: 10}
  logger: csv              # csv | wandb | none
  accelerator: auto        # hardware: accelerator, devices, strategy, num_nodes, precision
settings:                  # default: one setting, `common` itself
  - {dataset: cifar100, arch: vgg16_bn}    # the keys of `common`, overriding it for this part
  - {dataset: digits, recipe: {lr: 0.1}}   # of the grid; `recipe` merges key by key
methods:                   # a name, or {name: {hyperparameters}}; a name may appear twice
  - finetune
  - ga: {epochs: 3, lr: 0.005}
streams:                   # a kind, or {stream: kind, size: ..., requests: ...} (overrides both)
  - {stream: classwise, size: 1}
  - {stream: random, size: 0.05}
seeds: [0, 1]              # default [0]
```

The grid is setting-major, then stream-major (setting, stream, seed, method), so every method of
a (setting, stream, seed) reuses the pretrained model and the T oracles trained for the first one.
`expand_suite` is a pure function from the suite mapping to the ordered list of `RunConfig`s;
`check_suite` resolves every cell as its `Runner` would (names, hyperparameters, recipe, stream
sizes, run directory) without loading a dataset or writing anything (`--check`). Before a suite
runs, that check passes and every cell's `Runner` is built, so bad input fails before anything
is written. A cell that raises is recorded (`error.json` in its run directory and
`OUT/suite.json`) and the suite goes on; the leaderboard shows it as failed. Running the same
suite again resumes unfinished cells and leaves finished ones alone. `--shard i/n` runs only
cells k with k mod n = i − 1 (for job arrays: the shards share the store and the runs folder
safely); build the leaderboard once they are done.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from unlearnbench.config import ConfigError, Hardware, RunConfig

TOP_KEYS = {"out", "store", "leaderboard", "common", "settings", "methods", "streams", "seeds"}
HARDWARE_KEYS = {f.name for f in fields(Hardware)}
#: RunConfig fields a suite may set in `common` or a setting (the grid sets method, stream, seed).
COMMON_KEYS = {
    "dataset",
    "data_dir",
    "download",
    "arch",
    "requests",
    "size",
    "oracle",
    "mia_protocol",
    "recipe",
    "save_logits",
    "logger",
} | HARDWARE_KEYS
STREAM_KEYS = {"stream", "size", "requests"}


class SuiteError(ConfigError):
    """An invalid suite file: reported as one line, exit code 2, nothing written."""


def load_suite(path: Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SuiteError(f"cannot read suite {path}: {error}".replace("\n", " ")) from error
    if not isinstance(data, dict):
        raise SuiteError(f"suite {path} must be a YAML mapping with at least `methods`")
    return data


def _methods(spec: Any) -> list[tuple[str, dict]]:
    if isinstance(spec, dict):
        spec = [{name: args} for name, args in spec.items()]
    if not isinstance(spec, list) or not spec:
        raise SuiteError("`methods` must be a non-empty list of names or {name: {hyperparameters}}")
    methods = []
    for item in spec:
        if isinstance(item, str):
            methods.append((item, {}))
        elif isinstance(item, dict) and len(item) == 1:
            name, args = next(iter(item.items()))
            if args is not None and not isinstance(args, dict):
                raise SuiteError(f"hyperparameters of method {name!r} must be a mapping, got {args!r}")
            methods.append((str(name), dict(args or {})))
        else:
            raise SuiteError(f"a `methods` entry must be a name or {{name: {{hyperparameters}}}}, got {item!r}")
    return methods


def _streams(spec: Any) -> list[dict]:
    if spec is None:
        return [{}]
    if not isinstance(spec, list) or not spec:
        raise SuiteError("`streams` must be a non-empty list of kinds or {stream: kind, size: ..., requests: ...}")
    streams = []
    for item in spec:
        if isinstance(item, str):
            item = {"stream": item}
        if not isinstance(item, dict):
            raise SuiteError(f"a `streams` entry must be a kind or a mapping, got {item!r}")
        unknown = sorted(set(item) - STREAM_KEYS)
        if unknown:
            raise SuiteError(f"unknown stream key(s) {', '.join(unknown)}; valid: {', '.join(sorted(STREAM_KEYS))}")
        streams.append(dict(item))
    return streams


def _options(spec: Any, where: str) -> dict:
    """Run options of `common` or of one setting, their keys checked."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise SuiteError(f"{where} must be a mapping of run options, got {spec!r}")
    unknown = sorted(set(spec) - COMMON_KEYS)
    if unknown:
        raise SuiteError(f"unknown key(s) {', '.join(unknown)} in {where}; valid: {', '.join(sorted(COMMON_KEYS))}")
    if "recipe" in spec and not isinstance(spec["recipe"], dict):
        raise SuiteError(f"`recipe` in {where} must be a mapping of recipe keys")
    return dict(spec)


def _settings(spec: Any, common: dict) -> list[dict]:
    """Each setting's options: `common` overridden by the setting (recipes merged key by key)."""
    if spec is None:
        return [common]
    if not isinstance(spec, list) or not spec:
        raise SuiteError("`settings` must be a non-empty list of mappings of run options (the keys of `common`)")
    settings = []
    for k, item in enumerate(spec, start=1):
        options = _options(item if item is not None else {}, f"`settings` entry {k}")
        merged = {**common, **options}
        if "recipe" in common and "recipe" in options:
            merged["recipe"] = {**common["recipe"], **options["recipe"]}
        settings.append(merged)
    return settings


@dataclass(frozen=True)
class GridConfig:
    """One cell of the grid before it is resolved: its 1-based (setting, stream, seed, method) position."""

    position: tuple[int, int, int, int]
    config: RunConfig


def suite_grid(suite: dict, out: Path | None = None, logger: str | None = None) -> list[GridConfig]:
    """The grid in run order, each cell with its position; its schema checked, its cells not yet resolved."""
    unknown = sorted(set(suite) - TOP_KEYS)
    if unknown:
        raise SuiteError(f"unknown suite key(s) {', '.join(unknown)}; valid: {', '.join(sorted(TOP_KEYS))}")
    settings = _settings(suite.get("settings"), _options(suite.get("common"), "`common`"))
    seeds = suite.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise SuiteError(f"`seeds` must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SuiteError(f"`seeds` lists a seed twice: {seeds}")
    if "methods" not in suite:
        raise SuiteError("a suite needs `methods`")
    methods = _methods(suite["methods"])
    streams = _streams(suite.get("streams"))
    out_dir = Path(out) if out is not None else Path(suite.get("out") or "runs")
    store = suite.get("store")
    cells = []
    for k, setting in enumerate(settings, start=1):
        hardware = Hardware(**{key: setting[key] for key in HARDWARE_KEYS if key in setting})
        run_keys = {key: value for key, value in setting.items() if key not in HARDWARE_KEYS}
        if logger is not None:
            run_keys["logger"] = logger
        if run_keys.get("data_dir") is not None:
            run_keys["data_dir"] = Path(run_keys["data_dir"])
        for s, stream in enumerate(streams, start=1):
            for seed in seeds:
                for m, (method, args) in enumerate(methods, start=1):
                    values = {**run_keys, **stream}
                    config = RunConfig(
                        method=method,
                        seed=seed,
                        method_args=dict(args),
                        out=out_dir,
                        store=Path(store) if store else None,
                        hardware=hardware,
                        **{key: (dict(v) if isinstance(v, dict) else v) for key, v in values.items()},
                    )
                    cells.append(GridConfig((k, s, seeds.index(seed) + 1, m), config))
    return cells


def cell_label(index: int, count: int, config: RunConfig) -> str:
    """How errors and progress name a cell: its place in the grid and what it runs."""
    return (
        f"cell {index}/{count} ({config.dataset}/{config.arch}, {config.method}, {config.stream}, seed {config.seed})"
    )


def expand_suite(suite: dict, out: Path | None = None, logger: str | None = None) -> list[RunConfig]:
    """The suite's grid as an ordered list of RunConfigs (setting, stream, seed, method). Pure: writes nothing.

    `out` and `logger`, when given, override the suite's own (the command line's `--out`/`--logger`).
    """
    return [cell.config for cell in suite_grid(suite, out, logger)]


@dataclass
class CellResult:
    config: RunConfig
    run_dir: Path
    status: str  # complete | diverged | failed | already complete
    seconds: float
    error: str | None = None


@dataclass
class SuiteResult:
    cells: list[CellResult]
    trained: int  # models the store trained during this invocation (pretrained + oracles)
    leaderboard: Any  # report.leaderboard.Leaderboard | None

    @property
    def failed(self) -> list[CellResult]:
        return [cell for cell in self.cells if cell.status == "failed"]


def prepare_suite(suite: dict, reporter=None, out: Path | None = None, logger: str | None = None):
    """Every cell checked (`check_suite`), then its Runner built, datasets loaded; raises ConfigError naming the cell.

    The Runners share one `DatasetCache`: each dataset is loaded (and listed, and put on the
    device) once for the whole suite, not once per cell.
    """
    from unlearnbench.data.cache import DatasetCache
    from unlearnbench.runner import Runner
    from unlearnbench.suite_check import check_suite

    cells = check_suite(suite, out=out, logger=logger)
    datasets = DatasetCache()
    runners = []
    for i, cell in enumerate(cells, start=1):
        try:
            runners.append(Runner(cell.config, reporter, datasets))
        except (ConfigError, TypeError, ValueError) as error:
            raise SuiteError(f"{cell_label(i, len(cells), cell.config)}: {error}") from error
    return runners


def parse_shard(text: str) -> tuple[int, int]:
    """`i/n` with 1 <= i <= n: this job's shard of a job array."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise SuiteError(f"--shard takes i/n with 1 <= i <= n (e.g. 2/8), got {text!r}")
    return int(index), int(count)


def select_shard(cells: list, shard: tuple[int, int] | None) -> list:
    """Cells k (0-based, in grid order) with k mod n == i - 1: every cell in exactly one shard.

    The grid order is a pure function of the suite file, so every job of an array computes the
    same split without talking to the others; shards share the store (its file lock trains each
    model once) and the runs directory (each run directory belongs to one cell).
    """
    if shard is None:
        return cells
    index, count = shard
    return [cell for k, cell in enumerate(cells) if k % count == index - 1]


def run_suite(
    suite: dict,
    reporter=None,
    out: Path | None = None,
    logger: str | None = None,
    leaderboard: bool = True,
    shard: tuple[int, int] | None = None,
) -> SuiteResult:
    from unlearnbench.console import Reporter
    from unlearnbench.io import write_text_atomic

    reporter = reporter or Reporter(quiet=True)
    all_runners = prepare_suite(suite, reporter, out=out, logger=logger)
    out_dir = all_runners[0].config.out
    # On several nodes (`num_nodes` > 1 on every cell) only node 0 writes; the others follow its fits.
    writes = all(runner.nodes.leader for runner in all_runners)
    runners = select_shard(all_runners, shard)
    results: list[CellResult] = []
    trained = 0
    for i, runner in enumerate(runners, start=1):
        config = runner.config
        reporter.message(
            f"suite cell {i}/{len(runners)}: {config.method} · {config.stream} · seed {config.seed} · "
            f"{config.dataset}/{config.arch}"
        )
        start = time.perf_counter()
        try:
            with reporter.live():
                result = runner.run()
        except Exception as error:  # a failing cell is recorded; the suite goes on
            runner.run_logger.finish(failed=True)
            message = f"{type(error).__name__}: {error}"
            if writes and (runner.run_dir.path / "config.yaml").exists():
                write_text_atomic(
                    runner.run_dir.path / "error.json",
                    json.dumps({"error": message, "traceback": traceback.format_exc()}, indent=1) + "\n",
                )
            reporter.message(f"[red]cell {i} failed:[/red] {message}")
            results.append(CellResult(config, runner.run_dir.path, "failed", time.perf_counter() - start, message))
        else:
            if writes:
                (runner.run_dir.path / "error.json").unlink(missing_ok=True)
            status = result.summary.get("status", "complete")
            if result.already_complete:
                status = f"already {status}"
            results.append(CellResult(config, runner.run_dir.path, status, time.perf_counter() - start))
        finally:
            trained += runner.store.trained
    board = None
    if writes:
        _write_suite_record(out_dir, shard, results, trained)
    # A shard's leaderboard would show the other shards' cells as unfinished: build it after the array.
    if writes and leaderboard and shard is None and suite.get("leaderboard", True) is not False:
        from unlearnbench.report.leaderboard import build_leaderboard

        target = suite.get("leaderboard")
        board = build_leaderboard(out_dir, Path(target) if isinstance(target, str) else None)
        reporter.message(f"leaderboard: {board.files['md']} (+ .csv, .html, plots/)")
    return SuiteResult(results, trained, board)


def _write_suite_record(out_dir: Path, shard: tuple[int, int] | None, results: list[CellResult], trained: int) -> None:
    """`OUT/suite.json` (or the shard's file): each cell's status and time, and the models trained."""
    from unlearnbench.io import write_json_atomic

    write_json_atomic(
        out_dir / ("suite.json" if shard is None else f"suite-shard-{shard[0]}-of-{shard[1]}.json"),
        {
            "cells": [
                {
                    "dataset": c.config.dataset,
                    "arch": c.config.arch,
                    "method": c.config.method,
                    "stream": c.config.stream,
                    "seed": c.config.seed,
                    "run_dir": str(c.run_dir),
                    "status": c.status,
                    "seconds": round(c.seconds, 2),
                    "error": c.error,
                }
                for c in results
            ],
            "trained": trained,
        },
    )


def suite_command(argv: list[str]) -> int:
    """`unlearnbench suite SUITE.yaml [--out DIR] [--logger csv|wandb|none] [--shard i/n] [--quiet true] [--check]`.

    Raises ConfigError for bad input (before anything is written); exit code 1 when a cell failed.
    `--check` prints the resolved grid and runs nothing.
    """
    from jsonargparse import ArgumentError, ArgumentParser

    from unlearnbench.console import Reporter

    parser = ArgumentParser(
        prog="unlearnbench suite", description="Run a grid of runs, then build the leaderboard.", exit_on_error=False
    )
    parser.add_argument("suite", type=Path, help="suite YAML file (schema: unlearnbench/suite.py)")
    parser.add_argument(
        "--out", type=Path | None, default=None, help="folder of run directories (overrides the suite's)"
    )
    parser.add_argument("--logger", type=str | None, default=None, help="csv, wandb or none (overrides the suite's)")
    parser.add_argument("--quiet", type=bool, default=False)
    parser.add_argument("--shard", type=str | None, default=None, help="i/n: run only shard i of n (job arrays)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="resolve every cell and print the grid; load no dataset, run and write nothing",
    )
    try:
        args = parser.parse_args(argv)
    except ArgumentError as error:
        raise SuiteError(str(error)) from error
    shard = parse_shard(args.shard) if args.shard else None
    suite = load_suite(args.suite)
    if args.check:
        from unlearnbench.suite_check import check_report, check_suite

        cells = check_suite(suite, out=args.out, logger=args.logger)
        print("\n".join(check_report(str(args.suite), cells, shard)))
        return 0
    reporter = Reporter(quiet=args.quiet)
    result = run_suite(suite, reporter, out=args.out, logger=args.logger, shard=shard)
    done = sum(1 for cell in result.cells if cell.status != "failed")
    reporter.message(
        f"suite: {done}/{len(result.cells)} cells ran, {len(result.failed)} failed, {result.trained} models trained"
    )
    for cell in result.failed:
        reporter.message(f"  failed: {cell.run_dir.name}: {cell.error}")
    return 1 if result.failed else 0
