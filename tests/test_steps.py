"""benchmarks/steps.py counts the optimizer steps a request really gets, checked against hand counts of the batches."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST_RECIPE
from unlearnbench.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("steps", ROOT / "benchmarks" / "steps.py")
steps = sys.modules.setdefault("steps", importlib.util.module_from_spec(_spec))  # dataclasses look their module up
_spec.loader.exec_module(steps)


def _count(tmp_path, store, method: str, method_args: dict) -> steps.StepCount:
    config = RunConfig.from_options(
        method=method, method_args=method_args, requests=2, recipe=dict(FAST_RECIPE), out=tmp_path, store=store
    )
    return steps.request_steps(config)


def test_finetune_takes_epochs_times_its_retain_batches(tmp_path, shared_store):
    count = _count(tmp_path, shared_store, "finetune", {"optim": {"epochs": 3, "batch_size": 200}})
    assert count.forget + count.retain == 1437  # digits' train split, one class forgotten
    assert count.model_steps == 3 * math.ceil(count.retain / 200) == count.batches
    assert (count.fits, count.other_steps, count.budget) == (1, {}, "optim.epochs 3")
    assert count.cpu_s > 0 and count.wall_s > 0


def test_scrub_counts_its_max_steps_beside_the_batches(tmp_path, shared_store):
    """Manual optimization: in each of the first `msteps` epochs the first ⌈|F|/batch⌉ batches take two steps."""
    count = _count(tmp_path, shared_store, "scrub", {"msteps": 1, "optim": {"epochs": 2, "batch_size": 100}})
    batches = 2 * math.ceil(count.retain / 100)  # paired batches: an epoch runs over the longer set, retain
    assert count.batches == batches
    assert count.model_steps == batches + 1 * math.ceil(count.forget / 100)


def test_an_optimizer_off_the_model_is_counted_apart_and_stages_add_up(tmp_path, shared_store):
    loft = _count(tmp_path, shared_store, "loft", {"steps": 7})
    assert (loft.fits, loft.model_steps, loft.other_steps) == (0, 0, {"RiemannianAdam": 7})
    one_epoch = {"optim": {"epochs": 1}}
    rum = _count(tmp_path, shared_store, "rum", {"stage_args": {"finetune": one_epoch, "salun": one_epoch}})
    mixed = math.ceil((rum.forget + rum.retain) / 256)  # RUM's batches: forget ∪ retain, built once
    assert (rum.fits, rum.model_steps) == (2, 2 * mixed)  # none, then finetune and salun one epoch each


def test_a_method_refused_in_the_setting_is_a_row_not_a_crash(tmp_path, shared_store):
    config = RunConfig.from_options(method="unsir", stream="random", requests=2, out=tmp_path, store=shared_store)
    count = steps.request_steps(config)
    assert count.refused and "classwise" in count.refused


@pytest.mark.slow
def test_the_command_takes_run_options_and_writes_the_table(tmp_path, capsys):
    store, report = tmp_path / "store", tmp_path / "steps.json"
    argv = ["--methods", "loft,finetune", "--dataset.train_size", "500", "--recipe", json.dumps(FAST_RECIPE)]
    assert steps.main([*argv, "--store", str(store), "--out", str(tmp_path), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "digits/smallcnn train_size=500" in out and "| loft | steps 100 |" in out
    (setting,) = json.loads(report.read_text())
    loft, finetune = setting["counts"]
    assert loft["forget"] + loft["retain"] == 500
    assert finetune["model_steps"] == 10 * math.ceil(finetune["retain"] / 256)


def test_a_suite_gives_one_table_per_setting_and_stream(tmp_path, shared_store, capsys):
    suite = {
        "common": {"dataset": "digits", "arch": "smallcnn", "recipe": dict(FAST_RECIPE)},
        "methods": [{"finetune": {"optim": {"epochs": 1}}}],  # the suite's method and arguments are not the table's
        "streams": [{"stream": "classwise", "requests": 2}, {"stream": "random", "size": 0.05, "requests": 2}],
        "seeds": [0, 1],
    }
    path, report = tmp_path / "suite.yaml", tmp_path / "steps.json"
    path.write_text(yaml.safe_dump(suite))
    argv = ["--suite", str(path), "--methods", "ga", "--store", str(shared_store), "--json", str(report)]
    assert steps.main(argv) == 0
    settings = json.loads(report.read_text())
    assert [s["setting"] for s in settings] == [
        "digits/smallcnn, classwise, T = 2, seed 0",
        "digits/smallcnn, random, size 0.05, T = 2, seed 0",
    ]
    for setting in settings:
        (ga,) = setting["counts"]
        assert ga["model_steps"] == 5 * math.ceil(ga["forget"] / 256)  # GA's 5 epochs over the forget set
    assert steps.main(["--suite", str(path), "--requests", "3"]) == 2
    assert "run options --requests 3 do not apply" in capsys.readouterr().err


def test_bad_run_options_are_one_line_and_exit_2(capsys):
    assert steps.main(["--methods", "nope"]) == 2
    assert capsys.readouterr().err.startswith("steps.py: error: unknown method(s) nope; choose from: ")
