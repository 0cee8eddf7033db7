"""Factored per-sample gradients equal `torch.func`'s on every arch and on the layers that cannot be factored."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from unlearnbench.data.base import Batch
from unlearnbench.methods.gradients import diagonal_fisher, flat, inverse_fisher_product, per_sample_gradients
from unlearnbench.methods.sample_gradients import (
    SampleGradients,
    fisher_diagonal,
    sample_gradients,
    woodfisher_inverse_product,
)
from unlearnbench.registry import ARCHS


class TwiceAndSequence(nn.Module):
    """A linear layer called twice, one applied to a sequence, a tied weight, a frozen layer and a bias-free one."""

    def __init__(self):
        super().__init__()
        self.twice = nn.Linear(6, 6)
        self.sequence = nn.Linear(3, 4)
        self.tied_a, self.tied_b = nn.Linear(6, 6, bias=False), nn.Linear(6, 6)
        self.tied_b.weight = self.tied_a.weight
        self.frozen = nn.Linear(6, 6).requires_grad_(False)
        self.no_bias = nn.Linear(6, 5, bias=False)

    def forward(self, x):
        h = self.sequence(x.view(len(x), 2, 3)).flatten(1)[:, :6]
        h = torch.relu(self.twice(torch.relu(self.twice(h))))
        h = torch.tanh(self.tied_b(self.tied_a(h)))
        return self.no_bias(self.frozen(h))


SMALL = ["mixed", "mlp", "smallcnn"]  # the whole algebra, in float64; the big archs' factored layers below


def _model(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if name == "mixed":
        model, x = TwiceAndSequence(), torch.randn(9, 6)
    else:
        model, x = ARCHS.get(name)(num_classes=4, in_channels=1, input_size=16), torch.randn(9, 1, 16, 16)
    return model.double().eval(), x.double(), torch.arange(len(x)) % 4


@pytest.mark.parametrize("name", SMALL)
def test_factored_statistics_equal_the_materialized_per_sample_gradients(name):
    """In float64, so that the comparison is of the algebra, not of two summation orders' rounding."""
    model, x, y = _model(name)
    dense = per_sample_gradients(model, x, y)
    grads = sample_gradients(model, x, y)
    assert list(grads.shapes) == list(dense)  # every trainable parameter, in parameter order
    flat = torch.cat([g.flatten(1) for g in dense.values()], dim=1)
    for key, expected in dense.items():
        torch.testing.assert_close(grads.squared_sum(1e-3)[key], (expected + 1e-3).pow(2).sum(0))
    torch.testing.assert_close(grads.gram(), flat @ flat.T)
    v = torch.randn(flat.shape[1], dtype=torch.float64)
    torch.testing.assert_close(grads.dot(v), flat @ v)
    c = torch.randn(len(x), dtype=torch.float64)
    torch.testing.assert_close(grads.combine(c), c @ flat)


@pytest.mark.parametrize("name", ARCHS.names())
def test_every_archs_factored_layers_have_the_materialized_gradients(name):
    """Each arch's factored weights (its linear layers on flat features) against `torch.func`."""
    model, x, y = _model(name)
    grads = sample_gradients(model, x[:3], y[:3])
    classifier = next(path for path, m in model.named_modules() if m is model.get_classifier())
    assert f"{classifier}.weight" in grads.factors  # every arch ends in a linear classifier on flat features
    dense = per_sample_gradients(model, x[:3], y[:3])
    squared = grads.squared_sum(1e-3)
    for key in grads.factors:
        expected = dense[key]
        torch.testing.assert_close(squared[key], (expected + 1e-3).pow(2).sum(0))


def test_the_mlps_linear_layers_are_factored_and_the_unfactorable_ones_are_not():
    mlp = ARCHS.get("mlp")(num_classes=4, in_channels=1, input_size=16).eval()
    grads = sample_gradients(mlp, torch.randn(3, 1, 16, 16), torch.arange(3))
    assert set(grads.factors) == {n for n, _ in mlp.named_parameters() if n.endswith("weight")}
    mixed = sample_gradients(TwiceAndSequence().eval(), torch.randn(3, 6), torch.arange(3))
    assert set(mixed.factors) == {"no_bias.weight"}  # called twice, on a sequence, tied: materialized


@pytest.mark.parametrize("name", SMALL)
def test_fisher_and_ius_statistics_equal_their_materialized_references(name):
    """`fisher_diagonal` and `woodfisher_inverse_product` against `gradients.diagonal_fisher` and
    `gradients.inverse_fisher_product`, which materialize every per-sample gradient (the previous implementation)."""
    model, x, y = _model(name)
    batches = [Batch(x[:5], y[:5], torch.arange(5)), Batch(x[5:], y[5:], torch.arange(5, len(x)))]
    expected = diagonal_fisher(model, batches)
    for key, value in fisher_diagonal(model, batches).items():
        torch.testing.assert_close(value, expected[key])
    grads = SampleGradients.cat([sample_gradients(model, b.x, b.y) for b in batches])
    dense = torch.cat([flat(per_sample_gradients(model, b.x, b.y)) for b in batches])
    v = torch.randn(dense.shape[1], dtype=torch.float64)
    torch.testing.assert_close(woodfisher_inverse_product(grads, v, 7), inverse_fisher_product(dense, v, 7))
