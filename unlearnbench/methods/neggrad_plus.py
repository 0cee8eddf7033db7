"""NegGrad+: descend on retain and ascend on forget in the same step."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings, one_of
from unlearnbench.ranges import NON_NEGATIVE, PROBABILITY, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, Float, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("neggrad_plus")
class NegGradPlus(GradientMethod):
    """NegGrad+: CE(retain) − β·CE(forget) (Kurmanji et al., NeurIPS 2023; the seed lab's formulation).

    Default `formulation="lab"`: the seed paper's lab (TIML-Group/Mode-Connectivity-Unlearning at ff1f215, `unlearn.py:
    training_step_ga_plus`, `arg_parser.py`): one shuffled pass over forget ∪ retain split by membership, CE_r − β·CE_f
    from one forward pass; β 0.15, lr 0.01, batch 128, momentum 0.9, wd 1e-4, 10 epochs. We differ: constant lr (the lab
    anneals by cosine); a batch with no forget sample takes CE_r alone (the lab's is NaN). Measured (digits class-wise
    T=5, seed 0): forget_acc 0.0 throughout, retain_acc 67.5 after request 1, 12.6–25.7 after. `formulation="scrub"`:
    α·CE_r − (1−α)·CE_f on paired batches (meghdadk/SCRUB at 98ffb11, `large_scale_ictest.ipynb`: α 0.9999, lr 0.01, 10
    epochs, plain SGD): forget term ~1500x weaker; our old default (α 0.999, 5 epochs, wd 5e-4): forget_acc 82–93.
    Args:
        beta: weight β of the forget term (`formulation=lab`).
        formulation: `lab`: CE_r − β·CE_f in one pass; `scrub`: α·CE_r − (1−α)·CE_f over paired batches.
        alpha: α of the `scrub` formulation.
    """

    search_space = space(GRADIENT_SPACE, beta=Float(0.01, 1.0, log=True))
    valid_ranges = ranges(beta=NON_NEGATIVE, alpha=PROBABILITY)

    def __init__(
        self,
        beta: float = 0.15,
        formulation: Literal["lab", "scrub"] = "lab",
        alpha: float = 0.9999,
        optim: SGDSettings = SGDSettings(batch_size=128, weight_decay=1e-4),
    ):
        super().__init__(optim=optim)
        self.batch_mode = one_of("formulation", formulation, {"lab": BatchMode.MIXED, "scrub": BatchMode.PAIRED})

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        retain, forget, h = batch["retain"], batch["forget"], self.hparams
        if h.formulation == "scrub":
            retain_ce, forget_ce = F.cross_entropy(self(retain.x), retain.y), F.cross_entropy(self(forget.x), forget.y)
            return h.alpha * retain_ce - (1 - h.alpha) * forget_ce
        logits = self(torch.cat([forget.x, retain.x]))  # one forward pass, as in the lab
        loss = F.cross_entropy(logits[len(forget.y) :], retain.y)
        return loss - h.beta * F.cross_entropy(logits[: len(forget.y)], forget.y) if len(forget.y) else loss
