"""Fashion-MNIST and MNIST: 60,000/10,000 28x28 grey images of 10 classes, from the original idx files.

Both are read from the four idx files their authors publish (`train-images-idx3-ubyte`,
`train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, gzipped or not)
and held in memory as uint8 tensors (60,000 x 1 x 28 x 28 is 47 MB), like digits and CIFAR.

Where the files are looked for, in this order:

1. `--data-dir DIR` (default `$UNLEARNBENCH_DATA`, else `./data`): torchvision's layout
   `DIR/FashionMNIST/raw/` (`DIR/MNIST/raw/`), or the four files directly in `DIR`;
2. the folder of the Debian package (`apt-get install dataset-fashion-mnist` installs
   `/usr/share/datasets/fashion-mnist/`; Debian ships no MNIST package);
3. `--download`: torchvision fetches them into `DIR/FashionMNIST/raw/` (`DIR/MNIST/raw/`).

Train-time augmentation: a random shift of up to 2 pixels (random crop of the image zero-padded
by 2, the value used for 28x28 inputs by e.g. the Fashion-MNIST benchmark's CNNs); Fashion-MNIST
adds a horizontal flip, since a mirrored garment is the same garment, MNIST does not, since a
mirrored digit is another symbol (or none). The dataset argument `augment: false`
(`--dataset.augment false`) turns it off, in pretraining, the oracles and unlearning alike: a
model then sees each training image exactly as it is evaluated, so it can memorize it, and
random-sample unlearning has something to remove (docs/scale.md, the `mlp` tier).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from unlearnbench.data.base import Augmentation, DatasetError, ImageDataset, ImageSplit, data_root, known_size
from unlearnbench.registry import DATASETS

#: The four idx files of both datasets (the names their authors and torchvision use).
IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
#: idx magic numbers: 0x0000 08 (unsigned byte) 0N (N dimensions).
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801

#: Folders Debian packages install the files to, per dataset (tests point these elsewhere).
DEBIAN_DIRS = {"fashionmnist": Path("/usr/share/datasets/fashion-mnist")}


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An idx file (gzipped when its name ends in .gz) as a uint8 array of the shape its header gives."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or int.from_bytes(raw[:4], "big") != magic:
        found = f"{int.from_bytes(raw[:4], 'big'):#010x}" if len(raw) >= 4 else "a truncated header"
        raise DatasetError(
            f"{path} is not an idx file of {magic & 0xFF} dimension(s): expected magic {magic:#010x}, found {found}"
        )
    dims = magic & 0xFF
    shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(dims))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise DatasetError(f"{path}: header says {shape} ({int(np.prod(shape))} bytes), file holds {data.size}")
    return data.reshape(shape)


def _idx_files(folder: Path) -> dict[str, Path] | None:
    """The four files in `folder` (each plain or .gz), or None when any is missing."""
    found = {}
    for key, name in IDX_FILES.items():
        candidates = [folder / name, folder / f"{name}.gz"]
        path = next((path for path in candidates if path.is_file()), None)
        if path is None:
            return None
        found[key] = path
    return found


class _Source:
    """One dataset of the idx family: its name, torchvision reader, title and constants."""

    def __init__(self, name: str, title: str, torchvision_name: str, mean: float, std: float, flip: bool):
        self.name, self.title, self.torchvision_name = name, title, torchvision_name
        self.mean, self.std, self.flip = mean, std, flip

    def folders(self, data_dir: str | Path | None) -> list[Path]:
        """Where the files may be, in the order they are looked for (download not included)."""
        root = data_root(data_dir)
        folders = [root / self.torchvision_name / "raw", root]
        return [*folders, DEBIAN_DIRS[self.name]] if self.name in DEBIAN_DIRS else folders

    def missing(self, data_dir: str | Path | None) -> DatasetError:
        root = data_root(data_dir)
        ways = [
            f"--data-dir DIR where DIR/{self.torchvision_name}/raw/ or DIR itself holds the four idx files "
            f"({', '.join(IDX_FILES.values())}, each optionally .gz)"
        ]
        if self.name in DEBIAN_DIRS:
            ways.append(f"`apt-get install dataset-fashion-mnist` (installs them in {DEBIAN_DIRS[self.name]})")
        ways.append(f"--download (torchvision fetches them into {root / self.torchvision_name / 'raw'}, ~30 MB)")
        return DatasetError(
            f"{self.name}: no {self.title} idx files in {root / self.torchvision_name / 'raw'} or {root}"
            f"{' or ' + str(DEBIAN_DIRS[self.name]) if self.name in DEBIAN_DIRS else ''}; get them one of "
            f"{len(ways)} ways: " + "; ".join(ways)
        )

    def download(self, data_dir: str | Path | None) -> None:
        from torchvision import datasets

        reader = getattr(datasets, self.torchvision_name)
        try:
            reader(str(data_root(data_dir)), train=True, download=True)
        except Exception as error:  # network errors, bad archives
            message = " ".join(str(error).split())
            raise DatasetError(f"{self.name}: download failed: {type(error).__name__}: {message}") from error

    def load(self, data_dir: str | Path | None, download: bool, augment: bool) -> ImageDataset:
        files = next((found for folder in self.folders(data_dir) if (found := _idx_files(folder))), None)
        if files is None and download:
            self.download(data_dir)
            files = _idx_files(data_root(data_dir) / self.torchvision_name / "raw")
        if files is None:
            raise self.missing(data_dir)
        splits = []
        for split in ("train", "test"):
            images = read_idx(files[f"{split}_images"], IMAGES_MAGIC)
            labels = read_idx(files[f"{split}_labels"], LABELS_MAGIC)
            if images.ndim != 3 or len(images) != len(labels):
                raise DatasetError(
                    f"{self.name}: {files[f'{split}_images'].name} holds {images.shape[0]} images, "
                    f"{files[f'{split}_labels'].name} {len(labels)} labels"
                )
            if labels.size and int(labels.max()) > 9:
                raise DatasetError(f"{self.name}: labels outside 0..9 in {files[f'{split}_labels']}")
            splits.append(
                ImageSplit(torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))
            )
        augmentation = Augmentation(pad=2, flip=self.flip) if augment else Augmentation()
        return ImageDataset(self.name, 10, *splits, (self.mean,), (self.std,), augmentation)


#: Normalization: the mean and std of the 60,000 training images' pixels in [0, 1] (the
#: constants torchvision's examples use for MNIST; computed the same way for Fashion-MNIST).
FASHION = _Source("fashionmnist", "Fashion-MNIST", "FashionMNIST", 0.2860, 0.3530, flip=True)
MNIST = _Source("mnist", "MNIST", "MNIST", 0.1307, 0.3081, flip=False)


@DATASETS.register("fashionmnist")
@known_size(60_000, 10, num_test=10_000)
def fashionmnist(data_dir: str | Path | None = None, download: bool = False, augment: bool = True) -> ImageDataset:
    """Fashion-MNIST (Zalando): 60,000/10,000 28x28 grey images of 10 garment classes (idx files)."""
    return FASHION.load(data_dir, download, augment)


@DATASETS.register("mnist")
@known_size(60_000, 10, num_test=10_000)
def mnist(data_dir: str | Path | None = None, download: bool = False, augment: bool = True) -> ImageDataset:
    """MNIST: 60,000/10,000 28x28 grey images of handwritten digits (idx files)."""
    return MNIST.load(data_dir, download, augment)
