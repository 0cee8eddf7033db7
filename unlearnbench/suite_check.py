"""`unlearnbench suite SUITE.yaml --check`: every cell of a suite resolved, nothing loaded or run.

A suite of the seed papers' settings trains hundreds of models; a typo in its last setting must
not surface after the first ones have trained for a day, and a cluster job should be checkable on
a laptop that holds none of the datasets. `check_suite` resolves each cell as its `Runner` would
(registry names, method hyperparameters, the (dataset, arch) recipe, stream sizes, the run
identity and directory) but loads no dataset and writes nothing. Stream sizes are checked
against a dataset's train-split size and class count where its registration declares them
(`data.base.known_size`); other datasets' streams are checked when the run loads them.
`run_suite` runs this check before it builds any Runner.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.data.base import KnownSize, data_root
from unlearnbench.registry import DATASETS, METHODS, STREAMS
from unlearnbench.rundir import RunDirectory
from unlearnbench.suite import GridConfig, SuiteError, cell_label, select_shard, suite_grid
from unlearnbench.training import Recipe


@dataclass(frozen=True)
class Cell:
    """One resolved cell: its 1-based (setting, stream, seed, method) position, config, identity, run directory."""

    position: tuple[int, int, int, int]
    config: RunConfig
    identity: dict
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
                f"on (method and its arguments, stream, size, requests, dataset, arch, seed, oracle, recipe, "
                f"precision), not data_dir, download, logger or other hardware keys; remove the duplicate"
            )
        seen[cell.run_dir] = i
        cells.append(cell)
    _check_data_dirs(cells)
    return cells


def _resolve(item: GridConfig) -> Cell:
    config = item.config
    config.validate()
    _check_run_options(config)
    method_class = METHODS.get(config.method)
    defaults = {name: p.default for name, p in inspect.signature(method_class).parameters.items()}
    _check_numbers(config.method_args, defaults, f"method {config.method!r} argument")
    try:
        method = method_class(**config.resolved_method_args())
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid arguments for method {config.method!r}: {error}") from error
    recipe = _recipe(config)
    size = STREAMS.get(config.stream).default_size if config.size is None else config.size
    known: KnownSize | None = getattr(DATASETS.get(config.dataset), "known_size", None)
    if known is not None:
        STREAMS.get(config.stream)().validate(known.num_train, known.num_classes, config.requests, size)
    identity = config.identity(dict(method.hparams), recipe.as_dict(), size)
    run_dir = config.run_path(identity)
    RunDirectory(run_dir).check(identity)  # reads an existing run's config.yaml, if any
    return Cell(item.position, config, identity, run_dir)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_run_options(config: RunConfig) -> None:
    if not _is_int(config.requests) or config.requests < 1:
        raise ConfigError(f"requests must be a whole number >= 1, got {config.requests!r}")
    if config.size is not None and not _is_number(config.size):
        raise ConfigError(f"size must be a number, got {config.size!r}")
    for name in ("download", "save_logits"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name} must be true or false, got {getattr(config, name)!r}")


def _check_numbers(values: dict, defaults: dict, what: str) -> None:
    """A number where the default is a number, a flag where it is a flag.

    YAML reads `1e-4` (no dot) and `1.0e4` (no exponent sign) as text; uncaught, such a value
    fails only when unlearning starts, after the pretrained model and the oracles were trained.
    """
    for name, value in values.items():
        default = defaults.get(name)
        if isinstance(default, bool):
            expected, ok = "true or false", isinstance(value, bool)
        elif isinstance(default, int):
            expected, ok = "a whole number", _is_int(value)
        elif isinstance(default, float):
            expected, ok = "a number", _is_number(value)
        else:
            continue
        if not ok:
            hint = " (YAML reads 1e-4 as text: write 1.0e-4)" if isinstance(value, str) else ""
            raise ConfigError(f"{what} {name} must be {expected}, got {value!r}{hint}")


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
    _check_numbers(config.recipe, Recipe().as_dict(), "recipe key")
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

    One pretrained model per (dataset, arch, recipe, seed) and, when the oracle is retrained, T per
    (those, stream, size, requests). At most: two streams whose first requests forget the same
    samples share those oracles in the store.
    """
    pretrained, streams = set(), set()
    for cell in cells:
        config = cell.config
        key = (config.dataset, config.arch, json.dumps(cell.identity["recipe"], sort_keys=True), config.seed)
        pretrained.add(key)
        if config.oracle == "retrain":
            streams.add((*key, config.stream, cell.identity["size"], config.requests))
    return len(pretrained), sum(key[-1] for key in streams)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def grid_summary(cells: list[Cell]) -> str:
    """`4 settings x 2 streams x 3 seeds x 5 methods = 120 cells`: the grid's shape, as suite files quote it."""
    shape = [max(cell.position[k] for cell in cells) for k in range(4)]
    grid = " x ".join(_plural(n, word) for n, word in zip(shape, ("setting", "stream", "seed", "method"), strict=True))
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
        rows.append(
            (
                str(i),
                f"{cell.position[0]} {config.dataset}/{config.arch}",
                f"{config.stream}:{cell.identity['size']} T={config.requests}",
                str(config.seed),
                f"{config.method}({args})" if args else config.method,
                cell.run_dir.name,
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    pretrained, oracles = models_to_train(cells)
    lines.append(
        f"a first run trains {_plural(pretrained, 'pretrained model')} and {_plural(oracles, 'oracle')} into "
        f"{cells[0].config.store_dir} (fewer if they are there); datasets were not loaded, so check they are on disk"
    )
    return lines
