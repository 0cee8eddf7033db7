"""Planning: suite files and run options turned into resolved runs, with nothing loaded or written.

The suite schema is here (`load_suite`, `suite_grid`: the grid of a suite file, each cell a
`RunConfig`) and so is resolution (`resolve_run`: a run's identity and run directory as its
`Runner` will compute them). `unlearnbench run`, `unlearnbench suite`, `suite --check` and the
tuner all plan through this module; it imports no running code, so planning a suite of the seed
papers' settings on a laptop without the datasets is instant, and a typo in its last setting fails
before the first model trains for a day. The checks of the values themselves are
`RunConfig.validate`'s, so a suite accepts exactly what `unlearnbench run` accepts. Stream sizes are
checked against a dataset's train-split size and class count where its registration declares them
(`data.base.known_size`); other datasets' streams are checked when the run loads them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from unlearnbench.config import ConfigError, Hardware, RunConfig
from unlearnbench.data.base import data_root
from unlearnbench.io import check_writable_directory, load_yaml
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.records import RunIdentity
from unlearnbench.registry import METHODS, STREAMS
from unlearnbench.rundir import RunDirectory
from unlearnbench.training import Recipe

TOP_KEYS = {"out", "store", "leaderboard", "common", "settings", "methods", "streams", "seeds", "unlearn_seeds"}
HARDWARE_KEYS = {f.name for f in fields(Hardware)}
#: RunConfig fields a suite may set in `common` or a setting (the grid sets method, stream, seed).
COMMON_KEYS = {
    "dataset",
    "dataset_args",
    "arch_args",
    "data_dir",
    "download",
    "arch",
    "requests",
    "size",
    "oracle",
    "oracle_every",
    "single_shot_every",
    "single_shot_baseline",
    "oracle_seeds",
    "train_seed",
    "unlearn_seed",
    "stream_seed",
    "mia_protocol",
    "recipe",
    "save_logits",
    "logger",
    "guards",
    "hparams",
} | HARDWARE_KEYS
STREAM_KEYS = {"stream", "size", "requests"}
#: Mappings a setting merges key by key into `common`'s instead of replacing them.
MERGED_KEYS = ("recipe", "dataset_args", "arch_args")


class SuiteError(ConfigError):
    """An invalid suite file: reported as one line, exit code 2, nothing written."""


def load_suite(path: Path) -> dict:
    try:
        data = load_yaml(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SuiteError(f"cannot read suite {path}: {error}".replace("\n", " ")) from error
    if not isinstance(data, dict):
        raise SuiteError(f"suite {path} must be a YAML mapping with at least `methods`")
    return data


METHOD_ENTRY_KEYS = {"method", "args", "guards"}


@dataclass(frozen=True)
class MethodEntry:
    """One `methods` entry: a method, its hyperparameters, and its own guards (None: the setting's)."""

    name: str
    args: dict
    guards: tuple[str, ...] | None = None
    guard_args: dict | None = None


def _methods(spec: Any) -> list[MethodEntry]:
    if isinstance(spec, dict):
        spec = [{name: args} for name, args in spec.items()]
    if not isinstance(spec, list) or not spec:
        raise SuiteError("`methods` must be a non-empty list of names or {name: {hyperparameters}}")
    methods = []
    for item in spec:
        if isinstance(item, str):
            methods.append(MethodEntry(item, {}))
        elif isinstance(item, dict) and "method" in item:
            unknown = sorted(set(item) - METHOD_ENTRY_KEYS)
            if unknown:
                raise SuiteError(
                    f"unknown key(s) {', '.join(unknown)} in a `methods` entry; valid: "
                    f"{', '.join(sorted(METHOD_ENTRY_KEYS))}"
                )
            args = item.get("args") or {}
            if not isinstance(args, dict):
                raise SuiteError(f"`args` of method {item['method']!r} must be a mapping, got {args!r}")
            guards = _guards(item["guards"], f"method {item['method']!r}") if "guards" in item else (None, None)
            methods.append(MethodEntry(str(item["method"]), dict(args), *guards))
        elif isinstance(item, dict) and len(item) == 1:
            name, args = next(iter(item.items()))
            if args is not None and not isinstance(args, dict):
                raise SuiteError(f"hyperparameters of method {name!r} must be a mapping, got {args!r}")
            methods.append(MethodEntry(str(name), dict(args or {})))
        else:
            raise SuiteError(
                f"a `methods` entry must be a name, {{name: {{hyperparameters}}}} or {{method: name, args: ..., "
                f"guards: ...}}, got {item!r}"
            )
    return methods


def _guards(spec: Any, where: str) -> tuple[tuple[str, ...], dict]:
    """`guards:` as on the command line: names in the order they apply, each optionally {name: {arguments}}."""
    if spec is None:
        return (), {}
    if not isinstance(spec, list):
        raise SuiteError(f"`guards` of {where} must be a list of guard names or {{name: {{arguments}}}}, got {spec!r}")
    names, args = [], {}
    for item in spec:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item.values())) or {}, dict):
            name, values = next(iter(item.items()))
            names.append(str(name))
            if values:
                args[str(name)] = dict(values)
        else:
            raise SuiteError(f"a `guards` entry of {where} must be a name or {{name: {{arguments}}}}, got {item!r}")
    return tuple(names), args


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
    for key in MERGED_KEYS:
        if key in spec and not isinstance(spec[key], dict):
            raise SuiteError(f"`{key}` in {where} must be a mapping of {key.replace('_args', '')} keys")
    options = dict(spec)
    if "guards" in options:
        options["guards"], options["guard_args"] = _guards(options["guards"], where)
    return options


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
        for key in MERGED_KEYS:
            if key in common and key in options:
                merged[key] = {**common[key], **options[key]}
        settings.append(merged)
    return settings


@dataclass(frozen=True)
class GridConfig:
    """One cell of the grid before it is resolved: its 1-based (setting, stream, seed, method) position."""

    position: tuple[int, int, int, int]
    config: RunConfig


def _seeds_and_chains(suite: dict) -> tuple[list[int], int]:
    """The suite's `seeds` and its unlearning chains per seed (`unlearn_seeds`), checked."""
    seeds = suite.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise SuiteError(f"`seeds` must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SuiteError(f"`seeds` lists a seed twice: {seeds}")
    chains = suite.get("unlearn_seeds", 1)
    if not isinstance(chains, int) or isinstance(chains, bool) or chains < 1:
        raise SuiteError(f"`unlearn_seeds` must be a whole number >= 1 (unlearning chains per seed), got {chains!r}")
    return seeds, chains


def _check_leaderboard(board: Any) -> None:
    """`leaderboard`: a folder (writable, found now rather than after every cell has run), false, or absent."""
    if board is not None and board is not False and not isinstance(board, str):
        raise SuiteError(f"`leaderboard` must be a folder, or false for none, got {board!r}")
    if isinstance(board, str):
        check_writable_directory(Path(board))


def suite_grid(suite: dict, out: Path | None = None, logger: str | None = None) -> list[GridConfig]:
    """The grid in run order, each cell with its position; its schema checked, its cells not yet resolved."""
    unknown = sorted(set(suite) - TOP_KEYS)
    if unknown:
        raise SuiteError(f"unknown suite key(s) {', '.join(unknown)}; valid: {', '.join(sorted(TOP_KEYS))}")
    settings = _settings(suite.get("settings"), _options(suite.get("common"), "`common`"))
    seeds, chains = _seeds_and_chains(suite)
    if "methods" not in suite:
        raise SuiteError("a suite needs `methods`")
    methods = _methods(suite["methods"])
    streams = _streams(suite.get("streams"))
    out_dir = Path(out) if out is not None else Path(suite.get("out") or "runs")
    store = suite.get("store")
    _check_leaderboard(suite.get("leaderboard"))
    cells = []
    for k, setting in enumerate(settings, start=1):
        hardware = Hardware(**{key: setting[key] for key in HARDWARE_KEYS if key in setting})
        run_keys = {key: value for key, value in setting.items() if key not in HARDWARE_KEYS}
        if logger is not None:
            run_keys["logger"] = logger
        for key in ("data_dir", "hparams"):
            if run_keys.get(key) is not None:
                run_keys[key] = Path(run_keys[key])
        for s, stream in enumerate(streams, start=1):
            for (i, seed), chain in itertools.product(enumerate(seeds), range(chains)):
                for m, entry in enumerate(methods, start=1):
                    values = {**run_keys, **stream}
                    if chain:  # chain j: unlearn seed (the setting's, else the seed) + j; chain 0 is the plain run
                        base = values.get("unlearn_seed")
                        values["unlearn_seed"] = (seed if base is None else base) + chain
                    if entry.guards is not None:
                        values |= {"guards": entry.guards, "guard_args": entry.guard_args}
                    values["guards"] = list(values.get("guards", ()))
                    config = RunConfig(
                        method=entry.name,
                        seed=seed,
                        method_args=dict(entry.args),
                        out=out_dir,
                        store=Path(store) if store else None,
                        hardware=hardware,
                        **{key: (dict(v) if isinstance(v, dict) else v) for key, v in values.items()},
                    )
                    cells.append(GridConfig((k, s, i * chains + chain + 1, m), config))
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


@dataclass(frozen=True)
class Cell:
    """One resolved cell: its 1-based (setting, stream, seed, method) position, config, identity, run directory."""

    position: tuple[int, int, int, int]
    config: RunConfig
    identity: RunIdentity
    run_dir: Path


def check_suite(suite: dict, out: Path | None = None, logger: str | None = None) -> list[Cell]:
    """The suite's cells in run order, each resolved; raises SuiteError naming the first bad cell."""
    grid = suite_grid(suite, out, logger)
    cells: list[Cell] = []
    seen: dict[Path, int] = {}
    for i, item in enumerate(grid, start=1):
        label = cell_label(i, len(grid), item.config)
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
    identity, run_dir = resolve_run(item.config)
    return Cell(item.position, item.config, identity, run_dir)


@dataclass(frozen=True)
class RunPlan:
    """One run resolved without loading data or writing anything: the method built from its checked
    arguments, the recipe merged, the identity (what its numbers depend on) and its run directory."""

    config: RunConfig
    method: UnlearningMethod
    recipe: Recipe
    identity: RunIdentity
    run_dir: Path


def plan_run(config: RunConfig, require_recipe: bool = True) -> RunPlan:
    """The run plan of `config`; the one place a run's method, recipe and identity are resolved, for `run`,
    every suite cell, `suite --check` and the tuner alike.

    `require_recipe`: a suite's cell must name its (dataset, arch) recipe (`_recipe`); a single `run`
    falls back on `Recipe`'s generic defaults when there is no file.
    """
    config.validate()  # names, numbers, hardware and, for datasets of known size, the stream's sizes
    try:
        method = METHODS.get(config.method)(**config.method_kwargs())
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid arguments for method {config.method!r}: {error}") from error
    recipe = (
        _recipe(config) if require_recipe else replace(Recipe.for_setting(config.dataset, config.arch), **config.recipe)
    )
    size = STREAMS.get(config.stream).default_size if config.size is None else config.size
    identity = config.identity(dict(method.hparams), recipe.as_dict(), size)
    run_dir = config.run_path(identity)
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
    path = Recipe.path_for(config.dataset, config.arch)
    missing = [f.name for f in fields(Recipe) if f.name not in config.recipe]
    if missing and not path.is_file():
        raise ConfigError(
            f"no recipe unlearnbench/recipes/{path.name} for ({config.dataset}, {config.arch}): add one that cites its "
            f"source, or give {', '.join(missing)} in `recipe`"
        )
    return replace(Recipe.for_setting(config.dataset, config.arch), **config.recipe)


def _check_data_dirs(cells: list[Cell]) -> None:
    """One folder per dataset name: the model store and run directories know a dataset by name only."""
    folders: dict[str, set[Path]] = {}
    for cell in cells:
        folders.setdefault(cell.config.dataset, set()).add(data_root(cell.config.data_dir))
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
        if config.oracle == "retrain":
            stream = (config.stream, cell.identity.size, config.requests, config.resolved_seed("stream_seed"))
            scheduled = [t for t in range(1, config.requests + 1) if config.oracle_at(t)]
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
        continual += config.requests
        setting = json.dumps(
            [_pretrained_key(cell), cell.identity.method, cell.identity.method_args, cell.identity.guards],
            sort_keys=True,
        )
        seeds = (config.resolved_seed("stream_seed"), config.resolved_seed("unlearn_seed"), config.seed)
        stream = (config.stream, cell.identity.size, config.requests, config.mia_protocol, *seeds)
        single_shot |= {
            (setting, stream, t, kind)
            for t in range(2, config.requests + 1)
            if config.single_shot_at(t)
            for kind in config.single_shot_kinds
        }
    return continual, len(single_shot)


def _pretrained_key(cell: Cell) -> tuple:
    """(dataset, data and arch arguments, arch, recipe, train seed): what the pretrained model depends on."""
    config = cell.config
    data = json.dumps([cell.identity.dataset_args, cell.identity.arch_args], sort_keys=True)
    recipe = json.dumps(cell.identity.recipe, sort_keys=True)
    return (config.dataset, data, config.arch, recipe, config.resolved_seed("train_seed"))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def grid_summary(cells: list[Cell]) -> str:
    """`4 settings x 2 streams x 3 seeds x 5 methods = 120 cells`: the grid's shape, as suite files quote it;
    `... x 1 seed x 8 chains x ...` where `unlearn_seeds` runs several chains per seed."""
    settings, streams, seeds_and_chains, methods = (max(cell.position[k] for cell in cells) for k in range(4))
    seeds = len({cell.config.seed for cell in cells})
    chains = seeds_and_chains // seeds
    shape = [(settings, "setting"), (streams, "stream"), (seeds, "seed")]
    shape += [(chains, "chain")] if chains > 1 else []
    grid = " x ".join(_plural(n, word) for n, word in [*shape, (methods, "method")])
    return f"{grid} = {_plural(len(cells), 'cell')}"


def check_report(source: str, cells: list[Cell], shard: tuple[int, int] | None = None) -> list[str]:
    """The resolved grid as text: a header, one line per cell (of `shard`, if given), the models to train."""
    lines = [f"{source}: {grid_summary(cells)}; run directories in {cells[0].config.out}"]
    numbered = list(enumerate(cells, start=1))
    if shard is not None:
        numbered = select_shard(numbered, shard)
        lines.append(f"shard {shard[0]}/{shard[1]}: {_plural(len(numbered), 'cell')}")
    rows = [("cell", "setting", "stream", "seed", "method", "run directory")]
    for i, cell in numbered:
        config = cell.config
        args = ", ".join(f"{k}={v}" for k, v in config.method_args.items())
        method = "+".join([config.method, *config.guards])
        rows.append(
            (
                str(i),
                f"{cell.position[0]} {config.dataset}/{config.arch}",
                f"{config.stream}:{cell.identity.size} T={config.requests}",
                str(config.seed),
                f"{method}({args})" if args else method,
                cell.run_dir.name,
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    pretrained, oracles = models_to_train(cells)
    continual, single_shot = unlearning_fits(cells)
    lines.append(
        f"a first run trains {_plural(pretrained, 'pretrained model')} and {_plural(oracles, 'oracle')} into "
        f"{cells[0].config.store_dir} (fewer if they are there) and serves {continual + single_shot} unlearning "
        f"requests: {continual} continual and {single_shot} single-shot (fewer if cached); datasets were not "
        "loaded, so check they are on disk"
    )
    return lines
