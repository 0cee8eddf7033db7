"""Suite and tune-suite files as grids of partial run specs: their schema, one merge order, checks before torch.

A suite cell's run options are merged from the file's parts, a later part overriding an earlier one
(`recipe`, `dataset_args` and `arch_args` merged key by key between `common` and a setting):

    common < setting < stream < seed (and unlearning chain) < `methods` entry

and a tune study's from `common` < stream < its method (its budget and sampler are the file's own keys).
Each merged mapping is a partial `RunConfig` (`unlearnbench run`'s options by name, hardware keys
included): `plan.suite_grid` and `tune.suite_specs` build their configs from it, and `check_suite_file` and
`check_tune_file` put every one through `unlearnbench run`'s early checks (`early_checks.check_run_options`)
before torch and Lightning are imported, so a typo in a suite's last cell is refused in well under 2 s. This
module therefore imports neither, nor anything that does.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from unlearnbench.config import RUN_OPTIONS
from unlearnbench.early_checks import check_run_options
from unlearnbench.errors import ConfigError
from unlearnbench.io import check_writable_directory, load_yaml

TOP_KEYS = {"out", "store", "leaderboard", "common", "settings", "methods", "streams", "seeds", "unlearn_seeds"}
#: Run options a suite may not set in `common` or a setting: the grid's own axes (method, stream, seed), what a
#: `methods` entry or the file's top level sets, one run's own folder and the tuner's split.
NOT_COMMON = {"method", "stream", "seed", "method_args", "guard_args", "out", "store", "run_dir", "split"}
#: Run options a suite may set in `common` or a setting (`guards` among them): every other one, hardware included, so
#: a new run option is a suite key too.
COMMON_KEYS = {*RUN_OPTIONS, "guards"} - NOT_COMMON
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
class CellOptions:
    """One cell of a suite's grid: its 1-based (setting, stream, seed, method) position and its merged run options."""

    position: tuple[int, int, int, int]
    options: dict


def cell_options(suite: dict, out: Path | None = None, logger: str | None = None) -> list[CellOptions]:
    """The grid in run order (setting, stream, seed, method), each cell's options merged in the module's order;
    the file's schema checked, its values not yet. `out` and `logger`, when given, override the suite's own (the
    command line's `--out`/`--logger`)."""
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
        run_keys = dict(setting)
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
                    options = {
                        "method": entry.name,
                        "seed": seed,
                        "method_args": dict(entry.args),
                        "out": out_dir,
                        "store": Path(store) if store else None,
                        **{key: (dict(v) if isinstance(v, dict) else v) for key, v in values.items()},
                    }
                    cells.append(CellOptions((k, s, i * chains + chain + 1, m), options))
    return cells


def cell_label(index: int, count: int, options: Mapping[str, Any]) -> str:
    """How errors and progress name a cell: its place in the grid and what it runs (`options`: a cell's run options,
    or a `RunConfig`'s fields)."""
    setting = f"{options.get('dataset', 'digits')}/{options.get('arch', 'smallcnn')}"
    return (
        f"cell {index}/{count} ({setting}, {options['method']}, {options.get('stream', 'classwise')}, "
        f"seed {options['seed']})"
    )


def check_suite_file(path: Path, out: Path | None = None, logger: str | None = None) -> None:
    """The suite file read, its schema and every cell's run options checked as `unlearnbench run` checks its own
    before anything heavy is imported; SuiteError naming the first bad cell."""
    cells = cell_options(load_suite(path), out, logger)
    for index, cell in enumerate(cells, start=1):
        try:
            check_run_options(cell.options)
        except ConfigError as error:
            raise SuiteError(f"{cell_label(index, len(cells), cell.options)}: {error}") from None


#: Keys of a tune suite file (`benchmarks/tune_cpu.yaml`); `common` takes the run keys below.
TUNE_SUITE_KEYS = {
    "out",
    "storage",
    "store",
    "trials",
    "tune_seeds",
    "objective",
    "sampler",
    "pruner",
    "heartbeat",
    "common",
    "methods",
    "streams",
}
TUNE_COMMON_KEYS = {
    "dataset",
    "dataset_args",
    "arch",
    "arch_args",
    "data_dir",
    "requests",
    "size",
    "recipe",
    "accelerator",
    "devices",
    "precision",
}
#: A tune study's own keys of a tune suite (the rest of a study is run options).
STUDY_KEYS = ("trials", "objective", "sampler", "pruner", "heartbeat")


def study_options(suite: dict, out: Path | None = None, storage: str | None = None) -> list[dict]:
    """Every study of a tune suite, in order (stream-major, then method): its options by name (`TuneSpec.from_options`),
    merged in the module's order; the schema checked, the values not yet. `methods: all` is every registered
    method (`tune.suite_specs` leaves out the stream kinds a method does not serve)."""
    from unlearnbench.registry import METHODS

    unknown = sorted(set(suite) - TUNE_SUITE_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown tune suite key(s) {', '.join(unknown)}; valid: {', '.join(sorted(TUNE_SUITE_KEYS))}"
        )
    common = suite.get("common") or {}
    if not isinstance(common, dict) or set(common) - TUNE_COMMON_KEYS:
        raise ConfigError(f"`common` of a tune suite takes only: {', '.join(sorted(TUNE_COMMON_KEYS))}")
    methods = suite.get("methods")
    if methods == "all":
        methods = sorted(METHODS.catalog())  # read from source: nothing imported
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        raise ConfigError("`methods` must be `all` or a non-empty list of method names")
    run_keys = dict(common)
    if run_keys.get("data_dir") is not None:
        run_keys["data_dir"] = Path(run_keys["data_dir"])
    options = {k: suite[k] for k in STUDY_KEYS if k in suite}
    if "tune_seeds" in suite:
        options["tune_seeds"] = tuple(suite["tune_seeds"])
    where = {
        "out": Path(out or suite.get("out") or "tuned"),
        "storage": storage or suite.get("storage"),
        "store": Path(suite["store"]) if suite.get("store") else None,
    }
    return [
        {"method": method, **where, **run_keys, **stream, **options}
        for stream in _streams(suite.get("streams"))
        for method in methods
    ]


def check_tune_file(path: Path) -> None:
    """A tune suite read, its schema and every study's run options checked as `unlearnbench run` checks its own,
    before anything heavy is imported; ConfigError naming the study."""
    for study in study_options(load_suite(path)):
        try:
            check_run_options(study)
        except ConfigError as error:
            raise ConfigError(
                f"tune study of {study['method']} on {study.get('stream', 'classwise')}: {error}"
            ) from None


def suite_parser():
    """`unlearnbench suite`'s options, built without torch: `cmd_suite` parses the command line with it before the
    suite file is read, so a misspelt option (`--chec`) is refused in well under 2 s, as a bad cell is."""
    from unlearnbench.parsers import command_parser  # looked up at each call, as the docs' option test replaces it
    from unlearnbench.registry import LOGGERS

    parser = command_parser("suite", "Run a grid of runs, then build the leaderboard.")
    parser.add_argument(
        "suite", type=Path, help="suite YAML file (schema: docs/reporting.md, Suites; code: unlearnbench/grid.py)"
    )
    parser.add_argument(
        "--out", type=Path | None, default=None, help="folder of run directories (overrides the suite's)"
    )
    parser.add_argument(
        "--logger",
        type=str | None,
        default=None,
        help=f"one of: {', '.join(LOGGERS.catalog())} (overrides the suite's)",
    )
    parser.add_argument("--quiet", type=bool, default=False)
    parser.add_argument("--shard", type=str | None, default=None, help="i/n: run only shard i of n (job arrays)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="resolve every cell and print the grid; load no dataset, run and write nothing",
    )
    return parser
