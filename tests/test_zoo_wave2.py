"""Wave-2 methods (UNSIR, Boundary Shrink/Expand, Fisher, IU, CF-k, EU-k) and the arch block interface."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import tiny_config
from unlearnbench.config import ConfigError
from unlearnbench.data.base import Batch
from unlearnbench.methods.adversarial import fgsm_labels
from unlearnbench.methods.gradients import inverse_fisher_product
from unlearnbench.methods.unsir import error_maximizing_noise
from unlearnbench.models.blocks import last_blocks, parameter_blocks
from unlearnbench.ranges import parameters
from unlearnbench.registry import ARCHS, METHODS
from unlearnbench.runner import Runner
from unlearnbench.streams.base import UnlearningRequest

WAVE2 = ["unsir", "boundary_shrink", "boundary_expand", "fisher", "influence", "cf_k", "eu_k"]

#: (method, argument, value in the cited reference, where it is)
REFERENCE_DEFAULTS = [
    ("unsir", "noise_per_class", 32, "forget_full_class_strategies.py: noise_batch_size = 32"),
    ("unsir", "noise_steps", 25, "UNSIR_noise_train(noise, model, label, 25, ...)"),
    ("unsir", "noise_lr", 0.1, "unlearn.py: Adam(noise.parameters(), lr=0.1)"),
    ("unsir", "noise_l2", 0.1, "unlearn.py: 0.1 * torch.mean(torch.sum(inputs**2, [1, 2, 3]))"),
    ("unsir", "noise_samples", 3 * 80, "UNSIR_create_noisy_loader: batch[0].size(0) = 3 images x 80 copies"),
    ("unsir", "optim.lr", 1e-4, "fit_one_unlearning_cycle(1, ..., lr=0.0001), impair and repair"),
    ("unsir", "optim.epochs", 1, "fit_one_unlearning_cycle(1, ...)"),
    ("unsir", "optim.batch_size", 32, "UNSIR_create_noisy_loader(..., batch_size=noise_batch_size)"),
    ("boundary_shrink", "bound", 0.1, "boundary_sh.py: bound = 0.1  # hard coding in the paper"),
    ("boundary_shrink", "optim.lr", 1e-5, "paper: a learning rate of 1e-5 for 10 epochs"),
    ("boundary_shrink", "optim.epochs", 10, "paper: 10 epochs"),
    ("boundary_shrink", "optim.batch_size", 256, "arg_parser.py: --batch_size 256"),
    ("boundary_shrink", "optim.weight_decay", 5e-4, "arg_parser.py: --weight_decay 5e-4"),
    ("boundary_expand", "optim.lr", 1e-5, "paper: a learning rate of 1e-5 for 10 epochs"),
    ("boundary_expand", "optim.epochs", 10, "paper: 10 epochs"),
    ("fisher", "alpha", 0.2, "arg_parser.py: --alpha 0.2"),
    ("fisher", "max_std", 1e-3, "fisher.py: .clamp(max=1e-3)"),
    ("fisher", "head_boost", 10.0, "fisher.py: noise * 10 if parameter.shape[-1] == 10"),
    ("influence", "alpha", 0.2, "arg_parser.py: --alpha 0.2"),
    ("influence", "samples", 1000, "Wfisher.py: N = 1000"),
    ("cf_k", "k", 1, "scripts/unlearn.sh: --minL-rf=1"),
    ("cf_k", "optim.lr", 0.1, "learn.py: --maxlr 0.1"),
    ("cf_k", "optim.epochs", 30, "scripts/unlearn.sh: --epochs-ft=30"),
    ("cf_k", "optim.batch_size", 64, "learn.py: --batch-size 64"),
    ("cf_k", "optim.weight_decay", 5e-5, "learn.py: --weight-decay 5e-5"),
    ("cf_k", "clip", 10.0, "learn.py: --clip 10"),
    ("eu_k", "k", 1, "scripts/unlearn.sh: --minL-rf=1"),
    ("eu_k", "optim.epochs", 62, "scripts/unlearn.sh: --epochs-rf=62"),
    ("eu_k", "optim.weight_decay", 5e-5, "learn.py: --weight-decay 5e-5"),
]


@pytest.mark.parametrize(("method", "argument", "value", "source"), REFERENCE_DEFAULTS)
def test_defaults_are_the_references(method, argument, value, source):
    assert parameters(METHODS.get(method))[argument].default == value, source


class View:
    """A `StreamView` over in-memory tensors: forget = the first `n_forget` samples, retain the rest."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, n_forget: int):
        self.x, self.y = x, y
        self.sets = {"forget": np.arange(n_forget), "retain": np.arange(n_forget, len(y))}
        self.normalization = ((0.0,), (1.0,))

    def request(self) -> UnlearningRequest:
        forget, retain = self.sets["forget"], self.sets["retain"]
        return UnlearningRequest(t=1, forget=forget, forgotten=forget, retain=retain, forget_classes=(0,))

    def loader(self, which: str, *, batch_size: int = 512, augment: bool = False, indices=None) -> list[Batch]:
        chosen = self.sets[which] if indices is None else np.asarray(indices)
        chunks = np.array_split(chosen, math.ceil(len(chosen) / batch_size))
        return [Batch(self.x[c], self.y[c], torch.as_tensor(c)) for c in chunks]


def _toy(inputs: int, classes: int, samples: int, n_forget: int, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(inputs, classes))
    view = View(torch.randn(samples, 1, 1, inputs), torch.randint(0, classes, (samples,)), n_forget)
    return model, view


def _sample_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample CE gradients by one autograd call per sample (independent of `torch.func`)."""
    rows = []
    for i in range(len(y)):
        grads = torch.autograd.grad(F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), list(model.parameters()))
        rows.append(torch.cat([g.flatten() for g in grads]))
    return torch.stack(rows)


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# --- UNSIR -----------------------------------------------------------------------------------------


def _pretrained(tmp_path, store, method: str, **overrides):
    runner = Runner.from_config(tiny_config(tmp_path, store, method, requests=1, **overrides))
    return runner, runner.trained_model(np.array([], dtype=np.int64), "pretraining")


def test_unsir_noise_raises_the_forget_loss(tmp_path, shared_store):
    _, model = _pretrained(tmp_path, shared_store, "unsir")
    labels = torch.full((32,), 3)
    torch.manual_seed(1)
    start = torch.randn(32, 1, 8, 8)
    torch.manual_seed(1)  # the noise starts from the same N(0, 1) draw
    noise = error_maximizing_noise(model, labels, (1, 8, 8), steps=25, lr=0.1, l2=0.1)
    with torch.no_grad():
        before, after = F.cross_entropy(model(start), labels), F.cross_entropy(model(noise), labels)
    assert after > before + 1.0, (before, after)


def test_unsir_refuses_a_random_stream_before_loading_data(tmp_path, monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("data was loaded")

    monkeypatch.setattr("unlearnbench.data.cache.DatasetCache.load", no_data)
    with pytest.raises(ConfigError, match="serves only classwise") as error:
        Runner.from_config(tiny_config(tmp_path, tmp_path / "store", "unsir", stream="random"))
    assert "\n" not in str(error.value)


# --- Boundary Shrink / Expand ----------------------------------------------------------------------


def test_boundary_shrink_labels_differ_from_the_true_ones(tmp_path, shared_store):
    runner, model = _pretrained(tmp_path, shared_store, "boundary_shrink")
    request = runner.stream.select(1)
    batch = next(iter(runner.stream.view().loader("forget", batch_size=512)))
    normalization = runner.stream.view().normalization
    assert (model(batch.x).argmax(1) == batch.y).float().mean() > 0.9  # the pretrained model knows them
    labels = fgsm_labels(model, batch.x, batch.y, 0.1, normalization)
    assert (labels != batch.y).float().mean() > 0.5, request.forget_classes
    # bound 0: the image is only rounded to 1/255, which the digits pixels already are
    torch.testing.assert_close(fgsm_labels(model, batch.x, batch.y, 0.0, normalization), model(batch.x).argmax(1))


def test_boundary_expand_trains_an_extra_unit_and_leaves_the_width_unchanged(tmp_path, shared_store):
    runner, model = _pretrained(tmp_path, shared_store, "boundary_expand", method_args={"optim": {"lr": 0.01}})
    method = runner.method.attach(model, runner.dataset.num_classes)
    before = {key: value.clone() for key, value in method.state_dict().items()}
    widths, loss = [], method.loss

    def recording_loss(batch):
        widths.append(method(batch["forget"].x).shape[1])
        return loss(batch)

    method.loss = recording_loss
    runner.serve(runner.stream.select(1))
    assert widths and set(widths) == {11}
    assert model.get_classifier().out_features == 10 and model(torch.zeros(1, 1, 8, 8)).shape == (1, 10)
    after = method.state_dict()
    assert {k: v.shape for k, v in after.items()} == {k: v.shape for k, v in before.items()}
    assert not torch.equal(after["model.head.weight"].cpu(), before["model.head.weight"].cpu())


# --- Fisher ------------------------------------------------------------------------------------------


def test_fisher_noise_has_the_stated_variance():
    model, view = _toy(inputs=400, classes=3, samples=60, n_forget=10)
    retain = view.loader("retain")[0]
    before = [p.detach().clone() for p in model.parameters()]
    log_p = [
        torch.autograd.grad(-F.cross_entropy(model(retain.x[i : i + 1]), retain.y[i : i + 1]), list(model.parameters()))
        for i in range(len(retain.y))
    ]
    fisher = [torch.stack([(g[j] + 1e-8) ** 2 for g in log_p]).mean(0) for j in range(2)]
    max_std = 1e-3
    alpha = max_std**2 * fisher[0].median().item()  # about half the weights clamped, half not
    method = METHODS.get("fisher")(alpha=alpha, max_std=max_std).attach(model, num_classes=3)
    method.prepare(view.request(), view)
    method.unlearn(lambda epochs: None)
    for j, (p, boost) in enumerate(zip(model.parameters(), (1.0, 10.0), strict=True)):  # weight (3, 400); bias (3,)
        std = (alpha / fisher[j]).sqrt().clamp(max=max_std) * boost
        z = (p.detach() - before[j]) / std
        if j == 0:
            clamped = ((alpha / fisher[j]).sqrt() > max_std).float().mean()
            assert 0.2 < clamped < 0.8
            assert abs(z.mean()) < 0.1 and 0.85 < z.var() < 1.15, (z.mean(), z.var())
        else:
            assert z.abs().max() < 5 and z.abs().max() > 0


# --- IU -------------------------------------------------------------------------------------------


def test_inverse_fisher_product_is_the_sherman_morrison_recursion():
    torch.manual_seed(0)
    grads, v, n = torch.randn(7, 12, dtype=torch.float64), torch.randn(12, dtype=torch.float64), 5
    inverse = torch.eye(12, dtype=torch.float64)
    for g in grads:  # H_m = H_{m-1} + g gᵀ/n, one rank-1 update at a time
        h = inverse @ g
        inverse = inverse - torch.outer(h, h) / (n + g @ h)
    torch.testing.assert_close(inverse_fisher_product(grads, v, n), inverse @ v)


def test_influence_step_is_alpha_times_an_explicit_inverse_hessian_product():
    model, view = _toy(inputs=4, classes=3, samples=40, n_forget=8)  # 15 parameters: H is 15 x 15
    forget, retain = view.loader("forget")[0], view.loader("retain")[0]
    before = _flat(model).clone()
    g_forget, g_retain = _sample_gradients(model, forget.x, forget.y), _sample_gradients(model, retain.x, retain.y)
    n_f, n_r, samples, alpha = len(forget.y), len(retain.y), 20, 0.5
    v = g_forget.sum(0) / (n_f + n_r) - g_retain.sum(0) * n_f / ((n_f + n_r) * n_r)
    first = g_retain[:samples].double()
    hessian = torch.eye(15, dtype=torch.float64) + first.T @ first / samples
    expected = alpha * torch.linalg.solve(hessian, v.double())
    method = METHODS.get("influence")(alpha=alpha, samples=samples).attach(model, num_classes=3)
    method.prepare(view.request(), view)
    method.unlearn(lambda epochs: None)
    torch.testing.assert_close((_flat(model) - before).double(), expected, rtol=1e-4, atol=1e-7)
    assert (g_forget.sum(0) @ (_flat(model) - before)) > 0  # the step ascends the forget loss


# --- blocks, CF-k, EU-k -------------------------------------------------------------------------------

ALL_ARCHS = [*ARCHS.names(), "timm:resnet10t"]


@pytest.fixture(scope="module")
def built():
    return {}


def _arch(name: str, built: dict) -> nn.Module:
    if name not in built:
        torch.manual_seed(0)
        built[name] = ARCHS.get(name)(num_classes=5, in_channels=3, input_size=32)
    return built[name]


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_blocks_partition_the_parameters_from_stem_to_classifier(arch, built):
    model = _arch(arch, built)
    blocks = parameter_blocks(model)
    names = [name for name, _ in model.named_parameters()]
    assert len(blocks) >= 3  # the mlp's two hidden layers and its classifier; every CNN has more
    assert sorted(name for block in blocks for name in block) == sorted(names)  # each parameter exactly once
    assert names[0] in blocks[0]  # the stem first
    classifier = {
        f"{path}.{n}"
        for path, m in model.named_modules()
        if m is model.get_classifier()
        for n, _ in m.named_parameters()
    }
    assert set(blocks[-1]) == classifier  # the classifier alone last
    order = {name: i for i, name in enumerate(names)}
    assert [min(order[n] for n in block) for block in blocks] == sorted(min(order[n] for n in b) for b in blocks)
    with pytest.raises(ValueError, match="k must be between 1"):
        last_blocks(model, len(blocks) + 1)


@pytest.mark.parametrize("arch", ALL_ARCHS)
@pytest.mark.parametrize("method_name", ["cf_k", "eu_k"])
def test_cf_k_and_eu_k_touch_exactly_the_last_k_blocks(method_name, arch, built):
    model = _arch(arch, built)
    method = METHODS.get(method_name)(k=2).attach(model, num_classes=5)
    chosen = last_blocks(model, 2)
    with torch.no_grad():  # as if trained: no parameter sits at a value its reset would give again
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable_in_fit = []
    method.unlearn(lambda epochs: trainable_in_fit.extend(n for n, p in model.named_parameters() if p.requires_grad))
    assert set(trainable_in_fit) == chosen  # only the last k blocks train
    assert all(p.requires_grad for p in model.parameters())  # and everything is trainable again after
    for name, p in model.named_parameters():
        if name not in chosen or method_name == "cf_k":
            assert torch.equal(p, before[name]), name
    if method_name == "eu_k":
        owners = {
            f"{path}.{n}".lstrip(".")
            for path, m in model.named_modules()
            if hasattr(m, "reset_parameters")
            for n, _ in m.named_parameters(recurse=False)
        }
        reset = [name for name in chosen if name in owners]
        assert reset and all(not torch.equal(dict(model.named_parameters())[n], before[n]) for n in reset)
    model.load_state_dict({k: v for k, v in model.state_dict().items()})  # nothing renamed or reshaped


def test_cf_k_training_leaves_the_other_blocks_bit_identical(tmp_path, shared_store):
    runner, model = _pretrained(tmp_path, shared_store, "cf_k", method_args={"optim": {"epochs": 1}, "k": 2})
    method = runner.method.attach(model, runner.dataset.num_classes)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    runner.serve(runner.stream.select(1))
    chosen = last_blocks(model, 2)
    for name, p in model.named_parameters():
        assert torch.equal(p.cpu(), before[name].cpu()) == (name not in chosen), name
    assert method.state_dict().keys() == {f"model.{k}" for k in model.state_dict()}


# --- resume: scratch state stays out of the checkpoint -----------------------------------------------------


@pytest.mark.parametrize("method_name", WAVE2)
def test_state_after_a_request_reloads_into_a_fresh_method(method_name, tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, method_name, requests=1)
    runner = Runner.from_config(config)
    pretrained = runner.trained_model(np.array([], dtype=np.int64), "pretraining")
    runner.method.attach(pretrained, runner.dataset.num_classes)
    runner.serve(runner.stream.select(1))
    state = runner.method.state_dict()
    fresh = Runner.from_config(config)
    fresh.method.attach(fresh.trained_model(np.array([], dtype=np.int64), "pretraining"), fresh.dataset.num_classes)
    fresh.method.load_state_dict(state)  # strict: the runner's resume path
    for key, value in fresh.method.state_dict().items():
        assert torch.equal(value.cpu(), state[key].cpu()), key
