"""CIFAR-10 and CIFAR-100 (torchvision's readers of the python-pickle batches), and a synthetic CIFAR.

The whole dataset is held as uint8 tensors (50,000 x 3 x 32 x 32 is 150 MB) with the standard
train-time augmentation of the seed papers, random crop with 4 pixels of zero padding and a
horizontal flip, applied batched on the tensors' device: no worker processes.

`synthetic_cifar` / `synthetic_cifar_mini` are seeded random tensors in CIFAR-10's shape (10
classes, learnable class patterns plus noise) for smoke tests and throughput measurements on a
machine with nothing to download.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import CIFAR10, CIFAR100

from unlearnbench.data.base import Augmentation, DatasetError, ImageDataset, ImageSplit, data_root, known_size
from unlearnbench.registry import DATASETS

#: Per-channel statistics of the train splits (the constants the seed papers' code uses).
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CIFAR_AUGMENTATION = Augmentation(pad=4, flip=True)


def _without_checksums(reader: type[CIFAR10]) -> type[CIFAR10]:
    """`reader` that checks the batch files exist instead of hashing them on every load.

    Downloads are still verified: torchvision checks the archive's md5 before extracting it.
    """
    return type(
        reader.__name__,
        (reader,),
        {
            "train_list": [[name, None] for name, _ in reader.train_list],
            "test_list": [[name, None] for name, _ in reader.test_list],
            "meta": {**reader.meta, "md5": None},
        },
    )


_READERS = {"cifar10": _without_checksums(CIFAR10), "cifar100": _without_checksums(CIFAR100)}


def _split(reader: CIFAR10) -> ImageSplit:
    images = torch.from_numpy(np.ascontiguousarray(reader.data)).permute(0, 3, 1, 2).contiguous()
    return ImageSplit(images, torch.as_tensor(reader.targets, dtype=torch.long))


def _load(name: str, title: str, data_dir: str | Path | None, download: bool) -> tuple[ImageSplit, ImageSplit]:
    reader = _READERS[name]
    root = data_root(data_dir)
    folder = root / reader.base_folder
    files = [file for file, _ in reader.train_list + reader.test_list] + [reader.meta["filename"]]
    missing = [file for file in files if not (folder / file).is_file()]
    if missing and not download:
        raise DatasetError(
            f"{name}: no {title} python batches in {folder} (missing {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}); pass --download to fetch {reader.filename} "
            f"(~170 MB), or --data-dir DIR where DIR/{reader.base_folder} holds the extracted batches"
        )
    try:
        train = reader(str(root), train=True, download=download)
        test = reader(str(root), train=False, download=False)
    except Exception as error:  # network errors, truncated or foreign pickles
        message = " ".join(str(error).split())
        raise DatasetError(f"{name}: cannot load {title} from {folder}: {type(error).__name__}: {message}") from error
    return _split(train), _split(test)


def _cifar(name: str, title: str, num_classes: int, mean, std, data_dir, download) -> ImageDataset:
    train, test = _load(name, title, data_dir, download)
    if int(train.labels.max()) >= num_classes or int(test.labels.max()) >= num_classes:
        raise DatasetError(f"{name}: labels outside 0..{num_classes - 1} in {data_root(data_dir)}")
    return ImageDataset(name, num_classes, train, test, mean, std, CIFAR_AUGMENTATION)


@DATASETS.register("cifar10")
@known_size(50_000, 10)
def cifar10(data_dir: str | Path | None = None, download: bool = False) -> ImageDataset:
    """CIFAR-10: 50,000/10,000 32x32 colour images of 10 classes (torchvision's python batches)."""
    return _cifar("cifar10", "CIFAR-10", 10, CIFAR10_MEAN, CIFAR10_STD, data_dir, download)


@DATASETS.register("cifar100")
@known_size(50_000, 100)
def cifar100(data_dir: str | Path | None = None, download: bool = False) -> ImageDataset:
    """CIFAR-100: 50,000/10,000 32x32 colour images of 100 fine classes (torchvision's python batches)."""
    return _cifar("cifar100", "CIFAR-100", 100, CIFAR100_MEAN, CIFAR100_STD, data_dir, download)


def synthetic_images(name: str, num_train: int, num_test: int, num_classes: int = 10, seed: int = 0) -> ImageDataset:
    """Seeded uint8 images in CIFAR's shape: a smooth random pattern per class plus uniform noise.

    Class-balanced (label = index mod num_classes) and learnable, so accuracies move the way they
    do on real data; generated in chunks so that a CIFAR-sized set never needs a float copy.
    """
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, 3, 4, 4, generator=generator)
    patterns = torch.nn.functional.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
    patterns = (patterns * 160).to(torch.uint8)

    def split(count: int) -> ImageSplit:
        labels = torch.arange(count) % num_classes
        labels = labels[torch.randperm(count, generator=generator)]
        images = torch.empty(count, 3, 32, 32, dtype=torch.uint8)
        for start in range(0, count, 8192):
            chunk = labels[start : start + 8192]
            noise = torch.randint(0, 96, (len(chunk), 3, 32, 32), generator=generator, dtype=torch.uint8)
            images[start : start + len(chunk)] = patterns[chunk] + noise
        return ImageSplit(images, labels)

    train, test = split(num_train), split(num_test)
    sample = train.images[:2048].float() / 255.0
    mean = tuple(sample.mean(dim=(0, 2, 3)).tolist())
    std = tuple(sample.std(dim=(0, 2, 3)).tolist())
    return ImageDataset(name, num_classes, train, test, mean, std, CIFAR_AUGMENTATION)


@DATASETS.register("synthetic_cifar")
@known_size(50_000, 10)
def synthetic_cifar(data_dir: str | Path | None = None, download: bool = False) -> ImageDataset:
    """Synthetic tensors in CIFAR-10's shape (50,000/10,000 3x32x32, 10 classes): nothing to download."""
    return synthetic_images("synthetic_cifar", 50_000, 10_000)


@DATASETS.register("synthetic_cifar_mini")
@known_size(1_000, 10)
def synthetic_cifar_mini(data_dir: str | Path | None = None, download: bool = False) -> ImageDataset:
    """Synthetic CIFAR-shaped tensors, 1,000/200 images of 10 classes: for CPU checks and tests."""
    return synthetic_images("synthetic_cifar_mini", 1_000, 200)
