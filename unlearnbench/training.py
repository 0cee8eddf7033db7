"""Supervised training from scratch: the pretrained model and the retrained oracles.

The oracle after request t is trained with exactly the pretraining recipe on request t's retain
set, so the only difference between it and the pretrained model is the forgotten data (unless that
fit diverges: `refit_until_finite`).
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from dataclasses import replace

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.data.base import Batch, ImageDataset
from unlearnbench.early_checks import check_arch_arguments
from unlearnbench.lean_module import LeanModule
from unlearnbench.recipe import Recipe
from unlearnbench.registry import ARCHS
from unlearnbench.store import finite_state

_log = logging.getLogger(__name__)

#: Arch factory parameters the dataset fixes; the others (`smallcnn`'s `width`) are arch arguments.
DATASET_FIXED_PARAMETERS = ("num_classes", "in_channels", "input_size")


def arch_parameters(arch: str) -> dict[str, object]:
    """Arch argument -> default: the arch factory's keyword arguments that the dataset does not fix."""
    parameters = inspect.signature(ARCHS.get(arch)).parameters
    return {key: p.default for key, p in parameters.items() if key not in DATASET_FIXED_PARAMETERS}


def check_arch_args(arch: str, args: dict) -> dict:
    """`args` checked against `arch`'s arguments (`early_checks.check_arch_arguments`); returns those that differ
    from the defaults."""
    parameters = arch_parameters(arch)
    check_arch_arguments(arch, args, parameters)
    return {key: value for key, value in args.items() if value != parameters[key]}


def build_model(arch: str, dataset: ImageDataset, arch_args: dict | None = None) -> nn.Module:
    channels, height, _ = dataset.input_shape
    factory = ARCHS.get(arch)
    return factory(num_classes=dataset.num_classes, in_channels=channels, input_size=height, **(arch_args or {}))


def recipe_optimization(parameters, recipe: Recipe) -> dict:
    """A recipe's optimization, as Lightning's `configure_optimizers` returns it: SGD with the recipe's lr, momentum
    and weight decay, the lr annealed by a cosine over its epochs (one model's fit or several trained together)."""
    optimizer = torch.optim.SGD(parameters, lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=recipe.epochs)
    return {"optimizer": optimizer, "lr_scheduler": scheduler}


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
        return recipe_optimization(self.model.parameters(), self.recipe)


#: The largest model (in parameters) trained in a group by `train_together`, and the fewest intra-op threads
#: it takes to pay. Measured (plain SGD steps of 16 MLPs, each alone and all 16 together, on a shared 2-core
#: machine under load): on one thread the group costs what the lone fits cost (1.02x: the batched matrix
#: products are no faster than the lone ones, only the per-step overhead is shared); on two threads 0.37x at
#: 0.5M parameters (the memorizing tier's `mlp`) and 0.61x at 3.7M (`--arch.width 2048`), a lone fit's small
#: matrix products leaving the second core idle. On a quiet machine the gain is smaller: 16 `mlp` oracles of 2
#: epochs take 0.94x the lone fits' time on two threads (`benchmarks/perf.py` P8, repeats 0.92-0.94), against a
#: floor of 0.81x for their forward and backward products, stacked, and the recipe's SGD step on the stacked
#: weights (P8b; the products alone 0.59x): each model's products stay batch-by-width small however many are
#: batched, so only the loop's cost a step is shared. Larger models were not measured and are trained one by one.
BATCHED_FIT_MAX_PARAMETERS = 4_000_000
BATCHED_FIT_MIN_THREADS = 2


def trains_together(arch: str, dataset: ImageDataset, arch_args: dict | None = None) -> bool:
    """Whether models of `arch` are trained in one batched fit (`train_together`) rather than one by one.

    Only where it pays (`BATCHED_FIT_MAX_PARAMETERS`, `BATCHED_FIT_MIN_THREADS`) and where a model holds no
    buffers: a batch norm's running statistics are updated in place by each forward pass, which a vmapped
    forward cannot do for a stack of models.
    """
    if torch.get_num_threads() < BATCHED_FIT_MIN_THREADS:
        return False
    model = build_model(arch, dataset, arch_args)
    parameters = sum(p.numel() for p in model.parameters())
    return not list(model.buffers()) and parameters <= BATCHED_FIT_MAX_PARAMETERS


class StackedBatches:
    """One batch of each of K loaders per step, stacked: images (K, B, C, H, W), labels and indices (K, B).

    Each loader keeps its own seeded order, so model k sees the batches its lone fit would. The
    loaders cover the same indices with the same batch size, so their batches have equal sizes.
    """

    def __init__(self, loaders: list):
        self.loaders = loaders

    def __len__(self) -> int:
        return len(self.loaders[0])

    def __iter__(self):
        for batches in zip(*self.loaders, strict=True):
            yield Batch(*(torch.stack(parts) for parts in zip(*batches, strict=True)))


class EnsembleClassifier(LeanModule):
    """K models of one arch trained by one Lightning fit, each as `SupervisedClassifier` trains one.

    The models' parameters are stacked (`torch.func.stack_module_state`) and each model runs on its
    own batch by `functional_call` under `vmap`. The loss is the sum of the K models' mean cross-entropies,
    so each model's gradient is the one its lone fit computes; SGD's momentum and weight decay are
    elementwise and the cosine schedule is per epoch, so each slice of the stack takes its lone fit's
    steps, up to the rounding of batched matrix products.
    """

    def __init__(self, models: list[nn.Module], recipe: Recipe):
        super().__init__()
        parameters, _ = torch.func.stack_module_state(models)
        self.names = list(parameters)
        self.stacked = nn.ParameterList(parameters.values())
        # The arch's structure without weights: functional_call runs it on a model's slice of the stack.
        self.template = (copy.deepcopy(models[0]).to("meta"),)
        self.recipe = recipe

    def model_loss(self, parameters: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(torch.func.functional_call(self.template[0], parameters, (x,)), y)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        parameters = dict(zip(self.names, self.stacked, strict=True))
        return torch.func.vmap(self.model_loss)(parameters, batch.x, batch.y).sum()

    def configure_optimizers(self):
        return recipe_optimization(self.stacked.parameters(), self.recipe)

    def state_dicts(self) -> list[dict[str, Tensor]]:
        """Each model's weights, as its own `state_dict`."""
        count = len(self.stacked[0])
        return [
            {name: p[k].detach().clone() for name, p in zip(self.names, self.stacked, strict=True)}
            for k in range(count)
        ]


def train_together(
    dataset: ImageDataset,
    arch: str,
    recipe: Recipe,
    indices: np.ndarray,
    seeds: list[int],
    make_trainer,
    arch_args: dict | None = None,
) -> list[dict[str, Tensor]]:
    """`train_from_scratch` for each of `seeds`, as one batched fit (`EnsembleClassifier`): the weights of each.

    Model k starts from the initialization and sees the batches `train_from_scratch(..., seeds[k], ...)`
    would (its global seed before it is built, its loader's seed), so it equals that lone fit's model up
    to float rounding. For archs `trains_together` accepts.
    """
    starts = [_seeded_start(dataset, arch, recipe, indices, seed, arch_args) for seed in seeds]
    ensemble = EnsembleClassifier([model for model, _ in starts], recipe)
    make_trainer(recipe.epochs).fit(ensemble, train_dataloaders=StackedBatches([loader for _, loader in starts]))
    return ensemble.state_dicts()


def _seeded_start(
    dataset: ImageDataset, arch: str, recipe: Recipe, indices: np.ndarray, seed: int, arch_args: dict | None
) -> tuple[nn.Module, object]:
    """A fit's starting point from `seed`: the global seed set, then the freshly initialized model, then its shuffled
    loader over `indices` (in this order, so a lone fit and a model of a batched one start alike)."""
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
    return model, loader


#: How many times `refit_until_finite` halves a diverged oracle fit's lr before the store refuses the fit.
ORACLE_REFITS = 3


def refit_until_finite(fit: Callable[[Recipe], nn.Module], recipe: Recipe, what: str) -> nn.Module:
    """`fit(recipe)`, refitted from the same seeded start with the lr halved while its weights are not finite.

    A stream's last requests leave an oracle few classes to learn (class-wise, T = 9 of 10 classes: two), and the
    lr that trains the whole set can blow up on them: the memorizing tier's lr 0.05 with momentum 0.9 reached
    non-finite weights in the third epoch of seed 2's oracle at t = 8 (its 1,000 trousers and 1,000 bags: weight norm 21,
    56, then NaN), where seeds 0 and 1 train at it. An oracle that cannot be trained would stop every method's run
    at that request; a practitioner retraining would lower the lr, and so does this, with one warning line naming
    the lr used. Each refit starts from the same seed, so the stored oracle is still a function of its key; a fit
    that stays finite (every published oracle of seeds 0 and 1) is untouched. After `ORACLE_REFITS` halvings the
    non-finite weights go to the store, which refuses them with the fix.
    """
    model = fit(recipe)
    for _ in range(ORACLE_REFITS):
        if finite_state(model.state_dict()):
            break
        _log.warning(f"{what} diverged at lr {recipe.lr:g}; refitting it from the same start at lr {recipe.lr / 2:g}")
        recipe = replace(recipe, lr=recipe.lr / 2)
        model = fit(recipe)
    return model


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
    model, loader = _seeded_start(dataset, arch, recipe, indices, seed, arch_args)
    make_trainer(recipe.epochs).fit(SupervisedClassifier(model, recipe), train_dataloaders=loader)
    return model.eval()
