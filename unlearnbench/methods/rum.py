"""RUM: split each forget set by a memorization proxy and unlearn its subsets from least to most memorized."""

from __future__ import annotations

import numpy as np
import torch

from unlearnbench.methods.base import NO_STAGE, StagedMethod, evaluating, stage_method
from unlearnbench.methods.gradients import on_device
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Int, space
from unlearnbench.streams.base import StreamView, UnlearningRequest


@METHODS.register("rum")
class RUM(StagedMethod):
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

    search_space = space(batch_size=Int(32, 512, log=True))  # its stages' own hyperparameters are theirs

    def __init__(
        self,
        stages: tuple[str, ...] = (NO_STAGE, "finetune", "salun"),
        stage_args: dict | None = None,
        batch_size: int = 256,
    ):
        super().__init__()
        self.stages = tuple(stage_method("rum", name, (stage_args or {}).get(name, {})) for name in stages)

    @torch.no_grad()
    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        super().prepare(request, data)
        confidence, indices = [], []
        with evaluating(self.model):
            for b in on_device(data.loader("forget", batch_size=self.batch_size), self.device):
                confidence.append(self.model(b.x).softmax(dim=1).gather(1, b.y[:, None])[:, 0].cpu())
                indices.append(b.idx.cpu())
        order = torch.argsort(-torch.cat(confidence), stable=True)  # memorization 1 − confidence, ascending
        self.subsets = np.array_split(torch.cat(indices)[order].numpy(), len(self.stages))
