"""One test over every registered method (timm-style): it runs, changes the model, and can forget."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from tests.conftest import run_tiny, tiny_config
from unlearnbench.registry import METHODS
from unlearnbench.runner import Runner, trainable_vector

#: Per-method arguments under which forgetting must be visible after one request.
STRONG = {
    "finetune": {"epochs": 8, "lr": 0.05},
    "ga": {"epochs": 5, "lr": 0.01},
    "neggrad_plus": {"epochs": 8, "lr": 0.05, "alpha": 0.9},
    "rl": {"epochs": 5, "lr": 0.05},
    "salun": {"epochs": 5, "lr": 0.05},
}


@pytest.mark.parametrize("method", METHODS.names())
@pytest.mark.parametrize("stream", ["classwise", "random"])
def test_method_runs_and_metrics_are_in_range(method, stream, tmp_path, shared_store):
    result = run_tiny(tmp_path, shared_store, method, stream)
    assert len(result.rows) == 2
    for row in result.rows:
        scores = row["method"]
        for key in ("forget_acc", "retain_acc", "test_acc", "mia_member_rate"):
            assert 0.0 <= scores[key] <= 100.0, (key, scores[key])
        assert math.isfinite(scores["gap"]) and scores["gap"] >= 0
        assert scores["rte_s"] > 0
        assert len(scores["history"]) == 2
        if stream == "classwise":
            assert 0.0 <= scores["forget_test_acc"] <= 100.0


@pytest.mark.parametrize("method", METHODS.names())
def test_method_changes_parameters(method, tmp_path, shared_store):
    runner = Runner(tiny_config(tmp_path, shared_store, method))
    model = runner.trained_model(torch.zeros(0, dtype=torch.long).numpy(), "pretraining")
    runner.method.attach(model, runner.dataset.num_classes)
    before = trainable_vector(model)
    runner.serve(runner.stream.select(1))
    assert not torch.equal(before, trainable_vector(runner.method.model))


@pytest.mark.parametrize("method", METHODS.names())
def test_method_forgets_at_a_strong_setting(method, tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, method, requests=1, method_args=STRONG.get(method, {}))
    runner = Runner(config)
    pretrained = runner.trained_model(torch.zeros(0, dtype=torch.long).numpy(), "pretraining")
    request = runner.stream.select(1)
    before = runner.score(runner.logits(pretrained), request)["forget_acc"]
    after = runner.run().rows[0]["method"]["forget_acc"]
    assert after < before - 20, (before, after)


@pytest.mark.parametrize("method", METHODS.names())
def test_method_is_documented_and_typed(method):
    cls = METHODS.get(method)
    assert METHODS.describe(method), "first docstring line is the `unlearnbench list` description"
    for name, parameter in inspect.signature(cls).parameters.items():
        assert parameter.annotation is not inspect.Parameter.empty, f"{method}.{name} has no type hint"
        assert parameter.default is not inspect.Parameter.empty, f"{method}.{name} has no default"
