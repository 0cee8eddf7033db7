"""Properties of the method zoo that the registry-wide tests cannot see."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import tiny_config
from unlearnbench.data.base import Batch
from unlearnbench.methods.adversarial import targeted_l2_pgd
from unlearnbench.methods.delete import masked_target
from unlearnbench.methods.gradients import importances
from unlearnbench.methods.l1_sparse import l1_weight
from unlearnbench.methods.losses import info_nce
from unlearnbench.methods.munba import FALLBACK, munba_weights, nash_bargaining
from unlearnbench.methods.ssd import dampen
from unlearnbench.runner import Runner, trainable_vector


@pytest.mark.parametrize("seed", range(5))
def test_munba_weights_solve_the_bargaining_equation(seed):
    generator = torch.Generator().manual_seed(seed)
    g_r, g_f = torch.randn(2, 200, generator=generator) * torch.tensor([[1.0], [3.0]])
    alpha = nash_bargaining(g_r, g_f)
    assert alpha is not None and min(alpha) > 0
    gram = torch.stack([g_r, g_f]).double() @ torch.stack([g_r, g_f]).double().T
    alpha = torch.tensor(alpha, dtype=torch.float64)
    torch.testing.assert_close(gram @ alpha, 1 / alpha, rtol=1e-4, atol=0)
    assert munba_weights(g_r, g_f) == tuple(alpha.tolist())


@pytest.mark.parametrize(
    "g_f",
    [torch.tensor([300.0, 0.0, 0.0]), torch.tensor([0.0, 200.0, 0.0]), torch.tensor([float("nan"), 1.0, 0.0])],
    ids=["parallel", "orthogonal", "non-finite"],
)
def test_munba_falls_back_when_bargaining_fails(g_f):
    g_r = torch.tensor([100.0, 0.0, 0.0])
    assert nash_bargaining(g_r, g_f) is None
    assert munba_weights(g_r, g_f) == FALLBACK


def test_ssd_importance_is_the_mean_squared_minibatch_gradient():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    batches = [Batch(torch.randn(5, 4), torch.randint(0, 3, (5,)), torch.arange(5)) for _ in range(3)]
    expected = torch.zeros_like(model.weight)
    for batch in batches:
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(batch.x), batch.y), model.weight)
        expected += grad.pow(2) / len(batches)
    torch.testing.assert_close(importances(model, batches)["weight"], expected)


def test_ssd_dampens_exactly_the_selected_parameters():
    torch.manual_seed(0)
    model = nn.Linear(20, 10)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    data = {name: torch.rand_like(p) for name, p in before.items()}
    forget = {name: torch.rand_like(p) * 30 for name, p in before.items()}
    alpha, lam = 10.0, 1.0
    dampen(model, data, forget, alpha, lam)
    for name, p in model.named_parameters():
        selected = forget[name] > alpha * data[name]
        assert 0 < selected.sum() < selected.numel()
        assert torch.equal(p[~selected], before[name][~selected])
        factor = (lam * data[name] / forget[name])[selected]
        assert (factor < 1).all()
        torch.testing.assert_close(p[selected], before[name][selected] * factor)


def _served_with_snapshots(tmp_path, store, method_name: str, teachers: tuple[str, ...]):
    """Serve request 1, recording each teacher's parameters right after `prepare`."""
    runner = Runner.from_config(tiny_config(tmp_path, store, method_name, method_args={"optim": {"epochs": 1}}))
    model = runner.trained_model(torch.zeros(0, dtype=torch.long).numpy(), "pretraining")
    method = runner.method.attach(model, runner.dataset.num_classes)
    pretrained = {key: value.clone() for key, value in model.state_dict().items()}
    snapshots = {}
    prepare = method.prepare

    def recording_prepare(request, data):
        prepare(request, data)
        for name in teachers:
            teacher = getattr(method, name).module
            snapshots[name] = {key: value.clone() for key, value in teacher.state_dict().items()}

    method.prepare = recording_prepare
    before = trainable_vector(model)
    runner.serve(runner.stream.select(1))
    assert not torch.equal(before, trainable_vector(method.model)), "the student must have trained"
    assert all(key.startswith("model.") for key in method.state_dict()), "teachers must stay out of state_dict"
    return method, pretrained, snapshots


@pytest.mark.parametrize(
    ("method_name", "teachers"),
    [("scrub", ("teacher",)), ("bad_teacher", ("competent", "incompetent")), ("delete", ("teacher",))],
)
def test_teachers_never_change(method_name, teachers, tmp_path, shared_store):
    method, pretrained, snapshots = _served_with_snapshots(tmp_path, shared_store, method_name, teachers)
    for name in teachers:
        teacher = getattr(method, name).module
        assert not teacher.training
        for key, value in teacher.state_dict().items():
            assert torch.equal(value.cpu(), snapshots[name][key].cpu()), (name, key)
    competent = getattr(method, teachers[0]).module.state_dict()
    for key, value in pretrained.items():
        assert torch.equal(competent[key].cpu(), value.cpu()), key
    if "incompetent" in teachers:  # freshly initialized, not a copy
        incompetent = method.incompetent.module.state_dict()
        assert not torch.equal(incompetent["head.weight"].cpu(), pretrained["head.weight"].cpu())


def test_delete_target_gives_zero_mass_to_the_true_class():
    torch.manual_seed(0)
    logits, labels = torch.randn(16, 10) * 5, torch.randint(0, 10, (16,))
    target = masked_target(logits, labels)
    assert torch.equal(target[torch.arange(16), labels], torch.zeros(16))
    torch.testing.assert_close(target.sum(dim=1), torch.ones(16))
    # The other classes keep the teacher's relative probabilities.
    other = torch.ones_like(target, dtype=torch.bool)
    other[torch.arange(16), labels] = False
    teacher = logits.softmax(dim=1)
    ratio = target[other].view(16, 9) / teacher[other].view(16, 9)
    torch.testing.assert_close(ratio, ratio[:, :1].expand(16, 9))


def test_l1_weight_decays_linearly_to_zero():
    epochs, alpha = 10, 1e-4
    weights = [l1_weight(alpha, epoch, epochs) for epoch in range(epochs + 1)]
    assert weights[0] == alpha and weights[-1] == 0
    steps = torch.tensor(weights[:-1]) - torch.tensor(weights[1:])
    torch.testing.assert_close(steps, torch.full((epochs,), alpha / epochs, dtype=steps.dtype))


def test_l2ul_attack_stays_in_the_ball_and_reaches_its_targets():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5))
    x, target = torch.randn(32, 1, 4, 4), torch.randint(0, 5, (32,))
    adversarial = targeted_l2_pgd(model, x, target, eps=4.0, step=0.5, iters=50)
    assert ((adversarial - x).flatten(1).norm(dim=1) <= 4.0 + 1e-4).all()
    assert (model(adversarial).argmax(dim=1) == target).float().mean() > 0.9


def test_info_nce_rewards_matching_views():
    torch.manual_seed(0)
    z = torch.randn(8, 16)
    assert info_nce(z, z + 0.01 * torch.randn_like(z), 0.5) < info_nce(z, torch.randn(8, 16), 0.5)
