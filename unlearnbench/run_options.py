"""`unlearnbench run`'s parser, and the one way options become a `RunConfig`: parsed by it.

The command line and its --config files (`cli.parse_run_args`), every suite cell and every tune study
(`config_of_options`) are parsed by the same parser, built from the run's parts (`config.PARTS`) and from the
signatures of the chosen method, guards, dataset and arch, so a run's options are typed alike and mean one thing
whichever front end gave them: a suite cell's `lr: 1` is the float `--salun.optim.lr 1` is, and both name one run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from jsonargparse import ArgumentError as JsonArgumentError

from unlearnbench.early_checks import check_section
from unlearnbench.errors import ConfigError
from unlearnbench.parsers import add_field_options, command_parser

if TYPE_CHECKING:
    from unlearnbench.config import RunConfig


def run_parser(
    method: str | None, guards: list[str] = (), dataset: str | None = "digits", arch: str | None = "smallcnn"
) -> ArgumentParser:
    """`run`'s parser: an option for each run option that is one (`config.option`: type, default and help declared
    there), in one section per part of the run (`config.PARTS`), the groups of `dataset`, `arch`, `method` and
    `guards` among them; with none of those (None, ()) it holds `run`'s own options only and imports nothing heavy
    (`cli._parse_own_options`)."""
    from unlearnbench.config import PARTS, declared_options, option_name
    from unlearnbench.registry import GUARDS, METHODS

    parser = command_parser(
        "run",
        "Run one method over one request stream. A method's hyperparameters, with their descriptions and "
        "valid ranges, are listed by `unlearnbench run --method NAME --help`.",
    )
    parser.add_argument("--config", action=ActionConfigFile, help="YAML file with any of these options")
    for part, cls, heading in PARTS:
        section = parser.add_argument_group(heading)
        if part == "method":
            section.add_argument(
                "--method",
                type=str,
                required=True,
                help=f"one of: {', '.join(METHODS.catalog())}; its hyperparameters: run --method NAME --help",
            )
        names = [option_name(spec) for spec in fields(cls) if spec.metadata.get("help")]
        add_field_options(section, declared_options(names))
        if part == "method":  # the guards part, a list of (name, arguments), follows the method whose fits it guards
            parser.add_argument_group("guards").add_argument(
                "--guards",
                type=list[str],
                default=[],
                help=f"--guard NAME (repeatable, or a,b): {', '.join(GUARDS.catalog())}",
            )
        elif part == "data":
            _add_dataset_arguments(section, dataset)
        elif part == "arch":
            _add_arch_arguments(section, arch)
    parser.add_argument("--quiet", type=bool, nargs="?", const=True, default=False, help="only errors and warnings")
    if method in METHODS:
        _add_method_arguments(parser, method)
    for guard in guards:
        parser.add_class_arguments(GUARDS.get(guard), nested_key=guard, help=f"arguments of guard {guard}")
    return parser


def _add_dataset_arguments(section, dataset: str) -> None:
    """`--dataset_args.<key>` for each argument of `dataset` (its factory's keywords, train_size and test_size)."""
    from unlearnbench.registry import DATASETS

    if dataset in DATASETS:
        from unlearnbench.data.cache import dataset_parameters

        for key, (kind, default) in dataset_parameters(dataset).items():
            section.add_argument(
                f"--dataset_args.{key}", type=kind, default=default, help=f"dataset argument of {dataset}"
            )


def _add_arch_arguments(section, arch: str) -> None:
    """`--arch_args.<key>` for each argument of `arch` its factory takes and the dataset does not fix."""
    from unlearnbench.registry import ARCHS

    if arch in ARCHS:
        from unlearnbench.training import arch_parameters

        for key, default in arch_parameters(arch).items():
            section.add_argument(
                f"--arch_args.{key}", type=type(default), default=default, help=f"arch argument of {arch}"
            )


def _add_method_arguments(parser: ArgumentParser, method: str) -> None:
    """`--<method>.<argument>` (a group's fields `--<method>.optim.<setting>`), described by the method's docstring
    (`Args:`; a group's by its class's), each with its valid range (named by path: `optim.lr`)."""
    from unlearnbench.ranges import valid_ranges
    from unlearnbench.registry import METHODS

    cls = METHODS.get(method)
    parser.add_class_arguments(cls, nested_key=method, help=f"hyperparameters of {method}")
    ranges = valid_ranges(cls)
    for action in parser._actions:  # jsonargparse offers no public way to extend a generated help line
        name = action.dest.removeprefix(f"{method}.")
        if action.dest.startswith(f"{method}.") and name in ranges:
            action.help = f"{(action.help or '').rstrip('.')}; valid: {ranges[name].describe(name)}".lstrip("; ")


def run_config(args) -> RunConfig:
    """The `RunConfig` of parsed `run` options (the suite builds the same from a cell's options)."""
    from unlearnbench.config import RUN_OPTIONS, RunConfig

    built = {  # the options a parsed value does not give as it is
        "dataset_args": _group(args, "dataset_args"),
        "arch_args": _group(args, "arch_args"),
        "method_args": _group(args, args.method),
        "guards": list(args.guards),
        "guard_args": {guard: dict(args.get(guard) or {}) for guard in args.guards},
        "recipe": dict(args.recipe),
    }
    # every other option is the parsed value of its name (`split` is the tuner's, not an option of `run`)
    parsed = {name: args.get(name) for name in RUN_OPTIONS if name not in built and name in args}
    return RunConfig.from_options(**parsed, **built)


def _group(args, name: str) -> dict:
    """A nested group of parsed options (`dataset_args`, a method's) as a plain dict (its groups too); empty when absent."""
    group = args.get(name)
    return dict(group.as_dict() if hasattr(group, "as_dict") else group or {})


def parse_tuned(parser: ArgumentParser, parse: Callable[[ArgumentParser], Namespace]) -> Namespace:
    """`parse(parser)`; where the options name a tuned folder (`hparams`), parsed again with the tuned values as the
    method's defaults (`_tuned_defaults`), so explicit arguments still win. The parser is changed: it is this run's."""
    args = parse(parser)
    if args.hparams is not None:
        parser.set_defaults(_tuned_defaults(args))
        args = parse(parser)
    return args


def _tuned_defaults(args) -> dict:
    from unlearnbench.config import ConfigError
    from unlearnbench.hparams import load_tuned
    from unlearnbench.ranges import groups, parameters, paths
    from unlearnbench.registry import METHODS

    cls = METHODS.get(args.method)
    values = load_tuned(args.hparams, args.dataset, args.arch, args.stream, args.method)["hparams"]
    unknown = sorted(set(paths(values, groups(cls))) - set(parameters(cls)))
    if unknown:
        raise ConfigError(f"tuned file for {args.method} sets {', '.join(unknown)}, which it has no argument for")
    return method_options(args.method, values)


def method_options(method: str, values: dict) -> dict:
    """A method's hyperparameters (a group nested: `optim: {lr: ...}`, as tuned files and run records hold them) as
    its `run` options (`salun.optim.lr`: a group's fields one option each)."""
    from unlearnbench.methods.base import method_arguments
    from unlearnbench.ranges import groups, paths
    from unlearnbench.registry import METHODS

    cls = METHODS.get(method)
    return {f"{method}.{name}": value for name, value in paths(method_arguments(cls, values), groups(cls)).items()}


def check_sections(parser: ArgumentParser, args, keys) -> None:
    """The groups among `keys` parsed as a mapping: a --config file's `salun: 3` is taken by the parser as the group's
    value, which no run can read (`early_checks.check_section`); `salun: null` stands for the defaults."""
    for key in keys:
        group = args.get(key)
        if not isinstance(group, Namespace):
            # (jsonargparse offers no public listing of a group's options)
            names = dict.fromkeys(a.dest.split(".")[1] for a in parser._actions if a.dest.startswith(f"{key}."))
            check_section(key, group, names)


def config_of_options(options: Mapping[str, object]) -> RunConfig:
    """The run of `options` by name (a suite cell's, a tune study's: `config.RUN_OPTIONS` and the guards'), parsed by
    `run`'s parser as the same options in a `run --config` file would be, tuned values (`hparams`) becoming the
    method's defaults as there; its groups (the method's, the guards', the dataset's and the arch's arguments) hold
    the values given, as the parser typed them. `split` (the tuner's, no option of `run`) is set on the parsed run.
    ConfigError for bad options: `RunConfig.validate`'s line where it refuses them, else the parser's."""
    from unlearnbench.config import RUN_OPTIONS, RunConfig

    # the run's own checks first, in their words (the valid choices, the fix); the parser's types are the backstop
    RunConfig.from_options(**options).validate()
    options = dict(options)
    method, split = options.pop("method"), options.pop("split", "test")
    method_args = options.pop("method_args", None) or {}
    guards, guard_args = list(options.pop("guards", None) or ()), options.pop("guard_args", None) or {}
    document = {key: str(value) if isinstance(value, Path) else value for key, value in options.items()}
    document |= {"method": method, method: method_args, "guards": guards}
    document |= {guard: guard_args.get(guard) or {} for guard in guards}
    dataset, arch, stream = (
        options.get(name) or RUN_OPTIONS[name][2].default for name in ("dataset", "arch", "stream")
    )
    tuned = (stream, str(options["hparams"])) if options.get("hparams") else None
    parser = _cell_parser(method, tuple(guards), dataset, arch, tuned)
    try:
        args = parser.parse_object(document)
    except JsonArgumentError as error:
        raise ConfigError(" ".join(str(error).split())) from error
    check_sections(parser, args, ("dataset_args", "arch_args", method, *guards))
    config = run_config(args)
    typed = config.options()
    # the groups hold what was given, in the parser's types (defaults and tuned values are the plan's to fill in)
    given = {
        "method_args": _as_given(typed["method_args"], method_args),
        "dataset_args": _as_given(typed["dataset_args"], options.get("dataset_args") or {}),
        "arch_args": _as_given(typed["arch_args"], options.get("arch_args") or {}),
        "guard_args": {  # (a guard not selected keeps its arguments: `RunConfig.from_options` names it)
            guard: _as_given(typed["guard_args"].get(guard, {}), args) if guard in guards else args
            for guard, args in guard_args.items()
        },
    }
    return config.replace(**given, split=split)


def _as_given(parsed: dict, given: Mapping) -> dict:
    """The parsed values of the keys `given` names (a group's too: `optim: {lr: ...}`)."""
    return {
        key: _as_given(parsed[key], value)
        if isinstance(value, Mapping) and isinstance(parsed[key], dict)
        else parsed[key]
        for key, value in given.items()
    }


@functools.cache
def _cell_parser(
    method: str, guards: tuple[str, ...], dataset: str, arch: str, tuned: tuple[str, str] | None
) -> ArgumentParser:
    """`run_parser` built once per setting (a suite's cells share a few dozen), with the tuned values of `tuned` (the
    stream kind, the `hparams` folder) as the method's defaults, as `parse_tuned` gives them on the command line."""
    parser = run_parser(method, guards, dataset, arch)
    if tuned is not None:
        stream, hparams = tuned
        setting = Namespace(method=method, dataset=dataset, arch=arch, stream=stream, hparams=Path(hparams))
        parser.set_defaults(_tuned_defaults(setting))
    return parser
