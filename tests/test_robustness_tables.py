"""benchmarks/robustness_cpu.py, which docs/results.md's robustness tables come from: its suite is the memorizing tier's
setting with every measure the tables read, and each cell is the interval over seeds of the value in the run directories,
a reference model (the oracle, the original) counted once per seed however many methods ran beside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import run_tiny
from unlearnbench.suite import load_suite

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tables(tmp_path_factory, shared_store):
    """The script as a module (it imports its sibling plasticity_cpu, as running it from benchmarks/ does) and the runs
    it reads: FT and RL, one class-wise request with both evaluations, seeds 0 and 1."""
    pytest.MonkeyPatch().syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("robustness_cpu", ROOT / "benchmarks" / "robustness_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("robustness")
    for seed in (0, 1):
        for method in ("finetune", "rl"):
            options = {"relearn_every": 1, "relearn_steps": 5, "quantize_every": 1, "single_shot_every": 0}
            run_tiny(out, shared_store, method, seed=seed, requests=1, **options)
    return module, out


def _row(lines: list[str], label: str) -> list[str]:
    (line,) = [line for line in lines if line.startswith(f"| {label} |")]
    return [cell.strip() for cell in line.strip("|").split("|")[1:]]


def test_the_robustness_suite_is_the_memorizing_tier_with_every_measure_and_the_issue_methods(no_datasets):
    tier = load_suite(ROOT / "benchmarks" / "fashionmnist_mlp.yaml")["common"]
    suite = load_suite(ROOT / "benchmarks" / "robustness_fashionmnist_mlp.yaml")
    assert {key: suite["common"][key] for key in ("dataset", "dataset_args", "arch")} == {
        key: tier[key] for key in ("dataset", "dataset_args", "arch")
    }
    assert suite["common"]["relearn_every"] == 1 and suite["common"]["quantize_every"] == 1
    assert {stream["stream"] for stream in suite["streams"]} == {
        "classwise",
        "interleaved",
        "memorized_most",
        "memorized_least",
    }
    assert {"finetune", "neggrad_plus", "rl", "salun", "scrub", "loft"} <= set(suite["methods"])
    assert suite["seeds"] == [0, 1, 2]


@pytest.mark.slow
def test_each_cell_is_the_interval_over_seeds_of_the_stored_value_and_references_count_once(tables):
    module, out = tables
    runs, diverged = module.finished_runs(out)
    assert diverged == [] and {method: len(found) for method, found in runs["classwise"].items()} == {
        "finetune": 2,
        "rl": 2,
    }
    last = {
        (method, run.identity().seed): module.last_row(run)
        for method, found in runs["classwise"].items()
        for run in found
    }
    quantized = module.quantization_table(runs["classwise"])
    for label, side, method in (
        ("*oracle*", "oracle", "rl"),
        ("*original*", "original", "rl"),
        ("`rl`", "method", "rl"),
    ):
        values = [getattr(last[(method, seed)], side)["int4_forget_acc"] for seed in (0, 1)]
        assert _row(quantized, label)[2] == module.interval(values)
    # the oracle of a seed appears in FT's run and RL's: one value per seed, so two values, not four
    oracle_forget = [last[("finetune", seed)].oracle["forget_acc"] for seed in (0, 1)]
    assert _row(quantized, "*oracle*")[0] == module.interval(oracle_forget)

    relearning = module.relearning_table(runs["classwise"])
    curves = [last[("finetune", seed)].method["relearn_curve"] for seed in (0, 1)]
    assert _row(relearning, "`finetune`")[0] == module.interval([curve[0] for curve in curves])
    oracle_curves = [last[("rl", seed)].oracle["relearn_curve"] for seed in (0, 1)]
    assert _row(relearning, "*oracle*")[:2] == [module.interval([curve[k] for curve in oracle_curves]) for k in (0, 5)]
    assert _row(relearning, "`rl`")[2:4] == ["—", "—"]  # k = 25 and 100 are past these runs' 5-step attack
