"""The suite files under benchmarks/ resolve, and `unlearnbench suite --check` loads, runs and writes nothing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from unlearnbench.cli import main
from unlearnbench.grid import check_suite_file, load_suite
from unlearnbench.plan import check_suite, grid_summary, models_to_train, unlearning_fits
from unlearnbench.registry import DATASETS

ROOT = Path(__file__).resolve().parent.parent
#: Every YAML file under benchmarks/ is a suite, except the tune suites (`tune_*.yaml`, tests/test_tune.py).
SUITE_FILES = sorted(path for path in ROOT.glob("benchmarks/**/*.yaml") if not path.name.startswith("tune_"))


def test_the_seed_paper_suites_are_there():
    names = {path.relative_to(ROOT).as_posix() for path in SUITE_FILES}
    assert {
        "benchmarks/suite_cpu.yaml",
        "benchmarks/suites/plasticity_collapse.yaml",
        "benchmarks/suites/loft.yaml",
        "benchmarks/suites/loft_continual.yaml",
    } <= names


def test_no_datasets_refuses_to_load_but_keeps_known_sizes(no_datasets):
    with pytest.raises(AssertionError, match="dataset cifar100 was loaded"):
        DATASETS.get("cifar100")(data_dir="data")
    assert DATASETS.get("cifar100").known_size.num_classes == 100


@pytest.mark.parametrize("path", SUITE_FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_suite_file_resolves_without_loading_or_writing(path, suite_cwd, no_datasets):
    suite = load_suite(path)
    check_suite_file(path)  # `unlearnbench suite`'s early checks take every shipped suite
    cells = check_suite(suite)
    sizes = [len(suite.get(key) or [None]) for key in ("settings", "streams", "seeds", "methods")]
    assert len(cells) == math.prod(sizes) * (suite.get("unlearn_seeds") or 1)
    assert [cell.position for cell in cells] == sorted(cell.position for cell in cells)  # setting-major
    assert len({cell.run_dir for cell in cells}) == len(cells)
    assert [path.name for path in suite_cwd.iterdir()] == ["tuned"]


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("benchmarks/suites/*.yaml")), ids=lambda path: path.relative_to(ROOT).as_posix()
)
def test_suite_file_states_its_cost(path, empty_cwd, no_datasets):
    """The comment block's grid and model count are the ones the check computes."""
    cells = check_suite(load_suite(path))
    text = " ".join(path.read_text().replace("#", " ").split())
    assert grid_summary(cells) in text
    assert f"{sum(models_to_train(cells))} models are trained" in text
    continual, single_shot = unlearning_fits(cells)
    assert (
        f"serves {continual + single_shot} unlearning runs: {continual} continual requests and {single_shot} "
        "single-shot counterfactuals"
    ) in text
    assert f"unlearnbench suite {path.relative_to(ROOT).as_posix()} --check" in text


def test_check_lists_every_cell_and_writes_nothing(empty_cwd, no_datasets, capsys):
    path = ROOT / "benchmarks" / "suite_cpu.yaml"
    assert main(["suite", str(path), "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = check_suite(load_suite(path))
    assert lines[0].startswith(f"{path}: 1 setting x 2 streams x 2 seeds x 5 methods = 20 cells")
    assert lines[1].split() == ["cell", "setting", "stream", "seed", "method", "run", "directory"]
    assert len(lines) == 2 + 20 + 1
    for line, cell in zip(lines[2:-1], cells, strict=True):
        assert line.endswith(cell.run_dir.name) and f" {cell.config.method.name}" in line
    assert "2 pretrained models and 12 oracles" in lines[-1]
    assert "serves 100 unlearning requests: 60 continual and 40 single-shot" in lines[-1]
    assert list(empty_cwd.iterdir()) == []


def test_check_reports_where_each_cell_stands_once_runs_exist(empty_cwd, no_datasets, capsys):
    """A long grid's progress is read with the command that planned it: each cell's status from its run directory's
    files (a finished summary, a divergence, a suite's recorded error, a stopped or a just-started run), a count,
    and what the finished requests cost, summed from their rows (one written before rows recorded it)."""
    from unlearnbench.records import RequestRecord, RunSummary
    from unlearnbench.rundir import RunDirectory

    path = ROOT / "benchmarks" / "suite_cpu.yaml"
    cells = check_suite(load_suite(path))
    requests = cells[0].config.stream.requests
    runs = [RunDirectory(cell.run_dir) for cell in cells[:5]]
    for run, cell in zip(runs, cells, strict=False):
        run.initialize(cell.identity, {}, np.zeros(1), np.zeros(1))
    runs[0].write_summary(RunSummary(requests, {}, "complete"))
    runs[1].write_summary(RunSummary(0, {}, "diverged", diverged_at=1))
    runs[2].write_error("boom", "Traceback ...")
    runs[4].write_summary(RunSummary(1, {}, "complete"))
    runs[0].write_error("an older version could not read a newer row", "Traceback ...")  # done all the same
    costs = [{"wall_s": 3600.0, "cpu_s": 1800.0}, {"wall_s": 3600.0, "cpu_s": 3600.0}]
    for t, cost in enumerate(costs, start=1):
        runs[0].append_row(RequestRecord(t, "ok", [t], {"forget_acc": 1.0}, None, None, cost=cost))
    runs[4].append_row(RequestRecord(1, "ok", [1], {"forget_acc": 1.0}, None, None))
    assert main(["suite", str(path), "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-1] == "status"
    statuses = [line.split(cell.run_dir.name)[1].strip() for line, cell in zip(lines[2:22], cells, strict=True)]
    assert statuses[:6] == ["done", "diverged at t=1", "failed", "started", f"1/{requests}", ""]
    assert lines[-2] == (
        "1 of 20 cells done, 2 diverged or failed, 2 started and not finished, 15 not started; their finished "
        "requests cost 1.50 CPU-hours (2.00 wall-hours) measured on 2 of 3 requests"
    )


def test_check_of_a_shard_lists_its_cells(empty_cwd, no_datasets, capsys):
    path = ROOT / "benchmarks" / "suite_cpu.yaml"
    assert main(["suite", str(path), "--check", "--shard", "2/3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "shard 2/3: 7 cells"
    assert [line.split()[0] for line in lines[3:-1]] == ["2", "5", "8", "11", "14", "17", "20"]


def test_check_of_a_bad_suite_is_one_line_and_exit_2(empty_cwd, no_datasets, capsys):
    suite = yaml.safe_load((ROOT / "benchmarks" / "suites" / "loft_continual.yaml").read_text())
    suite["streams"] = [{"stream": "classwise", "size": 2, "requests": 100}]
    path = empty_cwd / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(SystemExit) as exit_info:
        main(["suite", str(path), "--check"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert (
        "cell 1/12 (tinyimagenet/swin_t, loft, classwise, seed 0): classwise stream needs requests x size"
        in captured.err
    )
    assert [p.name for p in empty_cwd.iterdir()] == ["suite.yaml"]


@pytest.mark.parametrize("name", ["digits", "synthetic_cifar_mini"])
def test_known_sizes_are_the_loaded_sizes(name):
    factory = DATASETS.get(name)
    dataset = factory()
    assert (factory.known_size.num_train, factory.known_size.num_classes) == (len(dataset.train), dataset.num_classes)


def test_folder_of_classes_has_no_known_size():
    assert getattr(DATASETS.get("imagefolder"), "known_size", None) is None


def test_the_published_leaderboard_suite_runs_every_registered_method_on_the_memorizing_tier(suite_cwd, no_datasets):
    """docs/leaderboard/ comes from benchmarks/fashionmnist_mlp.yaml: a new method serving both kinds joins it, at its
    defaults and with the values its tuning suite chose (one row each); the 700-image setting whose model memorized
    nothing is gone."""
    from unlearnbench.registry import METHODS

    suite = load_suite(ROOT / "benchmarks" / "fashionmnist_mlp.yaml")
    tuning = load_suite(ROOT / "benchmarks" / "tune_fashionmnist_mlp.yaml")
    assert suite["settings"] == [{}, {"hparams": tuning["out"]}]
    cells = check_suite(suite)
    both = {name for name in METHODS.names() if METHODS.get(name).streams in (None, ("classwise", "random"))}
    assert {cell.config.method.name for cell in cells} == both, "a method that serves both stream kinds joins the suite"
    assert all(cell.config.method.args == {} for cell in cells)
    assert {cell.position[0]: cell.config.method.hparams is not None for cell in cells} == {1: False, 2: True}
    assert suite["leaderboard"] == "docs/leaderboard"
    assert not (ROOT / "benchmarks" / "fashionmnist.yaml").exists()


def test_the_memorizing_tier_suite_is_the_setting_measured_to_memorize(no_datasets):
    """benchmarks/fashionmnist_mlp.yaml: the setting measured to reach >= 99% train and >= 85% test accuracy on every
    seed (docs/scale.md) on >= 10,000 train and >= 2,000 test images; every method that serves both streams; a
    class-wise stream through every class but one and a random one of >= 100 images per request, T >= 30. The
    plasticity benchmark reads its tier from the same block."""
    import importlib.util

    from unlearnbench.registry import METHODS

    suite = load_suite(ROOT / "benchmarks" / "fashionmnist_mlp.yaml")
    common = suite["common"]
    assert common["dataset"] == "fashionmnist" and common["arch"] == "mlp" and "arch_args" not in common
    assert common["dataset_args"]["train_size"] >= 10_000 and common["dataset_args"]["test_size"] >= 2_000
    assert common["dataset_args"]["augment"] is False  # augmentation keeps the mlp at 89% train accuracy
    shipped = [name for name in METHODS.names() if METHODS.get(name).__module__.startswith("unlearnbench.methods.")]
    both_streams = {name for name in shipped if getattr(METHODS.get(name), "streams", None) is None}
    assert set(suite["methods"]) == both_streams
    classwise, random = suite["streams"]
    known = DATASETS.get("fashionmnist").known_size
    assert classwise == {"stream": "classwise", "size": 1, "requests": known.num_classes - 1}
    assert random["stream"] == "random" and random["requests"] >= 30
    assert random["size"] * common["dataset_args"]["train_size"] >= 100
    assert suite["seeds"] == [0, 1, 2]
    cells = check_suite(suite)
    assert all(cell.config.single_shot_at(cell.config.stream.requests) for cell in cells)  # fwd_fail is filled
    spec = importlib.util.spec_from_file_location("plasticity_cpu", ROOT / "benchmarks" / "plasticity_cpu.py")
    plasticity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plasticity)
    assert plasticity.tier("fashionmnist") == {key: common[key] for key in ("dataset", "dataset_args", "arch")}
    guarded = plasticity.suite([0], ["loft", "rl+ewc", "rl+orthogonal+lwf"])
    assert guarded["methods"] == [
        "loft",
        {"method": "rl", "guards": ["ewc"]},
        {"method": "rl", "guards": ["orthogonal", "lwf"]},
    ]
    assert {cell.config.method.name: cell.config.guard_names for cell in check_suite(guarded)}["rl"] in (
        ["ewc"],
        ["orthogonal", "lwf"],
    )
