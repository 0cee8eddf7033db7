"""Every default a method docstring attributes to a reference, compared with that reference's value."""

from __future__ import annotations

import inspect
import typing

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.base import SGDSettings
from unlearnbench.ranges import parameters
from unlearnbench.registry import METHODS
from unlearnbench.streams.base import RequestStream
from unlearnbench.streams.batches import BatchMode
from unlearnbench.training import build_model

#: (method, hyperparameter) -> the reference's value, with where it is read.
REFERENCE = {
    # TIML-Group/Mode-Connectivity-Unlearning ff1f215: arg_parser.py (--beta, --lr, --momentum, --wd,
    # --batch_size) and README (--epochs=10 for unlearning runs).
    ("neggrad_plus", "beta"): 0.15,
    ("neggrad_plus", "optim.lr"): 0.01,
    ("neggrad_plus", "optim.momentum"): 0.9,
    ("neggrad_plus", "optim.weight_decay"): 1e-4,
    ("neggrad_plus", "optim.batch_size"): 128,
    ("neggrad_plus", "optim.epochs"): 10,
    ("neggrad_plus", "formulation"): "lab",
    # meghdadk/SCRUB 98ffb11, large_scale_ictest.ipynb: args.ng_alpha (the `scrub` formulation).
    ("neggrad_plus", "alpha"): 0.9999,
    # OPTML-Group/Unlearn-Saliency a6e89fd: Classification/README.md (RL example), arg_parser.py, unlearn/RL.py.
    ("rl", "optim.lr"): 0.013,
    ("rl", "optim.epochs"): 10,
    ("rl", "optim.batch_size"): 256,
    ("rl", "optim.momentum"): 0.9,
    ("rl", "optim.weight_decay"): 5e-4,
    ("rl", "exclude_true"): False,
    ("salun", "ratio"): 0.5,
    ("salun", "optim.lr"): 0.013,
    ("salun", "optim.epochs"): 10,
    # The code the SalUn paper's numbers were made with, OPTML-Group/Unlearn-Saliency 9576623 (2023-10):
    # unlearn/RL.py concatenates the relabelled forget set and the retain set into one shuffled loader for every
    # dataset, CIFAR-10 included, and the SalUn mask multiplies the gradient only.
    ("rl", "batches"): "mixed",
    ("salun", "batches"): "mixed",
    ("salun", "hold"): "gradient",
    # OPTML-Group/Unlearn-Saliency a6e89fd: Classification/arg_parser.py (batch, momentum, weight decay) and
    # unlearn/FT.py, GA.py; lr and epochs from OPTML-Group/Unlearn-Sparse 80ba55d: README.MD (FT, GA, l1-sparse).
    ("finetune", "optim.lr"): 0.01,
    ("finetune", "optim.epochs"): 10,
    ("finetune", "optim.batch_size"): 256,
    ("finetune", "optim.momentum"): 0.9,
    ("finetune", "optim.weight_decay"): 5e-4,
    ("ga", "optim.lr"): 1e-4,
    ("ga", "optim.epochs"): 5,
    ("ga", "optim.batch_size"): 256,
    ("ga", "optim.momentum"): 0.9,
    ("ga", "optim.weight_decay"): 5e-4,
    ("l1_sparse", "optim.lr"): 0.01,
    ("l1_sparse", "optim.epochs"): 10,
    ("l1_sparse", "optim.batch_size"): 256,
    ("l1_sparse", "optim.momentum"): 0.9,
    ("l1_sparse", "optim.weight_decay"): 5e-4,
    # JingWu321/Scissorhands 73ae065: Classification/sh/main_0.1_cifar10.sh (FT_prune --alpha 0.0001); the
    # Unlearn-Sparse and Unlearn-Saliency READMEs leave --alpha open.
    ("l1_sparse", "alpha"): 1e-4,
    # meghdadk/SCRUB 98ffb11: large_scale_unlearning.ipynb (args.kd_T, msteps, gamma, alpha, sgda_*); its loaders
    # use batches of 512 (forget) and 256 (retain), so batch_size has no reference value here.
    ("scrub", "temperature"): 4.0,
    ("scrub", "msteps"): 2,
    ("scrub", "gamma"): 0.99,
    ("scrub", "alpha"): 0.001,
    ("scrub", "optim.epochs"): 3,
    ("scrub", "optim.lr"): 5e-4,
    ("scrub", "optim.momentum"): 0.9,
    ("scrub", "optim.weight_decay"): 5e-4,
    # vikram2000b/bad-teaching-unlearning f1aa988: CIFARSuper20_Rocket_Unlearn.ipynb (0.3 retain subset,
    # KL_temperature = 1, Adam lr 0.0001 without weight decay, epochs = 1, batch_size = 256), unlearn.py.
    ("bad_teacher", "retain_fraction"): 0.3,
    ("bad_teacher", "temperature"): 1.0,
    ("bad_teacher", "optim.lr"): 1e-4,
    ("bad_teacher", "optim.epochs"): 1,
    ("bad_teacher", "optim.batch_size"): 256,
    ("bad_teacher", "optim.weight_decay"): 0.0,
    # if-loops/selective-synaptic-dampening cdfdc0e: src/forget_full_class_main.py (selection_weighting
    # 10 * model_size_scaler, 1 for ResNet; dampening_constant 1; -b 64).
    ("ssd", "alpha"): 10.0,
    ("ssd", "lam"): 1.0,
    ("ssd", "batch_size"): 64,
    # JingWu321/MUNBa 7038772: Classification/arg_parser.py (unlearn_lr, unlearn_epochs, batch_size, momentum,
    # weight_decay) and unlearn/MUNBa.py (clip_grad_norm_ 1.0).
    ("munba", "optim.lr"): 0.01,
    ("munba", "optim.epochs"): 10,
    ("munba", "optim.batch_size"): 256,
    ("munba", "optim.momentum"): 0.9,
    ("munba", "optim.weight_decay"): 5e-4,
    ("munba", "clip"): 1.0,
    # shaaaaron/DELETE 60018a1: method/delete.py (SGD momentum 0.9, no weight decay) and
    # config/cifar10_resnet18.yaml (batch_size 128, unlearn_epoch 20; its unlearn_rate 1e-4 is not our lr).
    ("delete", "optim.epochs"): 20,
    ("delete", "optim.batch_size"): 128,
    ("delete", "optim.momentum"): 0.9,
    ("delete", "optim.weight_decay"): 0.0,
    # csm9493/L2UL 5fb777b: main_unlearn_cifar10_mixed_label_resnet18.py (naiive_unlearn_kwargs batch 32,
    # SGD momentum 0.9 and weight decay 1e-4, --pgd-alpha 0.1) and run_unlearn_cifar_imagenet.sh (--unlearn-lr
    # 0.001, --reg-lamb 1.0, --pgd-eps 4.0).
    ("l2ul", "optim.lr"): 1e-3,
    ("l2ul", "optim.batch_size"): 32,
    ("l2ul", "optim.momentum"): 0.9,
    ("l2ul", "optim.weight_decay"): 1e-4,
    ("l2ul", "reg_lambda"): 1.0,
    ("l2ul", "pgd_eps"): 4.0,
    ("l2ul", "pgd_step"): 0.1,
}


@pytest.mark.parametrize(("method", "name"), list(REFERENCE))
def test_default_is_the_reference_value(method, name):
    default = parameters(METHODS.get(method))[name].default  # a group's fields by path (optim.lr)
    assert default == REFERENCE[(method, name)]


#: (method, hyperparameter) -> the value that gives the reference code's behaviour after the paper, with where it is
#: read: an option beside the paper's default.
LATER_CODE = {
    # OPTML-Group/Unlearn-Saliency f31f82e (2024-04), still at a6e89fd: unlearn/RL.py's cifar10/svhn branch serves
    # the forget loader, then the retain loader.
    ("rl", "batches"): "forget_then_retain",
    ("salun", "batches"): "forget_then_retain",
    # OPTML-Group/Unlearn-Saliency a6e89fd (2026-02-28, "Fix weight decay"): masked-out weights restored after each step.
    ("salun", "hold"): "weights",
}


@pytest.mark.parametrize(("method", "name"), list(LATER_CODE))
def test_the_later_codes_behaviour_is_an_option_beside_the_papers_default(method, name):
    choices = typing.get_args(typing.get_type_hints(METHODS.get(method).__init__)[name])
    assert REFERENCE[(method, name)] != LATER_CODE[(method, name)]
    assert set(choices) == {REFERENCE[(method, name)], LATER_CODE[(method, name)]}
    METHODS.get(method)(**{name: LATER_CODE[(method, name)]})  # accepted


@pytest.mark.parametrize(
    ("method", "args", "mode"),
    [
        ("neggrad_plus", {}, BatchMode.MIXED),
        ("neggrad_plus", {"formulation": "scrub"}, BatchMode.PAIRED),
        ("rl", {}, BatchMode.MIXED),
        ("rl", {"batches": "forget_then_retain"}, BatchMode.FORGET_THEN_RETAIN),
        ("salun", {}, BatchMode.MIXED),
        ("salun", {"batches": "forget_then_retain"}, BatchMode.FORGET_THEN_RETAIN),
    ],
)
def test_batch_mode_follows_the_option(method, args, mode):
    assert METHODS.get(method)(**args).batch_mode is mode


@pytest.mark.parametrize(
    ("method", "args"), [("neggrad_plus", {"formulation": "x"}), ("rl", {"batches": "x"}), ("salun", {"hold": "x"})]
)
def test_unknown_option_is_refused(method, args):
    with pytest.raises(ValueError, match="must be"):
        METHODS.get(method)(**args)


def _model_and_batch(n_forget: int):
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    forget = Batch(torch.randn(n_forget, 6), torch.randint(0, 4, (n_forget,)), torch.arange(n_forget))
    retain = Batch(torch.randn(9, 6), torch.randint(0, 4, (9,)), torch.arange(9))
    return model, forget, retain


@pytest.mark.parametrize("n_forget", [3, 0])
def test_neggrad_plus_lab_loss_is_ce_retain_minus_beta_ce_forget(n_forget):
    model, forget, retain = _model_and_batch(n_forget)
    method = METHODS.get("neggrad_plus")(beta=0.15).attach(model, 4)
    expected = F.cross_entropy(model(retain.x), retain.y)
    if n_forget:
        expected = expected - 0.15 * F.cross_entropy(model(forget.x), forget.y)
    torch.testing.assert_close(method.loss({"forget": forget, "retain": retain}), expected)


def test_neggrad_plus_scrub_loss_is_the_alpha_mixture():
    model, forget, retain = _model_and_batch(3)
    method = METHODS.get("neggrad_plus")(formulation="scrub", alpha=0.9).attach(model, 4)
    expected = 0.9 * F.cross_entropy(model(retain.x), retain.y) - 0.1 * F.cross_entropy(model(forget.x), forget.y)
    torch.testing.assert_close(method.loss({"forget": forget, "retain": retain}), expected)


@pytest.mark.parametrize("sides", [("forget",), ("retain",), ("forget", "retain")])
def test_rl_loss_takes_whichever_sides_the_step_has(sides):
    model, forget, retain = _model_and_batch(3)
    method = METHODS.get("rl")().attach(model, 4)
    batch = {"forget": forget, "retain": retain}
    torch.manual_seed(1)
    loss = method.loss({side: batch[side] for side in sides})
    torch.manual_seed(1)
    x = torch.cat([batch[side].x for side in sides])
    y = [torch.randint(0, 4, (3,)) if side == "forget" else retain.y for side in sides]
    torch.testing.assert_close(loss, F.cross_entropy(model(x), torch.cat(y)))


def _salun_fit(digits, hold: str):
    """SalUn served request 1 of a class-wise digits stream for one epoch with a large weight decay; returns the
    method, its mask, the weights before and the number of optimizer steps taken."""
    stream = RequestStream(digits, "classwise", 1, seed=0)
    request = stream.select(1)
    torch.manual_seed(0)
    settings = SGDSettings(lr=0.05, epochs=1, batch_size=256, momentum=0.9, weight_decay=0.05)
    method = METHODS.get("salun")(hold=hold, optim=settings).attach(build_model("smallcnn", digits), 10)
    method.prepare(request.public(), stream.view())
    stream.configure_batches(method.batch_mode, method.batch_size)
    before = {name: p.detach().clone() for name, p in method.model.named_parameters()}
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(method, datamodule=stream)
    return method, before, trainer.global_step


def _decayed_only(weights: torch.Tensor, steps: int, lr: float, momentum: float, weight_decay: float) -> torch.Tensor:
    """`weights` after `steps` SGD steps whose loss gradient is zero: weight decay and its momentum alone."""
    buffer = None
    for _ in range(steps):
        d = weight_decay * weights
        buffer = d if buffer is None else momentum * buffer + d
        weights = weights - lr * buffer
    return weights


@pytest.mark.parametrize("hold", ["gradient", "weights"])
def test_salun_keeps_the_weights_outside_its_mask_as_hold_says(digits, hold):
    method, before, steps = _salun_fit(digits, hold)
    assert steps == 6  # ceil(|forget ∪ retain| / 256) on digits' train split
    for name, p in method.model.named_parameters():
        mask, after = method.masks[name], p.detach()
        if hold == "weights":  # a6e89fd: exactly fixed
            torch.testing.assert_close(after[~mask], before[name][~mask], rtol=0, atol=0)
        else:  # the paper's code: no loss gradient, but weight decay still shrinks them
            torch.testing.assert_close(after[~mask], _decayed_only(before[name][~mask], steps, 0.05, 0.9, 0.05))
        assert not torch.equal(after[mask], before[name][mask])


def test_rum_passes_the_hook_before_each_optimizer_step_to_its_current_stage():
    seen = []
    rum = METHODS.get("rum")()
    rum.current = type("Stage", (), {"on_before_optimizer_step": lambda self, optimizer: seen.append(optimizer)})()
    rum.on_before_optimizer_step("optimizer")
    assert seen == ["optimizer"]


#: LOFT's release (arg_parser.py: --unlearn_lr 1; its runs: 50–100 steps; RiemannianAdam without `stabilize`;
#: U from a random orthonormal frame).
LOFT_REFERENCE = {"lr": 1.0, "steps": 100, "init": "random", "stabilize": None}


@pytest.mark.parametrize("name", list(LOFT_REFERENCE))
def test_loft_default_is_the_reference_value(name):
    assert inspect.signature(METHODS.get("loft")).parameters[name].default == LOFT_REFERENCE[name]


def test_random_orthonormal_is_orthonormal_seeded_and_not_the_pca_frame():
    from unlearnbench.methods.subspace import random_orthonormal

    U = random_orthonormal(12, 4, torch.Generator().manual_seed(0))
    torch.testing.assert_close(U.T @ U, torch.eye(4, dtype=torch.float64))
    torch.testing.assert_close(U, random_orthonormal(12, 4, torch.Generator().manual_seed(0)))
    assert not torch.allclose(U, random_orthonormal(12, 4, torch.Generator().manual_seed(1)))
    # Haar: the mean of U Uᵀ over frames is (s/d)·I
    mean = sum(V @ V.T for V in (random_orthonormal(12, 4, torch.Generator().manual_seed(k)) for k in range(400)))
    torch.testing.assert_close(mean / 400, torch.eye(12, dtype=torch.float64) * 4 / 12, atol=0.05, rtol=0)
