"""The relearning attack (evaluation/relearn.py): its curve against a hand-written fine-tuning loop, the Anamnesis
Index of the oracle against itself (1) and of a model that kept F (0 steps), its rows recomputed from the run
directory, its schedule, its determinism across a resume, and a run without it unchanged."""

from __future__ import annotations

import copy
import json
from functools import partial

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from tests.conftest import SimulatedCrashError, crash_before_request, measured_rows, tiny_config
from tests.test_cli import _assert_refused_before_torch
from unlearnbench.console import Reporter
from unlearnbench.evaluation import reference_scores
from unlearnbench.evaluation.quantization import QUANTIZED_METRICS, quantized_key
from unlearnbench.evaluation.relearn import (
    anamnesis_index,
    heldout_accuracy,
    relearn_curve,
    relearn_scores,
    relearn_split,
    steps_within_margin,
)
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.plan import plan_run
from unlearnbench.registry import METHODS
from unlearnbench.report.leaderboard import build_leaderboard
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import Runner
from unlearnbench.seeds import relearn_seed

STEPS = 12
#: The keys the robustness evaluations add to a side of a row.
ROBUSTNESS_KEYS = {
    "relearn_curve",
    "relearn_acc",
    "relearn_steps",
    "relearn_ratio",
    *(quantized_key(bits, key) for bits in (8, 4) for key in QUANTIZED_METRICS),
}


@pytest.fixture(scope="module")
def attack(tmp_path_factory, shared_store):
    """Request 1 of a tiny class-wise stream: its runner, oracle, split and a curve function of the run's protocol."""
    config = tiny_config(tmp_path_factory.mktemp("relearn"), shared_store, "finetune", requests=2)
    runner = Runner.from_config(config)
    request = runner.stream.select(1)
    seed = relearn_seed(config.seeds.seed, 1)
    split = relearn_split(request.forgotten, request.retain, 0.5, seed)
    make_trainer = partial(runner.trainer, -1, "relearning attack", one_device=True)
    curve = partial(
        relearn_curve,
        dataset=runner.dataset,
        split=split,
        recipe=runner.recipe,
        steps=STEPS,
        seed=seed,
        make_trainer=make_trainer,
    )
    return runner, runner.oracle(request, 0), split, seed, curve


def _hand_curve(model, dataset, split, recipe, steps: int, seed: int) -> list[float]:
    """The attack written out: plain SGD steps on the attacker's batches, the held-out accuracy by argmax."""
    model = copy.deepcopy(model)
    heldout = torch.as_tensor(split.heldout)
    images, labels = dataset.normalize(dataset.train.images[heldout]), dataset.train.labels[heldout]

    def measure() -> float:
        model.eval()
        with torch.no_grad():
            value = 100.0 * float((model(images).argmax(1) == labels).float().mean())
        model.train()
        return value

    curve = [measure()]
    L.seed_everything(seed, verbose=False)
    loader = dataset.loader(
        dataset.train, torch.as_tensor(split.attack), recipe.batch_size, augment=True, shuffle=True, seed=seed
    )
    optimizer = torch.optim.SGD(
        model.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay
    )
    model.train()
    while len(curve) <= steps:
        for batch in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(batch.x), batch.y).backward()
            optimizer.step()
            curve.append(measure())
            if len(curve) > steps:
                break
    return curve


def test_the_split_holds_the_stated_fraction_out_and_as_many_retain_samples():
    forgotten, retain = np.arange(100, 200), np.arange(0, 100)
    split = relearn_split(forgotten, retain, 0.3, seed=5)
    assert len(split.known) == 30 and len(split.heldout) == 70 and len(split.retain) == 30
    assert sorted([*split.known, *split.heldout]) == list(forgotten)
    assert set(split.retain) <= set(retain)
    again = relearn_split(forgotten, retain, 0.3, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(vars(split).values(), vars(again).values(), strict=True))


def test_the_curve_is_a_hand_written_fine_tuning_loops(attack):
    runner, oracle, split, seed, curve = attack
    ours = curve(oracle)
    assert len(ours) == STEPS + 1
    assert ours == pytest.approx(_hand_curve(oracle, runner.dataset, split, runner.recipe, STEPS, seed), abs=1e-6)
    assert ours[0] == 0.0 and max(ours) > 50.0  # the oracle never saw F's class, and learns it from the attacker


def test_the_oracle_relearns_exactly_as_fast_as_itself_and_a_model_that_kept_f_at_once(attack):
    """The oracle attacked as if it were the method: the same curve, so an Anamnesis Index of exactly 1. The pretrained
    model, which kept F, is within the margin of itself before any step: 0 steps, and 0 against the oracle."""
    runner, oracle, split, _, curve = attack
    original = runner.pretrained_model()
    original_accuracy = heldout_accuracy(original, runner.dataset, split.heldout)
    scores = relearn_scores({"method": curve(oracle), "oracle": curve(oracle)}, original_accuracy, 0.05)
    assert scores["method"]["relearn_curve"] == scores["oracle"]["relearn_curve"]
    assert scores["oracle"]["relearn_steps"] is not None and scores["oracle"]["relearn_steps"] > 0
    assert scores["method"]["relearn_ratio"] == 1.0 and scores["oracle"]["relearn_ratio"] == 1.0

    kept = relearn_scores({"method": curve(original), "oracle": curve(oracle)}, original_accuracy, 0.05)
    assert kept["method"]["relearn_curve"][0] == original_accuracy
    assert kept["method"]["relearn_steps"] == 0 and kept["method"]["relearn_ratio"] == 0.0
    assert kept["original"] == {"relearn_curve": [original_accuracy], "relearn_steps": 0, "relearn_ratio": 0.0}


def test_steps_within_margin_is_the_first_step_at_the_target_and_the_ratio_counts_a_miss_as_k_plus_one():
    assert steps_within_margin([0.0, 40.0, 95.0, 90.0, 99.0], 94.0) == 2
    assert steps_within_margin([0.0, 40.0], 94.0) is None
    assert steps_within_margin([97.0], 94.0) == 0
    assert anamnesis_index(2, 8, budget=10) == 0.25
    assert anamnesis_index(2, None, budget=10) == 2 / 11  # the oracle misses: a bound, at most this
    assert anamnesis_index(None, None, budget=10) == 1.0  # neither gets there within the budget
    assert anamnesis_index(3, 0, budget=10) is None  # the oracle is within the margin before the attack


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _without(rows: list[dict], keys: set[str]) -> list[dict]:
    """The rows (`measured_rows`'s) with `keys` left out of every side."""
    return [
        {
            field: {k: v for k, v in value.items() if k not in keys} if isinstance(value, dict) else value
            for field, value in row.items()
        }
        for row in rows
    ]


def test_a_run_with_the_attack_records_it_where_scheduled_recomputably_and_changes_nothing_else(tmp_path, shared_store):
    """T = 3, the attack at t = 2 and 3 (`--relearn-every 2`): its keys there only, on the method's, the oracle's and
    the original's sides; steps and ratio recomputed from the row's curves and config.yaml's margin; and every
    other number equal to the run without it, whose name is the one it had before the attack existed."""
    options = {"requests": 3, "single_shot_every": 0, "logger": "none"}
    plain = Runner.from_config(tiny_config(tmp_path / "plain", shared_store, "rl", **options)).run()
    config = tiny_config(tmp_path / "attacked", shared_store, "rl", relearn_every=2, relearn_steps=STEPS, **options)
    attacked = Runner.from_config(config).run()

    # the name this run had before the option existed (tests/conftest.py's tiny recipe, `rl`, T = 3), which the
    # attack's settings do not change where it does not run
    assert plain.run_dir.name == "rl-classwise-digits-smallcnn-T3-seed0-b0e46853"
    unscheduled = tiny_config(tmp_path / "plain", shared_store, "rl", relearn_fraction=0.3, relearn_steps=5, **options)
    assert plan_run(unscheduled, require_recipe=False).run_dir == plain.run_dir
    recorded = RunDirectory(attacked.run_dir).identity()
    assert (recorded.relearn_every, recorded.relearn_steps, recorded.relearn_margin) == (2, STEPS, 0.05)

    rows = _rows(attacked.run_dir)
    for row in rows:
        for side in ("method", "oracle", "original"):
            assert ("relearn_steps" in row[side]) == (row["t"] in (2, 3)), (row["t"], side)
    for row in rows[1:]:
        target = (1 - recorded.relearn_margin) * row["original"]["relearn_curve"][0]
        steps = {side: steps_within_margin(row[side]["relearn_curve"], target) for side in ("method", "oracle")}
        assert len(row["method"]["relearn_curve"]) == len(row["oracle"]["relearn_curve"]) == STEPS + 1
        assert row["method"]["relearn_acc"] == row["method"]["relearn_curve"][-1]
        assert {side: row[side]["relearn_steps"] for side in steps} == steps
        assert row["original"]["relearn_steps"] == 0
        capped = {side: STEPS + 1 if count is None else count for side, count in steps.items()}
        expected = None if steps["oracle"] == 0 else capped["method"] / capped["oracle"]
        assert row["method"]["relearn_ratio"] == expected
    assert _without(measured_rows(attacked.run_dir), ROBUSTNESS_KEYS) == measured_rows(plain.run_dir)


def test_a_resumed_run_attacks_to_the_same_numbers(tmp_path, shared_store, monkeypatch):
    options = {"requests": 2, "single_shot_every": 0, "logger": "none", "relearn_every": 1, "relearn_steps": STEPS}
    reference = Runner.from_config(tiny_config(tmp_path / "a", shared_store, "finetune", **options)).run()
    reference_scores.clear()
    interrupted = tiny_config(tmp_path / "b", shared_store, "finetune", **options)
    with monkeypatch.context() as patch:
        crash_before_request(patch, 2)
        with pytest.raises(SimulatedCrashError):
            Runner.from_config(interrupted).run()
    reference_scores.clear()  # the resumed session computes the oracle's attack afresh, as a new process does
    resumed = Runner.from_config(interrupted).run()
    assert measured_rows(resumed.run_dir) == measured_rows(reference.run_dir)
    assert (
        _rows(resumed.run_dir)[1]["method"]["relearn_curve"] == _rows(reference.run_dir)[1]["method"]["relearn_curve"]
    )


REFUSALS = [
    (["--relearn-steps=-1"], "relearn_steps must be a whole number >= 0"),
    (["--relearn-every", "-2"], "relearn_every must be a whole number >= 0"),
    (["--relearn-fraction", "1"], "relearn_fraction must be a number between 0 and 1"),
    (["--relearn_fraction", "0"], "relearn_fraction must be a number between 0 and 1"),
    (["--relearn-margin", "1.5"], "relearn_margin must be a number >= 0 and < 1"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_bad_attack_options_are_refused_in_one_line_before_data_is_loaded(argv, message, tmp_path):
    _assert_refused_before_torch(
        ["run", "--method", "finetune", *argv, "--out", str(tmp_path / "out")], message, tmp_path
    )


def test_the_robustness_keys_reach_the_console_the_csv_log_and_the_leaderboard(tmp_path, shared_store):
    console = Console(record=True, width=100, force_terminal=False)
    config = tiny_config(
        tmp_path / "runs",
        shared_store,
        "rl",
        relearn_every=1,
        relearn_steps=STEPS,
        quantize_every=2,
        single_shot_every=0,
    )
    reporter = Reporter(console=console)
    result = Runner.from_config(config, reporter=reporter).run()
    reporter.summary(result.rows, result.summary, result.run_dir)
    text = console.export_text()
    for shown in ("relearn_steps", "relearn_ratio", "int8_forget_acc", "int4_forget_acc", "Anamnesis Index"):
        assert shown in text, shown
    last = result.rows[-1]
    assert f"forget_acc at T, 4-bit weights (method / oracle / original): {last.method['int4_forget_acc']:.2f}" in text

    logged = (result.run_dir / "csv_logs" / "from_t001" / "metrics.csv").read_text()
    assert (
        "method/relearn_steps" in logged and "oracle/int8_forget_acc" in logged and "original/int4_test_acc" in logged
    )

    board = build_leaderboard(tmp_path / "runs", tmp_path / "board", plots=False)
    (group,) = board.groups
    (entry,) = group.entries
    assert entry.cells["relearn_acc"].mean == pytest.approx(last.method["relearn_acc"])
    assert entry.cells["int4_forget_acc"].mean == pytest.approx(last.method["int4_forget_acc"])
    assert group.oracle.cells["relearn_ratio"].mean == pytest.approx(last.oracle["relearn_ratio"])
    assert group.original.cells["relearn_steps"].mean == 0
    table = (tmp_path / "board" / "leaderboard.md").read_text()
    assert all(column in table for column in ("ain", "relearn_steps", "q8_forget", "q4_forget"))


@pytest.mark.parametrize("method", METHODS.names())
def test_every_method_deploys_its_model_so_the_attack_and_the_quantizer_copy_what_is_scored(method):
    """The robustness evaluations copy `method.model`, for every method alike (no per-method branch): that is the model
    the method's rows are scored on only while no method answers with a forward of its own."""
    assert METHODS.get(method).forward is UnlearningMethod.forward
