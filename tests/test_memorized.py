"""Memorization-stratified streams: forget sets from the top or bottom of the leave-out memorization estimate, which
is computed once per pretrained model, stored beside it and recomputable from its half-models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import run_tiny, tiny_config
from tests.test_cli import _assert_refused_before_torch
from unlearnbench import runner as runner_module
from unlearnbench.cli import main
from unlearnbench.runner import Runner
from unlearnbench.streams import RequestStream, StreamError
from unlearnbench.streams.memorized import HALF_PAIRS, PROXY, held_out_halves

KINDS = ("memorized_most", "memorized_least", "memorized_mixed")


def _forgotten(stream: RequestStream) -> set[int]:
    return {int(i) for request in stream.requests for i in request.forget}


@pytest.mark.parametrize("seed", [0, 5])
def test_the_forget_sets_are_exactly_the_top_or_the_bottom_of_the_estimate(digits, seed):
    """T x n samples of the stratum, no other; ties taken in index order; `mixed` n // 2 from the top per request."""
    n, requests = len(digits.train), 3
    estimate = np.round(np.random.default_rng(seed).random(n), 2)  # rounded: many ties
    count = round(0.05 * n)
    ranked_most = sorted(range(n), key=lambda i: (-estimate[i], i))
    ranked_least = sorted(range(n), key=lambda i: (estimate[i], i))
    most = RequestStream(digits, "memorized_most", requests, 0.05, seed=seed, memorization=estimate)
    least = RequestStream(digits, "memorized_least", requests, 0.05, seed=seed, memorization=estimate)
    mixed = RequestStream(digits, "memorized_mixed", requests, 0.05, seed=seed, memorization=estimate)
    assert _forgotten(most) == set(ranked_most[: requests * count])
    assert _forgotten(least) == set(ranked_least[: requests * count])
    top, bottom = set(ranked_most[: requests * (count // 2)]), set(ranked_least[: requests * (count - count // 2)])
    assert _forgotten(mixed) == top | bottom
    for request in mixed.requests:
        assert len(request.forget) == count and len(set(request.forget.tolist()) & top) == count // 2
    assert all(len(request.forget) == count for request in (*most.requests, *least.requests))


def test_a_manifest_names_the_estimate_it_was_drawn_from_and_other_kinds_are_unchanged(digits):
    estimate = np.random.default_rng(1).random(len(digits.train))
    manifest = RequestStream(digits, "memorized_most", 2, 0.05, seed=0, memorization=estimate).manifest()
    changed = RequestStream(digits, "memorized_most", 2, 0.05, seed=0, memorization=estimate[::-1].copy()).manifest()
    assert manifest["memorization"] != changed["memorization"] and manifest["requests"] != changed["requests"]
    assert "memorization" not in RequestStream(digits, "random", 2, 0.05, seed=0).manifest()
    with pytest.raises(StreamError, match="needs memorization"):
        RequestStream(digits, "memorized_least", 2, 0.05, seed=0)
    with pytest.raises(StreamError, match="at least 2 samples per request"):
        RequestStream(digits, "memorized_mixed", 2, 0.0007, seed=0, memorization=estimate)


def test_every_sample_is_held_in_and_out_by_half_of_the_models():
    halves = held_out_halves(101, seed=3)
    assert len(halves) == 2 * HALF_PAIRS
    left_out = np.zeros(101, dtype=int)
    for first, second in zip(halves[::2], halves[1::2], strict=True):
        assert not set(first) & set(second) and len(first) + len(second) == 101  # complementary
        left_out[first] += 1
        left_out[second] += 1
    assert (left_out == HALF_PAIRS).all()


def _true_label_probability(model: torch.nn.Module, dataset) -> np.ndarray:
    """Softmax of the true label over the train split, one plain pass (eval transform)."""
    model.eval()
    with torch.no_grad():
        images = dataset.normalize(dataset.train.images)
        probabilities = torch.softmax(model(images).double(), dim=1)
    return probabilities[torch.arange(len(images)), dataset.train.labels].numpy()


def test_a_stratified_run_draws_from_the_stored_estimate_computed_once(tmp_path, monkeypatch):
    """The estimate is computed once per pretrained model (counted), stored beside it and read back by every other
    run on it; it equals mean p(y|x) over the half-models trained on a sample minus over those that left it out,
    recomputed here from those models; and the run's forget sets are the top (bottom) T x n of it."""
    computed = []
    estimate_function = runner_module.memorization_estimate
    monkeypatch.setattr(
        runner_module, "memorization_estimate", lambda *args: computed.append(1) or estimate_function(*args)
    )
    store = tmp_path / "store"
    most = run_tiny(tmp_path / "runs", store, "finetune", "memorized_most", logger="none", single_shot_every=0)
    trained_first = sorted(path.name for path in store.glob("*.pt"))
    least = run_tiny(tmp_path / "runs", store, "finetune", "memorized_least", logger="none", single_shot_every=0)
    assert len(computed) == 1

    runner = Runner.from_config(tiny_config(tmp_path / "runs", store, "finetune", "memorized_most"))
    pretrained = runner.model_spec(np.array([], dtype=np.int64), 0)
    stored = json.loads((store / "memorization" / f"{pretrained.key()}.json").read_text())
    assert stored["key"] == pretrained.key() and stored["proxy"] == PROXY
    halves = held_out_halves(len(runner.train_labels), 0)
    probabilities = np.stack(
        [_true_label_probability(runner.trained_model(left, "half", 0), runner.dataset) for left in halves]
    )
    assert runner.store.trained == 0  # the half-models were read from the store
    n = probabilities.shape[1]
    expected = np.empty(n)
    for i in range(n):
        out = [k for k, left in enumerate(halves) if i in set(left.tolist())]
        held_in = [k for k in range(len(halves)) if k not in out]
        expected[i] = probabilities[held_in, i].mean() - probabilities[out, i].mean()
    np.testing.assert_allclose(stored["scores"], expected, atol=1e-6)
    assert len(trained_first) == 1 + 2 * HALF_PAIRS + 2  # pretrained, half-models, an oracle per request

    scores = np.asarray(stored["scores"])
    count, requests = round(0.05 * n), 2
    for result, order in ((most, -scores), (least, scores)):
        manifest = json.loads((result.run_dir / "manifest.json").read_text())
        drawn = {i for request in manifest["requests"] for i in request["forget"]}
        assert drawn == set(np.argsort(order, kind="stable")[: requests * count].tolist())
    assert most.run_dir.name.startswith("finetune-memorized_most-digits")
    assert most.rows[-1].method["forget_acc"] is not None


def test_an_existing_kind_keeps_its_name_and_manifest(tmp_path, shared_store, digits):
    """The random stream's run is named as before the stratified kinds existed (the name main gave this run), and its
    manifest is the pure function of (dataset, kind, T, size, seed) it always was: nothing stored is read for it."""
    result = run_tiny(tmp_path, shared_store, "finetune", "random", logger="none")
    assert result.run_dir.name == "finetune-random-digits-smallcnn-T2-seed0-6cb91b6c"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(RequestStream(digits, "random", 2, 0.05, seed=0).manifest()))
    assert not (shared_store / "memorization").exists()


def test_an_unknown_stratum_is_refused_in_one_line_before_torch_is_imported(tmp_path):
    argv = ["run", "--method", "finetune", "--stream", "memorized_medium", "--out", str(tmp_path / "out")]
    _assert_refused_before_torch(
        argv, "unknown stream 'memorized_medium'; choose one of: classwise, interleaved, memorized_least", tmp_path
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--size", "0.0005"], "memorized_mixed needs at least 2 samples per request (one of each stratum), got 1"),
        (["--size", "0.5", "--requests", "3"], "random stream needs requests x size < 1"),
    ],
)
def test_an_impossible_stratified_stream_is_refused_in_one_line_before_data_is_loaded(
    options, message, tmp_path, no_datasets, capsys
):
    with pytest.raises(SystemExit) as exit:
        main(["run", "--method", "finetune", "--stream", "memorized_mixed", *options, "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and error.count("\n") == 1 and message in error, error
    assert not (tmp_path / "out").exists()
