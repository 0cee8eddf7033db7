"""UNSIR: learn noise that maximizes the forget classes' loss, impair the model on it, repair on retain."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.adversarial import error_maximizing_noise
from unlearnbench.methods.base import AdamOptimizer, GradientMethod, SGDSettings
from unlearnbench.ranges import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, Int, space
from unlearnbench.streams.base import StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode


@METHODS.register("unsir")
class UNSIR(AdamOptimizer, GradientMethod):
    """UNSIR: error-maximizing noise, an impair epoch on noise + retain, a repair epoch (Tarun et al., TNNLS 2023).

    "Fast Yet Effective Machine Unlearning", as in selective-synaptic-dampening's `src/forget_full_class_strategies.py`
    (`UNSIR`; commit 24c0a617 of the Oomataa fork) and `src/unlearn.py`, after vikram2000b/Fast-Machine-Unlearning: 32
    noise images per forgotten class from N(0, 1), 25 Adam steps (lr 0.1) on −CE + 0.1·mean‖N‖² with the model in eval
    mode; impair = one epoch over noise labelled with its class plus retain, repair = one epoch over retain, each with a
    fresh Adam at lr 1e-4, batch 32. Where we differ: its loader appends `batch[0].size(0)` (3 channels) images per copy
    of the noise batch, 80 copies, so its impair set holds 240 noise samples of 3 distinct images; we keep 240
    (`noise_samples`), cycle through all learned images and spread them over the impair steps. It takes ≤ 500 retain
    images per class (all of them on digits) and repairs in batches of 128; we use all of retain and `batch_size`.
    Random streams are refused (noise is learned per class). `momentum` is unused (Adam).

    Args:
        noise_per_class: noise images learned per forgotten class.
        noise_steps: Adam steps that learn the noise.
        noise_lr: Adam learning rate of the noise.
        noise_l2: weight of the noise's L2 penalty.
        noise_samples: noise samples in the impair epoch.
    """

    batch_mode = BatchMode.RETAIN
    streams = ("classwise",)

    search_space = space(
        optim={"lr": Float(1e-6, 1e-2, log=True), "epochs": Int(1, 3)},
        noise_lr=Float(1e-3, 1.0, log=True),
        noise_l2=Float(1e-3, 1.0, log=True),
    )
    valid_ranges = ranges(
        noise_per_class=AT_LEAST_ONE,
        noise_steps=NON_NEGATIVE,
        noise_lr=POSITIVE,
        noise_l2=NON_NEGATIVE,
        noise_samples=AT_LEAST_ONE,
    )

    def __init__(
        self,
        noise_per_class: int = 32,
        noise_steps: int = 25,
        noise_lr: float = 0.1,
        noise_l2: float = 0.1,
        noise_samples: int = 240,
        optim: SGDSettings = SGDSettings(lr=1e-4, epochs=1, batch_size=32, weight_decay=0.0),
    ):
        super().__init__(optim=optim)
        self.labels, self.shape = torch.zeros(0, dtype=torch.long), ()
        self.noise: Tensor | None = None  # per request, never in the state dict
        self.impairing = False

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        self.shape = tuple(next(iter(data.loader("forget", batch_size=1))).x.shape[1:])
        classes = torch.tensor(request.forget_classes, device=self.device)
        self.labels = classes.repeat_interleave(self.hparams.noise_per_class)

    def unlearn(self, fit: Callable[[int], None]) -> None:
        h = self.hparams
        self.noise = error_maximizing_noise(
            self.model.eval(), self.labels, self.shape, h.noise_steps, h.noise_lr, h.noise_l2
        )
        self.impairing = True
        fit(self.optim.epochs)
        self.impairing = False
        fit(self.optim.epochs)
        self.noise = None

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        x, y = batch["retain"].x, batch["retain"].y
        if self.impairing:  # this step's share of the noise samples, in order
            steps, total = self.trainer.num_training_batches, self.hparams.noise_samples
            share = -(-total // steps)
            start = min((self.global_step % steps) * share, total)
            take = torch.arange(start, min(start + share, total), device=x.device) % len(self.noise)
            x, y = torch.cat([x, self.noise[take].to(x.device)]), torch.cat([y, self.labels[take].to(y.device)])
        return F.cross_entropy(self(x), y)
