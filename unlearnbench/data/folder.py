"""Folder-backed datasets: Tiny-ImageNet and any ImageNet-style folder of classes (`imagefolder`).

Too large for memory in general, so a split is a list of files plus its labels (the labels are
in memory: streams and metrics need them) and images are decoded by DataLoader worker processes
with torchvision transforms: a random-resized crop (Tiny-ImageNet: a padded random crop) and a
horizontal flip for training, resize + center crop for evaluation. `FolderDataset.loader` yields
the same `Batch(x, y, idx)` as the in-memory path, with `idx` indexing the split's file list, so
streams, training and evaluation run unchanged on either kind of dataset.

Reproducibility: the batch order comes from the loader's seeded generator; augmentation draws in
worker processes are seeded from that generator too (PyTorch seeds each worker from it), and with
`num_workers=0` they come from the global RNG the runner seeds per request.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

from unlearnbench.data.base import Batch, DatasetError, IndexedLoader, data_root, known_size, normalize
from unlearnbench.registry import DATASETS

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


#: Overrides the number of DataLoader worker processes per loader (default: min(8, CPUs)).
WORKERS_ENV = "UNLEARNBENCH_WORKERS"


def default_num_workers() -> int:
    if os.environ.get(WORKERS_ENV):
        return int(os.environ[WORKERS_ENV])
    return min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@dataclass(frozen=True, eq=False)
class FolderSplit:
    """One split on disk: image file paths and their int64 labels, in a fixed order.

    Paths are one numpy bytes array rather than a list of str objects, so that forked DataLoader
    workers do not copy them page by page as reference counts change (ImageNet: 1.28M paths).
    """

    files: np.ndarray
    labels: Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, index: int) -> str:
        return os.fsdecode(self.files[index])

    def to(self, device: torch.device | str) -> FolderSplit:
        return self  # images are decoded per batch; labels stay on the CPU

    def subset(self, indices: Tensor) -> FolderSplit:
        """The files at `indices`, in that order (the validation view of a train split)."""
        index = torch.as_tensor(indices, dtype=torch.long)
        return FolderSplit(self.files[index.numpy()], self.labels[index])

    def content_sample(self) -> bytes:
        """The whole file list: two folders, or a file added to one, never look alike."""
        return b"\0".join(self.files.tolist())


def read_image(path: str) -> Tensor:
    """uint8 RGB (3, H, W); torchvision's decoder (JPEG, PNG, WebP, GIF), PIL for anything else."""
    try:
        return decode_image(path, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError):
        from PIL import Image

        with Image.open(path) as image:
            return v2.functional.pil_to_tensor(image.convert("RGB"))


class _DecodedSplit(torch.utils.data.Dataset):
    """Map-style dataset for DataLoader workers: index -> (normalized image, label, index)."""

    def __init__(self, split: FolderSplit, transform: Callable[[Tensor], Tensor]):
        self.split = split
        self.transform = transform

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> tuple[Tensor, int, int]:
        return self.transform(read_image(self.split.path(index))), int(self.split.labels[index]), index


@dataclass(frozen=True, eq=False)
class FolderDataset:
    """A dataset of image files with a fixed train/test split, read through DataLoader workers."""

    name: str
    num_classes: int
    train: FolderSplit
    test: FolderSplit
    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int
    train_transform: Callable[[Tensor], Tensor]
    eval_transform: Callable[[Tensor], Tensor]
    classes: tuple[str, ...] = ()
    num_workers: int = field(default_factory=default_num_workers)
    #: what the model store keys models by (`data.base.data_fingerprint`); set when loaded for a run
    fingerprint: str = ""

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (3, self.image_size, self.image_size)

    def to(self, device: torch.device | str) -> FolderDataset:
        return self

    def normalize(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std)

    def loader(
        self,
        split: FolderSplit,
        indices: Tensor,
        batch_size: int,
        *,
        augment: bool = False,
        shuffle: bool = False,
        seed: int = 0,
    ) -> FolderLoader:
        """Batches of `indices` of `split`, decoded by `num_workers` worker processes."""
        return FolderLoader(self, split, indices, batch_size, augment=augment, shuffle=shuffle, seed=seed)


class FolderLoader(IndexedLoader):
    """`InMemoryLoader`'s interface over a `FolderDataset`: the same indices, order and batches,
    decoded by DataLoader workers."""

    def __init__(
        self,
        dataset: FolderDataset,
        split: FolderSplit,
        indices: Tensor,
        batch_size: int,
        *,
        augment: bool = False,
        shuffle: bool = False,
        seed: int = 0,
    ):
        super().__init__(dataset, split, indices, batch_size, augment=augment, shuffle=shuffle, seed=seed)
        transform = dataset.train_transform if augment else dataset.eval_transform
        self.source = _DecodedSplit(split, transform)

    def batch(self, idx: Tensor) -> Batch:
        """One batch decoded in this process (for callers that choose the indices of each batch)."""
        idx = torch.as_tensor(idx, dtype=torch.long).cpu()
        if len(idx) == 0:
            return Batch(torch.empty(0, *self.dataset.input_shape), torch.empty(0, dtype=torch.long), idx)
        images = torch.stack([self.source[int(i)][0] for i in idx])
        return Batch(images, self.split.labels[idx], idx)

    def __iter__(self) -> Iterator[Batch]:
        chunks = [chunk.tolist() for chunk in self.order().split(self.batch_size)]
        workers = self.dataset.num_workers
        loader = DataLoader(
            self.source,
            batch_sampler=chunks,
            num_workers=workers,
            generator=self.generator,
            pin_memory=torch.cuda.is_available(),
            prefetch_factor=4 if workers else None,
        )
        for images, labels, idx in loader:
            yield Batch(images, labels.long(), idx.long())


def _transforms(mean, std, image_size: int, resize_size: int, train_crop: str) -> tuple[v2.Compose, v2.Compose]:
    normalize = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    if train_crop == "pad":  # images already at their size (Tiny-ImageNet): CIFAR-style shifts
        crop = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
        train = v2.Compose([*crop, v2.RandomCrop(image_size, padding=image_size // 16), v2.RandomHorizontalFlip()])
        evaluation = v2.Compose(crop)
    else:
        train = v2.Compose([v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()])
        evaluation = v2.Compose([v2.Resize(resize_size, antialias=True), v2.CenterCrop(image_size)])
    return v2.Compose([*train.transforms, *normalize]), v2.Compose([*evaluation.transforms, *normalize])


def _split(samples: list[tuple[str, int]]) -> FolderSplit:
    files = np.array([os.fsencode(path) for path, _ in samples], dtype=bytes)
    return FolderSplit(files, torch.tensor([label for _, label in samples], dtype=torch.long))


def tinyimagenet_root(data_dir: str | Path | None) -> Path:
    """The folder holding wnids.txt: DIR/tiny-imagenet-200 or DIR itself."""
    root = data_root(data_dir)
    nested = root / "tiny-imagenet-200"
    return nested if (nested / "wnids.txt").is_file() or not (root / "wnids.txt").is_file() else root


def _download_tinyimagenet(root: Path) -> None:
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(TINYIMAGENET_URL, download_root=str(root.parent))
    except Exception as error:
        message = " ".join(str(error).split())
        raise DatasetError(
            f"tinyimagenet: download of {TINYIMAGENET_URL} failed: {type(error).__name__}: {message}"
        ) from error


@DATASETS.register("tinyimagenet")
@known_size(100_000, 200)
def tinyimagenet(
    data_dir: str | Path | None = None, download: bool = False, num_workers: int | None = None
) -> FolderDataset:
    """Tiny-ImageNet-200: 100,000/10,000 64x64 images of 200 classes (train/ and labelled val/ folders)."""
    root = tinyimagenet_root(data_dir)
    needed = [root / "wnids.txt", root / "train", root / "val" / "val_annotations.txt"]
    if download and not all(path.exists() for path in needed):
        _download_tinyimagenet(root)
    missing = [str(path.relative_to(root)) for path in needed if not path.exists()]
    if missing:
        raise DatasetError(
            f"tinyimagenet: no Tiny-ImageNet at {root} (missing {', '.join(missing)}); pass --download to fetch "
            f"tiny-imagenet-200.zip (~240 MB) or --data-dir DIR where DIR/tiny-imagenet-200 is the unzipped folder"
        )
    wnids = sorted({line.strip() for line in (root / "wnids.txt").read_text().splitlines() if line.strip()})
    class_index = {wnid: i for i, wnid in enumerate(wnids)}
    train = []
    for wnid in wnids:
        files = sorted((root / "train" / wnid / "images").glob("*.JPEG"))
        if not files:
            raise DatasetError(f"tinyimagenet: no images in {root / 'train' / wnid / 'images'}")
        train += [(str(path), class_index[wnid]) for path in files]
    test = []
    for number, line in enumerate((root / "val" / "val_annotations.txt").read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or parts[1] not in class_index:
            raise DatasetError(f"tinyimagenet: val/val_annotations.txt line {number} names no class of wnids.txt")
        path = root / "val" / "images" / parts[0]
        if not path.is_file():
            raise DatasetError(f"tinyimagenet: {path} is listed in val/val_annotations.txt but missing")
        test.append((str(path), class_index[parts[1]]))
    train_transform, eval_transform = _transforms(IMAGENET_MEAN, IMAGENET_STD, 64, 64, train_crop="pad")
    return FolderDataset(
        "tinyimagenet",
        len(wnids),
        _split(train),
        _split(test),
        IMAGENET_MEAN,
        IMAGENET_STD,
        64,
        train_transform,
        eval_transform,
        tuple(wnids),
        default_num_workers() if num_workers is None else num_workers,
    )


@DATASETS.register("imagefolder")
def imagefolder(
    data_dir: str | Path | None = None,
    download: bool = False,
    image_size: int = 224,
    num_workers: int | None = None,
) -> FolderDataset:
    """ImageNet-style folders DIR/train/<class>/* and DIR/val/<class>/* (ImageNet-1k: 224x224 crops)."""
    root = data_root(data_dir)
    if download:
        raise DatasetError(
            "imagefolder: --download is not available; point --data-dir at a folder with train/ and val/"
        )
    missing = [name for name in ("train", "val") if not (root / name).is_dir()]
    if missing:
        raise DatasetError(
            f"imagefolder: no {' and '.join(f'{name}/' for name in missing)} under {root}; pass --data-dir DIR "
            f"where DIR/train/<class>/ and DIR/val/<class>/ hold the images (for ImageNet, sort val/ into class "
            f"folders first)"
        )
    try:
        classes, class_index = find_classes(str(root / "train"))
        val_classes, _ = find_classes(str(root / "val"))
        unknown = sorted(set(val_classes) - set(classes))
        if unknown:
            raise DatasetError(f"imagefolder: val/ has classes that train/ lacks: {', '.join(unknown[:5])}")
        train = make_dataset(str(root / "train"), class_index, extensions=IMG_EXTENSIONS)
        test = make_dataset(
            str(root / "val"), {name: class_index[name] for name in val_classes}, extensions=IMG_EXTENSIONS
        )
    except FileNotFoundError as error:
        raise DatasetError(f"imagefolder: {' '.join(str(error).split())}") from error
    resize = round(image_size * 256 / 224)
    train_transform, eval_transform = _transforms(IMAGENET_MEAN, IMAGENET_STD, image_size, resize, "resized")
    return FolderDataset(
        "imagefolder",
        len(classes),
        _split(train),
        _split(test),
        IMAGENET_MEAN,
        IMAGENET_STD,
        image_size,
        train_transform,
        eval_transform,
        tuple(classes),
        default_num_workers() if num_workers is None else num_workers,
    )
