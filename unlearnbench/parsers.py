"""The argument parser every `unlearnbench <command>` is built on.

It lives apart from `cli.py` because the commands (`suite`, `tune`, `leaderboard`) build their own
parsers and `cli.py` dispatches to them: a parser module they all import keeps that graph acyclic.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import MISSING, Field
from typing import Literal, get_origin, get_type_hints

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


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    """`cls`'s field types, evaluated once: `run`'s parser asks for them field by field."""
    return get_type_hints(cls)


def add_field_options(container, declared: Iterable[tuple[str, type, Field]]) -> None:
    """`--name` (and `--name-with-dashes`) for each (name, class, field) of `declared`: a run option, a field of one of
    the run's parts declared with `config.option` (`config.declared_options`), on a parser or one of its sections.
    Its type, default and help are the field's, so an option is declared once, where the run holds it. A choice
    among words (`Literal`) is parsed as a word, so that the run's own check names the choices in one line; a flag
    may be given bare (`--download`)."""
    from unlearnbench import registry

    for name, cls, spec in declared:
        hint = _hints(cls)[spec.name]
        kind = str if get_origin(hint) is Literal else hint
        default = spec.default_factory() if spec.default is MISSING else spec.default
        help_text = spec.metadata["help"]
        if spec.metadata["registry"]:
            help_text += f"; one of: {', '.join(getattr(registry, spec.metadata['registry']).catalog())}"
        flag = {"nargs": "?", "const": True} if kind is bool else {}
        spellings = dict.fromkeys([f"--{name}", f"--{name.replace('_', '-')}"])
        container.add_argument(*spellings, type=kind, default=default, help=help_text, **flag)
