"""Properties of wave-2 methods (SCAR, SFR-on, JiT, LFSSD, RUM) and the continual-learning guards (EWC, LwF, MAS)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unlearnbench.data.base import Batch
from unlearnbench.guards import pull_toward, trainable
from unlearnbench.guards.ewc import EWC
from unlearnbench.guards.lwf import LwF, lwf_distillation
from unlearnbench.guards.mas import MAS, mas_importance
from unlearnbench.methods.base import SGDSettings
from unlearnbench.methods.finetune import FineTune
from unlearnbench.methods.jit import JiT
from unlearnbench.methods.lfssd import output_norm_importances
from unlearnbench.methods.losses import adaptive_ce, lipschitz_loss
from unlearnbench.methods.mahalanobis import mahalanobis, shrunk_precision, tukey
from unlearnbench.methods.rum import RUM
from unlearnbench.methods.sfron import saliency_mask
from unlearnbench.methods.ssd import dampen
from unlearnbench.ranges import parameters
from unlearnbench.registry import GUARDS, METHODS
from unlearnbench.streams.base import RequestStream
from unlearnbench.training import build_model


@pytest.fixture(scope="module")
def stream(digits):
    stream = RequestStream(digits, "classwise", 2, seed=0)
    stream.select(1)
    return stream


def _method(stream) -> FineTune:
    torch.manual_seed(0)
    return FineTune(optim=SGDSettings(batch_size=128)).attach(
        build_model("smallcnn", stream.dataset), stream.dataset.num_classes
    )


def test_ewc_penalty_is_zero_at_the_previous_weights_and_its_gradient_is_pulled(stream):
    method, guard = _method(stream), EWC(ewc_lambda=0.4)
    guard.before_request(method, stream.view())
    assert any(c.abs().sum() > 0 for c in guard.coefficient)
    assert EWC.penalty(method.model, guard.anchor, guard.coefficient) == 0
    pull_toward(trainable(method.model), guard.anchor, guard.coefficient)
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in trainable(method.model))
    method.model.zero_grad(set_to_none=True)
    with torch.no_grad():
        for p in trainable(method.model):
            p.add_(0.01 * torch.randn_like(p))
    penalty = EWC.penalty(method.model, guard.anchor, guard.coefficient)
    assert penalty > 0
    expected = torch.autograd.grad(penalty, trainable(method.model))
    pull_toward(trainable(method.model), guard.anchor, guard.coefficient)
    for p, g in zip(trainable(method.model), expected, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_lwf_distillation_is_zero_when_the_model_equals_the_previous_one(stream):
    method, guard = _method(stream), LwF()
    guard.before_request(method, stream.view())
    x = stream.dataset.normalize(stream.dataset.train.images[:32])
    method.model.eval()
    assert lwf_distillation(method.model(x), guard.teacher(x), 2.0).abs() < 1e-6
    guard._retain = Batch(x, stream.dataset.train.labels[:32], torch.arange(32))
    guard.on_before_optimizer_step(None, method, None)
    assert all(p.grad.abs().max() < 1e-6 for p in trainable(method.model))
    assert lwf_distillation(torch.randn(8, 10), torch.randn(8, 10), 2.0) > 0


def test_mas_importance_matches_the_closed_form_of_a_linear_model():
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    batches = [Batch(torch.randn(n, 6), torch.zeros(n, dtype=torch.long), torch.arange(n)) for n in (5, 3)]
    expected_w, expected_b = torch.zeros(4, 6), torch.zeros(4)
    for batch in batches:  # ∂ mean_i ‖Wx_i + b‖ = mean_i u_i x_iᵀ, u_i = f_i / ‖f_i‖
        with torch.no_grad():
            u = F.normalize(model(batch.x), dim=1)
        expected_w += (u.T @ batch.x / len(batch.x)).abs() * len(batch.x)
        expected_b += u.mean(0).abs() * len(batch.x)
    weight, bias = mas_importance(model, batches)
    torch.testing.assert_close(weight, expected_w / 8)
    torch.testing.assert_close(bias, expected_b / 8)


def test_mas_blends_importance_across_requests_and_saves_it(stream):
    method, guard = _method(stream), MAS(alpha=0.5)
    guard.before_request(method, stream.view())
    first = [i.clone() for i in guard.importance]
    guard.after_request(method, stream.view())
    restored = MAS(alpha=0.5)
    restored.load_state_dict(guard.state_dict())
    restored.before_request(method, stream.view())  # same model and data: Ω = 0.5·Ω_1 + 0.5·(2·Ω_1)
    for blended, one in zip(restored.importance, first, strict=True):
        torch.testing.assert_close(blended, 1.5 * one)


def test_jit_loss_is_the_mean_over_copies_of_the_summed_output_to_input_change_ratio():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5))
    x = torch.randn(8, 1, 4, 4)
    torch.manual_seed(3)
    loss = lipschitz_loss(model, x, 0.1, 4)
    torch.manual_seed(3)
    expected = 0.0
    for _ in range(4):
        noisy = (x + 0.1 * torch.randn_like(x)).clamp(x.min(), x.max())
        ratio = (model(x) - model(noisy)).norm(dim=1) / (x - noisy).flatten(1).norm(dim=1)
        expected = expected + ratio.sum() / 4
    torch.testing.assert_close(loss, expected)
    (grad,) = torch.autograd.grad(loss, model[1].bias)  # f(x') is held constant: in f(x) − f(x') the bias would cancel
    assert grad.abs().sum() > 0


def test_jit_steps_at_its_default_learning_rate_make_the_model_smoother_around_the_forget_samples(stream):
    """The property JiT optimizes: after its steps, the output changes less per unit of input noise on F."""
    torch.manual_seed(0)
    method = JiT(n_samples=5).attach(build_model("smallcnn", stream.dataset), stream.dataset.num_classes)
    batch = {"forget": next(iter(stream.view().loader("forget", batch_size=64)))}
    x = batch["forget"].x
    method.on_train_start()  # eval mode, as in a run
    optimizer = method.configure_optimizers()

    def smoothness() -> float:
        torch.manual_seed(1)  # the same noise before and after
        with torch.no_grad():
            return float(lipschitz_loss(method.model, x, method.hparams.sigma, 25))

    before = smoothness()
    for _ in range(5):
        optimizer.zero_grad()
        method.loss(batch).backward()
        optimizer.step()
    assert smoothness() < 0.95 * before  # measured: 0.382 -> 0.333 on digits


def test_lfssd_dampens_exactly_the_weights_the_forget_set_drives():
    torch.manual_seed(0)
    model = nn.Linear(20, 10, bias=False)
    before = model.weight.detach().clone()
    forget_x, retain_x = torch.zeros(32, 20), torch.zeros(32, 20)
    forget_x[:, :5], retain_x[:, 5:] = torch.randn(32, 5), torch.randn(32, 15)
    forget = output_norm_importances(model, [Batch(forget_x, torch.zeros(32), torch.arange(32))])
    data = output_norm_importances(model, [Batch(x, torch.zeros(32), torch.arange(32)) for x in (retain_x, forget_x)])
    dampen(model, data, forget, alpha=1.5, lam=1.0)
    assert (model.weight[:, :5].abs() < before[:, :5].abs()).all()
    assert torch.equal(model.weight[:, 5:], before[:, 5:])


def test_sfron_mask_selects_weights_that_matter_more_to_forget():
    forget = {"w": torch.tensor([2.0, 1.0, 0.5, 0.0])}
    retain = {"w": torch.tensor([1.0, 1.0, 1.0, 0.0])}
    assert saliency_mask(forget, retain, gamma=1.0)["w"].tolist() == [True, True, False, True]
    assert saliency_mask(forget, retain, gamma=1.5)["w"].tolist() == [True, False, False, False]


def test_sfron_adaptive_weights_are_inverse_powers_of_the_loss():
    logits, labels = torch.tensor([[3.0, 0.0], [0.0, 0.0], [-2.0, 1.0]]), torch.tensor([0, 0, 0])
    ce = F.cross_entropy(logits, labels, reduction="none")
    weight = ce.pow(-0.5) / ce.pow(-0.5).sum()
    torch.testing.assert_close(adaptive_ce(logits, labels, 0.5), (weight * ce).sum())


def test_scar_pull_moves_a_forget_embedding_to_the_target_class():
    torch.manual_seed(0)
    clusters = [torch.rand(50, 8) + shift for shift in (torch.eye(8)[0] * 3, torch.eye(8)[1] * 3)]
    points = [tukey(c, 0.5) for c in clusters]
    means = torch.stack([p.mean(0) for p in points])
    precisions = torch.stack([shrunk_precision(p, 3.0, 3.0) for p in points])
    z = nn.Parameter(clusters[0][:4].clone())  # class 0 embeddings, pulled toward class 1
    assert (mahalanobis(z, means, precisions, 0.5).argmin(1) == 0).all()
    optimizer = torch.optim.Adam([z], lr=0.05)
    for _ in range(200):
        optimizer.zero_grad()
        mahalanobis(z, means, precisions, 0.5)[:, 1].mean().backward()
        optimizer.step()
    assert (mahalanobis(z, means, precisions, 0.5).argmin(1) == 1).all()


def test_scar_precision_where_the_svd_fails_is_the_symmetric_pseudo_inverse(monkeypatch):
    """MKL's SVD did not converge on one thread for a well-conditioned correlation matrix (SCAR, random stream, seed 1,
    request 23 of the published grid) that it decomposes on two: the precision is then the eigendecomposition's
    pseudo-inverse of the same symmetric matrix, and only then."""
    samples = torch.randn(60, 8) @ torch.randn(8, 8)
    by_svd = shrunk_precision(samples, 3.0, 3.0)
    pinv = torch.linalg.pinv
    calls = []

    def svd_fails(matrix, hermitian=False):
        calls.append(hermitian)
        if not hermitian:
            raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge (error code: 1).")
        return pinv(matrix, hermitian=True)

    monkeypatch.setattr(torch.linalg, "pinv", svd_fails)
    by_eigh = shrunk_precision(samples, 3.0, 3.0)
    assert calls == [False, True]
    torch.testing.assert_close(by_eigh, by_svd, rtol=1e-4, atol=1e-5)
    correlation = torch.linalg.inv(by_svd)  # well conditioned: the precision's inverse is the correlation matrix
    torch.testing.assert_close(correlation.diagonal(), torch.ones(8), rtol=1e-4, atol=1e-4)


def test_rum_visits_subsets_in_order_from_least_to_most_memorized(stream):
    rum = RUM(stages=("finetune", "rl", "salun")).attach(_method(stream).model, stream.dataset.num_classes)
    request = stream.current.public()
    rum.prepare(request, stream.view())
    visits, fits = [], []
    for stage in rum.stages:
        stage.prepare = lambda req, data, stage=stage: visits.append((type(stage).__name__, req.forget, data))
    rum.unlearn(fits.append)
    assert [name for name, *_ in visits] == ["FineTune", "RandomLabel", "SalUn"]
    assert fits == [10, 10, 10]
    subsets = [forget for _, forget, _ in visits]
    assert sorted(torch.cat([torch.as_tensor(s) for s in subsets]).tolist()) == sorted(request.forget.tolist())
    x, y = stream.dataset.normalize(stream.dataset.train.images), stream.dataset.train.labels
    rum.model.eval()
    with torch.no_grad():
        confidence = rum.model(x).softmax(1)[torch.arange(len(y)), y]
    means = [float(confidence[torch.as_tensor(s)].mean()) for s in subsets]
    assert means[0] > means[1] > means[2]  # memorization 1 − confidence rises stage by stage
    for _, subset, data in visits:  # each stage's view serves its own subset as the forget set
        assert sorted(torch.cat([b.idx for b in data.loader("forget")]).tolist()) == sorted(subset.tolist())


def test_rum_refuses_stages_it_cannot_run():
    with pytest.raises(ValueError, match="retain or mixed batches"):
        RUM(stages=("none", "ga"))
    with pytest.raises(ValueError, match="unknown method"):
        RUM(stages=("nope",))


REFERENCE_DEFAULTS = [
    # SCAR: jackbntz/SCAR `Mahalanobis` and its port (T 2, λ2 5, γ 3, lr 5e-4, wd 0), paper δ 0.5, λ1 1
    ("scar", {"lambda_1": 1.0, "lambda_2": 5.0, "delta": 0.5, "gamma1": 3.0, "gamma2": 3.0, "temperature": 2.0}),
    ("scar", {"optim.lr": 5e-4, "optim.weight_decay": 0.0}),
    # SFR-on: K1nght/Unified-Unlearning-w-Remain-Geometry Classification/unlearn/sfron.py, CIFAR-10 setting
    ("sfron", {"forget_alpha": 25.0, "forget_freq": 5, "lambd": 0.5, "gamma": 1.0, "max_norm": 7.0, "ema_beta": 1.0}),
    ("sfron", {"optim.lr": 0.01, "optim.momentum": 0.9, "optim.weight_decay": 5e-4, "optim.batch_size": 128}),
    # JiT: jwf40/Information-Theoretic-Unlearning src/lipschitz.py + forget_random_main.py (VGG16 σ)
    (
        "jit",
        {
            "sigma": 0.01,
            "n_samples": 25,
            "optim.batch_size": 128,
            "optim.momentum": 0.0,
            "optim.weight_decay": 0.0,
            "optim.epochs": 1,
        },
    ),
    # LFSSD: SSD's α and λ, batches of 64
    ("lfssd", {"alpha": 10.0, "lam": 1.0, "batch_size": 64}),
    # RUM: nothing -> finetune -> salun, low to high memorization
    ("rum", {"stages": ("none", "finetune", "salun")}),
]


@pytest.mark.parametrize(("name", "values"), REFERENCE_DEFAULTS)
def test_method_defaults_are_the_cited_reference_values(name, values):
    named = parameters(METHODS.get(name))  # a group's fields by path (optim.lr)
    assert {key: named[key].default for key in values} == values


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("ewc", {"ewc_lambda": 0.4}),  # Avalanche example scripts (EWCPlugin has no default)
        ("lwf", {"alpha": 1.0, "temperature": 2.0}),  # Avalanche LearningWithoutForgetting
        ("mas", {"lambda_reg": 1.0, "alpha": 0.5}),  # Avalanche MASPlugin
    ],
)
def test_guard_defaults_are_the_cited_reference_values(name, values):
    parameters = inspect.signature(GUARDS.get(name)).parameters
    assert {key: parameters[key].default for key in values} == values
