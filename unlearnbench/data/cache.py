"""Dataset arguments, and each dataset loaded once per process that asks for it many times (a suite's cells).

Dataset arguments (`--dataset.train_size 10000`, `dataset_args: {train_size: 10000}` in a config
or a suite cell) are the keyword arguments of the dataset's registered factory (e.g.
`imagefolder`'s `image_size`, `fashionmnist`'s `augment`) plus `train_size` / `test_size`, which every dataset takes: a
seeded, class-balanced subset of that split (`data.base.balanced_subset`), the way CI and quick
studies stay cheap without a second dataset name. They are checked (names, flags, whole numbers
>= 1, sizes within a split whose size the dataset declares) before anything is loaded, and they enter
the dataset's fingerprint, so the model store never mixes two subsets.

A suite builds every cell's Runner before the first one runs, so that bad input fails before
anything is written. Loaded per cell, the plasticity-collapse suite's 120 cells would hold 120
copies of CIFAR-100 in memory (and, on a GPU, 120 device copies); an ImageNet folder would be
listed once per cell. Cells of one setting share the copy this cache holds instead: datasets
are never modified after loading, so sharing is safe.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import replace
from pathlib import Path

import torch

from unlearnbench.data.base import DatasetError, ImageDataset, data_fingerprint, data_root, with_subset
from unlearnbench.early_checks import check_dataset_arguments
from unlearnbench.errors import ConfigError
from unlearnbench.registry import DATASETS

#: Factory parameters that say where and how to read, not what the data is: run options, not dataset arguments.
LOADING_PARAMETERS = ("data_dir", "download", "num_workers")


def subset_arguments(train_size: int | None = None, test_size: int | None = None) -> None:
    """The dataset arguments every dataset takes: sizes of seeded class-balanced subsets (None: the whole split)."""


def dataset_parameters(name: str) -> dict[str, tuple[type, object]]:
    """Dataset argument -> (type, default) for dataset `name`: its factory's own, then the subset sizes."""
    parameters = {}
    for function in (DATASETS.get(name), subset_arguments):
        hints = typing.get_type_hints(function)
        for key, parameter in inspect.signature(function).parameters.items():
            if key not in LOADING_PARAMETERS and parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                parameters[key] = (hints.get(key, object), parameter.default)
    return parameters


def check_dataset_args(name: str, args: dict) -> dict:
    """`args` checked against dataset `name`'s arguments; returns those that differ from the defaults.

    What is valid is `early_checks.check_dataset_arguments`' to say (`run` asks it before torch is imported, from
    `known_arguments`); its refusal is a `DatasetError` here. An argument left at its default is not returned, so it
    neither enters the fingerprint nor the run identity: adding an argument to a dataset renames no existing run.
    """
    parameters = dataset_parameters(name)
    try:
        check_dataset_arguments(name, args, parameters, getattr(DATASETS.get(name), "known_size", None))
    except ConfigError as error:
        raise DatasetError(str(error)) from None
    return {key: value for key, value in args.items() if value != parameters[key][1]}


def load_dataset(name: str, data_dir: str | Path | None, download: bool, args: dict | None = None):
    """Dataset `name` with its arguments applied (subsets last) and its fingerprint set."""
    args = check_dataset_args(name, dict(args or {}))
    own = {key: value for key, value in args.items() if key not in ("train_size", "test_size")}
    dataset = DATASETS.get(name)(data_dir=data_dir, download=download, **own)
    dataset = with_subset(dataset, args.get("train_size"), args.get("test_size"))
    return replace(dataset, fingerprint=data_fingerprint(dataset, args))


class DatasetCache:
    """Loaded datasets by (name, folder, download, arguments), and their device copies by device."""

    def __init__(self) -> None:
        self._loaded: dict[tuple, ImageDataset] = {}

    def load(
        self,
        name: str,
        data_dir: str | Path | None,
        download: bool,
        device: torch.device | None = None,
        args: dict | None = None,
    ) -> ImageDataset:
        """The dataset on the host, or its copy on `device` (in-memory datasets train from there)."""
        args = check_dataset_args(name, dict(args or {}))
        key = (name, data_root(data_dir).resolve(), download, json.dumps(args, sort_keys=True))
        if key not in self._loaded:
            self._loaded[key] = load_dataset(name, data_dir, download, args)
        if device is None:
            return self._loaded[key]
        on_device = (*key, str(device))
        if on_device not in self._loaded:
            self._loaded[on_device] = self._loaded[key].to(device)
        return self._loaded[on_device]
