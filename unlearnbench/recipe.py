"""The pretraining recipe: its fields, the shipped recipe files and the check of a run's overrides.

Apart from `training.py`, which imports torch and Lightning: `run`, `suite` and `tune` check a `recipe` before
either is imported (`early_checks`), so `--recipe '{"epochs": -1}'` is refused in well under 2 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from unlearnbench.early_checks import check_numbers
from unlearnbench.errors import ConfigError

#: Shipped inside the package, so a regular (non-editable) install trains with the same recipes.
RECIPE_DIR = Path(__file__).resolve().parent / "recipes"


@dataclass(frozen=True)
class Recipe:
    """SGD with momentum and a cosine learning-rate schedule: the seed papers' recipe family."""

    epochs: int = 30
    lr: float = 0.05
    batch_size: int = 64
    momentum: float = 0.9
    weight_decay: float = 5e-4

    @staticmethod
    def path_for(dataset: str, arch: str) -> Path:
        """Where the recipe of a (dataset, arch) lives: `unlearnbench/recipes/<dataset>-<arch>.yaml`."""
        return RECIPE_DIR / f"{dataset}-{arch}.yaml"

    @classmethod
    def for_setting(cls, dataset: str, arch: str) -> Recipe:
        """The setting's recipe file (`path_for`) if it exists, else the defaults above."""
        path = cls.path_for(dataset, arch)
        if not path.exists():
            return cls()
        values = yaml.safe_load(path.read_text()) or {}
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{path.name}: unknown recipe keys {sorted(unknown)}")
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)


def check_recipe(values: Mapping[str, object]) -> None:
    """A run's recipe overrides: known keys, each a number of its default's type and counts >= 1 (`check_numbers`)."""
    names = [f.name for f in fields(Recipe)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown recipe key(s) {', '.join(unknown)}; valid: {', '.join(names)}")
    check_numbers(dict(values), Recipe().as_dict(), "recipe key")
