"""LOFT and continual LOFT: the subspace math, the projected model, the feature cache, the method state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unlearnbench.data.base import Batch
from unlearnbench.methods.continual_loft import ContinualLOFT
from unlearnbench.methods.loft import LOFT
from unlearnbench.methods.subspace import (
    FeatureCache,
    Moments,
    ProjectedModel,
    captured,
    explained_rank,
    loft_objective,
    optimize_stiefel,
    pooled,
    top_eigenvectors,
)
from unlearnbench.models.smallcnn import SmallCNN
from unlearnbench.runner import trainable_vector
from unlearnbench.streams.base import UnlearningRequest


class FakeView:
    """A StreamView over fixed tensors: eval batches of the given train indices."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def loader(self, which: str, *, batch_size: int = 512, augment: bool = False, indices=None):
        index = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return [Batch(self.images[i], self.labels[i], i) for i in index.split(batch_size)]


def _covariance(eigenvalues: list[float], seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(len(eigenvalues), len(eigenvalues), generator=generator, dtype=torch.float64))
    return Q @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ Q.T


def _model(seed: int = 0) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN(num_classes=4, width=4).eval()


def _data(n: int = 80, seed: int = 0) -> FakeView:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 4
    images = torch.randn(n, 1, 8, 8, generator=generator) + labels[:, None, None, None].float()
    return FakeView(images, labels)


def _request(t: int, forget: np.ndarray, forgotten: np.ndarray, n: int = 80) -> UnlearningRequest:
    retain = np.setdiff1d(np.arange(n), forgotten)
    return UnlearningRequest(t=t, forget=forget, forgotten=forgotten, retain=retain, forget_classes=None)


@pytest.mark.parametrize(
    ("eigenvalues", "fraction", "expected"),
    [
        ([50, 30, 15, 4, 1], 0.95, 3),  # 50+30+15 = 95 of 100: exactly 95% at k = 3
        ([40, 30, 20, 10], 0.95, 4),  # 90% at k = 3 is not enough
        ([40, 30, 20, 10], 0.90, 3),
        ([97, 1, 1, 1], 0.95, 1),
    ],
)
def test_s_from_explained_variance_matches_hand_value(eigenvalues, fraction, expected):
    assert explained_rank(_covariance(eigenvalues), fraction) == expected


def test_u_stays_orthonormal_and_j_decreases():
    generator = torch.Generator().manual_seed(1)
    retain = torch.randn(200, 12, generator=generator, dtype=torch.float64) * torch.linspace(3, 0.1, 12)
    forget = torch.randn(50, 12, generator=generator, dtype=torch.float64) * torch.linspace(0.1, 3, 12)
    sigma_r, sigma_f = Moments.of(retain).cov, Moments.of(forget).cov
    U0 = top_eigenvectors(sigma_r, explained_rank(sigma_r))
    U, trace = optimize_stiefel(U0, lambda U: loft_objective(U, [(1.0, sigma_f)], sigma_r), steps=200, lr=0.02)
    assert torch.linalg.matrix_norm(U.T @ U - torch.eye(U.shape[1], dtype=U.dtype)) < 1e-4
    assert trace[-1] < trace[0]
    assert captured(U, sigma_f) < captured(U0, sigma_f)


def test_covariances_are_centred_unbiased_and_pool_exactly():
    generator = torch.Generator().manual_seed(2)
    a, b = torch.randn(30, 5, generator=generator) + 3, torch.randn(20, 5, generator=generator)
    moments = Moments.of(a)
    assert moments.cov.dtype == torch.float64
    torch.testing.assert_close(moments.cov, torch.cov(a.double().T))  # mean-centred, /(N−1)
    union = pooled([Moments.of(a), Moments.of(b)])
    torch.testing.assert_close(union.cov, torch.cov(torch.cat([a, b]).double().T))
    assert union.n == 50


def test_fused_head_gives_the_projected_logits():
    backbone = _model()
    x = torch.randn(6, 1, 8, 8)
    U, _ = torch.linalg.qr(torch.randn(backbone.num_features, 5))
    projected, fused = ProjectedModel(backbone), ProjectedModel(backbone, fuse=True)
    with torch.no_grad():
        projected.projection.copy_(U @ U.T)
        fused.projection.copy_(U @ U.T)
        z = backbone.forward_head(backbone.forward_features(x), pre_logits=True)
        by_hand = backbone.head(z @ U @ U.T)
        torch.testing.assert_close(projected(x), by_hand, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused(x), by_hand, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(projected.fused_classifier()(z), by_hand, rtol=1e-5, atol=1e-5)


def test_projected_model_starts_as_the_backbone():
    backbone = _model()
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(ProjectedModel(backbone)(x), backbone(x))


def test_feature_cache_is_invalidated_by_a_changed_model():
    model, data, cache = _model(), _data(), FeatureCache()
    indices = np.arange(0, 40)
    first = cache.get(model, data, "retain", indices, batch_size=16)
    passes = cache.passes
    torch.testing.assert_close(cache.get(model, data, "retain", indices, batch_size=16), first)
    assert cache.passes == passes  # same model: served from the cache
    with torch.no_grad():
        model.head.weight.add_(0.0)  # unchanged values: still a hit
        model.features[0][0].weight.mul_(2.0)
    again = cache.get(model, data, "retain", indices, batch_size=16)
    assert cache.passes > passes
    assert not torch.allclose(again, first)
    other = _model(seed=5)
    passes = cache.passes
    cache.get(other, data, "retain", indices, batch_size=16)
    assert cache.passes > passes  # another model is never served this model's features
    model.features[1][1].running_mean.add_(1.0)  # buffers count too
    passes = cache.passes
    cache.get(model, data, "retain", indices, batch_size=16)
    assert cache.passes > passes


def test_loft_changes_only_the_projection_and_hides_the_forget_set():
    method = LOFT(steps=100, lr=0.05).attach(_model(), 4)
    backbone_before = {k: v.clone() for k, v in method.model.backbone.state_dict().items()}
    before = trainable_vector(method.model)
    data, forget = _data(), np.arange(0, 80, 4)  # class 0
    method.prepare(_request(1, forget, forget), data)
    method.unlearn(lambda epochs: None)
    assert not torch.equal(before, trainable_vector(method.model))
    assert len(before) == method.model.projection.numel()  # the backbone is frozen
    for key, value in method.model.backbone.state_dict().items():
        assert torch.equal(value, backbone_before[key]), key
    assert method.trace[-1] < method.trace[0]
    s = method.U.shape[1]
    torch.testing.assert_close(method.model.projection.detach().double(), method.U @ method.U.T, rtol=0, atol=1e-6)
    assert s == explained_rank(method.retain_cov, 0.95)
    assert "weight_decay" not in method.hparams and "momentum" not in method.hparams


def test_continual_loft_keeps_history_as_covariances_and_resumes():
    data, n = _data(), 80
    method = ContinualLOFT(steps=30, lr=0.05, history="weighted", lambda_hist=0.5).attach(_model(), 4)
    f1, f2 = np.arange(0, n, 4), np.arange(1, n, 4)
    method.prepare(_request(1, f1, f1), data)
    method.unlearn(lambda epochs: None)
    U1 = method.U.clone()
    method.prepare(_request(2, f2, np.union1d(f1, f2)), data)
    assert len(method.forget) == 2 and method.forget[1][0] == 0.5
    torch.testing.assert_close(method.start(), U1)  # warm start from U_{t−1}
    method.unlearn(lambda epochs: None)
    state = method.state_dict()
    resumed = ContinualLOFT(steps=30, lr=0.05, history="weighted", lambda_hist=0.5).attach(_model(), 4)
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed.U, method.U)
    assert sorted(resumed.past) == [1, 2]
    torch.testing.assert_close(resumed.past[1].cov, method.past[1].cov)
    torch.testing.assert_close(resumed.model.projection, method.model.projection)
    assert not any(key.startswith("cache") for key in state)


def test_pooled_history_covers_every_forget_set():
    data, n = _data(), 80
    method = ContinualLOFT(steps=5).attach(_model(), 4)
    f1, f2 = np.arange(0, n, 4), np.arange(1, n, 4)
    method.prepare(_request(1, f1, f1), data)
    method.unlearn(lambda epochs: None)
    method.prepare(_request(2, f2, np.union1d(f1, f2)), data)
    features = method.cache.get(method.model.backbone, data, "forget", np.union1d(f1, f2), 512)
    (weight, cov), *rest = method.forget
    assert weight == 1.0 and not rest
    torch.testing.assert_close(cov, Moments.of(features).cov)
