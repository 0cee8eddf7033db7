"""SalUn: random labeling restricted to the weights most salient for the forget set."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from unlearnbench.methods.base import SGDSettings, evaluating
from unlearnbench.methods.gradients import accumulated_gradients, on_device
from unlearnbench.methods.masks import hold_outside_, top_fraction
from unlearnbench.methods.rl import RandomLabel
from unlearnbench.ranges import FRACTION, ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, space
from unlearnbench.streams.base import StreamView, UnlearningRequest


@METHODS.register("salun")
class SalUn(RandomLabel):
    """SalUn: RL on the top-`ratio` salient weights (Fan et al., "SalUn", ICLR 2024).

    Compared against OPTML-Group/Unlearn-Saliency at a6e89fd (2026-02-28). The mask is computed once per request from
    the model in eval mode: the gradient of −CE summed over the forget set, thresholded globally at its top `ratio`
    magnitudes, as in `Classification/generate_mask.py` (ratio 0.5; ties at the threshold are all kept here, where the
    reference breaks them by sort order). Training is RL's (`Classification/unlearn/RL.py`, same defaults and `batches`
    order, see `RandomLabel`) with the gradient masked; after every step the masked-out weights are restored and their
    momentum zeroed, so they and their optimizer state stay exactly fixed, as the reference does since a6e89fd ("Fix
    weight decay"; before it only the gradient was masked, and weight decay and momentum still moved masked-out weights).

    Args:
        ratio: share of the weights (largest forget-gradient magnitudes) that training may change.
    """

    search_space = space(RandomLabel.search_space, ratio=Float(0.1, 0.9))
    valid_ranges = ranges(ratio=FRACTION)

    def __init__(
        self,
        ratio: float = 0.5,
        batches: Literal["forget_then_retain", "mixed"] = "forget_then_retain",
        exclude_true: bool = False,
        optim: SGDSettings = SGDSettings(lr=0.013),
    ):
        super().__init__(batches=batches, exclude_true=exclude_true, optim=optim)
        self.masks: dict[str, torch.Tensor] = {}
        self.frozen_values: dict[str, torch.Tensor] = {}

    def prepare(self, request: UnlearningRequest, data: StreamView) -> None:
        model, batches = self.model, on_device(data.loader("forget"), self.device)
        with evaluating(model):
            gradients, _ = accumulated_gradients(
                model, batches, lambda b: -F.cross_entropy(model(b.x), b.y, reduction="sum")
            )
        self.masks = top_fraction(gradients, self.hparams.ratio)
        self.frozen_values = {name: p.detach().clone() for name, p in model.named_parameters()}

    def after_step(self) -> None:
        hold_outside_(self.model, self.masks, self.frozen_values, self.optimizers().optimizer)
