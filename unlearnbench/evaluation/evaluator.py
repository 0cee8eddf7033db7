"""One inference pass in eval mode over the whole train and test splits: the logits every metric uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from unlearnbench.data.base import ImageDataset, ImageSplit


@dataclass(frozen=True)
class EvalLogits:
    """Float32 logits for every train and test sample, in split order."""

    train: np.ndarray
    test: np.ndarray

    @property
    def finite(self) -> bool:
        """Whether every logit is finite: finite weights can still overflow (a request's growing weights under
        gradient ascent), and such logits cannot be scored (the attacks' classifiers refuse them)."""
        return bool(np.isfinite(self.train).all() and np.isfinite(self.test).all())


@torch.inference_mode()
def _split_logits(model: nn.Module, dataset: ImageDataset, split: ImageSplit, batch_size: int, device) -> np.ndarray:
    loader = dataset.loader(split, torch.arange(len(split)), batch_size)
    return torch.cat([model(batch.x.to(device)).float().cpu() for batch in loader]).numpy()


def compute_logits(model: nn.Module, dataset: ImageDataset, batch_size: int = 1024) -> EvalLogits:
    """Logits of `model` (put in eval mode, restored afterwards) with eval transforms."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        return EvalLogits(
            _split_logits(model, dataset, dataset.train, batch_size, device),
            _split_logits(model, dataset, dataset.test, batch_size, device),
        )
    finally:
        model.train(was_training)
