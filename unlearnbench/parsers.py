"""The argument parser every `unlearnbench <command>` is built on.

It lives apart from `cli.py` because the commands (`suite`, `tune`, `leaderboard`) build their own
parsers and `cli.py` dispatches to them: a parser module they all import keeps that graph acyclic.
"""

from __future__ import annotations

from jsonargparse import ArgumentParser, DefaultHelpFormatter


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help, with a plain class named as a type (`Path`, not `<class 'Path'>`)."""

    def _get_type_str(self, action) -> str | None:
        kind = getattr(action, "_typehint", action.type)
        if isinstance(kind, type):
            return kind.__name__
        return super()._get_type_str(action)


def command_parser(command: str, description: str) -> ArgumentParser:
    """The parser of `unlearnbench <command>`: its name in usage lines, types named plainly, errors raised, and
    options spelled out (argparse would take `--request 3` for `--requests 3`, and a later option that shares
    the prefix would silently change what an old command line means)."""
    return ArgumentParser(
        prog=f"unlearnbench {command}",
        description=description,
        formatter_class=HelpFormatter,
        exit_on_error=False,
        allow_abbrev=False,
    )
