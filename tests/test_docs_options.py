"""The README and docs/ (the user guide's method list too) name what the code has: every registered method, and every `--option` as `--help` spells it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from unlearnbench import parsers
from unlearnbench.cli import main, run_parser
from unlearnbench.parsers import command_parser
from unlearnbench.registry import ARCHS, DATASETS, GUARDS, METHODS

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPTION = re.compile(r"(?<![\w-])--[a-zA-Z][\w.-]*\w")

#: Options in the docs that are not unlearnbench's: other tools' and the scripts' under benchmarks/ (each with its
#: own argparse), the user guide's example of a refused spelling, and docs/extending.md's example method.
FOREIGN = {
    "--dist": "pytest-xdist",
    "--index-url": "pip",
    "--ipc": "docker",
    **dict.fromkeys(("--array", "--cpus-per-task", "--gpus", "--gres", "--nodes", "--ntasks-per-node"), "SLURM"),
    **dict.fromkeys(
        ("--tier", "--seeds", "--only", "--streams", "--backward", "--dataset-args", "--cpu-check", "--epochs"),
        "benchmarks/",
    ),
    "--salun.lr": "the user guide: the flat spelling, refused with one line naming --salun.optim.lr",
    "--my_method.share": "docs/extending.md's example method",
}


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _documented() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for option in OPTION.findall(line):
                found.setdefault(option.rstrip("."), []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def _command_options(monkeypatch) -> set[str]:
    """Every option string of every command's parser: `run` with each method and every guard, each dataset and arch
    (their arguments), and the parsers `suite`, `tune` and `leaderboard` build for their `--help`."""
    options = set()
    guards = list(GUARDS.names())
    for method in METHODS.names():
        options |= _options(run_parser(method, guards))
    for dataset in DATASETS.names():
        options |= _options(run_parser(None, (), dataset=dataset))
    for arch in ARCHS.names():
        options |= _options(run_parser(None, (), arch=arch))
    built = []
    monkeypatch.setattr(parsers, "command_parser", lambda *args: built.append(command_parser(*args)) or built[-1])
    for command in ("suite", "tune", "leaderboard"):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main([command, "--help"])
    assert len(built) == 3
    return options | {option for parser in built for option in _options(parser)}


def test_every_documented_option_is_one_the_parsers_have(monkeypatch):
    options = _command_options(monkeypatch)
    unknown = {option: where for option, where in _documented().items() if option not in options | set(FOREIGN)}
    assert not unknown, unknown


def test_the_user_guide_names_every_registered_method():
    guide = (ROOT / "docs" / "guide.md").read_text()
    listed = re.search(r"Methods: (.*?) — each one file", guide, re.S).group(1)
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(METHODS.names())
