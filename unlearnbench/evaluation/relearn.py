"""The relearning attack: how many fine-tuning steps bring the forgotten data back, against the oracle's count.

A method can drive forget accuracy to the oracle's and still keep the knowledge a few steps away. The attack
(`--relearn-every K`, at t = K, 2K, ... and T) measures that distance after request t:

1. The forgotten data so far, F_1..F_t, is split at random (`relearn_split`, seeded from the run's `--seed` and
   t): the attacker holds a share `--relearn-fraction` of it, the rest is held out. The attacker also holds as
   many retain samples as forgotten ones, drawn from request t's retain set.
2. A copy of the model is fine-tuned on the attacker's samples, every weight trainable, by cross-entropy with
   the setting's own training recipe (SGD, its lr, momentum, weight decay and batch size) at a constant lr,
   for `--relearn-steps` optimizer steps, in a Lightning fit seeded like everything else (`seeds.relearn_seed`),
   so a resumed run gets the same numbers.
3. The accuracy on the held-out part is measured before the first step and after every step: the curve
   `relearn_curve` (k = 0..K), kept in the row.
4. `relearn_steps` is the first k at which that accuracy is back within `--relearn-margin` of the original
   (pretrained) model's accuracy on the same held-out samples: acc_k >= (1 − margin) · acc_original; None when
   the K steps do not get there. The original model needs 0 steps by construction.
5. The oracle (retrained without F_1..F_t, so it never saw them) is attacked the same way on the same split with
   the same seed, and `relearn_ratio` = relearn_steps(method) / relearn_steps(oracle) is the Anamnesis Index,
   a count of None taken as K + 1 (at least that many): about 1 when the method is as far from the knowledge as
   a model that never had it (or neither gets there within K), near 0 when the knowledge was only hidden (the
   original scores 0), above 1 when the method pushed the model further away than never having seen the data
   would (the Streisand side of over-forgetting). Where only one of the two gets there, the ratio is a bound
   (s / (K + 1) or (K + 1) / s); None where the oracle needs 0 steps (it is within the margin before the attack).

Protocols followed, and where we depart:

- Relearn time, Golatkar, Achille and Soatto (CVPR 2020), "Eternal Sunshine of the Spotless Net": fine-tune the
  scrubbed model and count the time until the forgotten data is learned again. They count epochs until a loss
  threshold; we count optimizer steps until an accuracy threshold, as Chundawat et al. do.
- Anamnesis Index, Chundawat, Tarun, Mandal and Kankanhalli (IEEE TIFS 2023), "Zero-shot machine unlearning",
  reference code `metrics.py` (`relearn_time`, `ain`) of ayushkumartarun/zero-shot-unlearning: mini-batch steps
  until the accuracy on held-out samples of the forgotten class reaches (1 − α) times the fully trained model's
  (α = 0.05 there, our default margin), divided by the same count for the retrained ("gold") model. Departures:
  (a) they fine-tune on the whole training set (retain and forget data) and measure on the forgotten class's
  *test* samples; we fine-tune on a stated fraction of the forgotten training samples plus as many retain
  samples, and measure on the held-out rest of the forgotten training samples, which the original model
  memorized; (b) Adam at lr 1e-3, batch 256 there; the setting's recipe here (constant lr), so the attack
  learns as the model was trained; (c) they check after each step only, so their count is at least 1; we check
  before the first step too, so a model that kept F counts 0; (d) they cap the attack at 10 epochs and count the
  cap; we cap it at K steps, record None (not reached) as the steps and count K + 1 in the ratio, so that
  reaching the target at the last step and not reaching it differ.
- Attacker holds part of the forgotten data, measured on the rest: Deeb and Roger (2024), "Do Unlearning
  Methods Remove Information from Language Model Weights?" (arXiv 2410.08827): fine-tune on the accessible
  facts, measure the others, which cannot be guessed from them. The retain samples beside them keep the
  reference protocols' mix (Chundawat et al. relearn on the whole training set, retain data included) in a
  stated proportion: each batch is half forgotten data whatever the size of F_1..F_t.

On a class-wise stream the held-out samples are of the forgotten classes, so the oracle learns them as a new class
from the attacker's samples and reaches at most about its test accuracy on those classes, while the original
memorized them: with a small margin the oracle may not come within it in K steps (on the memorizing Fashion-MNIST
tier it does at t = 1 and plateaus near 70-80% after), which says that reaching the target at all takes knowledge
the data alone does not give. Read the curve beside the counts; the row keeps it, so the counts at another margin
are recomputed from the run directory (`relearn_scores`).

Cost per scheduled request: two fits of K steps (the method's copy and the oracle's; the oracle's is computed once
per process for every run of a setting, `reference_scores`) plus one evaluation of the held-out part per step;
on the memorizing Fashion-MNIST tier's MLP at K = 100 about 2 CPU-seconds each (docs/reporting.md).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.seed import isolate_rng
from torch import nn

from unlearnbench.data.base import ImageDataset
from unlearnbench.evaluation.keys import accuracy
from unlearnbench.recipe import Recipe
from unlearnbench.training import SupervisedClassifier

#: What a `relearn_curve` fit needs of the runner: a Trainer of `max_steps` steps on one device, with `callbacks`.
MakeTrainer = Callable[..., L.Trainer]


@dataclass(frozen=True)
class RelearnSplit:
    """Request t's data for the attack: the attacker's part of F_1..F_t, the held-out rest, the retain samples."""

    known: np.ndarray
    heldout: np.ndarray
    retain: np.ndarray

    @property
    def attack(self) -> np.ndarray:
        """Every sample the attacker fine-tunes on."""
        return np.concatenate([self.known, self.retain])


def relearn_split(forgotten: np.ndarray, retain: np.ndarray, fraction: float, seed: int) -> RelearnSplit:
    """F_1..F_t (`forgotten`) split at random into a share `fraction` for the attacker (at least one sample, and at
    least one held out where there are two) and the held-out rest, and as many retain samples as the attacker's
    forgotten ones, drawn from `retain`; each part in ascending order."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.asarray(forgotten, dtype=np.int64))
    count = min(max(round(fraction * len(order)), 1), max(len(order) - 1, 0))
    retained = rng.choice(np.asarray(retain, dtype=np.int64), size=min(count, len(retain)), replace=False)
    return RelearnSplit(np.sort(order[:count]), np.sort(order[count:]), np.sort(retained))


@torch.no_grad()
def heldout_accuracy(model: nn.Module, dataset: ImageDataset, indices: np.ndarray) -> float | None:
    """Top-1 accuracy (%) of `model` (in eval mode, restored afterwards) on the train samples `indices`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loader = dataset.loader(dataset.train, torch.as_tensor(indices, dtype=torch.long), 1024)
    try:
        logits = torch.cat([model(batch.x.to(device)).float().cpu() for batch in loader]) if len(indices) else None
    finally:
        model.train(was_training)
    if logits is None:
        return None
    labels = dataset.train.labels[torch.as_tensor(indices, dtype=torch.long)].cpu().numpy()
    return accuracy(logits.numpy(), labels, dataset.num_classes)


class RelearnClassifier(SupervisedClassifier):
    """The attacker's fine-tuning: cross-entropy on every weight of the copy, SGD with the recipe's lr, momentum and
    weight decay held constant (the recipe's cosine runs over its pretraining epochs, which a K-step attack is not)."""

    def on_train_start(self) -> None:
        self.model.requires_grad_(True)  # a frozen part (LOFT's backbone) is the attacker's to train too
        self.model.train()  # it arrives in eval mode from evaluation

    def configure_optimizers(self) -> torch.optim.Optimizer:
        recipe = self.recipe
        return torch.optim.SGD(
            self.model.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay
        )


class HeldOutCurve(Callback):
    """The held-out accuracy after every optimizer step of the attack: the curve's k = 1..K."""

    def __init__(self, measure: Callable[[nn.Module], float | None]):
        self.measure = measure
        self.curve: list[float | None] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.curve.append(self.measure(pl_module.model))


def relearn_curve(
    model: nn.Module,
    dataset: ImageDataset,
    split: RelearnSplit,
    recipe: Recipe,
    steps: int,
    seed: int,
    make_trainer: MakeTrainer,
) -> list[float | None]:
    """The held-out accuracy of a copy of `model` before and after each of `steps` attack steps (k = 0..K).

    The fit is seeded by `seed` (the global seed, then the attacker's shuffled loader), so the same model,
    split and seed give the same curve: the method's and the oracle's attacks see the same batches.
    """
    attacked = copy.deepcopy(model)

    def measure(candidate: nn.Module) -> float | None:
        return heldout_accuracy(candidate, dataset, split.heldout)

    curve = [measure(attacked)]
    if steps == 0:
        return curve
    recorder = HeldOutCurve(measure)
    with isolate_rng():  # the run's random state after the attack is what it was before: no other number changes
        L.seed_everything(seed, verbose=False)
        loader = dataset.loader(
            dataset.train,
            torch.as_tensor(split.attack, dtype=torch.long),
            recipe.batch_size,
            augment=True,
            shuffle=True,
            seed=seed,
        )
        make_trainer(max_steps=steps, callbacks=(recorder,)).fit(
            RelearnClassifier(attacked.train(), recipe), train_dataloaders=loader
        )
    return curve + recorder.curve


def steps_within_margin(curve: list[float | None], target: float) -> int | None:
    """The first k at which the curve reaches `target`; None when it never does."""
    return next((k for k, value in enumerate(curve) if value is not None and value >= target), None)


def relearn_target(original_accuracy: float, margin: float) -> float:
    """The accuracy the attack has to bring back: within `margin` (relative) of the original model's."""
    return (1.0 - margin) * original_accuracy


def anamnesis_index(steps: int | None, oracle_steps: int | None, budget: int) -> float | None:
    """relearn_steps(model) / relearn_steps(oracle), Chundawat et al.'s AIN, a count of None (not within the `budget`
    of K steps) taken as K + 1, as the reference code counts its cap; None where the oracle needs 0 steps."""
    if oracle_steps == 0:
        return None
    capped = [budget + 1 if count is None else count for count in (steps, oracle_steps)]
    return capped[0] / capped[1]


def relearn_scores(
    curves: dict[str, list[float | None]], original_accuracy: float | None, margin: float
) -> dict[str, dict]:
    """The row keys of each attacked model (`curves` of K + 1 points: "method", and "oracle" where request t has one)
    and of the original model, whose accuracy on the held-out part sets the target: curve, steps within the margin,
    ratio to the oracle's steps. Without the original's accuracy (no held-out sample) there is no target: no steps,
    no ratio."""
    budget = len(curves["method"]) - 1
    target = None if original_accuracy is None else relearn_target(original_accuracy, margin)

    def steps(curve: list[float | None]) -> int | None:
        return None if target is None else steps_within_margin(curve, target)

    def ratio(curve: list[float | None]) -> float | None:
        if target is None or "oracle" not in curves:
            return None
        return anamnesis_index(steps(curve), steps(curves["oracle"]), budget)

    scores = {
        side: {
            "relearn_curve": curve,
            "relearn_acc": curve[-1],
            "relearn_steps": steps(curve),
            "relearn_ratio": ratio(curve),
        }
        for side, curve in curves.items()
    }
    original = [original_accuracy]
    scores["original"] = {"relearn_curve": original, "relearn_steps": steps(original), "relearn_ratio": ratio(original)}
    return scores
