"""The runner's fast paths give exactly what the paths they replace gave: batches, attribute writes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import unlearnbench.data.base as data_base
from unlearnbench.data.base import Augmentation, normalize
from unlearnbench.lean_module import LeanModule
from unlearnbench.registry import DATASETS


def _fashionmnist():
    try:
        return DATASETS.get("fashionmnist")(augment=False)
    except data_base.DatasetError:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")


@pytest.mark.parametrize("load", [lambda: DATASETS.get("digits")(), _fashionmnist], ids=["digits", "fashionmnist"])
@pytest.mark.parametrize("over_budget", [False, True])
def test_unaugmented_batches_are_bit_identical_and_in_the_same_order(load, over_budget, monkeypatch):
    """Shuffled training batches of a dataset without augmentation (and evaluation batches) are gathered from the
    split's normalized copy: the same images, labels, indices and order, bit for bit; a split over the copy's
    budget is normalized batch by batch as before."""
    if over_budget:
        monkeypatch.setattr(data_base, "NORMALIZED_CACHE_BYTES", 0)
    dataset = load()
    dataset = replace(dataset, augmentation=Augmentation())  # the memorizing tier's `augment: false`
    indices = torch.arange(0, len(dataset.train), 3)
    for augment in (True, False):  # the identity augmentation draws nothing: the same batches either way
        loader = dataset.loader(dataset.train, indices, 64, augment=augment, shuffle=True, seed=7)
        generator = torch.Generator().manual_seed(7)  # what the loader's order was drawn from before
        for _epoch in range(2):  # the generator moves on between epochs as before
            order = indices[torch.randperm(len(indices), generator=generator)]
            batches = list(loader)
            assert len(batches) == -(-len(order) // 64)
            for batch, idx in zip(batches, order.split(64), strict=True):
                assert torch.equal(batch.idx, idx) and torch.equal(batch.y, dataset.train.labels[idx])
                expected = normalize(dataset.train.images[idx], dataset.mean, dataset.std)
                assert batch.x.dtype == expected.dtype and torch.equal(batch.x, expected)
    cached = dataset.test.normalized(dataset.mean, dataset.std)
    assert (cached is None) == over_budget
    if cached is not None:
        assert cached is dataset.test.normalized(dataset.mean, dataset.std)  # computed once


def test_augmented_batches_still_draw_their_augmentation(digits):
    """A dataset with a real augmentation is not served from the normalized copy."""
    assert not digits.augmentation.identity
    loader = digits.loader(digits.train, torch.arange(64), 64, augment=True, shuffle=False, seed=0)
    (batch,) = list(loader)
    assert not torch.equal(batch.x, digits.train.normalized(digits.mean, digits.std)[:64])


class _Module(LeanModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.register_buffer("count", torch.zeros(1))


def test_lean_module_writes_plain_values_directly_and_everything_else_as_nn_module_does():
    module = _Module()
    module._current_fx_name = "training_step"  # what Lightning writes around every hook
    assert module.__dict__["_current_fx_name"] == "training_step"
    module.count = torch.ones(1)  # a tensor to a buffer's name: still the buffer
    assert torch.equal(module._buffers["count"], torch.ones(1)) and "count" not in module.__dict__
    with pytest.raises(TypeError, match="buffer"):
        module.count = 3  # a plain value to a buffer's name: refused as nn.Module refuses it
    with pytest.raises(TypeError, match="child module"):
        module.layer = "text"
    module.layer.bias = None  # None to a parameter's name (a plain nn.Module here): unregisters it
    assert module.layer.bias is None
    module.extra = torch.nn.Linear(1, 1)
    assert "extra" in module._modules
    module.weight = torch.nn.Parameter(torch.zeros(1))
    assert "weight" in module._parameters
    module.weight = None  # a plain value to a parameter's name takes nn.Module's path
    assert module._parameters["weight"] is None
