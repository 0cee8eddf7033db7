"""Writes `known_arguments.json` from the live registries: `python -m unlearnbench.generate_known_arguments`.

Run it after changing a built-in method's, guard's, dataset's or arch's arguments, ranges or declared size; a test
regenerates the file and fails where it differs. A module apart from `known_arguments`, which `cli.py` reads
before torch is imported: this one imports every class, and `cli.py`'s parser.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import metadata

from unlearnbench.known_arguments import KNOWN_ARGUMENTS, TYPE_NAMES

#: The file's sections: the registry each describes (its attribute in `unlearnbench.registry`), the argument of
#: `run_options.run_parser` that chooses one of its entries, and the key its arguments are given under on the command line
#: (`--dataset_args.train_size`; None: the entry's name, `--salun.ratio`).
SECTIONS = {
    "methods": ("METHODS", "method", None),
    "guards": ("GUARDS", "guards", None),
    "datasets": ("DATASETS", "dataset", "dataset_args"),
    "archs": ("ARCHS", "arch", "arch_args"),
}


def generate() -> dict:
    """The file's content, read from the live classes (imports torch and Lightning): the options of each built-in
    as `run`'s parser makes them (`run_options.run_parser`), the ranges and sizes as `RunConfig.validate` reads them,
    and the words the hardware options take as the installed Lightning lists them (`config.Hardware.choices`)."""
    from unlearnbench import registry
    from unlearnbench.config import Hardware
    from unlearnbench.ranges import valid_ranges as class_ranges
    from unlearnbench.run_options import run_parser

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
    content["lightning"] = {"version": metadata.version("lightning"), "choices": Hardware.choices()}
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
        if eval(text, TYPE_NAMES) != kind:
            raise ValueError(f"{key}.{name}: type {kind!r} cannot be written to the file")
        # as the file holds it (a tuple as a list: the early checks judge numbers and flags, never a default's type)
        entry["options"].append([name, text, json.loads(json.dumps(action.default))])
    return entry


def write() -> None:
    """Regenerate the file: after a built-in class's arguments, ranges or size changed (a test says so)."""
    KNOWN_ARGUMENTS.write_text(json.dumps(generate(), indent=1) + "\n")


if __name__ == "__main__":
    write()
