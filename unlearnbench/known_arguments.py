"""The arguments of the built-in methods, guards, datasets and archs, known before any of them is imported.

A bad value inside a registered class's argument group (`--salun.ratio 2`, `--ewc.nope 1`, `--dataset_args.test_size
1`) is judged by the class's signature and ranges, and reading those imports the class: torch and Lightning, seconds
before a one-line refusal. `known_arguments.json`, beside this module, holds what the full parse and
`RunConfig.validate` read of each built-in class: the options `run`'s parser makes of its arguments (name, type,
default), a method's valid ranges, a dataset's declared size; and the words `--accelerator`, `--strategy` and
`--precision` take, with the version of the Lightning that listed them. It is generated from the live registries
(`python -m unlearnbench.generate_known_arguments`), never written by hand: a test regenerates it and fails where it
differs, so it cannot drift from the classes. A class it does not hold (a plugin's method, a `timm:<model>` arch) is
left to the full parse, which stays the authority on every run.
"""

from __future__ import annotations

import functools
import json
import typing
from dataclasses import field, make_dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

from unlearnbench.ranges import Range

KNOWN_ARGUMENTS = Path(__file__).with_name("known_arguments.json")
#: What a type in the file may name: builtins and `typing` (`typing.Literal['gradient', 'weights']`, `int | None`).
TYPE_NAMES = {"typing": typing, "NoneType": type(None)}

#: One option: its name inside the group (`ratio`, `optim.lr`), its type as the parser checks it, its default.
Option = tuple[str, object, object]


@functools.cache
def _file() -> dict:
    return json.loads(KNOWN_ARGUMENTS.read_text())


def options(section: str, name: str) -> list[Option] | None:
    """The options of built-in `name` of `section` (`methods`...), types evaluated; None for a name the file lacks."""
    entry = _file()[section].get(name)
    if entry is None:
        return None
    return [(option, eval(kind, TYPE_NAMES), default) for option, kind, default in entry["options"]]


def group_class(section: str, name: str) -> type:
    """A dataclass of built-in `name`'s arguments, its groups nested, each of the type and default the file holds: the
    parser makes of it the group it makes of the class (`--salun.ratio`, `--salun '{...}'`, `--salun.optim '{...}'`,
    a --config file's `salun:` section), with the same values and the same words for a bad one, the class unimported."""
    entries = options(section, name)

    def fields_under(prefix: str) -> list[tuple]:
        fields, nested = [], set()
        for option, kind, default in entries:
            head, dot, _ = option.removeprefix(prefix).partition(".")
            if not option.startswith(prefix) or head in nested:
                continue
            if dot:  # a group of the class's (a method's `optim`): a dataclass of its own
                nested.add(head)
                group = make_dataclass(head, fields_under(f"{prefix}{head}."))
                fields.append((head, group, field(default_factory=group)))
            else:  # (the file holds a tuple as a list, which a dataclass takes as no default)
                fields.append((head, kind, field(default=tuple(default) if isinstance(default, list) else default)))
        return fields

    return make_dataclass(name, fields_under(""))


def subgroups(section: str, name: str) -> list[str]:
    """The groups inside `name`'s arguments, given whole as `--salun.optim '{...}'` (a method's SGD settings)."""
    return _file()[section][name]["groups"]


def settings(method: str) -> dict[str, list[str]]:
    """The fields of each of a built-in method's groups (`methods.base.group_settings` of its class)."""
    names = [option for option, _, _ in _file()["methods"][method]["options"]]
    return {
        group: [name.removeprefix(f"{group}.") for name in names if name.startswith(f"{group}.")]
        for group in subgroups("methods", method)
    }


def valid_ranges(method: str) -> dict[str, Range]:
    """A built-in method's valid ranges, by path (`optim.lr`: `ranges.valid_ranges` of its class)."""
    return {name: Range(**fields) for name, fields in _file()["methods"][method]["ranges"].items()}


def known_size(dataset: str) -> SimpleNamespace | None:
    """A built-in dataset's declared sizes (`data.base.KnownSize`'s fields), None where it declares none."""
    size = _file()["datasets"][dataset]["known_size"]
    return None if size is None else SimpleNamespace(**size)


def hardware_choices() -> dict[str, list[str]] | None:
    """The words `--accelerator`, `--strategy` and `--precision` take (`config.Hardware.choices`), as the Lightning
    the file was generated with lists them; None where another version is installed (or none), whose lists may
    differ: the full check, which reads them from it, judges them then."""
    recorded = _file()["lightning"]
    return recorded["choices"] if _lightning_version() == recorded["version"] else None


def _lightning_version() -> str | None:
    """The installed Lightning's version, read from its metadata: importing it takes seconds."""
    try:
        return metadata.version("lightning")
    except metadata.PackageNotFoundError:
        return None
