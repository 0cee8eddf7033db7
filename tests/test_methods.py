"""One test over every registered method (timm-style): it runs, changes the model, and can forget."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from tests.conftest import run_tiny, tiny_config
from unlearnbench.config import ConfigError
from unlearnbench.registry import METHODS
from unlearnbench.runner import Runner, trainable_vector

#: Per-method arguments under which forgetting must be visible after one request.
STRONG = {
    "finetune": {"optim": {"epochs": 8, "lr": 0.05}},
    "ga": {"optim": {"epochs": 5, "lr": 0.01}},
    "neggrad_plus": {"optim": {"epochs": 8, "lr": 0.05}, "alpha": 0.9},
    "rl": {"optim": {"epochs": 5, "lr": 0.05}},
    "salun": {"optim": {"epochs": 5, "lr": 0.05}},
    "munba": {"optim": {"epochs": 5, "lr": 0.05}},
    "l1_sparse": {"optim": {"epochs": 8, "lr": 0.05}},
    "scrub": {"optim": {"epochs": 5, "lr": 0.05}, "msteps": 5},
    "bad_teacher": {"optim": {"epochs": 3, "lr": 1e-3}},
    "ssd": {"alpha": 2.0, "lam": 1.0},
    "lfssd": {"alpha": 2.0, "lam": 1.0},
    "l2ul": {"optim": {"epochs": 10, "lr": 0.01}},
    "coun": {"optim": {"epochs": 8, "lr": 0.05}},
    "coun_rl": {"optim": {"epochs": 5, "lr": 0.05}},
    "delete": {"optim": {"epochs": 10, "lr": 0.01}},
    "unsir": {"optim": {"epochs": 3, "lr": 1e-3}, "noise_samples": 1000},
    "boundary_shrink": {"optim": {"epochs": 10, "lr": 0.05, "batch_size": 32}},
    "boundary_expand": {"optim": {"epochs": 10, "lr": 0.01}},
    "fisher": {"alpha": 1.0, "max_std": 1.0},
    "influence": {"alpha": 10.0},
    "cf_k": {"optim": {"epochs": 5}},
    "eu_k": {"optim": {"epochs": 5}},
}


@pytest.mark.parametrize("method", METHODS.names())
@pytest.mark.parametrize("stream", ["classwise", "random"])
def test_method_runs_and_metrics_are_in_range(method, stream, tmp_path, shared_store):
    served = METHODS.get(method).streams
    if served is not None and stream not in served:  # refused as bad input, before any data is loaded
        with pytest.raises(ConfigError, match=f"serves only {', '.join(served)} streams"):
            run_tiny(tmp_path, shared_store, method, stream)
        return
    result = run_tiny(tmp_path, shared_store, method, stream)
    assert len(result.rows) == 2
    for row in result.rows:
        scores = row.method
        for key in ("forget_acc", "retain_acc", "test_acc", "mia_member_rate"):
            assert 0.0 <= scores[key] <= 100.0, (key, scores[key])
        assert math.isfinite(scores["gap"]) and scores["gap"] >= 0
        assert scores["rte_s"] > 0
        assert len(scores["history"]) == 2
        if stream == "classwise":
            assert 0.0 <= scores["forget_test_acc"] <= 100.0


@pytest.mark.parametrize("method", METHODS.names())
def test_method_changes_parameters_and_forgets_at_a_strong_setting(method, tmp_path, shared_store):
    runner = Runner.from_config(
        tiny_config(tmp_path, shared_store, method, requests=1, method_args=STRONG.get(method, {}))
    )
    pretrained = runner.trained_model(torch.zeros(0, dtype=torch.long).numpy(), "pretraining")
    request = runner.stream.select(1)
    forget_before = runner.score(runner.logits(pretrained), request)["forget_acc"]
    runner.method.attach(pretrained, runner.dataset.num_classes)
    before = trainable_vector(runner.method.model)
    runner.serve(request)
    after = trainable_vector(runner.method.model)
    assert before.shape == after.shape and not torch.equal(before, after)
    forget_after = runner.score(runner.logits(runner.method), request)["forget_acc"]
    assert forget_after < forget_before - 20, (forget_before, forget_after)


@pytest.mark.parametrize("method", METHODS.names())
def test_method_is_documented_and_typed(method):
    cls = METHODS.get(method)
    assert METHODS.describe(method), "first docstring line is the `unlearnbench list` description"
    for name, parameter in inspect.signature(cls).parameters.items():
        assert parameter.annotation is not inspect.Parameter.empty, f"{method}.{name} has no type hint"
        assert parameter.default is not inspect.Parameter.empty, f"{method}.{name} has no default"
