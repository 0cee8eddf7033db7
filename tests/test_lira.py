"""The oracle-referenced attack on constructed cases with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import softmax
from torch import nn

from unlearnbench.evaluation.oracle_mia import (
    auc_and_tpr,
    lira_scores,
    logit_confidence,
    oracle_referenced_attack,
    reference_free_attack,
)

N_CLASSES, DIM = 10, 32


@pytest.fixture(scope="module")
def data():
    """Random inputs with random labels: nothing generalizes, so confidence on a sample means memorization."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(900, DIM)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, 900)
    # train = 0..599 (forget F = 0..149, retain = 150..599), test = 600..899
    return x, y


def _train(x: np.ndarray, y: np.ndarray, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, N_CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(150):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def models(data):
    x, y = data
    retain = np.arange(150, 600)
    everything = np.arange(600)

    def logits(model):
        with torch.no_grad():
            out = model(torch.from_numpy(x)).numpy()
        return out[:600], out[600:]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster than two contended ones
    try:
        return {
            "in": logits(_train(x[everything], y[everything], seed=1)),
            "out_a": logits(_train(x[retain], y[retain], seed=2)),
            "out_b": logits(_train(x[retain], y[retain], seed=3)),
            "out_c": logits(_train(x[retain], y[retain], seed=4)),
        }
    finally:
        torch.set_num_threads(threads)


def _attack(data, target, references):
    _, y = data
    return oracle_referenced_attack(target, references, y[:600], y[600:], np.arange(150), classwise=False)


def test_logit_confidence_matches_its_definition():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 30.0, 1.0]])
    labels = np.array([0, 1])
    p = softmax(logits, axis=1)[[0, 1], labels]
    np.testing.assert_allclose(logit_confidence(logits, labels)[:1], np.log(p / (1 - p))[:1])
    assert np.isfinite(logit_confidence(logits, labels)).all()  # p_y ≈ 1 stays finite
    assert logit_confidence(logits, labels)[1] == pytest.approx(30.0 - np.log(1 + np.exp(1.0)), rel=1e-9)


def test_memorizing_model_is_separated_from_a_never_trained_one(data, models):
    result = _attack(data, models["in"], [models["out_a"]])
    assert result["lira_auc"] > 0.9, result
    assert result["lira_tpr_at_1fpr"] > 20.0, result
    several = _attack(data, models["in"], [models["out_a"], models["out_b"], models["out_c"]])
    assert several["lira_auc"] > 0.9, several


@pytest.mark.parametrize("references", [["out_a"], ["out_a", "out_c"]])
def test_out_model_is_at_chance(data, models, references):
    result = _attack(data, models["out_b"], [models[r] for r in references])
    assert abs(result["lira_auc"] - 0.5) < 0.1, result
    assert result["lira_tpr_at_1fpr"] < 10.0, result


def test_reference_free_companions(data, models):
    _, y = data
    kwargs = dict(
        train_labels=y[:600],
        test_labels=y[600:],
        forget=np.arange(150),
        retain=np.arange(150, 600),
        test_retain=np.arange(300),
        classwise=False,
    )
    memorized = reference_free_attack(*models["in"], **kwargs)
    never = reference_free_attack(*models["out_b"], **kwargs)
    assert memorized["phi_auc"] > 0.9 and abs(never["phi_auc"] - 0.5) < 0.1
    assert never["phi_retain_auc"] > 0.9  # the OUT model memorized its own retain set


def test_per_sample_gaussian_uses_each_sample_own_spread():
    # ten samples whose OUT references spread by 0.2, one by 20: the same excess is significant for the former only
    out = np.array([[0.0] * 11, [0.2] * 10 + [20.0], [-0.2] * 10 + [-20.0]])
    scores = lira_scores(np.ones(11), out)
    assert scores[0] > 5 * scores[-1]
    np.testing.assert_allclose(scores[:10], scores[0])
    # with one reference the score is the plain difference
    np.testing.assert_allclose(lira_scores(np.array([1.0, 3.0]), out[1:2, [0, -1]]), [0.8, -17.0])


def test_auc_and_tpr_known_values():
    auc, tpr = auc_and_tpr(np.arange(100, 200.0), np.arange(100.0))
    assert auc == 1.0 and tpr == 1.0
    auc, tpr = auc_and_tpr(np.zeros(10), np.zeros(10))
    assert auc == 0.5
    assert auc_and_tpr(np.array([]), np.zeros(3)) == (None, None)


def test_recompute_from_run_directory_uses_every_out_oracle(tmp_path, data, models):
    import json

    from unlearnbench.evaluation.oracle_mia import recompute_from_run_directory

    _, y = data
    # T = 2 requests: F_1 = 0..74, F_2 = 75..149. The "method" memorized everything at both requests;
    # oracles (trained on 150..599) are OUT for both forget sets.
    manifest = {
        "kind": "random",
        "requests": [{"t": 1, "forget": list(range(75))}, {"t": 2, "forget": list(range(75, 150))}],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    np.savez(tmp_path / "labels.npz", train=y[:600], test=y[600:])
    (tmp_path / "logits").mkdir()
    for t, oracle in ((1, "out_a"), (2, "out_b")):
        np.savez_compressed(
            tmp_path / "logits" / f"t{t:03d}.npz",
            method_train=models["in"][0],
            method_test=models["in"][1],
            oracle_train=models[oracle][0],
            oracle_test=models[oracle][1],
        )
    rows = recompute_from_run_directory(tmp_path)
    assert [row["references"] for row in rows] == [2, 1]
    assert all(row["lira_auc"] > 0.9 for row in rows)
    assert len(rows[1]["lira_history"]) == 2 and rows[1]["lira_history"][0] > 0.9


@pytest.mark.parametrize("positives, negatives", [(40, 36), (20, 56)])
def test_null_band_equals_sklearn_aucs_of_the_same_permutations(positives, negatives):
    """Both sides of the pool drawn as the smaller (a retain pool's positives outnumber its test negatives; F_t's
    are outnumbered by theirs): the band is the AUCs of the same permutations, exactly as the positives' own rank
    sums give it."""
    from scipy.stats import rankdata
    from sklearn.metrics import roc_auc_score

    from unlearnbench.evaluation.oracle_mia import auc_null_band

    rng = np.random.default_rng(3)
    positive, negative = rng.normal(0.3, 1, positives), np.round(rng.normal(0, 1, negatives), 1)  # ties included
    low, high = auc_null_band(positive, negative, permutations=200)
    scores = np.concatenate([positive, negative])
    draws = np.argsort(np.random.default_rng(0).random((200, len(scores))), axis=1)[:, :positives]
    rank_aucs = (rankdata(scores)[draws].sum(axis=1) - positives * (positives + 1) / 2) / (positives * negatives)
    assert (low, high) == tuple(np.quantile(rank_aucs, [0.025, 0.975]))
    aucs = []
    for chosen in draws:
        labels = np.zeros(len(scores))
        labels[chosen] = 1
        aucs.append(roc_auc_score(labels, scores))
    assert low == pytest.approx(np.quantile(aucs, 0.025)) and high == pytest.approx(np.quantile(aucs, 0.975))
    assert low < 0.5 < high


def test_tpr_is_reported_only_where_the_negatives_support_the_fpr():
    positive = np.arange(100, 200.0)
    assert auc_and_tpr(positive, np.arange(99.0))[1] is None  # 1% of 99 negatives is < 1 false positive
    assert auc_and_tpr(positive, np.arange(100.0))[1] == 1.0
    assert auc_and_tpr(positive, np.arange(36.0), fpr=0.05)[1] == 1.0


def test_every_auc_carries_its_null_band(data, models):
    result = _attack(data, models["in"], [models["out_a"]])
    assert result["lira_auc_null_lo"] < 0.5 < result["lira_auc_null_hi"] < result["lira_auc"]
    _, y = data
    phi = reference_free_attack(
        *models["out_b"], y[:600], y[600:], np.arange(150), np.arange(150, 600), np.arange(300), classwise=False
    )
    assert phi["phi_auc_null_lo"] <= phi["phi_auc"] <= phi["phi_auc_null_hi"]  # a never-trained model: chance
    assert phi["phi_retain_auc"] > phi["phi_retain_auc_null_hi"]


def test_undecided_pairs_equal_a_count_over_every_pair():
    """Share and AUC credit of the pairs tied in the target's signal or in the score, against a double loop."""
    from unlearnbench.evaluation.oracle_mia import undecided_pairs

    rng = np.random.default_rng(8)
    positive, negative = rng.integers(0, 6, 40).astype(float), rng.integers(0, 6, 30).astype(float)
    signal_positive, signal_negative = rng.integers(0, 4, 40).astype(float), rng.integers(0, 4, 30).astype(float)
    share = credit = 0.0
    for p, sp in zip(positive, signal_positive, strict=True):
        for n, sn in zip(negative, signal_negative, strict=True):
            if p == n or sp == sn:
                share += 1
                credit += 0.5 if p == n else float(p > n)
    pairs = len(positive) * len(negative)
    assert undecided_pairs(positive, negative, signal_positive, signal_negative) == pytest.approx(
        (share / pairs, credit / pairs)
    )


def test_a_destroyed_model_is_degenerate_not_chance(data, models):
    """Class-wise, F = the train samples of class 0: a model whose outputs no longer depend on its input (huge,
    identical logits for every sample) orders no (F, test) pair of that class, so the AUC would be the reference's
    alone (here 0.5 ± noise, the oracle's target). Reported degenerate, with the share of undecided pairs."""
    _, y = data
    forget = np.flatnonzero(y[:600] == 0)
    destroyed = np.tile([4.4e6, -4.6e4, 0.0, 1e5, -2e6, 3.0, 7e5, -1.0, 2e4, 9e3], (900, 1)).astype(np.float32)
    destroyed = (destroyed[:600], destroyed[600:])

    def attack(target, reference):
        return oracle_referenced_attack(target, [reference], y[:600], y[600:], forget, classwise=True)

    result = attack(destroyed, models["out_a"])
    assert result["lira_auc"] is None and result["lira_tpr_at_1fpr"] is None
    assert result["lira_auc_ties"] == 1.0
    assert attack(destroyed, destroyed)["lira_auc"] is None  # every score tied too
    healthy = attack(models["in"], models["out_a"])
    assert healthy["lira_auc"] > healthy["lira_auc_null_hi"] and healthy["lira_auc_ties"] == 0.0
