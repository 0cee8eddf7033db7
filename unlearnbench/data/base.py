"""In-memory image datasets and the batches they yield.

Small datasets (digits, CIFAR) live as uint8 tensors on the training device: a batch is one
indexing operation plus a batched on-device augmentation, with no worker processes and no
per-sample collation. Train-time augmentation and eval transforms are two separate code paths
(`augment=True/False`), never a mutated shared `.transform`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor


class DatasetError(ValueError):
    """A dataset that cannot be loaded (missing files, bad layout); the message says how to get it."""


#: Where datasets that live on disk are looked for when no `--data-dir` is given.
DATA_DIR_ENV = "UNLEARNBENCH_DATA"


@dataclass(frozen=True)
class KnownSize:
    """A dataset's train-split size and class count (and test-split size, where declared), fixed by its definition."""

    num_train: int
    num_classes: int
    num_test: int | None = None


Factory = TypeVar("Factory")


def known_size(num_train: int, num_classes: int, num_test: int | None = None):
    """Decorator: record a dataset factory's `KnownSize` as `factory.known_size`.

    `unlearnbench suite --check` validates stream sizes (requests x size against the classes or
    samples) without loading anything; a factory whose size depends on the files it reads
    (`imagefolder`) has none and its streams are checked when the run loads it.
    """

    def decorator(factory: Factory) -> Factory:
        factory.known_size = KnownSize(num_train, num_classes, num_test)
        return factory

    return decorator


def data_root(data_dir: str | Path | None) -> Path:
    """`data_dir`, else `$UNLEARNBENCH_DATA`, else `./data`."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    return Path(os.environ.get(DATA_DIR_ENV, "data")).expanduser()


class Batch(NamedTuple):
    """Images (float, normalized), labels, and their indices into the split they came from."""

    x: Tensor
    y: Tensor
    idx: Tensor


@dataclass(frozen=True)
class Augmentation:
    """Random crop with zero padding and optional horizontal flip, applied to a whole batch.

    `Augmentation()` (no padding, no flip) leaves images as they are and draws no random numbers:
    a dataset's "no augmentation" (`fashionmnist`'s `augment: false`).
    """

    pad: int = 0
    flip: bool = False

    @property
    def identity(self) -> bool:
        """Whether it leaves every image as it is (and draws no random numbers)."""
        return not self.pad and not self.flip

    def __call__(self, images: Tensor, generator: torch.Generator) -> Tensor:
        batch, _, height, width = images.shape
        if self.pad:
            padded = torch.nn.functional.pad(images, (self.pad,) * 4)
            offsets = torch.randint(0, 2 * self.pad + 1, (2, batch), generator=generator, device=images.device)
            rows = offsets[0, :, None] + torch.arange(height, device=images.device)
            cols = offsets[1, :, None] + torch.arange(width, device=images.device)
            batch_index = torch.arange(batch, device=images.device)[:, None, None]
            images = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
            images = images.permute(0, 3, 1, 2)
        if self.flip:
            flip = torch.rand(batch, generator=generator, device=images.device) < 0.5
            images = torch.where(flip[:, None, None, None], images.flip(-1), images)
        return images


def normalize(images: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """uint8 images to floats in [0, 1], then per-channel standardization."""
    mean_t = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255.0 - mean_t) / std_t


#: The largest float32 copy of a split's images kept normalized in memory (`ImageSplit.normalized`): all of
#: Fashion-MNIST's train split (188 MB) fits, CIFAR's (614 MB) does not and is normalized batch by batch.
NORMALIZED_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class ImageSplit:
    """One split of an in-memory dataset: uint8 images (N, C, H, W) and int64 labels (N,)."""

    images: Tensor
    labels: Tensor
    #: `normalized`'s copies by (mean, std); each new split (`to`, `subset`, `replace`) starts without
    _normalized: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.labels)

    def normalized(self, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor | None:
        """Every image normalized (`normalize`), computed on first use and kept; None where the float copy would
        be larger than `NORMALIZED_CACHE_BYTES`.

        An unaugmented batch is then one gather of floats, not a gather, a conversion and two broadcasts
        per step (about 5% of a step of the memorizing tier's MLP). `normalize` is elementwise, so a row of
        the copy equals, bit for bit, that image normalized alone.
        """
        if self.images.numel() * 4 > NORMALIZED_CACHE_BYTES:
            return None
        key = (mean, std)
        if key not in self._normalized:
            self._normalized[key] = normalize(self.images, mean, std)
        return self._normalized[key]

    def to(self, device: torch.device | str) -> ImageSplit:
        return ImageSplit(self.images.to(device), self.labels.to(device))

    def subset(self, indices: Tensor) -> ImageSplit:
        """The samples at `indices`, in that order (the validation view of a train split)."""
        index = torch.as_tensor(indices, dtype=torch.long, device=self.labels.device)
        return ImageSplit(self.images[index], self.labels[index])

    def content_sample(self, count: int = 256) -> bytes:
        """The bytes of `count` evenly spaced images: enough to tell two datasets apart, cheap to hash."""
        picked = torch.linspace(0, max(len(self) - 1, 0), min(count, len(self))).long()
        return self.images[picked].cpu().numpy().tobytes()


@dataclass(frozen=True)
class ImageDataset:
    """A dataset with a fixed train/test split, normalization constants and its train augmentation."""

    name: str
    num_classes: int
    train: ImageSplit
    test: ImageSplit
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augmentation: Augmentation
    #: what the model store keys models by (`data_fingerprint`); set when the dataset is loaded for a run
    fingerprint: str = ""

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train.images.shape[1:])

    def to(self, device: torch.device | str) -> ImageDataset:
        return replace(self, train=self.train.to(device), test=self.test.to(device))

    def normalize(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std)

    def loader(
        self,
        split: ImageSplit,
        indices: Tensor,
        batch_size: int,
        *,
        augment: bool = False,
        shuffle: bool = False,
        seed: int = 0,
    ) -> InMemoryLoader:
        """Batches of `indices` of `split`: the one way training, streams and evaluation read data.

        Folder-backed datasets (`unlearnbench.data.folder`) implement the same method with
        DataLoader workers, so no caller branches on the kind of dataset.
        """
        return InMemoryLoader(self, split, indices, batch_size, augment=augment, shuffle=shuffle, seed=seed)


#: The subset a `train_size` / `test_size` selects is part of the dataset's definition: one seed for every run.
SUBSET_SEED = 0


def balanced_subset(labels: Tensor, size: int, seed: int = SUBSET_SEED) -> Tensor:
    """`size` indices (ascending) taken round-robin over the classes, each class in a seeded random order.

    Every class gets `size // classes` samples or one more (the classes that get one more are a
    seeded draw too); a class with fewer samples than its share gives all it has and the others fill
    the rest, so the subset is as balanced as the split allows.
    """
    labels = labels.cpu()
    if not 0 < size <= len(labels):
        raise DatasetError(f"a subset of {size} samples from a split of {len(labels)}: choose 1..{len(labels)}")
    generator = torch.Generator().manual_seed(seed)
    classes = labels.unique()
    class_rank = torch.empty(int(classes.max()) + 1, dtype=torch.long)
    class_rank[classes] = torch.randperm(len(classes), generator=generator)
    shuffled = torch.randperm(len(labels), generator=generator)
    # rank of each sample within its class in the shuffled order: 0, 1, 2, ... per class
    order = shuffled[torch.argsort(labels[shuffled], stable=True)]
    sorted_labels = labels[order]
    starts = torch.searchsorted(sorted_labels, sorted_labels, right=False)
    within = torch.arange(len(order)) - starts
    # round-robin: every class's first sample, then every class's second, ...
    chosen = order[torch.argsort(within * len(class_rank) + class_rank[sorted_labels], stable=True)[:size]]
    return chosen.sort().values


def data_fingerprint(dataset, arguments: dict) -> str:
    """A hash of what a model trained on `dataset` depends on: labels, content and the dataset's arguments.

    The model store keys models by it, so two subsets, two folders of images or two versions of
    the files under one dataset name never share a model. Content is a sample of images (in-memory
    datasets: 256 per split; hashing all of CIFAR would cost a second per load) or the file list
    (folder datasets), whose paths change with the folder.
    """
    digest = hashlib.sha256()
    digest.update(repr((dataset.name, dataset.num_classes, dataset.input_shape, sorted(arguments.items()))).encode())
    for split in (dataset.train, dataset.test):
        digest.update(split.labels.cpu().numpy().tobytes())
        digest.update(split.content_sample())
    return digest.hexdigest()[:16]


def with_subset(dataset, train_size: int | None, test_size: int | None):
    """`dataset` with seeded class-balanced subsets of its splits (`balanced_subset`), where sizes are given."""
    if train_size is not None:
        dataset = replace(dataset, train=dataset.train.subset(balanced_subset(dataset.train.labels, train_size)))
    if test_size is not None:
        dataset = replace(dataset, test=dataset.test.subset(balanced_subset(dataset.test.labels, test_size)))
    return dataset


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard_size(n: int) -> int:
    """Samples per rank: ceil(n / world size)."""
    return -(-n // _world()[1])


def shard_for_rank(order: Tensor) -> Tensor:
    """Under DDP each rank takes every world-th entry of the same seeded order.

    The order is padded by wrapping around, as `DistributedSampler` does, so every rank runs the
    same number of steps. Only training loaders shard; evaluation always runs in one process over
    every sample exactly once, so its metrics equal a single-process run's.
    """
    rank, world = _world()
    if world == 1 or len(order) == 0:
        return order
    total = shard_size(len(order)) * world
    padded = order.repeat(-(-total // len(order)))[:total]
    return padded[rank::world]


class IndexedLoader:
    """What every loader shares: which indices, in which seeded order, and this rank's share of them.

    Subclasses turn index chunks into `Batch`es (`batch(idx)`, `__iter__`). The generator makes
    shuffling and augmentation reproducible from the request's seed.
    """

    def __init__(
        self,
        dataset,
        split,
        indices: Tensor,
        batch_size: int,
        *,
        augment: bool = False,
        shuffle: bool = False,
        seed: int = 0,
    ):
        device = split.labels.device
        self.dataset = dataset
        self.split = split
        self.indices = torch.as_tensor(indices, dtype=torch.long, device=device)
        self.batch_size = batch_size
        self.augment = augment
        self.shuffle = shuffle
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __len__(self) -> int:
        return -(-shard_size(len(self.indices)) // self.batch_size)

    def order(self) -> Tensor:
        order = self.indices
        if self.shuffle:
            order = order[torch.randperm(len(order), generator=self.generator, device=order.device)]
        return shard_for_rank(order)


class InMemoryLoader(IndexedLoader):
    """Iterates `indices` of an in-memory split in batches; shuffled and augmented only when asked.

    A plain iterable with `__len__`, accepted by Lightning's Trainer like a DataLoader. Unaugmented
    batches (evaluation; training on a dataset whose augmentation is the identity) are gathered from
    the split's normalized copy where it has one (`ImageSplit.normalized`): the same floats.
    """

    def batch(self, idx: Tensor) -> Batch:
        if self.augment and not self.dataset.augmentation.identity:
            return self._augmented(idx)
        normalized = self.split.normalized(self.dataset.mean, self.dataset.std)
        if normalized is None:
            return Batch(self.dataset.normalize(self.split.images[idx]), self.split.labels[idx], idx)
        return Batch(normalized[idx], self.split.labels[idx], idx)

    def _augmented(self, idx: Tensor) -> Batch:
        images = self.dataset.augmentation(self.split.images[idx], self.generator)
        return Batch(self.dataset.normalize(images), self.split.labels[idx], idx)

    def __iter__(self) -> Iterator[Batch]:
        for chunk in self.order().split(self.batch_size):
            yield self.batch(chunk)
