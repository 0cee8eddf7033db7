"""Dataset and arch arguments (`--dataset.train_size`, `--arch.width`) and the data fingerprint in the store key.

The arguments are set like method arguments (command line, `--config` YAML, suite cells), checked
before any data is loaded, and recorded in the run identity; the model store keys models by the
dataset's fingerprint, so two subsets or two image folders under one dataset name never share one.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from tests.test_datasets_real import write_imagefolder
from unlearnbench.cli import main, parse_run_args, run_config
from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.data.base import DatasetError, balanced_subset
from unlearnbench.data.cache import check_dataset_args, load_dataset
from unlearnbench.plan import check_suite, resolve_run
from unlearnbench.registry import DATASETS
from unlearnbench.runner import Runner
from unlearnbench.store import ModelSpec

RECIPE = {"epochs": 2, "lr": 0.1, "batch_size": 128, "momentum": 0.9, "weight_decay": 5e-4}


def test_balanced_subset_is_seeded_sorted_and_as_balanced_as_the_split_allows():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 4)
    chosen = balanced_subset(labels, 25)
    assert torch.equal(chosen, balanced_subset(labels, 25)) and torch.equal(chosen, chosen.sort().values)
    assert sorted(torch.bincount(labels[chosen]).tolist()) == [4, 10, 11]  # class 2 gives all 4, the rest share
    assert torch.bincount(labels[balanced_subset(labels, 7)]).tolist() in ([3, 2, 2], [2, 3, 2], [2, 2, 3])
    assert not torch.equal(chosen, balanced_subset(labels, 25, seed=1))
    with pytest.raises(DatasetError, match=r"choose 1\.\.84"):
        balanced_subset(labels, 85)


def test_subset_arguments_select_balanced_splits_and_change_the_fingerprint():
    full = load_dataset("digits", None, False)
    small = load_dataset("digits", None, False, {"train_size": 100, "test_size": 50})
    assert (len(small.train), len(small.test)) == (100, 50)
    assert (
        torch.bincount(small.train.labels).tolist() == [10] * 10
        and torch.bincount(small.test.labels).tolist() == [5] * 10
    )
    other = load_dataset("digits", None, False, {"train_size": 200})
    again = load_dataset("digits", None, False, {"train_size": 100, "test_size": 50})
    assert len({full.fingerprint, small.fingerprint, other.fingerprint}) == 3
    assert small.fingerprint == again.fingerprint and torch.equal(small.train.images, again.train.images)
    # the defaults (null: the whole split) are the dataset itself
    assert load_dataset("digits", None, False, {"train_size": None}).fingerprint == full.fingerprint


def test_two_subsets_never_share_a_stored_model(tmp_path):
    runs = [
        Runner.from_config(
            RunConfig.from_options(method="finetune", dataset_args={"train_size": size}, out=tmp_path, recipe=RECIPE)
        )
        for size in (100, 200)
    ]
    assert [len(runner.dataset.train) for runner in runs] == [100, 200]
    assert [len(runner.train_labels) for runner in runs] == [100, 200]  # streams and metrics see the subset
    keys = {ModelSpec("digits", "smallcnn", RECIPE, 0, data=runner.dataset.fingerprint).key() for runner in runs}
    assert len(keys) == 2
    assert runs[0].identity.dataset_args == {"train_size": 100} and runs[0].run_dir.path != runs[1].run_dir.path


def test_two_image_folders_never_share_a_stored_model(tmp_path):
    write_imagefolder(tmp_path / "a")
    write_imagefolder(tmp_path / "b")  # the same pixels, another folder: another dataset
    first = load_dataset("imagefolder", tmp_path / "a", False, {"image_size": 32})
    second = load_dataset("imagefolder", tmp_path / "b", False, {"image_size": 32})
    assert first.input_shape == (3, 32, 32) and first.fingerprint != second.fingerprint
    assert load_dataset("imagefolder", tmp_path / "a", False, {"image_size": 32}).fingerprint == first.fingerprint
    assert load_dataset("imagefolder", tmp_path / "a", False, {"image_size": 48}).fingerprint != first.fingerprint


def test_command_line_config_file_and_suite_cell_resolve_alike(tmp_path):
    out = str(tmp_path / "runs")
    argv = ["--method", "rl", "--out", out, "--dataset.train_size", "300", "--arch.width", "8"]
    cli = run_config(parse_run_args(argv))
    assert (cli.data.args, cli.arch.args) == ({"train_size": 300, "test_size": None}, {"width": 8, "pools": 1})
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump({"dataset_args": {"train_size": 300}, "arch_args": {"width": 8}}))
    from_file = run_config(parse_run_args(["--method", "rl", "--out", out, "--config", str(config_file)]))
    suite = {
        "out": out,
        "common": {"recipe": RECIPE, "dataset_args": {"train_size": 300}},
        "settings": [{"arch_args": {"width": 8}}],
        "methods": ["rl"],
    }
    (cell,) = check_suite(suite)
    cli, from_file = cli.replace(recipe=RECIPE), from_file.replace(recipe=RECIPE)
    assert resolve_run(cli) == resolve_run(from_file) == (cell.identity, cell.run_dir)
    assert cell.identity.dataset_args == {"train_size": 300} and cell.identity.arch_args == {"width": 8}
    plain = run_config(parse_run_args(["--method", "rl", "--out", out, "--recipe", json.dumps(RECIPE)]))
    assert "dataset_args" not in resolve_run(plain)[0].to_json() and "arch_args" not in resolve_run(plain)[0].to_json()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset.train_size", "0"], "train_size must be a whole number >= 1"),
        (["--dataset.train_size", "70000"], "train_size=70000 exceeds the 60000 samples"),
        (["--dataset.test_size", "10001"], "test_size=10001 exceeds the 10000 samples"),
        (["--dataset.train_size", "5"], "fewer than fashionmnist's 10 classes"),
        # the smallest test subsets: an attack would fit on no non-member (scikit-learn's traceback after training)
        (["--dataset.test_size", "1"], "test_size=1 is fewer than fashionmnist's 10 classes: the SVC membership"),
        (["--dataset_args.test_size", "9"], "give at least 10 (one per class)"),
        (["--dataset.image_size", "32"], "image_size"),
        (["--arch.depth", "3"], "depth"),
        (["--arch.width", "0"], "width must be a whole number >= 1"),
        (["--dataset.augment", "maybe"], "augment"),
        (["--dataset.augment", "1"], "augment"),
    ],
)
def test_bad_arguments_fail_before_any_data_is_loaded(tmp_path, monkeypatch, capsys, argv, message):
    def no_loading(data_dir=None, download=False, augment: bool = True):
        raise AssertionError("data was loaded")

    no_loading.known_size = DATASETS.get("fashionmnist").known_size
    real_get = DATASETS.get
    monkeypatch.setattr(DATASETS, "get", lambda name: no_loading if name == "fashionmnist" else real_get(name))
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "finetune", "--dataset", "fashionmnist", "--out", str(out), *argv])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and message in stderr
    assert not out.exists()


def test_suite_checks_dataset_arguments_and_sizes_streams_by_the_subset(tmp_path):
    suite = {"out": str(tmp_path), "common": {"recipe": RECIPE, "dataset_args": {"train_sise": 3}}, "methods": ["ga"]}
    with pytest.raises(ConfigError, match=r"no argument.*train_sise.*train_size"):
        check_suite(suite)
    suite["common"]["dataset_args"] = {"train_size": 300}
    suite["streams"] = [{"stream": "random", "size": 0.5, "requests": 3}]  # 3 x 50% of 300 > 300
    with pytest.raises(ConfigError, match="random stream"):
        check_suite(suite)
    with pytest.raises(ConfigError, match="`dataset_args` in `common` must be a mapping"):
        check_suite({**suite, "common": {"dataset_args": 5}})


def test_check_dataset_args_returns_only_what_differs_from_the_defaults():
    assert check_dataset_args("digits", {"train_size": None, "test_size": 20}) == {"test_size": 20}


@pytest.mark.parametrize("value", ["false", 0, 1, None])
def test_augment_is_true_or_false_in_configs_and_suites_too(tmp_path, value):
    """YAML's `augment: "false"` (quoted) or `0` is not a flag: refused by name before anything is loaded."""
    with pytest.raises(ConfigError, match=rf"dataset argument augment must be true or false, got {value!r}"):
        RunConfig.from_options(
            method="finetune", dataset="mnist", dataset_args={"augment": value}, out=tmp_path
        ).validate()
    suite = {"out": str(tmp_path), "common": {"recipe": RECIPE, "dataset_args": {"augment": value}}}
    with pytest.raises(ConfigError, match="augment must be true or false"):
        check_suite({**suite, "settings": [{"dataset": "fashionmnist"}], "methods": ["ga"]})
    assert check_dataset_args("fashionmnist", {"augment": True}) == {}
    assert check_dataset_args("fashionmnist", {"augment": False}) == {"augment": False}


def test_a_test_subset_of_one_sample_per_class_is_the_smallest_accepted():
    from unlearnbench.data.cache import check_dataset_args

    assert check_dataset_args("digits", {"test_size": 10}) == {"test_size": 10}
