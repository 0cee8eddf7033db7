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

    Flags (`augment`) must be true or false; every other argument is a whole number (sizes,
    `image_size`) >= 1, and a subset no larger than the split where the dataset declares its size
    (`data.base.known_size`). An argument left at its default is not returned, so it neither enters
    the fingerprint nor the run identity: adding an argument to a dataset renames no existing run.
    """
    parameters = dataset_parameters(name)
    unknown = sorted(set(args) - set(parameters))
    if unknown:
        raise DatasetError(
            f"dataset {name!r} has no argument(s) {', '.join(unknown)}; its arguments are: {', '.join(parameters)}"
        )
    for key, value in args.items():
        if value is None and parameters[key][1] is None:
            continue
        if parameters[key][0] is bool:
            if not isinstance(value, bool):
                raise DatasetError(f"dataset argument {key} must be true or false, got {value!r}")
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            hint = " (or null: the whole split)" if key in ("train_size", "test_size") else ""
            raise DatasetError(f"dataset argument {key} must be a whole number >= 1{hint}, got {value!r}")
    known = getattr(DATASETS.get(name), "known_size", None)
    limits = {"train_size": known and known.num_train, "test_size": known and known.num_test}
    for key, limit in limits.items():
        if limit and args.get(key) is not None and args[key] > limit:
            raise DatasetError(f"dataset argument {key}={args[key]} exceeds the {limit} samples of {name}'s split")
    if known and args.get("train_size") is not None and args["train_size"] < known.num_classes:
        raise DatasetError(
            f"dataset argument train_size={args['train_size']} is fewer than {name}'s {known.num_classes} classes"
        )
    if known and args.get("test_size") is not None and args["test_size"] < known.num_classes:
        # (the subset is class-balanced: one per class is the least that leaves every class a test sample)
        raise DatasetError(
            f"dataset argument test_size={args['test_size']} is fewer than {name}'s {known.num_classes} classes: the "
            f"SVC membership attack and the oracle attacks (LiRA, RMIA) take their non-members from the test samples "
            f"of the retained classes, and forget_test_acc those of the forgotten ones; give at least "
            f"{known.num_classes} (one per class)"
        )
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
