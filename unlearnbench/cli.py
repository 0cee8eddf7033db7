"""`unlearnbench run | list`: the command line (jsonargparse, typed from the classes' signatures).

A method's hyperparameters are a group named after the method, read from its `__init__`
signature: `unlearnbench run --method salun --salun.ratio 0.3`, or in a `--config` YAML file
`salun: {ratio: 0.3}`. Bad input is one line on stderr and exit code 2, before anything is written.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser
from jsonargparse import ArgumentError as JsonArgumentError

EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_IO = 1


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


def _fail(message: str) -> None:
    one_line = " ".join(message.split()) or "invalid input"
    print(f"unlearnbench: error: {one_line}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _chosen_method(argv: list[str]) -> str | None:
    """The method named on the command line, or in the last --config file that names one."""
    for i, arg in enumerate(argv):
        if arg == "--method" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
    method = None
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else None
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else path
        if path is None:
            continue
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as error:
            raise UsageError(f"cannot read config {path}: {error}".replace("\n", " ")) from error
        if not isinstance(data, dict):
            raise UsageError(f"config {path} must be a YAML mapping of option names to values")
        method = data.get("run", data).get("method", method)
    return method


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
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else None
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else path
        data = yaml.safe_load(Path(path).read_text()) if path and Path(path).is_file() else None
        if isinstance(data, dict):
            names = list(data.get("run", data).get("guards", names) or [])
    return names, rest


def run_parser(method: str | None, guards: list[str] = ()) -> ArgumentParser:
    from unlearnbench.registry import METHODS, STREAMS

    parser = ArgumentParser(description="Run one method over one request stream.", exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile, help="YAML file with any of these options")
    parser.add_argument("--method", type=str, required=True, help=f"one of: {', '.join(METHODS.names())}")
    parser.add_argument("--stream", type=str, default="classwise", help=f"one of: {', '.join(STREAMS.names())}")
    parser.add_argument("--dataset", type=str, default="digits")
    parser.add_argument(
        "--data_dir", "--data-dir", type=Path | None, default=None, help="folder of on-disk datasets (default ./data)"
    )
    parser.add_argument(
        "--download", type=bool, nargs="?", const=True, default=False, help="fetch a missing dataset into --data-dir"
    )
    parser.add_argument("--arch", type=str, default="smallcnn")
    parser.add_argument("--requests", type=int, default=5, help="number of unlearning requests T")
    parser.add_argument(
        "--size",
        type=float | None,
        default=None,
        help="classes per request (classwise, default 1) or fraction "
        "of the train set per request (random, default 0.01)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle", type=str, default="retrain", help="retrain (default) or none: no gap")
    parser.add_argument(
        "--mia_protocol",
        "--mia-protocol",
        type=str,
        default="salun",
        help="non-members the SVC attack is fit on: salun (test of retained classes, default) or loft (all test)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs"), help="folder of run directories")
    parser.add_argument("--store", type=Path | None, default=None, help="model store (default OUT/store)")
    parser.add_argument(
        "--run_dir", "--run-dir", type=Path | None, default=None, help="exact run directory (default: named by config)"
    )
    parser.add_argument("--save_logits", "--save-logits", type=bool, default=False)
    parser.add_argument("--accelerator", type=str, default="auto")
    parser.add_argument("--devices", type=int | str, default=1)
    parser.add_argument("--strategy", type=str, default="auto")
    parser.add_argument("--num_nodes", "--num-nodes", type=int, default=1)
    parser.add_argument("--precision", type=str, default="32-true")
    parser.add_argument("--quiet", type=bool, default=False)
    parser.add_argument(
        "--logger",
        type=str,
        default="csv",
        help="csv (default, into the run dir), wandb (offline unless set up) or none",
    )
    parser.add_argument("--recipe", type=dict, default={}, help="overrides of the pretraining/oracle recipe")
    if method in METHODS:
        parser.add_class_arguments(METHODS.get(method), nested_key=method, help=f"hyperparameters of {method}")
    from unlearnbench.registry import GUARDS

    parser.add_argument(
        "--guards", type=list[str], default=[], help=f"--guard NAME (repeatable, or a,b): {', '.join(GUARDS.names())}"
    )
    for guard in guards:
        parser.add_class_arguments(GUARDS.get(guard), nested_key=guard, help=f"arguments of guard {guard}")
    return parser


def cmd_run(argv: list[str]) -> int:
    from unlearnbench.config import ConfigError, Hardware, RunConfig
    from unlearnbench.registry import METHODS

    method = _chosen_method(argv)
    if method is not None and method not in METHODS:
        raise UsageError(f"unknown method {method!r}; choose one of: {', '.join(METHODS.names())}")
    guards, argv = _chosen_guards(argv)
    from unlearnbench.registry import GUARDS

    for guard in guards:
        if guard not in GUARDS:
            raise UsageError(f"unknown guard {guard!r}; choose one of: {', '.join(GUARDS.names())}")
    parser = run_parser(method, guards)
    try:
        args = parser.parse_args(argv)
    except JsonArgumentError as error:
        raise UsageError(str(error)) from error
    from unlearnbench.console import Reporter
    from unlearnbench.rundir import UntrustedCheckpointError
    from unlearnbench.runner import Runner

    config = RunConfig(
        method=args.method,
        stream=args.stream,
        dataset=args.dataset,
        data_dir=args.data_dir,
        download=args.download,
        arch=args.arch,
        requests=args.requests,
        size=args.size,
        seed=args.seed,
        oracle=args.oracle,
        mia_protocol=args.mia_protocol,
        method_args=dict(args.get(args.method) or {}),
        guards=list(args.guards),
        guard_args={guard: dict(args.get(guard) or {}) for guard in args.guards},
        recipe=dict(args.recipe),
        out=args.out,
        store=args.store,
        run_dir=args.run_dir,
        save_logits=args.save_logits,
        logger=args.logger,
        hardware=Hardware(args.accelerator, args.devices, args.strategy, args.num_nodes, args.precision),
    )
    reporter = Reporter(quiet=args.quiet)
    try:
        runner = Runner(config, reporter)
    except ConfigError as error:
        raise UsageError(str(error)) from error
    try:
        with reporter.live():
            result = runner.run()
    except UntrustedCheckpointError as error:
        raise UsageError(str(error)) from error
    except OSError as error:
        print(f"unlearnbench: error: cannot write results under {runner.run_dir.path}: {error}", file=sys.stderr)
        return EXIT_IO
    if not runner.nodes.leader:
        reporter.message(f"node {runner.nodes.rank}: followed node 0; its results are in {result.run_dir}")
        return 0
    if result.already_complete:
        reporter.message(f"already finished: {result.run_dir} (nothing to do)")
    if result.summary["requests_done"]:
        reporter.summary(result.rows, result.summary, result.run_dir)
    if result.diverged:
        print(f"unlearnbench: request {result.summary['diverged_at']} diverged; see {result.run_dir}", file=sys.stderr)
        return EXIT_DIVERGED
    return 0


def cmd_list(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from unlearnbench.registry import ARCHS, DATASETS, GUARDS, METHODS, STREAMS

    if argv:
        raise UsageError(f"list takes no arguments, got {' '.join(argv)}")
    console = Console()
    for registry in (METHODS, GUARDS, STREAMS, DATASETS, ARCHS):
        table = Table(title=f"{registry.kind}s", title_justify="left", show_header=False)
        for name, description in registry.catalog().items():
            table.add_row(name, description)
        console.print(table)
    return 0


def cmd_suite(argv: list[str]) -> int:
    from unlearnbench.config import ConfigError
    from unlearnbench.suite import suite_command

    try:
        return suite_command(argv)
    except ConfigError as error:
        raise UsageError(str(error)) from error


def cmd_leaderboard(argv: list[str]) -> int:
    from unlearnbench.report.leaderboard import leaderboard_command

    try:
        return leaderboard_command(argv)
    except ValueError as error:
        raise UsageError(str(error)) from error


COMMANDS = {"run": cmd_run, "list": cmd_list, "suite": cmd_suite, "leaderboard": cmd_leaderboard}

USAGE = """usage: unlearnbench {run,list,suite,leaderboard} [options]

  run          run one method over one request stream (unlearnbench run --help)
  list         list registered methods, streams, datasets and archs
  suite        run a grid of runs from a YAML file, then build the leaderboard (unlearnbench suite --help)
  leaderboard  tables (Markdown, CSV, HTML) and plots from run directories (unlearnbench leaderboard --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Deprecation notices of the libraries (Lightning, timm, torch) say nothing about the user's run.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*(LeafSpec|does not have many workers|smaller than the logging).*")
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        _fail(f"unknown command {command!r}; choose one of: {', '.join(COMMANDS)}")
    try:
        return COMMANDS[command](rest)
    except UsageError as error:
        _fail(str(error))
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
