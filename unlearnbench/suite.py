"""`unlearnbench suite SUITE.yaml`: a grid of runs (settings x streams x seeds x methods), then the leaderboard.

The suite file (every key optional except `methods`; relative paths are relative to the current
directory, as on the command line):

```yaml
out: runs/cpu              # folder of the run directories (default: runs)
store: null                # model store shared by every cell (default: OUT/store)
leaderboard: null          # where the leaderboard goes (default: OUT/leaderboard); false: none
common:                    # any `unlearnbench run` option, for every cell
  dataset: digits
  dataset_args: {train_size: 1000}  # the dataset's arguments (`--dataset.train_size 1000` in `run`)
  arch: smallcnn
  arch_args: {width: 16}   # the arch's arguments (`--arch.width 16` in `run`)
  data_dir: null           # where on-disk datasets live (default $UNLEARNBENCH_DATA or ./data)
  download: false          # fetch a missing dataset into data_dir (CIFAR, Tiny-ImageNet)
  requests: 3
  oracle: retrain
  recipe: {epochs: 10}
  logger: csv              # csv | wandb | none
  hparams: null            # folder of `unlearnbench tune` files: each method starts from its tuned values
  accelerator: auto        # hardware: accelerator, devices, strategy, num_nodes, precision
settings:                  # default: one setting, `common` itself
  - {dataset: cifar100, arch: vgg16_bn}    # the keys of `common`, overriding it for this part
  - {dataset: digits, recipe: {lr: 0.1}}   # of the grid; `recipe`, `dataset_args`, `arch_args` merge key by key
  - {guards: [orthogonal]}                 # plasticity guards for every method of the setting: names or {name: {arguments}}
  - {hparams: tuned/cpu}                   # the same grid with tuned values: default and tuned rows side by side
methods:                   # a name, or {name: {hyperparameters}}; a name may appear twice
  - finetune
  - ga: {optim: {epochs: 3, lr: 0.005}}
  - {method: rl, args: {optim: {lr: 0.02}}, guards: [{shrink_perturb: {shrink: 0.5}}]}  # long form: own guards
streams:                   # a kind, or {stream: kind, size: ..., requests: ...} (overrides both)
  - {stream: classwise, size: 1}
  - {stream: random, size: 0.05}
seeds: [0, 1]              # default [0]
unlearn_seeds: 1           # K unlearning chains per seed (unlearn seed + 0..K-1), e.g. 8 with `oracle_seeds: 8`
```

The grid is setting-major, then stream-major (setting, stream, seed, method), so every method of
a (setting, stream, seed) reuses the pretrained model and the T oracles trained for the first one.
The schema and the order a cell's options merge in live in `unlearnbench.grid` (checked there, as `unlearnbench
run` checks its options, before torch is imported); `plan.expand_suite` is a pure function from the suite
mapping to the ordered list of `RunConfig`s;
`check_suite` plans every cell (`plan_run`: names, hyperparameters, recipe, stream sizes, run
directory) without loading a dataset or writing anything (`--check`). Before a suite runs, that
check passes and the `Runner` of every cell of its shard is built from the cell's plan, so bad
input fails before anything is written. A cell that raises is recorded (`error.json` in its run directory and
`OUT/suite.json`) and the suite goes on; the leaderboard shows it as failed. Running the same
suite again resumes unfinished cells and leaves finished ones alone. `--shard i/n` runs only
cells k with k mod n = i − 1 (for job arrays: the shards share the store and the runs folder
safely); build the leaderboard once they are done.
"""

from __future__ import annotations

import gc
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.early_checks import check_data_dir
from unlearnbench.grid import SuiteError, cell_label, load_suite, parse_shard, select_shard, suite_parser
from unlearnbench.interrupt import Interrupted
from unlearnbench.plan import Cell, check_suite


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


def prepare_suite(cells: list[Cell], reporter=None, shard: tuple[int, int] | None = None):
    """The Runners of `shard`'s cells (every cell without one), each built from its plan (`check_suite`), datasets
    loaded; raises ConfigError naming the cell. Another shard's cells are neither built nor loaded.

    The Runners share one `DatasetCache`: each dataset is loaded (and listed, and put on the
    device) once for the whole suite, not once per cell.
    """
    from unlearnbench.data.cache import DatasetCache
    from unlearnbench.runner import Runner

    datasets = DatasetCache()
    runners = []
    for i, cell in select_shard(list(enumerate(cells, start=1)), shard):
        try:
            check_data_dir(cell.config.data.dir, cell.config.data.download)  # not in --check: data may live elsewhere
            runners.append(Runner(cell.plan, reporter, datasets))
        except (ConfigError, TypeError, ValueError) as error:
            raise SuiteError(f"{cell_label(i, len(cells), cell.config.options())}: {error}") from error
    return runners


def _run_cell(runner, i: int, cells: int, reporter, writes: bool) -> CellResult:
    """Runs cell i of `cells`; a failure is recorded and reported, a signal stops the suite."""
    config, position = runner.config, f"{i}/{cells}"
    dataset, arch, stream = config.setting
    reporter.message(
        f"suite cell {position}: {config.method.name} · {stream} · seed {config.seeds.seed} · {dataset}/{arch}"
    )
    start = time.perf_counter()
    try:
        with reporter.live():
            result = runner.run()
    except Interrupted as interrupt:  # SIGINT/SIGTERM: the suite stops, never reporting success
        interrupt.where = f"cell {position}, {interrupt.where}"
        raise
    except Exception as error:  # a failing cell is recorded; the suite goes on
        runner.run_logger.finish(failed=True)
        message = f"{type(error).__name__}: {error}"
        if writes and runner.run_dir.initialized():
            runner.run_dir.write_error(message, traceback.format_exc())
        reporter.message(f"[red]cell {i} failed:[/red] {message}")
        return CellResult(config, runner.run_dir.path, "failed", time.perf_counter() - start, message)
    if writes:
        runner.run_dir.clear_error()
    status = result.summary.status
    if result.already_complete:
        status = f"already {status}"
    if result.stale_note():
        status = f"{status}, method code changed"
        print(f"unlearnbench: note: cell {i}: {result.stale_note()}", file=sys.stderr)
    return CellResult(config, runner.run_dir.path, status, time.perf_counter() - start)


def run_suite(
    suite: dict,
    reporter=None,
    out: Path | None = None,
    logger: str | None = None,
    leaderboard: bool = True,
    shard: tuple[int, int] | None = None,
) -> SuiteResult:
    from unlearnbench.console import Reporter

    reporter = reporter or Reporter(quiet=True)
    cells = check_suite(suite, out=out, logger=logger)  # every cell planned, whichever shard runs here
    out_dir = cells[0].config.output.out
    runners = prepare_suite(cells, reporter, shard)
    # Each cell's plan holds the method it built, which a finished run leaves holding its model and last Trainer:
    # kept here, every cell's would stay to the end of the suite (12 MB a cell of the memorizing tier).
    del cells
    # On several nodes (`num_nodes` > 1 on every cell) only node 0 writes; the others follow its fits.
    writes = all(runner.nodes.leader for runner in runners)
    results: list[CellResult] = []
    trained, count = 0, len(runners)
    for i in range(1, count + 1):
        # Taken off the list, a runner is freed once its cell is done: a finished cell's method, models, Trainers and
        # data views, kept to the end of the suite, grew a 27-cell suite's memory from 1.8 to 3.7 GB.
        runner = runners.pop(0)
        try:
            results.append(_run_cell(runner, i, count, reporter, writes))
        finally:
            trained += runner.store.trained
        # The runner is a web of reference cycles (Lightning's Trainers and the modules they fit refer to each other),
        # which only a full collection frees, and Python runs one rarely: without it, many cells' worth stay.
        runner = None
        gc.collect()
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
                    **dict(zip(("dataset", "arch", "stream"), c.config.setting, strict=True)),
                    "method": c.config.method.name,
                    "seed": c.config.seeds.seed,
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
    from jsonargparse import ArgumentError

    from unlearnbench.console import Reporter, quiet_lightning_info, silence_library_warnings

    parser = suite_parser()
    try:
        args = parser.parse_args(argv)
    except ArgumentError as error:
        raise SuiteError(str(error)) from error
    shard = parse_shard(args.shard) if args.shard else None
    suite = load_suite(args.suite)
    if args.check:
        from unlearnbench.plan import check_report

        cells = check_suite(suite, out=args.out, logger=args.logger)
        print("\n".join(check_report(str(args.suite), cells, shard)))
        return 0
    quiet_lightning_info()
    reporter = Reporter(quiet=args.quiet)
    if args.quiet:
        silence_library_warnings()
    result = run_suite(suite, reporter, out=args.out, logger=args.logger, shard=shard)
    done = sum(1 for cell in result.cells if cell.status != "failed")
    reporter.message(
        f"suite: {done}/{len(result.cells)} cells ran, {len(result.failed)} failed, {result.trained} models trained"
    )
    for cell in result.failed:
        reporter.message(f"  failed: {cell.run_dir.name}: {cell.error}")
    return 1 if result.failed else 0
