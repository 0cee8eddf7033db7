"""Datasets and archs over their registries: fixed splits, timm-style feature/head split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unlearnbench.registry import ARCHS, DATASETS
from unlearnbench.training import build_model

#: Datasets that need no files; the on-disk ones (CIFAR, Tiny-ImageNet, ImageFolder) are loaded from
#: small files in their real formats in test_datasets_real.py, which also checks that every
#: registered dataset is covered by one of the two.
EMBEDDED_DATASETS = ["digits", "synthetic_cifar_mini"]


@pytest.mark.parametrize("name", EMBEDDED_DATASETS)
def test_dataset_split_is_fixed_and_stratified(name):
    first, second = DATASETS.get(name)(), DATASETS.get(name)()
    assert torch.equal(first.train.labels, second.train.labels)
    assert torch.equal(first.test.images, second.test.images)
    assert first.train.images.dtype == torch.uint8
    train_share = np.bincount(first.train.labels.numpy()) / len(first.train)
    test_share = np.bincount(first.test.labels.numpy()) / len(first.test)
    assert np.abs(train_share - test_share).max() < 0.02


@pytest.mark.parametrize("arch", ARCHS.names())
def test_arch_head_of_features_is_forward(digits, arch):
    model = build_model(arch, digits).eval()
    x = digits.normalize(digits.train.images[:8])
    features = model.forward_features(x)
    pooled = model.forward_head(features, pre_logits=True)
    assert pooled.ndim == 2 and pooled.shape[0] == 8
    torch.testing.assert_close(model.forward_head(features), model(x))
    logits = model(x)
    assert logits.shape == (8, digits.num_classes)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
