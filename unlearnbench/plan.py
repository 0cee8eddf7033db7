"""Planning: suite cells and run options turned into resolved runs (`plan_run` -> `RunPlan`), nothing loaded or written.

`plan_run` is the one place a run is planned: its method built from checked arguments, its recipe,
its identity and its run directory. `unlearnbench run` plans its options, `unlearnbench suite` and
`suite --check` each cell once (`check_suite`; a suite's `Runner`s are built from those plans), the
tuner each trial. A suite file's schema and the order its parts merge in are `grid`'s; here each cell
becomes a `RunConfig` and is planned. This module imports no running code, so planning a suite of the
seed papers' settings on a laptop without the datasets is instant, and a typo in its last setting fails
before the first model trains for a day. The checks of the values themselves are `RunConfig.validate`'s,
so a suite accepts exactly what `unlearnbench run` accepts. Stream sizes are checked against a dataset's
train-split size and class count where its registration declares them (`data.base.known_size`); other
datasets' streams are checked when the run loads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.data.base import data_root
from unlearnbench.evaluation.keys import BROKEN_METRIC_PLUGINS, METRIC_KEYS
from unlearnbench.grid import SuiteError, cell_label, cell_options, select_shard
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.recipe import Recipe
from unlearnbench.records import MeasuredCost, RunIdentity, run_status
from unlearnbench.registry import METHODS, STREAMS
from unlearnbench.run_options import config_of_options
from unlearnbench.rundir import RunDirectory, refuse_a_run_missing_metrics


@dataclass(frozen=True)
class GridConfig:
    """One cell of the grid before it is resolved: its 1-based (setting, stream, seed, method) position."""

    position: tuple[int, int, int, int]
    config: RunConfig


def suite_grid(suite: dict, out: Path | None = None, logger: str | None = None) -> list[GridConfig]:
    """The grid in run order, each cell with its position and `RunConfig` (`grid.cell_options`: the schema and the
    merge order), its options parsed by `run`'s parser (`run_options.config_of_options`); its cells not yet
    resolved."""
    options = cell_options(suite, out, logger)
    cells = []
    for i, cell in enumerate(options, start=1):
        try:
            cells.append(GridConfig(cell.position, config_of_options(cell.options)))
        except ConfigError as error:
            raise SuiteError(f"{cell_label(i, len(options), cell.options)}: {error}") from None
    return cells


def expand_suite(suite: dict, out: Path | None = None, logger: str | None = None) -> list[RunConfig]:
    """The suite's grid as an ordered list of RunConfigs (setting, stream, seed, method). Pure: writes nothing.

    `out` and `logger`, when given, override the suite's own (the command line's `--out`/`--logger`).
    """
    return [cell.config for cell in suite_grid(suite, out, logger)]


@dataclass(frozen=True)
class RunPlan:
    """One run resolved without loading data or writing anything: the method built from its checked
    arguments, the recipe merged, the identity (what its numbers depend on) and its run directory."""

    config: RunConfig
    method: UnlearningMethod
    recipe: Recipe
    identity: RunIdentity
    run_dir: Path


@dataclass(frozen=True)
class Cell:
    """One planned cell: its 1-based (setting, stream, seed, method) position and its `RunPlan`, which the
    suite hands to the cell's `Runner` (a cell is planned once, whether it is checked or run)."""

    position: tuple[int, int, int, int]
    plan: RunPlan

    @property
    def config(self) -> RunConfig:
        return self.plan.config

    @property
    def identity(self) -> RunIdentity:
        return self.plan.identity

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir


def check_suite(suite: dict, out: Path | None = None, logger: str | None = None) -> list[Cell]:
    """The suite's cells in run order, each resolved; raises SuiteError naming the first bad cell."""
    grid = suite_grid(suite, out, logger)
    cells: list[Cell] = []
    seen: dict[Path, int] = {}
    for i, item in enumerate(grid, start=1):
        label = cell_label(i, len(grid), item.config.options())
        try:
            cell = _resolve(item)
        except (TypeError, ValueError) as error:  # ConfigError, StreamError and unknown names are ValueErrors
            raise SuiteError(f"{label}: {error}") from error
        if cell.run_dir in seen:
            raise SuiteError(
                f"{label} is the same run as cell {seen[cell.run_dir]}: a run is named after what its numbers depend "
                f"on (method and its arguments, stream, size, requests, dataset and its arguments, arch and its arguments, seed, oracle, recipe, "
                f"precision), not data_dir, download, logger or other hardware keys; remove the duplicate"
            )
        seen[cell.run_dir] = i
        cells.append(cell)
    _check_data_dirs(cells)
    return cells


def _resolve(item: GridConfig) -> Cell:
    return Cell(item.position, plan_run(item.config))


def plan_run(config: RunConfig, require_recipe: bool = True) -> RunPlan:
    """The run plan of `config`; the one place a run's method, recipe and identity are resolved, for `run`,
    every suite cell, `suite --check` and the tuner alike.

    `require_recipe`: a suite's cell must name its (dataset, arch) recipe (`_recipe`); a single `run`
    falls back on `Recipe`'s generic defaults when there is no file.
    """
    config.validate()  # names, numbers, hardware and, for datasets of known size, the stream's sizes
    try:
        method = METHODS.get(config.method.name)(**config.method_kwargs())
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid arguments for method {config.method.name!r}: {error}") from error
    arch = config.arch
    recipe = (
        _recipe(config) if require_recipe else replace(Recipe.for_setting(config.data.name, arch.name), **arch.recipe)
    )
    stream = config.stream
    size = STREAMS.get(stream.kind).default_size if stream.size is None else stream.size
    identity = config.identity(dict(method.hparams), recipe.as_dict(), size)
    run_dir = config.run_path(identity)
    refuse_a_run_missing_metrics(run_dir, identity, METRIC_KEYS, BROKEN_METRIC_PLUGINS)  # before: it names the cause
    RunDirectory(run_dir).check(identity)  # reads an existing run's config.yaml, if any: another run there is refused
    return RunPlan(config, method, recipe, identity, run_dir)


def resolve_run(config: RunConfig) -> tuple[RunIdentity, Path]:
    """A suite cell's identity and run directory, as its `Runner` will compute them; loads and writes nothing."""
    plan = plan_run(config)
    return plan.identity, plan.run_dir


def _recipe(config: RunConfig) -> Recipe:
    """The (dataset, arch) recipe file with the cell's overrides.

    `unlearnbench run` falls back on `Recipe`'s generic defaults when a setting has no file; a
    suite, whose models are what gets published, must name its recipe: a file, or every key.
    """
    dataset, arch = config.data.name, config.arch
    path = Recipe.path_for(dataset, arch.name)
    missing = [f.name for f in fields(Recipe) if f.name not in arch.recipe]
    if missing and not path.is_file():
        raise ConfigError(
            f"no recipe unlearnbench/recipes/{path.name} for ({dataset}, {arch.name}): add one that cites its "
            f"source, or give {', '.join(missing)} in `recipe`"
        )
    return replace(Recipe.for_setting(dataset, arch.name), **arch.recipe)


def _check_data_dirs(cells: list[Cell]) -> None:
    """One folder per dataset name: the model store and run directories know a dataset by name only."""
    folders: dict[str, set[Path]] = {}
    for cell in cells:
        folders.setdefault(cell.config.data.name, set()).add(data_root(cell.config.data.dir))
    for dataset, paths in folders.items():
        if len(paths) > 1:
            raise SuiteError(
                f"dataset {dataset!r} is read from {len(paths)} folders ({', '.join(sorted(map(str, paths)))}) but "
                f"stored models and run directories know it by name only; give each folder its own suite, with its "
                f"own `out` and `store`"
            )


def models_to_train(cells: list[Cell]) -> tuple[int, int]:
    """(pretrained models, oracles) a first run trains into an empty store.

    One pretrained model per (dataset, arch, recipe, train seed) and, when the oracle is retrained,
    K per scheduled request (`oracle_every`: t = E, 2E, ... and T) of each (those, stream, size,
    requests, stream seed), K = `oracle_seeds` (train seeds train_seed..train_seed+K−1, so runs whose
    seed ranges overlap share oracles). At most: two streams whose first requests forget the same
    samples share those oracles in the store.
    """
    pretrained, oracles = set(), set()
    for cell in cells:
        config = cell.config
        key = _pretrained_key(cell)
        pretrained.add(key)
        if config.protocol.oracle == "retrain":
            requests = config.stream.requests
            stream = (config.stream.kind, cell.identity.size, requests, config.seeds.resolved("stream_seed"))
            scheduled = [t for t in range(1, requests + 1) if config.oracle_at(t)]
            oracles.update((*key[:-1], *stream, seed, t) for seed in config.oracle_train_seeds for t in scheduled)
    return len(pretrained), len(oracles)


def unlearning_fits(cells: list[Cell]) -> tuple[int, int]:
    """(continual requests, single-shot fits) a first run serves with an empty single-shot cache.

    Every cell serves its T requests; a single-shot counterfactual is fitted once per (method, its
    arguments and guards, pretrained model, stream, seeds, t) however many cells schedule it (the
    store caches it) and baseline (`--single-shot-baseline both` fits two), and never at t = 1, where the
    continual fit is the single-shot one. At most:
    the stream kinds build the same first requests for different T, which this does not assume.
    """
    continual, single_shot = 0, set()
    for cell in cells:
        config = cell.config
        requests = config.stream.requests
        continual += requests
        setting = json.dumps(
            [_pretrained_key(cell), cell.identity.method, cell.identity.method_args, cell.identity.guards],
            sort_keys=True,
        )
        seeds = (config.seeds.resolved("stream_seed"), config.seeds.resolved("unlearn_seed"), config.seeds.seed)
        stream = (config.stream.kind, cell.identity.size, requests, config.protocol.mia_protocol, *seeds)
        single_shot |= {
            (setting, stream, t, kind)
            for t in range(2, requests + 1)
            if config.single_shot_at(t)
            for kind in config.single_shot_kinds
        }
    return continual, len(single_shot)


def _pretrained_key(cell: Cell) -> tuple:
    """(dataset, data and arch arguments, arch, recipe, train seed): what the pretrained model depends on."""
    config = cell.config
    data = json.dumps([cell.identity.dataset_args, cell.identity.arch_args], sort_keys=True)
    recipe = json.dumps(cell.identity.recipe, sort_keys=True)
    return (config.data.name, data, config.arch.name, recipe, config.seeds.resolved("train_seed"))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def grid_summary(cells: list[Cell]) -> str:
    """`4 settings x 2 streams x 3 seeds x 5 methods = 120 cells`: the grid's shape, as suite files quote it;
    `... x 1 seed x 8 chains x ...` where `unlearn_seeds` runs several chains per seed."""
    settings, streams, seeds_and_chains, methods = (max(cell.position[k] for cell in cells) for k in range(4))
    seeds = len({cell.config.seeds.seed for cell in cells})
    chains = seeds_and_chains // seeds
    shape = [(settings, "setting"), (streams, "stream"), (seeds, "seed")]
    shape += [(chains, "chain")] if chains > 1 else []
    grid = " x ".join(_plural(n, word) for n, word in [*shape, (methods, "method")])
    return f"{grid} = {_plural(len(cells), 'cell')}"


def cell_status(cell: Cell) -> str:
    """Where a cell's run stands (`records.run_status`), from its run directory's files alone, as `suite --check`
    shows it: "" (not started), "started" (no session has ended yet), "t/T" (stopped after request t), "done",
    "diverged at t" or "failed" (the suite recorded an error)."""
    run = RunDirectory(cell.run_dir)
    if not run.path.is_dir():
        return ""
    summary, requests = run.summary(), cell.config.stream.requests
    status = run_status(summary, requests, failed=run.error() is not None)
    if status == "diverged":
        return f"diverged at t={summary.diverged_at}"
    if status == "unfinished":
        return "started" if summary is None else f"{summary.requests_done}/{requests}"
    return "done" if status == "complete" else status


def cell_cost(cell: Cell) -> MeasuredCost:
    """What a cell's finished requests cost, from its rows (none where they cannot be read: `cell_status` says why)."""
    try:
        return MeasuredCost.of(RunDirectory(cell.run_dir).rows())
    except ValueError:  # a damaged metrics.jsonl (DamagedFileError): the leaderboard and the rerun name it
        return MeasuredCost()


def check_report(source: str, cells: list[Cell], shard: tuple[int, int] | None = None) -> list[str]:
    """The resolved grid as text: a header, one line per cell (of `shard`, if given), the models to train. Once some
    of the cells have run directories, a `status` column (`cell_status`), a count of them and what their finished
    requests cost (`RequestRecord.cost`) follow, so a long grid's progress and cost are read with the same command
    that planned it."""
    lines = [f"{source}: {grid_summary(cells)}; run directories in {cells[0].config.output.out}"]
    numbered = list(enumerate(cells, start=1))
    if shard is not None:
        numbered = select_shard(numbered, shard)
        lines.append(f"shard {shard[0]}/{shard[1]}: {_plural(len(numbered), 'cell')}")
    statuses = [cell_status(cell) for _, cell in numbered]
    shown = any(statuses)
    rows = [("cell", "setting", "stream", "seed", "method", "run directory", *(["status"] if shown else []))]
    for (i, cell), status in zip(numbered, statuses, strict=True):
        config = cell.config
        args = ", ".join(f"{k}={v}" for k, v in config.method.args.items())
        method = "+".join([config.method.name, *config.guard_names])
        rows.append(
            (
                str(i),
                f"{cell.position[0]} {config.data.name}/{config.arch.name}",
                f"{config.stream.kind}:{cell.identity.size} T={config.stream.requests}",
                str(config.seeds.seed),
                f"{method}({args})" if args else method,
                cell.run_dir.name,
                *([status] if shown else []),
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if shown:
        done = statuses.count("done")
        ended = sum(status.startswith(("diverged", "failed")) for status in statuses)
        under_way = sum(bool(status) for status in statuses) - done - ended
        cost = sum(
            (cell_cost(cell) for (_, cell), status in zip(numbered, statuses, strict=True) if status), MeasuredCost()
        )
        lines.append(
            f"{done} of {_plural(len(statuses), 'cell')} done, {ended} diverged or failed, {under_way} started and "
            f"not finished, {statuses.count('')} not started; their finished requests cost {cost.describe()}"
        )
    pretrained, oracles = models_to_train(cells)
    continual, single_shot = unlearning_fits(cells)
    lines.append(
        f"a first run trains {_plural(pretrained, 'pretrained model')} and {_plural(oracles, 'oracle')} into "
        f"{cells[0].config.store_dir} (fewer if they are there) and serves {continual + single_shot} unlearning "
        f"requests: {continual} continual and {single_shot} single-shot (fewer if cached); datasets were not "
        "loaded, so check they are on disk"
    )
    return lines
