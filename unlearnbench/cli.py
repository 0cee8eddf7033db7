"""`unlearnbench run | list`: the command line (jsonargparse, typed from the classes' signatures; `run`'s parser is
`run_options.run_parser`, which parses suite cells and tune studies too).

A method's hyperparameters are a group named after the method, read from its `__init__`
signature: `unlearnbench run --method salun --salun.ratio 0.3`, or in a `--config` YAML file
`salun: {ratio: 0.3}`; a gradient method's SGD settings are a group of their own,
`--salun.optim.lr 0.1` (YAML `salun: {optim: {lr: 0.1}}`). Bad input is one line on stderr and
exit code 2, before anything is written.
Exit codes are decided in `main` alone: `ConfigError` (every bad input and damaged file derives from
it) is 2, a SIGINT/SIGTERM (`Interrupted`) 128 + the signal, a failed write 1, divergence 3.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import warnings
from contextvars import ContextVar
from dataclasses import fields
from pathlib import Path
from types import UnionType
from typing import get_args, get_origin, get_type_hints

import yaml
from jsonargparse import ArgumentError as JsonArgumentError
from jsonargparse import Namespace

from unlearnbench.errors import ConfigError, excerpt, print_warnings_as_lines
from unlearnbench.interrupt import Interrupted, exit_process, ignore_late_signals, interruptible
from unlearnbench.io import load_yaml
from unlearnbench.run_options import check_sections, method_options, parse_tuned, run_config, run_parser

EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_IO = 1


class UsageError(ConfigError):
    """Bad input on the command line: reported as one line, exit code 2."""


def _config_paths(argv: list[str]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


#: The --config files read by the command under way ({path: options}; None outside one): each is read once per
#: command, though the early checks, the replay of a record, the choice of method and guards and the retired
#: spellings' check all look into it before jsonargparse reads it for the parse itself.
_CONFIGS_READ: ContextVar[dict[str, dict] | None] = ContextVar("configs_read", default=None)


@contextlib.contextmanager
def _configs_read_once():
    """Within it, `_read_config` reads each file once (nested: the outer command's reads are shared)."""
    if _CONFIGS_READ.get() is not None:
        yield
        return
    token = _CONFIGS_READ.set({})
    try:
        yield
    finally:
        _CONFIGS_READ.reset(token)


def _read_config(path: str) -> dict:
    """A --config file's run options (the mapping itself, or its `run:` section), or one line saying why not; read
    once per command (`_configs_read_once`)."""
    read = _CONFIGS_READ.get()
    if read is not None and path in read:
        return read[path]
    options = _config_options(path)
    if read is not None:
        read[path] = options
    return options


def _config_options(path: str) -> dict:
    try:
        data = load_yaml(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"cannot read config {path}: {error}") from error
    if not isinstance(data, dict):
        raise UsageError(f"config {path} must be a YAML mapping of option names to values")
    options = data.get("run", data)
    if not isinstance(options, dict):
        raise UsageError(f"`run` in config {path} must be a mapping of option names to values, got {excerpt(options)}")
    return options


def _fail(message: str) -> None:
    one_line = " ".join(message.split()) or "invalid input"
    print(f"unlearnbench: error: {one_line}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _chosen(given: dict[str, object], option: str) -> str | None:
    """The name `option` is given (`_given`: the command line and --config files, the last one wins), as the parser
    will see it."""
    value = given.get(option)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{option} must be a name, got {excerpt(value)}")
    return value


def _given(argv: list[str]) -> dict[str, object]:
    """Every `--name value` of the command line and the --config files, in the parser's order (a later one wins),
    by name with `_` for `-`: values as written (text on the command line, YAML's types in a file); a flag with no
    value is True."""
    given: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            continue
        name, has_value, value = arg[2:].partition("=")
        if not has_value:
            value = argv[i] if i < len(argv) and not argv[i].startswith("--") else True
            i += value is not True
        if name == "config":
            given |= _read_config(str(value))
        else:
            given[name.replace("-", "_")] = value
    return given


@functools.cache
def _early_options() -> dict[str, type]:
    """The run's own options checked before anything heavy is imported (each run option that holds a number, a flag
    or a list), and how a command-line text becomes their value: the field's type, `None` aside."""
    from unlearnbench.config import RUN_OPTIONS

    kinds = {}
    for name, (_, cls, spec) in RUN_OPTIONS.items():
        hint = get_type_hints(cls)[spec.name]
        if get_origin(hint) is UnionType:  # `int | None`: an int, or null
            hint = next(arg for arg in get_args(hint) if arg is not type(None))
        kind = get_origin(hint) or hint
        if spec.metadata.get("help") and kind in (int, float, bool, list):
            kinds[name] = kind
    return kinds


def _early_value(text: object, kind: type) -> object:
    """A command-line text as the parser would read it; a YAML value as it is. `_UNREAD` where the parser will be
    the one to refuse it (its message names the expected type)."""
    if not isinstance(text, str):
        return text
    if text.lower() in ("null", "none"):
        return None
    if kind is bool:
        return {"true": True, "false": False}.get(text.lower(), _UNREAD)
    if kind is list:  # `[8, 4]`, as the parser reads a list
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return _UNREAD
        return value if isinstance(value, list) else _UNREAD
    try:
        return kind(text)
    except ValueError:
        return _UNREAD


_UNREAD = object()


def _check_early(argv: list[str]) -> None:
    """What the run's options alone decide (`unlearnbench.early_checks`): refused before torch is imported."""
    from unlearnbench import known_arguments
    from unlearnbench.early_checks import (
        CHOICES,
        check_data_dir,
        check_hardware_choices,
        check_names,
        check_recipe,
        check_run_choices,
        check_run_numbers,
    )

    given = _given(argv)
    if {"help", "print_config"} & set(given) or "-h" in argv:  # they print and exit: nothing runs
        return
    check_names(given)
    values = {name: _early_value(given[name], kind) for name, kind in _early_options().items() if name in given}
    check_run_numbers({name: value for name, value in values.items() if value is not _UNREAD})
    check_run_choices({name: given[name] for name in CHOICES if name in given})
    download = values.get("download", False)
    check_data_dir(given.get("data_dir"), download is True)
    args, known = _parse_own_options(argv, given)
    check_recipe(args.recipe)  # the command line's, read as the parser reads it
    _check_known_groups(args, known)
    _check_stream_size(given, values, args, known)
    choices = known_arguments.hardware_choices()
    if choices is not None:  # (a value that is no text, from a --config file, is the parser's to refuse)
        check_hardware_choices({name: given[name] for name in choices if isinstance(given.get(name), str)}, choices)


def _check_stream_size(given: dict[str, object], values: dict[str, object], args, known: dict) -> None:
    """The stream against the dataset's declared size (`--requests 11` of one class each on digits' 10 classes), as
    `RunConfig.validate` checks it, where the stream, the dataset and its subset are known here: a built-in stream
    (its own module imported, numpy only), a built-in dataset whose group was parsed early (`_known_groups`)."""
    stream = _chosen(given, "stream") or args.stream
    numbers = {"requests": args.requests, "size": args.size}
    numbers |= {name: values[name] for name in numbers if name in values}  # a --config file's too
    if "dataset_args" in known and _UNREAD not in numbers.values():
        dataset, train_size = known["dataset_args"][1], args.get("dataset_args.train_size")
        _check_builtin_stream_size(stream, dataset, numbers["requests"], numbers["size"], train_size)


def _check_builtin_stream_size(
    stream: str, dataset: str, requests: int, size: float | None, train_size: int | None, view: bool = False
) -> None:
    """A built-in stream against a built-in dataset's declared size (`known_arguments`), on the train split or its
    subset of `train_size`, and with `view` also on the validation view's train part (`tune`'s trials); importing
    the stream kind's own module only. Any other stream or dataset is the full check's."""
    from unlearnbench import known_arguments
    from unlearnbench.data.validation import view_train_size
    from unlearnbench.early_checks import check_stream_size
    from unlearnbench.registry import DATASETS, STREAMS

    if stream not in STREAMS.builtins() or dataset not in DATASETS.builtins():
        return
    known = known_arguments.known_size(dataset)
    if known is not None:
        for part in [train_size, *([view_train_size(known.num_train)] if view else [])]:
            check_stream_size(STREAMS.builtin(stream), known, requests, size, part)


def _parse_own_options(argv: list[str], given: dict[str, object]):
    """The command line's options of `run` itself parsed by the parser `run` builds, with the argument groups of the
    built-in classes that `known_arguments` holds (`_known_groups`): a misspelt or unknown option (`--reqests 2`,
    `--salun.nope 1`), a value of the wrong type (`--requests abc`, `--salun.ratio abc`, `--salun '{"ratio": "x"}'`)
    and an option of a group that is not there (`--salun.ratio` beside `--method finetune`) are refused with the
    parser's own words before torch is imported. The --config files are parsed too where the parser holds every key
    they name; else they are left out (a plugin's method section), and so are the groups they have a section of. The
    groups of other classes are left to the full parse. Returns the parsed options and the groups parsed."""
    from unlearnbench import known_arguments

    guards, argv = _chosen_guards(_replayed_records(argv))  # (a run's record stands for its options, replayed)
    argv = _argument_groups(argv)
    method = _chosen(given, "method")
    if known_arguments.options("methods", method) is not None:  # as the full parse does first
        _refuse_retired_spellings(argv, method, known_arguments.settings(method))
    known = _known_groups(given, method, guards)
    parser = run_parser(None, (), None, None)
    for key, (section, name) in known.items():
        if section in ("methods", "guards"):  # a class's group, as `run_parser` makes it: given whole too
            parser.add_class_arguments(known_arguments.group_class(section, name), nested_key=key)
            continue
        for option, kind, default in known_arguments.options(section, name):  # `_add_data_arguments`'s options
            parser.add_argument(f"--{key}.{option}", type=kind, default=default)
    keys = {action.dest.split(".", 1)[0] for action in parser._actions}  # (jsonargparse lists its options no other way)
    sections = {key for path in _config_paths(argv) for key in _read_config(path)}
    configs = sections <= keys
    if not configs:
        known = {key: group for key, group in known.items() if key not in sections}
    groups = {"dataset_args", "arch_args", *guards, *([method] if method else [])} - set(known)
    own, i = [], 0
    while i < len(argv):
        arg = argv[i]
        alone = not arg.startswith("--") or "=" in arg or i + 1 == len(argv) or argv[i + 1].startswith("--")
        step = 1 if alone else 2  # an option and the value after it, as `_given` reads them
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if (configs or name != "config") and name.split(".", 1)[0] not in groups:  # `--salun.ratio 0.3`
            own += argv[i : i + step]
        i += step
    if method is not None and not any(arg == "--method" or arg.startswith("--method=") for arg in own):
        own += ["--method", method]  # named by a --config file (which this parse may leave out)
    try:
        args = parser.parse_args(own)
    except JsonArgumentError as error:
        raise UsageError(str(error)) from error
    check_sections(parser, args, known)
    return args, known


def _known_groups(given: dict[str, object], method: str | None, guards: list[str]) -> dict:
    """The argument groups whose class `known_arguments` holds, by key (`salun`, `dataset_args`): (its section, the
    class's name). Left to the full parse is a method's where tuned values (`--hparams`) stand under the given ones:
    the early check must never refuse what the full parse takes."""
    from unlearnbench import known_arguments

    chosen = {guard: ("guards", guard) for guard in guards}
    chosen |= {"dataset_args": ("datasets", _chosen(given, "dataset") or "digits")}
    chosen |= {"arch_args": ("archs", _chosen(given, "arch") or "smallcnn")}
    if method is not None and "hparams" not in given:
        chosen[method] = ("methods", method)
    return {key: group for key, group in chosen.items() if known_arguments.options(*group) is not None}


def _check_known_groups(args, known: dict) -> None:
    """The values of the groups parsed early (`_known_groups`), checked as `RunConfig.validate` checks them, in its
    order (the dataset's, the arch's, the method's, the guards'), by the same functions, from `known_arguments`."""
    from unlearnbench import known_arguments
    from unlearnbench.early_checks import (
        check_arch_arguments,
        check_dataset_arguments,
        check_group_mapping,
        check_numbers,
    )
    from unlearnbench.ranges import check_ranges

    order = ("datasets", "archs", "methods", "guards")
    for key, (section, name) in sorted(known.items(), key=lambda item: order.index(item[1][0])):
        options = known_arguments.options(section, name)
        if section == "methods":  # a group given as no mapping (`salun: {optim: 3}`), as `check_method_arguments` says
            for group, settings in known_arguments.settings(name).items():
                value = args.get(f"{key}.{group}")
                if not isinstance(value, Namespace):
                    check_group_mapping(name, group, settings, value)
        # an option of a group given as null (`salun: null`, `salun: {optim: null}`) is left at its default
        values = {
            option: args.get(f"{key}.{option}")
            for option, _, _ in options
            if args.get(f"{key}.{option}".rpartition(".")[0]) is not None
        }
        if section == "datasets":
            parameters = {option: (kind, default) for option, kind, default in options}
            check_dataset_arguments(name, values, parameters, known_arguments.known_size(name))
        elif section == "archs":
            check_arch_arguments(name, values, {option: default for option, _, default in options})
        else:  # by path (`optim.lr`), as the ranges name them
            what = f"{section.removesuffix('s')} {name!r} argument"
            check_numbers(values, {option: default for option, _, default in options}, what)
            if section == "methods":
                check_ranges(known_arguments.valid_ranges(name), values, what)


#: `--dataset.train_size 100` and `--arch.width 16` (as issues and older docs spell them) are parsed as
#: `--dataset_args.train_size` / `--arch_args.width`: `--dataset` itself is already the dataset's name.
ARGUMENT_GROUPS = {"--dataset.": "--dataset_args.", "--arch.": "--arch_args."}


def _argument_groups(argv: list[str]) -> list[str]:
    rewritten = []
    for arg in argv:
        for spelling, group in ARGUMENT_GROUPS.items():
            if arg.startswith(spelling):
                arg = group + arg[len(spelling) :]
        rewritten.append(arg)
    return rewritten


def _chosen_guards(argv: list[str]) -> tuple[list[str], list[str]]:
    """Guards from `--guard A --guard B,C` (repeatable, comma lists; they replace a config's list)
    or else from the last --config file's `guards:`; returns them and argv with one `--guards [..]`."""
    names, rest, i = [], [], 0
    while i < len(argv):
        arg, value = argv[i], None
        if arg in ("--guard", "--guards") and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        elif arg.startswith(("--guard=", "--guards=")):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            rest.append(arg)
            i += 1
        if value is not None:
            names += [name.strip(" '\"") for name in value.strip("[]").split(",") if name.strip(" '\"")]
    if names:
        return names, [*rest, "--guards", "[" + ",".join(names) + "]"]
    for path in _config_paths(argv):
        value = _read_config(path).get("guards", names) or []
        if isinstance(value, str):
            value = [name.strip() for name in value.split(",") if name.strip()]
        if not (isinstance(value, list) and all(isinstance(name, str) for name in value)):
            raise UsageError(f"`guards` in config {path} must be a list of guard names, got {excerpt(value)}")
        names = value
    return names, rest


def parse_run_args(argv: list[str]):
    """`run`'s command line (and --config files, a run's own `config.yaml` among them) parsed; raises UsageError for
    bad input."""
    with _configs_read_once():
        return _parse_run_args(argv)


def _parse_run_args(argv: list[str]):
    from unlearnbench.registry import GUARDS

    argv = _replayed_records(argv)
    given = _given(argv)  # the --config files read once for the choices below
    method = _chosen(given, "method")
    guards, argv = _chosen_guards(argv)
    for guard in guards:
        if guard not in GUARDS.catalog():
            raise UsageError(f"unknown guard {guard!r}; choose one of: {', '.join(GUARDS.catalog())}")
    if method is not None:
        from unlearnbench.methods.base import group_settings
        from unlearnbench.registry import METHODS

        _refuse_retired_spellings(argv, method, group_settings(METHODS.get(method)))
    argv = _argument_groups(argv)
    parser = run_parser(method, guards, _chosen(given, "dataset") or "digits", _chosen(given, "arch") or "smallcnn")
    try:
        args = parse_tuned(parser, lambda parser: parser.parse_args(argv))
    except JsonArgumentError as error:
        raise UsageError(str(error)) from error
    except KeyError as error:
        raise UsageError(str(error).strip("'\"")) from error
    check_sections(parser, args, ("dataset_args", "arch_args", *([method] if method else []), *guards))
    return args


#: The fields of a run's record (`config.yaml`, `records.RunIdentity`) that are not a `run` option of their own name
#: (`_record_arguments` spells each out); every other field is one, replayed as it is.
RECORD_PARTS = ("method_args", "recipe", "dataset_args", "arch_args", "guards", "tuned", "split", "metrics")


def _replayed_records(argv: list[str]) -> list[str]:
    """argv with each `--config RUN_DIR/config.yaml` (a run's record, told by its `method_args`) replaced, in place,
    by the options that record stands for (`_record_arguments`): `run --config runs/X/config.yaml --out elsewhere`
    replays run X, as Lightning replays its saved config. Other --config files stay as they are."""
    replayed, i = [], 0
    while i < len(argv):
        arg, path, step = argv[i], None, 1
        if arg == "--config" and i + 1 < len(argv):
            path, step = argv[i + 1], 2
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        options = _read_config(path) if path is not None else {}
        replayed += _record_arguments(path, options) if "method_args" in options else argv[i : i + step]
        i += step
    return replayed


def _record_arguments(path: str, record: dict) -> list[str]:
    """The `run` options a run's record stands for: its numbers' every input, the method's hyperparameters and the
    guards' arguments spelled out (defaults included), so the replay is the same run, its output and hardware
    (precision aside) the command line's. Where the record's values were tuned, they are given explicitly: the
    replay's numbers are the same, its folder is not named `-tuned`."""
    from unlearnbench.records import MalformedRecordError, RunIdentity

    try:
        identity = RunIdentity.from_json(record)
    except MalformedRecordError as error:
        raise UsageError(f"config {path} is not a run's record: {error}") from error
    if identity.split != "test":
        raise UsageError(f"config {path} is a tuning trial's run (split {identity.split}); `unlearnbench tune` runs it")
    argv = []
    for field in fields(identity):
        if field.name not in RECORD_PARTS and getattr(identity, field.name) is not None:
            argv += [f"--{field.name}", _option_text(getattr(identity, field.name))]
    argv += ["--recipe", json.dumps(identity.recipe)]
    for group in ("dataset_args", "arch_args"):
        argv += [
            arg
            for key, value in (getattr(identity, group) or {}).items()
            for arg in (f"--{group}.{key}", _option_text(value))
        ]
    for name, value in method_options(identity.method, identity.method_args).items():
        argv += [f"--{name}", _option_text(value)]
    for guard in identity.guards or []:
        ((name, args),) = guard.items()
        argv += [
            "--guard",
            name,
            *(arg for key, value in args.items() for arg in (f"--{name}.{key}", _option_text(value))),
        ]
    return argv


def _option_text(value: object) -> str:
    """A value as the command line gives it to the parser: text as it is, anything else as JSON (`0.1`, `true`)."""
    return value if isinstance(value, str) else json.dumps(value)


def _refuse_retired_spellings(argv: list[str], method: str, settings: dict[str, list[str]]) -> None:
    """`--salun.lr` and a config's `salun: {lr: ...}`, the spellings before the SGD settings were a group: one
    line naming `--salun.optim.lr`, before anything is parsed or loaded. `settings`: the fields of each of the
    method's groups (`methods.base.group_settings`)."""
    from unlearnbench.early_checks import check_group_spelling

    given = [arg.removeprefix(f"--{method}.").split("=", 1)[0] for arg in argv if arg.startswith(f"--{method}.")]
    for path in _config_paths(argv):
        section = _read_config(path).get(method)
        given += list(section) if isinstance(section, dict) else []
    check_group_spelling(method, settings, given)


def cmd_run(argv: list[str]) -> int:
    _check_early(argv)  # first: a refused input never waits for the imports of the methods and the runner
    args = parse_run_args(argv)
    from unlearnbench.console import Reporter, quiet_lightning_info, silence_library_warnings
    from unlearnbench.runner import Runner

    quiet_lightning_info()
    config = run_config(args)
    reporter = Reporter(quiet=args.quiet)
    if args.quiet:
        silence_library_warnings()
    runner = Runner.from_config(config, reporter)
    try:
        with reporter.live():
            result = runner.run()
    except OSError as error:
        print(f"unlearnbench: error: cannot write results under {runner.run_dir.path}: {error}", file=sys.stderr)
        return EXIT_IO
    if not runner.nodes.leader:
        reporter.message(f"node {runner.nodes.rank}: followed node 0; its results are in {result.run_dir}")
        return 0
    if result.already_complete:
        reporter.message(f"already finished: {result.run_dir} (nothing to do)")
    if result.stale_note():  # on stderr, as a problem is, so that --quiet keeps it
        print(f"unlearnbench: note: {result.stale_note()}", file=sys.stderr)
    if result.summary.requests_done:
        reporter.summary(result.rows, result.summary, result.run_dir)
    if result.diverged:
        print(f"unlearnbench: request {result.summary.diverged_at} diverged; see {result.run_dir}", file=sys.stderr)
        return EXIT_DIVERGED
    return 0


def cmd_list(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from unlearnbench.registry import ARCHS, DATASETS, GUARDS, LOGGERS, METHODS, STREAMS

    if argv in (["-h"], ["--help"]):
        print("usage: unlearnbench list\n\nList the registered methods (with installed plugins), guards, streams,")
        print("datasets, archs and loggers, each with the first line of its docstring. Takes no options.")
        return 0
    if argv:
        raise UsageError(f"list takes no arguments, got {' '.join(argv)}")
    console = Console()
    for registry in (METHODS, GUARDS, STREAMS, DATASETS, ARCHS, LOGGERS):
        table = Table(title=f"{registry.kind}s", title_justify="left", show_header=False)
        for name, description in registry.catalog().items():
            table.add_row(name, description)
        console.print(table)
    return 0


def _asks_for_help(argv: list[str]) -> bool:
    return bool({"-h", "--help", "--print_config"} & set(argv))


def cmd_suite(argv: list[str]) -> int:
    from unlearnbench.grid import check_suite_file, parse_shard, suite_parser

    if not _asks_for_help(argv):  # the options, the suite's names and numbers, before torch is imported
        try:
            args = suite_parser().parse_args(argv)
        except JsonArgumentError as error:
            raise UsageError(str(error)) from error
        if args.shard:
            parse_shard(args.shard)
        check_suite_file(args.suite, args.out, args.logger)
    from unlearnbench.suite import suite_command

    return suite_command(argv)


def cmd_leaderboard(argv: list[str]) -> int:
    from unlearnbench.report.leaderboard import leaderboard_command

    return leaderboard_command(argv)


#: The run options of `tune` checked before anything heavy is imported, as `run` checks its own.
TUNE_EARLY_OPTIONS = ("method", "stream", "dataset", "arch", "requests", "size")


def cmd_tune(argv: list[str]) -> int:
    _check_tune_early(argv)
    from unlearnbench.tune import tune_command

    try:
        return tune_command(argv)
    except ConfigError as error:
        raise UsageError(str(error)) from error


def _check_tune_early(argv: list[str]) -> None:
    """What `tune`'s options alone decide, before torch is imported: the options, names, numbers, hardware words, a
    tune suite's file and a study's stream size. `--help` prints and exits here, as the same parser would after the
    imports of `tune_command`."""
    from unlearnbench import known_arguments
    from unlearnbench.early_checks import check_data_dir, check_hardware_choices, check_recipe, check_run_options
    from unlearnbench.grid import check_tune_file
    from unlearnbench.tune_options import check_study_settings, tune_parser, tune_seeds

    try:
        args = tune_parser().parse_args(argv)
    except JsonArgumentError as error:
        raise UsageError(str(error)) from error
    seeds = tune_seeds(args.tune_seeds)
    check_study_settings(args.objective, args.sampler, args.pruner, args.trials, args.heartbeat, seeds)
    check_recipe(args.recipe)
    given = _given(argv)
    if given.get("suite") is not None and given.get("method") is None:  # both: `tune_specs` says which to drop
        check_tune_file(Path(str(given["suite"])))
    values = {
        name: _early_value(given[name], _early_options().get(name, str)) for name in TUNE_EARLY_OPTIONS if name in given
    }
    check_run_options({name: value for name, value in values.items() if value is not _UNREAD})
    choices = known_arguments.hardware_choices()  # (None: not the Lightning that listed them; the full check judges)
    if choices is not None:
        check_hardware_choices({name: getattr(args, name) for name in choices if name in args}, choices)
    check_data_dir(given.get("data_dir"), download=False)
    if args.method is not None:  # as `TuneSpec.validate` after the rest (a tune suite's: `check_tune_file` above)
        train_size = args.dataset_args.get("train_size")
        _check_builtin_stream_size(args.stream, args.dataset, args.requests, args.size, train_size, view=True)


COMMANDS = {"run": cmd_run, "list": cmd_list, "suite": cmd_suite, "leaderboard": cmd_leaderboard, "tune": cmd_tune}

USAGE = """usage: unlearnbench {run,list,suite,leaderboard,tune} [options]

  run          run one method over one request stream (unlearnbench run --help)
  list         list registered methods, streams, datasets and archs
  suite        run a grid of runs from a YAML file, then build the leaderboard (unlearnbench suite --help)
  leaderboard  tables (Markdown, CSV, HTML) and plots from run directories (unlearnbench leaderboard --help)
  tune         choose a method's hyperparameters on validation streams with Optuna (unlearnbench tune --help)
"""


def main(argv: list[str] | None = None) -> int:
    """The command `argv`'s exit code. Without `argv` this is the process (the console script, `python -m`):
    it reads `sys.argv` and, after a signal, leaves at once with the signal's code (`interrupt.exit_process`)."""
    if argv is None:
        ignore_late_signals()
        code = _command(sys.argv[1:])
        if code in INTERRUPTED_CODES:
            exit_process(code)
        return code
    return _command(argv)


#: A run stopped by SIGINT or SIGTERM exits 128 + the signal.
INTERRUPTED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def _command(argv: list[str]) -> int:
    argv = list(argv)
    # Deprecation notices of the libraries (Lightning, timm, torch) say nothing about the user's run.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*(LeafSpec|does not have many workers|smaller than the logging).*")
    # Two of Lightning's warnings that are false here, each silenced by its own message only:
    # modules in eval mode at the start of a fit are frozen teachers and snapshots, meant to stay so;
    # a resumed session's logger folder holds the killed session's steps, which are being redone.
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    print_warnings_as_lines()
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        _fail(f"unknown command {command!r}; choose one of: {', '.join(COMMANDS)}")
    try:
        with interruptible(), _configs_read_once():
            return COMMANDS[command](rest)
    except ConfigError as error:
        _fail(str(error))
    except Interrupted as interrupt:
        where = f" at {interrupt.where}" if interrupt.where else ""
        print(f"unlearnbench: interrupted{where}; rerun the same command to resume", file=sys.stderr)
        return interrupt.exit_code
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
