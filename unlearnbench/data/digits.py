"""scikit-learn's 8x8 handwritten digits: the embedded default dataset (ships with scikit-learn)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from unlearnbench.data.base import Augmentation, ImageDataset, ImageSplit, known_size
from unlearnbench.registry import DATASETS

#: The split is part of the dataset's definition: the same for every run seed.
SPLIT_SEED = 0
TEST_FRACTION = 0.2


def _to_uint8(images: np.ndarray) -> torch.Tensor:
    """Digits pixels are integers 0..16; map them to 0..255 so all datasets share one uint8 path."""
    scaled = np.rint(images.astype(np.float64) * 255.0 / 16.0).astype(np.uint8)
    return torch.from_numpy(scaled).unsqueeze(1)


@DATASETS.register("digits")
@known_size(1437, 10)  # 1,797 images, TEST_FRACTION held out
def digits(data_dir: str | None = None, download: bool = False) -> ImageDataset:
    """scikit-learn digits: 1,797 8x8 grey images of 10 classes, embedded, stratified 80/20 split."""
    bunch = load_digits()
    train_x, test_x, train_y, test_y = train_test_split(
        bunch.images, bunch.target, test_size=TEST_FRACTION, stratify=bunch.target, random_state=SPLIT_SEED
    )
    train = ImageSplit(_to_uint8(train_x), torch.from_numpy(train_y).long())
    pixels = train.images.float() / 255.0
    return ImageDataset(
        name="digits",
        num_classes=10,
        train=train,
        test=ImageSplit(_to_uint8(test_x), torch.from_numpy(test_y).long()),
        mean=(pixels.mean().item(),),
        std=(pixels.std().item(),),
        # Shifts of one pixel; no flips: a mirrored digit is a different symbol.
        augmentation=Augmentation(pad=1, flip=False),
    )
