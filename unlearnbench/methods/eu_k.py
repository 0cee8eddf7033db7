"""EU-k: exact unlearning of the last k blocks, re-initialized and retrained on the retain set."""

from __future__ import annotations

import torch

from unlearnbench.methods.base import SGDSettings
from unlearnbench.methods.cf_k import CFk
from unlearnbench.registry import METHODS


@METHODS.register("eu_k")
class EUk(CFk):
    """EU-k: re-initialize the last k blocks, train only them on retain (Goel et al., "Towards Adversarial Evaluations for Inexact Machine Unlearning").

    Reference shash42/Evaluating-Inexact-Unlearning (commit e3154015), `src/methods.py` (`retrain_lastK`): the same
    training as CF-k (see `cf_k`), after re-initializing the chosen layers; 62 epochs (`scripts/unlearn.sh`,
    `--epochs-rf=62`, its full training length), k = 1. Where we differ: every module whose parameters all lie in the
    last k blocks gets its own `reset_parameters()` (convs, linears and norms, BN running statistics included), where
    the reference re-draws conv/linear weights only (Kaiming normal, zero bias) and keeps BN; a parameter held by a
    module without `reset_parameters` (Swin's relative-position table) keeps its value. Blocks are the arch's layer
    groups, as in CF-k.
    """

    def __init__(
        self,
        k: int = 1,
        clip: float = 10.0,
        optim: SGDSettings = SGDSettings(lr=0.1, epochs=62, batch_size=64, weight_decay=5e-5),
    ):
        super().__init__(k=k, clip=clip, optim=optim)

    @torch.no_grad()
    def reset(self, names: set[str]) -> None:
        for prefix, module in self.model.named_modules():
            own = {f"{prefix}.{name}".lstrip(".") for name, _ in module.named_parameters(recurse=False)}
            if own and own <= names and hasattr(module, "reset_parameters"):
                module.reset_parameters()
