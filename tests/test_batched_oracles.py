"""K models of one arch and recipe trained together in one batched fit: each is its lone fit, up to float rounding."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from tests.conftest import FAST_RECIPE, tiny_config
from unlearnbench import training
from unlearnbench.registry import ARCHS
from unlearnbench.runner import Runner
from unlearnbench.store import ModelSpec, sha256_bytes
from unlearnbench.training import (
    BATCHED_FIT_MAX_PARAMETERS,
    EnsembleClassifier,
    Recipe,
    build_model,
    train_from_scratch,
    train_together,
    trains_together,
)


def _trainer(epochs: int):
    import lightning as L

    return L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )


def test_models_trained_together_equal_their_lone_fits_and_do_not_depend_on_their_group(digits):
    """Same initialization and batch order as the lone fit (own seed, own loader): the same model to float
    rounding after every step of a 4-epoch recipe; a model's weights are the same bits in any group."""
    recipe, keep = Recipe(**FAST_RECIPE), np.arange(0, len(digits.train), 2)
    together = train_together(digits, "mlp", recipe, keep, [11, 12], _trainer)
    for seed, state in zip([11, 12], together, strict=True):
        lone = train_from_scratch(digits, "mlp", recipe, keep, seed, _trainer).state_dict()
        assert state.keys() == lone.keys()
        for name, tensor in lone.items():
            torch.testing.assert_close(state[name], tensor, rtol=1e-4, atol=1e-5)
        assert max((state[name] - tensor).abs().max() for name, tensor in lone.items()) > 0  # really batched
    larger = train_together(digits, "mlp", recipe, keep, [11, 12, 13], _trainer)
    for first, second in zip(together, larger[:2], strict=True):
        assert all(torch.equal(first[name], second[name]) for name in first)


def test_each_model_of_a_group_sees_its_own_batches(digits):
    recipe = Recipe(**FAST_RECIPE)
    models = [build_model("mlp", digits) for _ in range(2)]
    ensemble = EnsembleClassifier(models, recipe)
    x = torch.stack([digits.normalize(digits.train.images[:5]), digits.normalize(digits.train.images[5:10])])
    y = torch.stack([digits.train.labels[:5], digits.train.labels[5:10]])
    expected = sum(torch.nn.functional.cross_entropy(model(x[k]), y[k]) for k, model in enumerate(models))
    loss = ensemble.training_step(type("Batch", (), {"x": x, "y": y})(), 0)
    torch.testing.assert_close(loss, expected)


@pytest.fixture
def two_threads(monkeypatch):
    """The batched fit's thread rule met on the tests' one thread (`training.BATCHED_FIT_MIN_THREADS`)."""
    monkeypatch.setattr(training, "BATCHED_FIT_MIN_THREADS", 1)


@pytest.mark.parametrize("arch", ARCHS.names())
def test_the_batched_fit_rule_over_every_arch(digits, arch, monkeypatch):
    """Trained together only where the fit pays and a vmapped forward can run it: enough threads, no buffers (batch
    norm's running statistics), at most `BATCHED_FIT_MAX_PARAMETERS`; then the stacked forward is each model's own."""
    model = build_model(arch, digits)
    parameters = sum(p.numel() for p in model.parameters())
    expected = not list(model.buffers()) and parameters <= BATCHED_FIT_MAX_PARAMETERS
    monkeypatch.setattr(training, "BATCHED_FIT_MIN_THREADS", torch.get_num_threads() + 1)
    assert not trains_together(arch, digits)  # on fewer threads no arch is
    monkeypatch.setattr(training, "BATCHED_FIT_MIN_THREADS", torch.get_num_threads())
    assert trains_together(arch, digits) == expected
    if expected:
        models = [build_model(arch, digits).eval() for _ in range(2)]
        ensemble = EnsembleClassifier(models, Recipe())
        x = digits.normalize(digits.train.images[:4])
        parameters = dict(zip(ensemble.names, ensemble.stacked, strict=True))
        logits = torch.func.vmap(lambda p, x: torch.func.functional_call(ensemble.template[0], p, (x,)))(
            parameters, torch.stack([x, x])
        )
        for k, model in enumerate(models):
            torch.testing.assert_close(logits[k], model(x))


def _record_batched_fits(monkeypatch) -> list[list[int]]:
    """The train seeds of each batched fit the runner makes from now on, one list per fit."""
    groups, original = [], Runner.train_models_together

    def recording(self, specs, keep, label):
        groups.append([spec.seed for spec in specs])
        return original(self, specs, keep, label)

    monkeypatch.setattr(Runner, "train_models_together", recording)
    return groups


def test_the_references_of_k_oracles_are_trained_in_one_fit_and_the_row_oracle_alone(
    tmp_path, monkeypatch, two_threads
):
    """K = 4: the row's oracle is the lone one a K = 1 run shares (the same row scores), the other 3 are trained by one
    batched fit and stored as batched; a second run trains nothing."""
    groups = _record_batched_fits(monkeypatch)
    store = tmp_path / "store"
    common = {"requests": 1, "single_shot_every": 0, "arch": "mlp", "method_args": {"optim": {"epochs": 1}}}
    runner = Runner.from_config(tiny_config(tmp_path / "k4", store, "finetune", oracle_seeds=4, **common))
    result = runner.run()
    assert groups == [[1, 2, 3]]
    entries = [json.loads(path.read_text()) for path in store.glob("*.json")]
    assert sorted(entry["seed"] for entry in entries) == [0, 0, 1, 2, 3]  # pretrained, row oracle, 3 references
    request = runner.stream.select(1)
    batched = [runner.model_spec(request.forgotten, seed, batched=True) for seed in (1, 2, 3)]
    assert {spec.key() for spec in batched} <= {entry["key"] for entry in entries}
    assert runner.model_spec(request.forgotten, 1).key() not in {entry["key"] for entry in entries}
    single = Runner.from_config(tiny_config(tmp_path / "k1", store, "finetune", oracle_seeds=1, **common)).run()
    assert single.rows[0].oracle == result.rows[0].oracle  # the row's oracle is the same model
    again = Runner.from_config(tiny_config(tmp_path / "again", store, "finetune", oracle_seeds=4, **common))
    again.run()
    assert again.store.trained == 0 and groups == [[1, 2, 3]]


def test_a_batched_spec_has_its_own_key_and_a_lone_one_keeps_its_old_key():
    """The field is in the key only when set: every model stored before it keeps its key."""
    spec = ModelSpec("digits", "mlp", {"epochs": 1}, 3, (1, 2), data="abc")
    assert spec.key() != ModelSpec("digits", "mlp", {"epochs": 1}, 3, (1, 2), data="abc", batched=True).key()
    payload = {"dataset": "digits", "data": "abc", "arch": "mlp", "arch_args": {}, "recipe": {"epochs": 1}, "seed": 3}
    excluded = sha256_bytes(np.asarray([1, 2], dtype=np.int64).tobytes())
    old_key = sha256_bytes(json.dumps(payload | {"excluded": excluded}, sort_keys=True).encode())[:24]
    assert spec.key() == old_key


def test_batched_references_of_other_shapes_are_retrained_together_with_one_warning_each(
    tmp_path, monkeypatch, two_threads, caplog
):
    """Batched entries with the right metadata and sha256 but tensors of another shape (an arch changed under one
    name) are checked as lone entries are: each named by one warning line, all retrained by one batched fit."""
    groups = _record_batched_fits(monkeypatch)
    store = tmp_path / "store"
    common = {"requests": 1, "single_shot_every": 0, "arch": "mlp", "method_args": {"optim": {"epochs": 1}}}
    runner = Runner.from_config(tiny_config(tmp_path / "first", store, "finetune", oracle_seeds=4, **common))
    runner.run()
    request = runner.stream.select(1)
    damaged = [store / f"{runner.model_spec(request.forgotten, seed, batched=True).key()}.pt" for seed in (1, 2, 3)]
    for weights in damaged:
        state = {name: torch.zeros(2, *tensor.shape) for name, tensor in torch.load(weights, weights_only=True).items()}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        weights.write_bytes(buffer.getvalue())
        meta = weights.with_suffix(".json")
        meta.write_text(json.dumps(json.loads(meta.read_text()) | {"sha256": sha256_bytes(buffer.getvalue())}))
    groups.clear()
    caplog.clear()
    again = Runner.from_config(tiny_config(tmp_path / "again", store, "finetune", oracle_seeds=4, **common))
    again.run()
    assert groups == [[1, 2, 3]] and again.store.trained == 3
    warned = [r.getMessage() for r in caplog.records if r.name == "unlearnbench.store" and r.levelname == "WARNING"]
    assert sorted(warned) == sorted(
        f"model store entry {weights} is unusable: its tensors are not the shapes of the model (the arch changed?); "
        "retraining it"
        for weights in damaged
    )
    model = build_model("mlp", again.dataset)
    for weights in damaged:
        model.load_state_dict(torch.load(weights, weights_only=True))  # the model's shapes again
