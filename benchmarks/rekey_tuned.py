"""Rewrite tuned hyperparameter files in place with a gradient method's SGD settings nested (`optim: {lr: ...}`).

`python benchmarks/rekey_tuned.py tuned/*/`: each `*.yaml` of the folders given whose `hparams` name a setting flat
(`lr:` beside `ratio:`, as `unlearnbench tune` wrote them before the settings were a group) gets them moved into the
group by `records.legacy_method_args`, the reader that `run --hparams` applies to such a file, so the file loads to
the same method arguments as before; everything else in it is written back as it was. A file already nested is left
untouched. Prints each file it rewrote.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from unlearnbench.io import load_yaml, write_text_atomic
from unlearnbench.methods.base import group_settings
from unlearnbench.records import legacy_method_args
from unlearnbench.registry import METHODS


def rekey(path: Path) -> bool:
    """Rewrite `path` nested; whether it had to be."""
    data = load_yaml(path.read_text())
    nested = legacy_method_args(data["hparams"], group_settings(METHODS.get(data["method"])))
    if nested == data["hparams"]:
        return False
    write_text_atomic(path, yaml.safe_dump({**data, "hparams": nested}, sort_keys=False))
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of tuned files (`run --hparams` folders)")
    for folder in parser.parse_args(argv).folders:
        for path in sorted(folder.glob("*.yaml")):
            if rekey(path):
                print(path)


if __name__ == "__main__":
    main()
