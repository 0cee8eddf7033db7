"""RUM: split each forget set by a memorization proxy and unlearn its subsets from least to most memorized."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor, nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import (
    GradientMethod,
    UnlearningMethod,
    check_method_arguments,
    evaluating,
    flat_arguments,
    method_arguments,
    samples_in,
)
from unlearnbench.methods.gradients import on_device
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Int, space
from unlearnbench.streams.base import NarrowedView, StreamView, UnlearningRequest
from unlearnbench.streams.batches import BatchMode

NOTHING = "none"


@METHODS.register("rum")
class RUM(UnlearningMethod):
    """RUM: refine the forget set into memorization levels, unlearn them low -> high, each with its own method (Zhao et al., NeurIPS 2024).

    "What makes unlearning hard and what to do about it". The forget set is sorted by a memorization proxy and cut into
    len(`stages`) equal-size groups, least memorized first; group k is unlearned by the registered method `stages[k]`
    (`none`: left alone) with its own defaults, overridden per name by `stage_args`, each stage starting from the model
    the previous one left. Default none -> finetune -> salun, following the paper's finding that low-memorization
    samples need little and high-memorization ones the strongest method. Where we differ: the paper's proxy (C-proxy) is
    the true-label confidence averaged over the pretraining run's checkpoints; that run is not recorded in the model
    store, so the proxy here is 1 − the pre-request model's softmax confidence on the true label (eval transform),
    computed once per request. A stage must train by gradient on retain or mixed batches (finetune, rl, salun,
    l1_sparse, ...): the request's batches are built once, mixed forget ∪ retain in batches of `batch_size`, and each
    stage sees only its own group's forget samples in them. A stage's `prepare` (SalUn's mask) runs inside `unlearn`,
    after the previous stage, so it is timed in rte_s, not prepare_s.

    Args:
        stages: a method per memorization group, least memorized first (`none`: left alone).
        stage_args: arguments per stage method name, over its defaults (as in a config: `{salun: {optim: {lr: 0.1}}}`).
        batch_size: samples per batch of the mixed request batches and of the memorization proxy.
    """

    batch_mode = BatchMode.MIXED

    search_space = space(batch_size=Int(32, 512, log=True))  # its stages' own hyperparameters are theirs

    def __init__(
        self,
        stages: tuple[str, ...] = (NOTHING, "finetune", "salun"),
        stage_args: dict | None = None,
        batch_size: int = 256,
    ):
        super().__init__()
        self.stages: tuple[GradientMethod | None, ...] = tuple(
            self._stage(n, (stage_args or {}).get(n, {})) for n in stages
        )
        self.subsets: list[np.ndarray] = []
        self.current: GradientMethod | None = None
        self.subset = torch.zeros(0, dtype=torch.long)

    @staticmethod
    def _stage(name: str, args: dict) -> GradientMethod | None:
        if name == NOTHING:
            return None
        cls = METHODS.get(name)
        if not issubclass(cls, GradientMethod) or cls.batch_mode not in (BatchMode.RETAIN, BatchMode.MIXED):
            raise ValueError(
                f"rum stage {name!r} must train by gradient on retain or mixed batches (e.g. finetune, salun)"
            )
        check_method_arguments(name, cls, args)
        return cls(**method_arguments(cls, flat_arguments(cls, args)))

    def attach(self, model: nn.Module, num_classes: int) -> RUM:
        for stage in self.stages:
            if stage is not None:
                stage.attach(model, num_classes)
        return super().attach(model, num_classes)

    @torch.no_grad()
    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        confidence, indices = [], []
        with evaluating(self.model):
            for b in on_device(data.loader("forget", batch_size=self.batch_size), self.device):
                confidence.append(self.model(b.x).softmax(dim=1).gather(1, b.y[:, None])[:, 0].cpu())
                indices.append(b.idx.cpu())
        order = torch.argsort(-torch.cat(confidence), stable=True)  # memorization 1 − confidence, ascending
        self.subsets = np.array_split(torch.cat(indices)[order].numpy(), len(self.stages))
        self.request, self.data = request, data

    def unlearn(self, fit: Callable[[int], None]) -> None:
        for subset, stage in zip(self.subsets, self.stages, strict=True):
            if stage is None or not len(subset):
                continue
            self.current, self.subset = stage.to(self.device), torch.as_tensor(subset)
            stage.prepare(replace(self.request, forget=subset), NarrowedView(self.data, subset))
            fit(stage.optim.epochs)
        self.current = None

    def on_train_start(self) -> None:
        super().on_train_start()
        self.current.trainer = self.trainer

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        return self.current.loss({**batch, "forget": samples_in(batch["forget"], self.subset)})

    def after_step(self) -> None:
        self.current.after_step()

    def configure_optimizers(self):
        return self.current.configure_optimizers()
