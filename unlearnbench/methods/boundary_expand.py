"""Boundary Expanding: train the forget samples into a temporary extra class, then prune it away."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import GradientMethod, SGDSettings
from unlearnbench.models.head import resized, set_classifier
from unlearnbench.registry import METHODS
from unlearnbench.search_space import GRADIENT_SPACE, space
from unlearnbench.streams.batches import BatchMode


@METHODS.register("boundary_expand")
class BoundaryExpand(GradientMethod):
    """Boundary Expanding: forget samples trained into an extra output unit, pruned after (Chen et al., CVPR 2023).

    "Boundary Unlearning", as in OPTML-Group/Unlearn-Saliency `Classification/unlearn/boundary_ex.py` (commit 3152cfeb):
    the classifier gets one more output (old rows copied, the new one freshly initialized) and every forget sample is
    trained toward it, forget set only. The OPTML code then keeps the widened head; the paper (and its authors' code)
    prunes the extra neuron, which is what we do after the fit, so the output width is the class count again and the
    state dict keeps its shapes. lr 1e-5 and 10 epochs are the paper's, SGD momentum 0.9, weight decay 5e-4 and batch
    256 from OPTML's `arg_parser.py`. Train mode on forget-only batches, as there, also moves BN's running statistics
    toward the forget set (at lr 1e-5 on digits, most of the effect).
    """

    batch_mode = BatchMode.FORGET
    search_space = space(GRADIENT_SPACE)

    def __init__(
        self,
        optim: SGDSettings = SGDSettings(lr=1e-5),
    ):
        super().__init__(optim=optim)

    def unlearn(self, fit: Callable[[int], None]) -> None:
        set_classifier(self.model, resized(self.model.get_classifier(), self.num_classes + 1))
        try:
            fit(self.optim.epochs)
        finally:
            set_classifier(self.model, resized(self.model.get_classifier(), self.num_classes))

    def loss(self, batch: dict[str, Batch]) -> Tensor:
        x = batch["forget"].x
        return F.cross_entropy(self(x), torch.full((len(x),), self.num_classes, device=x.device))
