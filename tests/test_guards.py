"""Plasticity guards: orthogonal update projection, shrink-and-perturb, their state, their wiring."""

from __future__ import annotations

import ast
import inspect
import io
import textwrap

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import tiny_config
from unlearnbench.cli import _chosen_guards, run_parser
from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.data.base import Batch
from unlearnbench.guards import build_guards, flat, pack_state, unpack_state
from unlearnbench.guards.orthogonal import OrthogonalProjection, top_subspace
from unlearnbench.guards.shrink_perturb import ShrinkPerturb
from unlearnbench.methods.base import FitMethod, GradientMethod, SGDSettings, UnlearningMethod
from unlearnbench.registry import GUARDS, METHODS
from unlearnbench.runner import Runner


class TinyMethod(GradientMethod):
    """CE on retain batches of a small MLP."""

    def loss(self, batch):
        return F.cross_entropy(self(batch["retain"].x), batch["retain"].y)


def _method(weight_decay: float = 0.0) -> TinyMethod:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    return TinyMethod(optim=SGDSettings(lr=0.1, epochs=2, momentum=0.9, weight_decay=weight_decay)).attach(model, 3)


class Batches:
    """A fixed list of `{"retain": Batch}` steps (an iterable, so Lightning does not unpack it)."""

    def __init__(self, n: int = 4):
        generator = torch.Generator().manual_seed(1)
        x, y = torch.randn(n, 16, 6, generator=generator), torch.randint(0, 3, (n, 16), generator=generator)
        self.steps = [{"retain": Batch(x[i], y[i], torch.arange(16))} for i in range(n)]

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


def _serve(method: GradientMethod, guards: list) -> torch.Tensor:
    """One request as the runner serves it: guard hooks around a Lightning fit; returns u = θ_after − θ_before."""
    before = flat(method.model)
    for guard in guards:
        guard.before_request(method)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=guards,
    )
    trainer.fit(method, train_dataloaders=Batches())
    for guard in guards:
        guard.after_request(method)
    return flat(method.model) - before


def test_top_subspace_from_the_gram_matrix_matches_the_svd():
    updates = torch.randn(4, 50, generator=torch.Generator().manual_seed(3))
    Q = top_subspace(updates, 2)
    torch.testing.assert_close(Q.T @ Q, torch.eye(2), atol=1e-5, rtol=0)
    left = torch.linalg.svd(updates.T.double(), full_matrices=False).U[:, :2].float()
    torch.testing.assert_close(Q @ Q.T, left @ left.T, atol=1e-5, rtol=0)
    assert top_subspace(torch.zeros(0, 0), 3) is None


def test_guarded_update_is_orthogonal_to_the_stored_basis():
    method = _method()
    guard = OrthogonalProjection(rank=2)
    d = len(flat(method.model))
    guard.updates = torch.randn(3, d, generator=torch.Generator().manual_seed(4))
    basis = top_subspace(guard.updates, 2)
    update = _serve(method, [guard])
    assert update.norm() > 1e-3  # it did learn
    assert (basis.T @ update).abs().max() < 1e-5 * update.norm()
    assert len(guard.updates) == 4
    torch.testing.assert_close(guard.updates[-1], update)
    unguarded = _serve(_method(), [])
    assert (basis.T @ unguarded).abs().max() > 1e-3 * unguarded.norm()


def test_first_request_is_unconstrained_and_recorded():
    method, guard = _method(), OrthogonalProjection(rank=3)
    torch.testing.assert_close(_serve(method, [guard]), _serve(_method(), []))
    assert guard.updates.shape == (1, len(flat(method.model)))


def test_shrink_perturb_identity_and_shrink():
    method = _method()
    before = flat(method.model)
    ShrinkPerturb(shrink=1.0, sigma=0.0).before_request(method)
    assert torch.equal(flat(method.model), before)
    ShrinkPerturb(shrink=0.5, sigma=0.0).before_request(method)
    torch.testing.assert_close(flat(method.model), 0.5 * before)
    torch.manual_seed(0)
    ShrinkPerturb(shrink=1.0, sigma=0.1).before_request(method)
    assert 0 < (flat(method.model) - 0.5 * before).std() < 0.2


def test_guard_state_round_trips_through_a_saved_state():
    guards = build_guards(["shrink_perturb", "orthogonal"], {"orthogonal": {"rank": 2}})
    guards[1].updates = torch.randn(2, 10)
    state = {"model.weight": torch.ones(2)} | pack_state(guards)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    fresh = build_guards(["shrink_perturb", "orthogonal"], {"orthogonal": {"rank": 2}})
    method_state = unpack_state(loaded, fresh)
    assert list(method_state) == ["model.weight"]
    torch.testing.assert_close(fresh[1].updates, guards[1].updates)


def test_guard_state_survives_resume(tmp_path, shared_store, monkeypatch):
    """A guarded run interrupted after request 1 ends exactly like an uninterrupted one."""

    def config(out):
        return tiny_config(
            out, shared_store, "finetune", oracle="none", guards=["orthogonal"], method_args={"optim": {"epochs": 1}}
        )

    whole = Runner.from_config(config(tmp_path / "whole"))
    whole_rows = whole.run().rows
    serve = Runner.serve

    def crash_at_2(self, request):
        if request.t == 2:
            raise KeyboardInterrupt
        return serve(self, request)

    monkeypatch.setattr(Runner, "serve", crash_at_2)
    with pytest.raises(KeyboardInterrupt):
        Runner.from_config(config(tmp_path / "resumed")).run()
    monkeypatch.setattr(Runner, "serve", serve)
    resumed = Runner.from_config(config(tmp_path / "resumed"))
    rows = resumed.run().rows
    assert len(resumed.guards[0].updates) == 2
    torch.testing.assert_close(resumed.guards[0].updates, whole.guards[0].updates)
    assert rows[1].method["forget_acc"] == whole_rows[1].method["forget_acc"]


def test_guards_compose_on_the_cli_and_in_the_run_identity(tmp_path):
    names, argv = _chosen_guards(["--method", "rl", "--guard", "orthogonal", "--guard=shrink_perturb"])
    assert names == ["orthogonal", "shrink_perturb"]
    assert _chosen_guards(["--guard", "orthogonal,shrink_perturb"])[0] == names
    args = run_parser("rl", names).parse_args([*argv, "--orthogonal.rank", "2"])
    assert args.guards == names and args.orthogonal.rank == 2 and args.shrink_perturb.shrink == 0.9
    (tmp_path / "c.yaml").write_text("method: rl\nguards: [shrink_perturb]\nshrink_perturb: {sigma: 0.0}\n")
    names, argv = _chosen_guards(["--config", str(tmp_path / "c.yaml")])
    assert names == ["shrink_perturb"]
    assert run_parser("rl", names).parse_args(argv).shrink_perturb.sigma == 0.0
    plain, guarded = RunConfig.from_options(method="rl"), RunConfig.from_options(method="rl", guards=["orthogonal"])
    assert "guards" not in plain.identity({}, {}, 1).to_json()
    identity = guarded.identity({}, {}, 1)
    assert identity.guards == [{"orthogonal": {"rank": 3}}]
    assert guarded.run_path(identity).name.startswith("rl+orthogonal-")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"method": "loft", "guards": ["orthogonal"]}, "training by gradient"),
        ({"method": "rl", "guards": ["nope"]}, "unknown guard"),
        ({"method": "rl", "guards": ["orthogonal"], "guard_args": {"orthogonal": {"r": 1}}}, "no argument"),
        ({"method": "rl", "guard_args": {"orthogonal": {"rank": 1}}}, "not selected"),
    ],
)
def test_bad_guard_configs_are_refused(config, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_options(out=tmp_path, **config).validate()


@pytest.mark.parametrize("guard", GUARDS.names())
@pytest.mark.parametrize("method", METHODS.names())
def test_a_guard_is_accepted_exactly_by_the_methods_that_train_by_fits(method, guard, tmp_path):
    stream = (METHODS.get(method).streams or ("classwise",))[0]
    config = RunConfig.from_options(method=method, stream=stream, guards=[guard], out=tmp_path)
    if issubclass(METHODS.get(method), FitMethod):
        config.validate()
    else:
        with pytest.raises(ConfigError, match=f"method {method!r} does not do; run it without --guard"):
            config.validate()


def _calls(function, name: str) -> bool:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name for n in ast.walk(tree))


@pytest.mark.parametrize("method", METHODS.names())
def test_a_methods_type_says_whether_its_training_runs_the_guards(method):
    """A `FitMethod` serves a request by `fit` (where guards' callbacks run); any other method never calls it."""
    cls = METHODS.get(method)
    assert _calls(cls.unlearn, "fit") == issubclass(cls, FitMethod)


def test_a_new_method_that_does_not_fit_refuses_guards_without_declaring_anything(tmp_path, monkeypatch):
    """Eligibility is the type: a weight edit written against `UnlearningMethod`, with no flag set, is refused."""
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))

    @METHODS.register("scale_head")
    class ScaleHead(UnlearningMethod):
        """Scales the weights once per request, no training."""

        def __init__(self, factor: float = 0.5, batch_size: int = 64):
            super().__init__()

        def unlearn(self, fit) -> None:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.mul_(self.hparams.factor)

    with pytest.raises(ConfigError, match="'scale_head' does not do; run it without --guard"):
        RunConfig.from_options(method="scale_head", guards=["shrink_perturb"], out=tmp_path).validate()
