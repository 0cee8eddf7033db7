"""Real on-disk dataset formats, written small: CIFAR python batches, Tiny-ImageNet, an ImageFolder.

Each dataset is loaded through the registry exactly as a run loads it; a missing dataset is a
one-line error that says how to get it, raised before anything is written.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from unlearnbench.cli import main
from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.data.base import Batch, DatasetError
from unlearnbench.data.folder import FolderDataset
from unlearnbench.registry import DATASETS
from unlearnbench.runner import Runner
from unlearnbench.streams.base import RequestStream
from unlearnbench.streams.batches import BatchMode, RequestBatches

# ---------------------------------------------------------------- CIFAR: python-pickle batches


def _cifar_images(count: int, offset: int) -> np.ndarray:
    """(count, 3, 32, 32) uint8 whose pixels identify image, channel and position."""
    rng = np.random.default_rng(offset)
    images = rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8)
    images[:, :, 0, 0] = (np.arange(count) + offset)[:, None] % 256
    return images


def _dump(path: Path, entry: dict) -> None:
    with path.open("wb") as file:
        pickle.dump(entry, file, protocol=2)  # the files were written by Python 2's cPickle


def write_cifar10(root: Path, per_batch: int = 4, test: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    all_images, all_labels = [], []
    for number in range(1, 6):
        images = _cifar_images(per_batch, 100 * number)
        labels = [(number * per_batch + i) % 10 for i in range(per_batch)]
        _dump(
            folder / f"data_batch_{number}",
            {
                "batch_label": f"training batch {number} of 5",
                "labels": labels,
                "data": images.reshape(per_batch, 3072),
                "filenames": [f"img_{number}_{i}.png" for i in range(per_batch)],
            },
        )
        all_images.append(images)
        all_labels += labels
    test_images = _cifar_images(test, 7)
    _dump(
        folder / "test_batch",
        {
            "batch_label": "testing batch 1 of 1",
            "labels": [i % 10 for i in range(test)],
            "data": test_images.reshape(test, 3072),
        },
    )
    _dump(folder / "batches.meta", {"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": per_batch})
    return np.concatenate(all_images), np.array(all_labels), test_images


def write_cifar100(root: Path, train: int = 12, test: int = 5) -> tuple[np.ndarray, np.ndarray]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    images = _cifar_images(train, 3)
    fine = [(7 * i) % 100 for i in range(train)]
    _dump(
        folder / "train",
        {"fine_labels": fine, "coarse_labels": [f // 5 for f in fine], "data": images.reshape(train, 3072)},
    )
    _dump(
        folder / "test",
        {
            "fine_labels": [99 - i for i in range(test)],
            "coarse_labels": [0] * test,
            "data": _cifar_images(test, 9).reshape(test, 3072),
        },
    )
    _dump(
        folder / "meta",
        {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": [f"c{i}" for i in range(20)]},
    )
    return images, np.array(fine)


def test_cifar10_reads_the_python_batches(tmp_path):
    images, labels, test_images = write_cifar10(tmp_path)
    dataset = DATASETS.get("cifar10")(data_dir=tmp_path)
    assert dataset.num_classes == 10 and dataset.input_shape == (3, 32, 32)
    assert (len(dataset.train), len(dataset.test)) == (20, 6)
    assert dataset.train.images.dtype == torch.uint8 and dataset.train.labels.dtype == torch.int64
    assert torch.equal(dataset.train.images, torch.from_numpy(images))  # batches 1..5 in order, CHW layout
    assert torch.equal(dataset.train.labels, torch.from_numpy(labels))
    assert torch.equal(dataset.test.images, torch.from_numpy(test_images))
    assert dataset.augmentation.pad == 4 and dataset.augmentation.flip


def test_cifar100_reads_fine_labels(tmp_path):
    images, fine = write_cifar100(tmp_path)
    dataset = DATASETS.get("cifar100")(data_dir=str(tmp_path))
    assert dataset.num_classes == 100
    assert (len(dataset.train), len(dataset.test)) == (12, 5)
    assert torch.equal(dataset.train.images, torch.from_numpy(images))
    assert torch.equal(dataset.train.labels, torch.from_numpy(fine))
    assert dataset.test.labels.tolist() == [99, 98, 97, 96, 95]


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("tinyimagenet", "tiny-imagenet-200"),
        ("imagefolder", "train/<class>/"),
    ],
)
def test_missing_dataset_is_one_line_saying_how_to_get_it(tmp_path, name, hint):
    with pytest.raises(DatasetError) as error:
        DATASETS.get(name)(data_dir=tmp_path / "absent")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{name}:") and hint in message
    assert "--data-dir" in message


def test_missing_dataset_through_the_cli_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "runs"
    (tmp_path / "none").mkdir()  # an empty folder (one that does not exist is refused as such: test_cli)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "run",
                "--method",
                "finetune",
                "--dataset",
                "cifar100",
                "--data-dir",
                str(tmp_path / "none"),
                "--out",
                str(out),
            ]
        )
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and "--download" in stderr and "cifar-100-python" in stderr
    assert not out.exists()


def test_runconfig_passes_data_dir_to_the_dataset(tmp_path):
    write_cifar10(tmp_path / "data")
    config = RunConfig.from_options(
        method="finetune", dataset="cifar10", data_dir=tmp_path / "data", requests=1, out=tmp_path / "runs"
    )
    runner = Runner.from_config(config)
    assert runner.dataset.name == "cifar10" and len(runner.dataset.train) == 20
    with pytest.raises(ConfigError, match="cifar10: no CIFAR-10"):
        Runner.from_config(
            RunConfig.from_options(method="finetune", dataset="cifar10", data_dir=tmp_path / "x", out=tmp_path / "runs")
        )


# ---------------------------------------------------------------- Tiny-ImageNet layout

COLOURS = [(220, 30, 30), (30, 200, 40), (40, 40, 230)]


def _jpeg(path: Path, colour, size: int = 64, grey: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (size, size), colour)
    (image.convert("L") if grey else image).save(path, "JPEG", quality=95)


def write_tinyimagenet(root: Path, per_class: int = 4, val_per_class: int = 2) -> list[str]:
    """tiny-imagenet-200/{wnids.txt, words.txt, train/<wnid>/images, val/images + val_annotations.txt, test/}."""
    base = root / "tiny-imagenet-200"
    wnids = ["n09999999", "n01443537", "n02094433"]  # listed unsorted, as in the real wnids.txt
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (base / "words.txt").write_text("".join(f"{w}\tthing {w}\n" for w in wnids))
    for wnid in wnids:
        colour = COLOURS[sorted(wnids).index(wnid)]
        boxes = []
        for i in range(per_class):
            _jpeg(base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", colour, grey=(wnid == wnids[0] and i == 0))
            boxes.append(f"{wnid}_{i}.JPEG\t0\t0\t63\t63")
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text("\n".join(boxes) + "\n")
    annotations, number = [], 0
    for _ in range(val_per_class):
        for wnid in wnids:
            _jpeg(base / "val" / "images" / f"val_{number}.JPEG", COLOURS[sorted(wnids).index(wnid)])
            annotations.append(f"val_{number}.JPEG\t{wnid}\t1\t2\t60\t61")
            number += 1
    (base / "val" / "val_annotations.txt").write_text("\n".join(annotations) + "\n")
    _jpeg(base / "test" / "images" / "test_0.JPEG", (0, 0, 0))  # unlabelled: never used
    return sorted(wnids)


def _colour_of(dataset: FolderDataset, batch: Batch) -> torch.Tensor:
    """Per-image mean RGB in 0..255, undoing the normalization."""
    mean = torch.tensor(dataset.mean).view(1, 3, 1, 1)
    std = torch.tensor(dataset.std).view(1, 3, 1, 1)
    return ((batch.x * std + mean) * 255).mean(dim=(2, 3))


def test_tinyimagenet_layout_splits_and_labels(tmp_path):
    wnids = write_tinyimagenet(tmp_path)
    dataset = DATASETS.get("tinyimagenet")(data_dir=tmp_path)
    assert isinstance(dataset, FolderDataset)
    assert dataset.num_classes == 3 and dataset.classes == tuple(wnids) and dataset.input_shape == (3, 64, 64)
    assert (len(dataset.train), len(dataset.test)) == (12, 6)
    assert dataset.train.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert dataset.test.labels.tolist() == [2, 0, 1, 2, 0, 1]  # from val_annotations.txt, in file order
    assert all("/val/images/" in dataset.test.path(i) for i in range(len(dataset.test)))
    # The folder itself works as --data-dir too.
    assert len(DATASETS.get("tinyimagenet")(data_dir=tmp_path / "tiny-imagenet-200").train) == 12


def test_folder_loader_batches_keep_index_semantics(tmp_path):
    write_tinyimagenet(tmp_path)
    dataset = DATASETS.get("tinyimagenet")(data_dir=tmp_path, num_workers=0)
    indices = torch.tensor([11, 0, 5, 3, 8])
    batches = list(dataset.loader(dataset.test, torch.arange(6), batch_size=4))
    assert [len(b.y) for b in batches] == [4, 2]
    for batch in batches:
        assert batch.x.shape[1:] == (3, 64, 64) and batch.x.dtype == torch.float32
        assert torch.equal(batch.y, dataset.test.labels[batch.idx])
        expected = torch.tensor([COLOURS[label] for label in batch.y.tolist()], dtype=torch.float32)
        torch.testing.assert_close(_colour_of(dataset, batch), expected, atol=6, rtol=0)
    train = dataset.loader(dataset.train, indices, batch_size=2, augment=True, shuffle=True, seed=3)
    seen = torch.cat([batch.idx for batch in train])
    assert len(train) == 3 and sorted(seen.tolist()) == sorted(indices.tolist())
    single = train.batch(torch.tensor([5, 0]))
    assert single.x.shape == (2, 3, 64, 64) and single.y.tolist() == [1, 0]
    assert train.batch(torch.tensor([], dtype=torch.long)).x.shape == (0, 3, 64, 64)


def test_folder_loader_with_workers_is_reproducible(tmp_path):
    write_tinyimagenet(tmp_path)
    dataset = DATASETS.get("tinyimagenet")(data_dir=tmp_path, num_workers=1)

    def epoch(seed: int) -> list[Batch]:
        return list(
            dataset.loader(dataset.train, torch.arange(12), batch_size=5, augment=True, shuffle=True, seed=seed)
        )

    first, again, other = epoch(1), epoch(1), epoch(2)
    assert all(torch.equal(a.idx, b.idx) and torch.equal(a.x, b.x) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a.idx, b.idx) for a, b in zip(first, other, strict=True))
    assert all(torch.equal(b.y, dataset.train.labels[b.idx]) for b in first)


def test_folder_loader_shards_like_the_in_memory_loader_under_ddp(tmp_path, monkeypatch):
    import unlearnbench.data.base as base

    write_tinyimagenet(tmp_path)
    dataset = DATASETS.get("tinyimagenet")(data_dir=tmp_path, num_workers=0)
    digits = DATASETS.get("digits")()
    seen = []
    for rank in (0, 1):
        monkeypatch.setattr(base, "_world", lambda rank=rank: (rank, 2))
        folder = dataset.loader(dataset.train, torch.arange(11), batch_size=2, augment=True, shuffle=True, seed=5)
        memory = digits.loader(digits.train, torch.arange(11), batch_size=2, augment=True, shuffle=True, seed=5)
        assert len(folder) == len(memory) == 3  # ceil(ceil(11 / 2) / 2)
        assert torch.equal(folder.order(), memory.order())
        seen += [i for batch in folder for i in batch.idx.tolist()]
    assert sorted(set(seen)) == list(range(11)) and len(seen) == 12  # padded by wrapping, as DistributedSampler


def test_mixed_batches_over_a_folder_dataset(tmp_path):
    write_tinyimagenet(tmp_path)
    dataset = DATASETS.get("tinyimagenet")(data_dir=tmp_path, num_workers=0)
    stream = RequestStream(dataset, "classwise", num_requests=1, size=1, seed=0)
    stream.configure_batches(BatchMode.MIXED, 5)
    forget = set(stream.current.forget.tolist())
    steps = list(stream.train_dataloader())
    assert isinstance(stream.train_dataloader(), RequestBatches) and len(steps) == 3
    assert sorted(i for s in steps for part in s.values() for i in part.idx.tolist()) == list(range(12))
    assert all(set(s["forget"].idx.tolist()) <= forget for s in steps)


@pytest.mark.slow
def test_a_stream_runs_end_to_end_on_a_folder_dataset(tmp_path, monkeypatch):
    """Pretraining, unlearning, evaluation and oracles read through DataLoader workers."""
    monkeypatch.setenv("UNLEARNBENCH_WORKERS", "1")
    write_tinyimagenet(tmp_path / "data")
    config = RunConfig.from_options(
        method="finetune",
        dataset="tinyimagenet",
        data_dir=tmp_path / "data",
        requests=1,
        size=1,
        method_args={"optim": {"epochs": 1, "batch_size": 4}},
        recipe={"epochs": 1, "batch_size": 4},
        out=tmp_path / "runs",
        accelerator="cpu",
    )
    result = Runner.from_config(config).run()
    row = result.rows[0]
    assert row.t == 1 and row.oracle is not None
    assert 0 <= row.method["forget_acc"] <= 100 and 0 <= row.method["test_acc"] <= 100


# ---------------------------------------------------------------- ImageNet-style folder of classes


def write_imagefolder(root: Path) -> None:
    for split, count in (("train", 3), ("val", 2)):
        for c, name in enumerate(["bird", "cat"]):
            for i in range(count):
                path = root / split / name / f"{name}_{i}.{'png' if split == 'train' else 'JPEG'}"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (48 + 8 * i, 40), COLOURS[c]).save(path)
    (root / "train" / "cat" / "notes.txt").write_text("not an image")


def test_imagefolder_reads_train_and_val_class_folders(tmp_path):
    write_imagefolder(tmp_path)
    dataset = DATASETS.get("imagefolder")(data_dir=tmp_path, image_size=32, num_workers=0)
    assert dataset.num_classes == 2 and dataset.classes == ("bird", "cat") and dataset.input_shape == (3, 32, 32)
    assert (len(dataset.train), len(dataset.test)) == (6, 4)
    assert dataset.train.labels.tolist() == [0, 0, 0, 1, 1, 1] and dataset.test.labels.tolist() == [0, 0, 1, 1]
    evaluation = next(iter(dataset.loader(dataset.test, torch.arange(4), batch_size=4)))
    assert evaluation.x.shape == (4, 3, 32, 32)
    expected = torch.tensor([COLOURS[label] for label in evaluation.y.tolist()], dtype=torch.float32)
    torch.testing.assert_close(_colour_of(dataset, evaluation), expected, atol=6, rtol=0)
    augmented = next(iter(dataset.loader(dataset.train, torch.arange(6), batch_size=6, augment=True, shuffle=True)))
    assert augmented.x.shape == (6, 3, 32, 32)
    assert DATASETS.get("imagefolder")(data_dir=tmp_path).input_shape == (3, 224, 224)  # ImageNet default


def test_imagefolder_rejects_val_classes_unknown_to_train(tmp_path):
    write_imagefolder(tmp_path)
    (tmp_path / "val" / "dog").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "val" / "dog" / "d.png")
    with pytest.raises(DatasetError, match="val/ has classes that train/ lacks: dog"):
        DATASETS.get("imagefolder")(data_dir=tmp_path)


# ---------------------------------------------------------------- synthetic CIFAR-shaped tensors


def test_synthetic_cifar_is_seeded_balanced_and_cifar_shaped():
    first, second = DATASETS.get("synthetic_cifar_mini")(), DATASETS.get("synthetic_cifar_mini")()
    assert first.input_shape == (3, 32, 32) and first.train.images.dtype == torch.uint8
    assert (len(first.train), len(first.test)) == (1000, 200)
    assert torch.equal(first.train.images, second.train.images)
    assert first.train.labels.bincount().tolist() == [100] * 10


def test_synthetic_cifar_has_cifar10_sizes():
    dataset = DATASETS.get("synthetic_cifar")()
    assert dataset.input_shape == (3, 32, 32) and dataset.num_classes == 10
    assert (len(dataset.train), len(dataset.test)) == (50_000, 10_000)


def test_every_registered_dataset_is_covered():
    from tests.test_data_models import EMBEDDED_DATASETS

    covered = {"cifar10", "cifar100", "tinyimagenet", "imagefolder", "synthetic_cifar", *EMBEDDED_DATASETS}
    covered |= {"fashionmnist", "mnist"}  # tests/test_datasets_mnist.py
    assert set(DATASETS.names()) <= covered, "a new dataset needs a test here or in test_data_models.py"
