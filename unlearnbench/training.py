"""Supervised training from scratch: the pretrained model and the retrained oracles.

The oracle after request t is trained with exactly the pretraining recipe on request t's retain
set, so the only difference between it and the pretrained model is the forgotten data.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from unlearnbench.data.base import Batch, ImageDataset
from unlearnbench.lean_module import LeanModule
from unlearnbench.registry import ARCHS

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


#: Arch factory parameters the dataset fixes; the others (`smallcnn`'s `width`) are arch arguments.
DATASET_FIXED_PARAMETERS = ("num_classes", "in_channels", "input_size")


def arch_parameters(arch: str) -> dict[str, object]:
    """Arch argument -> default: the arch factory's keyword arguments that the dataset does not fix."""
    parameters = inspect.signature(ARCHS.get(arch)).parameters
    return {key: p.default for key, p in parameters.items() if key not in DATASET_FIXED_PARAMETERS}


def check_arch_args(arch: str, args: dict) -> dict:
    """`args` checked against `arch`'s arguments (whole numbers >= 1); returns those that differ from the defaults."""
    parameters = arch_parameters(arch)
    unknown = sorted(set(args) - set(parameters))
    if unknown:
        valid = ", ".join(parameters) or "none"
        raise ValueError(f"arch {arch!r} has no argument(s) {', '.join(unknown)}; its arguments are: {valid}")
    for key, value in args.items():
        if isinstance(parameters[key], int) and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"arch argument {key} must be a whole number >= 1, got {value!r}")
    return {key: value for key, value in args.items() if value != parameters[key]}


def build_model(arch: str, dataset: ImageDataset, arch_args: dict | None = None) -> nn.Module:
    channels, height, _ = dataset.input_shape
    factory = ARCHS.get(arch)
    return factory(num_classes=dataset.num_classes, in_channels=channels, input_size=height, **(arch_args or {}))


class SupervisedClassifier(LeanModule):
    """Cross-entropy training of one model with a `Recipe`."""

    def __init__(self, model: nn.Module, recipe: Recipe):
        super().__init__()
        self.model = model
        self.recipe = recipe

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return F.cross_entropy(self(batch.x), batch.y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=self.recipe.lr,
            momentum=self.recipe.momentum,
            weight_decay=self.recipe.weight_decay,
        )
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.recipe.epochs)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def train_from_scratch(
    dataset: ImageDataset,
    arch: str,
    recipe: Recipe,
    indices: np.ndarray,
    seed: int,
    make_trainer,
    arch_args: dict | None = None,
) -> nn.Module:
    """Train a freshly initialized `arch` on `indices` of the train split; seeded, so reproducible."""
    L.seed_everything(seed, verbose=False)
    model = build_model(arch, dataset, arch_args)
    loader = dataset.loader(
        dataset.train,
        torch.as_tensor(indices, dtype=torch.long),
        recipe.batch_size,
        augment=True,
        shuffle=True,
        seed=seed,
    )
    make_trainer(recipe.epochs).fit(SupervisedClassifier(model, recipe), train_dataloaders=loader)
    return model.eval()
