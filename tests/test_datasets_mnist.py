"""Fashion-MNIST and MNIST from idx files the tests write (gzipped and plain), in every place they are looked for.

The order is `--data-dir` (torchvision's DIR/FashionMNIST/raw/ or the four files in DIR), then the
Debian package's folder, then `--download`; a dataset found nowhere is one line naming every way
to get it, exit 2 through the CLI, nothing written.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from unlearnbench.cli import main
from unlearnbench.config import RunConfig
from unlearnbench.data import mnist
from unlearnbench.data.base import Augmentation, DatasetError, data_fingerprint
from unlearnbench.data.cache import load_dataset
from unlearnbench.plan import resolve_run
from unlearnbench.registry import DATASETS
from unlearnbench.store import ModelSpec


def _idx(path: Path, array: np.ndarray, magic: int, gz: bool) -> None:
    header = magic.to_bytes(4, "big") + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


def write_idx_dataset(folder: Path, train: int = 30, test: int = 12, gz: bool = True, seed: int = 0):
    """The four idx files in `folder`; pixel (0, 0) of image i is i, so order and layout are checkable."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in (("train", train), ("test", test)):
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        images[:, 0, 0] = np.arange(count) % 256
        labels = (np.arange(count) * 7 + seed) % 10
        _idx(folder / mnist.IDX_FILES[f"{split}_images"], images, mnist.IMAGES_MAGIC, gz)
        _idx(folder / mnist.IDX_FILES[f"{split}_labels"], labels, mnist.LABELS_MAGIC, gz)
        arrays[split] = (images, labels)
    return arrays


@pytest.fixture
def no_debian(monkeypatch, tmp_path):
    """The Debian package's folder pointed at an empty place, so an installed package does not interfere."""
    monkeypatch.setattr(mnist, "DEBIAN_DIRS", {"fashionmnist": tmp_path / "no-debian-package"})


@pytest.mark.parametrize("gz", [True, False], ids=["gz", "plain"])
@pytest.mark.parametrize("layout", ["torchvision", "flat"])
@pytest.mark.parametrize(("name", "folder"), [("fashionmnist", "FashionMNIST"), ("mnist", "MNIST")])
def test_idx_files_load_as_uint8_tensors(tmp_path, no_debian, gz, layout, name, folder):
    where = tmp_path / folder / "raw" if layout == "torchvision" else tmp_path
    arrays = write_idx_dataset(where, gz=gz)
    dataset = DATASETS.get(name)(data_dir=tmp_path)
    assert dataset.name == name and dataset.num_classes == 10 and dataset.input_shape == (1, 28, 28)
    assert dataset.train.images.dtype == torch.uint8 and dataset.train.labels.dtype == torch.int64
    for split in ("train", "test"):
        images, labels = arrays[split]
        assert torch.equal(getattr(dataset, split).images, torch.from_numpy(images).unsqueeze(1))
        assert getattr(dataset, split).labels.tolist() == labels.tolist()


def test_augmentation_shifts_both_and_flips_garments_but_not_digits(tmp_path, no_debian):
    write_idx_dataset(tmp_path / "FashionMNIST" / "raw")
    write_idx_dataset(tmp_path / "MNIST" / "raw")
    fashion, digits = DATASETS.get("fashionmnist")(data_dir=tmp_path), DATASETS.get("mnist")(data_dir=tmp_path)
    assert (fashion.augmentation.pad, fashion.augmentation.flip) == (2, True)
    assert (digits.augmentation.pad, digits.augmentation.flip) == (2, False)


def test_data_dir_comes_before_the_debian_folder(tmp_path, monkeypatch):
    debian, mine = tmp_path / "debian", tmp_path / "mine"
    write_idx_dataset(debian, train=20, seed=1)
    write_idx_dataset(mine / "FashionMNIST" / "raw", train=40, seed=2)
    monkeypatch.setattr(mnist, "DEBIAN_DIRS", {"fashionmnist": debian})
    assert len(DATASETS.get("fashionmnist")(data_dir=mine).train) == 40
    from_debian = DATASETS.get("fashionmnist")(data_dir=tmp_path / "empty")
    assert len(from_debian.train) == 20 and from_debian.augmentation.flip and from_debian.augmentation.pad == 2
    with pytest.raises(DatasetError, match="mnist: no MNIST"):  # Debian ships no MNIST
        DATASETS.get("mnist")(data_dir=tmp_path / "empty")


def test_download_goes_through_torchvision_into_the_data_dir(tmp_path, no_debian, monkeypatch):
    """`--download` calls torchvision's reader (stubbed: tests never download) and reads what it wrote."""
    calls = []

    class FakeReader:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            write_idx_dataset(Path(root) / "FashionMNIST" / "raw", train=10)

    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", FakeReader)
    dataset = DATASETS.get("fashionmnist")(data_dir=tmp_path, download=True)
    assert calls == [(str(tmp_path), True, True)] and len(dataset.train) == 10


def test_missing_dataset_names_all_three_ways(tmp_path, no_debian):
    with pytest.raises(DatasetError) as error:
        DATASETS.get("fashionmnist")(data_dir=tmp_path / "absent")
    message = str(error.value)
    assert "\n" not in message and message.startswith("fashionmnist: no Fashion-MNIST idx files")
    assert "one of 3 ways" in message
    assert "--data-dir DIR" in message and "apt-get install dataset-fashion-mnist" in message
    assert "--download" in message and "FashionMNIST/raw" in message


def test_a_truncated_or_foreign_file_is_a_dataset_error(tmp_path, no_debian):
    arrays = write_idx_dataset(tmp_path, gz=False)
    assert len(arrays["train"][0]) == 30
    path = tmp_path / mnist.IDX_FILES["train_images"]
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DatasetError, match="header says"):
        DATASETS.get("fashionmnist")(data_dir=tmp_path)
    path.write_bytes(b"\x00\x00\x08\x01" + b"\x00" * 8)
    with pytest.raises(DatasetError, match="expected magic 0x00000803"):
        DATASETS.get("fashionmnist")(data_dir=tmp_path)


def test_missing_fashionmnist_through_the_cli_exits_2_and_writes_nothing(tmp_path, no_debian, capsys):
    out = tmp_path / "runs"
    (tmp_path / "empty").mkdir()  # (a --data-dir that does not exist is refused as such: test_cli)
    argv = ["run", "--method", "finetune", "--dataset", "fashionmnist", "--data-dir", str(tmp_path / "empty")]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(out)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and "apt-get install dataset-fashion-mnist" in stderr
    assert not out.exists()


@pytest.mark.parametrize("name", ["fashionmnist", "mnist"])
def test_augment_false_trains_on_the_images_as_they_are(tmp_path, no_debian, name):
    """`augment: false`: the batches training asks to augment (pretraining, oracles, unlearning) are the eval pixels."""
    write_idx_dataset(tmp_path, train=40)
    plain = load_dataset(name, tmp_path, False)
    still = load_dataset(name, tmp_path, False, {"augment": False})
    assert still.augmentation == Augmentation() and plain.augmentation.pad == 2
    everything = torch.arange(40)

    def pixels(dataset, augment: bool, seed: int) -> torch.Tensor:
        (batch,) = dataset.loader(dataset.train, everything, 40, augment=augment, seed=seed)
        return batch.x

    evaluated = pixels(still, False, 0)
    assert torch.equal(pixels(still, True, 0), evaluated) and torch.equal(pixels(still, True, 1), evaluated)
    assert not torch.equal(pixels(plain, True, 0), pixels(plain, True, 1))  # the default still augments
    assert torch.equal(pixels(plain, False, 0), evaluated)


def test_augment_false_is_another_dataset_and_run_while_the_default_renames_nothing(tmp_path, no_debian):
    """Left at its default, `augment` enters neither the fingerprint (store keys) nor the identity (run names)."""
    write_idx_dataset(tmp_path)
    default = load_dataset("fashionmnist", tmp_path, False)
    assert default.fingerprint == data_fingerprint(default, {})  # what it was before the argument existed
    assert load_dataset("fashionmnist", tmp_path, False, {"augment": True}).fingerprint == default.fingerprint
    still = load_dataset("fashionmnist", tmp_path, False, {"augment": False})
    assert still.fingerprint == data_fingerprint(default, {"augment": False}) != default.fingerprint
    keys = {ModelSpec("fashionmnist", "mlp", {}, 0, data=data.fingerprint).key() for data in (default, still)}
    assert len(keys) == 2

    def resolved(dataset_args: dict):
        return resolve_run(
            RunConfig.from_options(method="finetune", dataset="fashionmnist", dataset_args=dataset_args, out=tmp_path)
        )

    (identity, run_dir), explicit = resolved({}), resolved({"augment": True})
    assert "dataset_args" not in identity.to_json() and explicit == (identity, run_dir)
    still_identity, still_dir = resolved({"augment": False})
    assert still_identity.dataset_args == {"augment": False} and still_dir != run_dir
