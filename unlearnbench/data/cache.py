"""Each dataset loaded once per process that asks for it many times (a suite's cells).

A suite builds every cell's Runner before the first one runs, so that bad input fails before
anything is written. Loaded per cell, the plasticity-collapse suite's 120 cells would hold 120
copies of CIFAR-100 in memory (and, on a GPU, 120 device copies); an ImageNet folder would be
listed once per cell. Cells of one setting share the copy this cache holds instead: datasets
are never modified after loading, so sharing is safe.
"""

from __future__ import annotations

from pathlib import Path

import torch

from unlearnbench.data.base import ImageDataset, data_root
from unlearnbench.registry import DATASETS


class DatasetCache:
    """Loaded datasets by (name, folder, download), and their device copies by device."""

    def __init__(self) -> None:
        self._loaded: dict[tuple, ImageDataset] = {}

    def load(
        self, name: str, data_dir: str | Path | None, download: bool, device: torch.device | None = None
    ) -> ImageDataset:
        """The dataset on the host, or its copy on `device` (in-memory datasets train from there)."""
        key = (name, data_root(data_dir).resolve(), download)
        if key not in self._loaded:
            self._loaded[key] = DATASETS.get(name)(data_dir=data_dir, download=download)
        if device is None:
            return self._loaded[key]
        on_device = (*key, str(device))
        if on_device not in self._loaded:
            self._loaded[on_device] = self._loaded[key].to(device)
        return self._loaded[on_device]
