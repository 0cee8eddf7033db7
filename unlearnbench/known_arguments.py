"""The arguments of the built-in methods, guards, datasets and archs, known before any of them is imported.

A bad value inside a registered class's argument group (`--salun.ratio 2`, `--ewc.nope 1`, `--dataset_args.test_size
1`) is judged by the class's signature and ranges, and reading those imports the class: torch and Lightning, seconds
before a one-line refusal. `known_arguments.json`, beside this module, holds what the full parse and
`RunConfig.validate` read of each built-in class: the options `run`'s parser makes of its arguments (name, type,
default), a method's valid ranges, a dataset's declared size. It is generated from the live registries
(`python -m unlearnbench.known_arguments`), never written by hand: a test regenerates it and fails where it differs,
so it cannot drift from the classes. A class it does not hold (a plugin's method, a `timm:<model>` arch) is left to
the full parse, which stays the authority on every run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from pathlib import Path
from types import SimpleNamespace

from unlearnbench.ranges import Range

KNOWN_ARGUMENTS = Path(__file__).with_name("known_arguments.json")
#: The file's sections: the registry each describes (its attribute in `unlearnbench.registry`), the argument of
#: `cli.run_parser` that chooses one of its entries, and the key its arguments are given under on the command line
#: (`--dataset_args.train_size`; None: the entry's name, `--salun.ratio`).
SECTIONS = {
    "methods": ("METHODS", "method", None),
    "guards": ("GUARDS", "guards", None),
    "datasets": ("DATASETS", "dataset", "dataset_args"),
    "archs": ("ARCHS", "arch", "arch_args"),
}
#: What a type in the file may name: builtins and `typing` (`typing.Literal['gradient', 'weights']`, `int | None`).
_TYPE_NAMES = {"typing": typing, "NoneType": type(None)}

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
    return [(option, eval(kind, _TYPE_NAMES), default) for option, kind, default in entry["options"]]


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
    """A built-in method's valid ranges, by flat name (`ranges.valid_ranges` of its class)."""
    return {name: Range(**fields) for name, fields in _file()["methods"][method]["ranges"].items()}


def known_size(dataset: str) -> SimpleNamespace | None:
    """A built-in dataset's declared sizes (`data.base.KnownSize`'s fields), None where it declares none."""
    size = _file()["datasets"][dataset]["known_size"]
    return None if size is None else SimpleNamespace(**size)


def generate() -> dict:
    """The file's content, read from the live classes (imports torch and Lightning): the options of each built-in
    as `run`'s parser makes them (`cli.run_parser`), the ranges and sizes as `RunConfig.validate` reads them."""
    from unlearnbench import registry
    from unlearnbench.cli import run_parser
    from unlearnbench.ranges import valid_ranges as class_ranges

    content = {}
    for section, (attribute, argument, key) in SECTIONS.items():
        known: registry.Registry = getattr(registry, attribute)
        content[section] = {}
        for name in known.builtins():
            chosen = {"method": None, "guards": (), "dataset": None, "arch": None}
            chosen[argument] = [name] if argument == "guards" else name
            entry = _group_of(run_parser(**chosen), key or name)
            if section == "methods":
                entry["ranges"] = {n: dataclasses.asdict(r) for n, r in class_ranges(known.get(name)).items()}
            if section == "datasets":
                size = getattr(known.get(name), "known_size", None)
                entry["known_size"] = None if size is None else dataclasses.asdict(size)
            content[section][name] = entry
    return content


def _group_of(parser, key: str) -> dict:
    """The options and subgroups `parser` holds under `key`; a type or default the file cannot hold is an error
    here, when the file is generated, not a silent difference between the early check and the parse."""
    entry = {"options": [], "groups": []}
    for action in parser._actions:  # jsonargparse offers no public listing of a group's options and their types
        if not action.dest.startswith(f"{key}."):
            continue
        name = action.dest.removeprefix(f"{key}.")
        kind = getattr(action, "_typehint", None)  # jsonargparse's type of the option, as its help names it
        if kind is None:  # a group given whole (`--salun.optim '{...}'`)
            entry["groups"].append(name)
            continue
        text = kind.__name__ if isinstance(kind, type) and kind.__module__ == "builtins" else repr(kind)
        if eval(text, _TYPE_NAMES) != kind:
            raise ValueError(f"{key}.{name}: type {kind!r} cannot be written to the file")
        # as the file holds it (a tuple as a list: the early checks judge numbers and flags, never a default's type)
        entry["options"].append([name, text, json.loads(json.dumps(action.default))])
    return entry


def write() -> None:
    """Regenerate the file: after a built-in class's arguments, ranges or size changed (a test says so)."""
    KNOWN_ARGUMENTS.write_text(json.dumps(generate(), indent=1) + "\n")


if __name__ == "__main__":
    write()
