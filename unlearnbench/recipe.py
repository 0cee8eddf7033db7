"""The pretraining recipe: its fields and the shipped recipe files.

Apart from `training.py`, which imports torch and Lightning: `run`, `suite` and `tune` check a `recipe` before
either is imported (`early_checks.check_recipe`), so `--recipe '{"epochs": -1}'` is refused in well under 2 s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

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
