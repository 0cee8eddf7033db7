"""Every request metric against an independent numpy/scikit-learn computation on the same logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import accuracy_score
from sklearn.svm import SVC

from unlearnbench.evaluation.evaluator import EvalLogits, compute_logits
from unlearnbench.evaluation.keys import GAP_ACC, gap_keys, significant
from unlearnbench.evaluation.scoring import avg_gap, request_scores, stream_summary
from unlearnbench.records import RequestRecord
from unlearnbench.streams import RequestStream
from unlearnbench.training import build_model


def _numpy_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (shifted / shifted.sum(axis=1, keepdims=True))[np.arange(len(labels)), labels]


@pytest.fixture
def fixed_logits(digits):
    rng = np.random.default_rng(0)
    train_labels, test_labels = digits.train.labels.numpy(), digits.test.labels.numpy()
    # Mostly right, with label noise, and sharper on half the classes: non-trivial accuracies and MIA.
    train = rng.normal(size=(len(train_labels), 10)) + 4.0 * np.eye(10)[train_labels] * rng.uniform(
        0, 1.5, (len(train_labels), 1)
    )
    test = rng.normal(size=(len(test_labels), 10)) + 2.0 * np.eye(10)[test_labels] * rng.uniform(
        0, 1.5, (len(test_labels), 1)
    )
    return EvalLogits(train.astype(np.float32), test.astype(np.float32))


@pytest.mark.parametrize(("kind", "size"), [("classwise", 2), ("random", 0.05)])
def test_request_scores_equal_an_independent_computation(digits, fixed_logits, kind, size):
    stream = RequestStream(digits, kind, 3, size, seed=1)
    train_labels, test_labels = digits.train.labels.numpy(), digits.test.labels.numpy()
    request = stream.requests[1]
    scores = request_scores(fixed_logits, train_labels, test_labels, request, stream.requests, 10, mia_seed=5)

    def acc(logits, labels):
        return 100.0 * accuracy_score(labels, logits.argmax(axis=1))

    train, test = fixed_logits.train, fixed_logits.test
    assert scores["forget_acc"] == pytest.approx(acc(train[request.forget], train_labels[request.forget]))
    assert scores["retain_acc"] == pytest.approx(acc(train[request.retain], train_labels[request.retain]))
    assert scores["test_acc"] == pytest.approx(acc(test[request.test_retain], test_labels[request.test_retain]))
    for s, other in enumerate(stream.requests):
        assert scores["history"][s] == pytest.approx(acc(train[other.forget], train_labels[other.forget]))
    if kind == "classwise":
        assert scores["forget_test_acc"] == pytest.approx(
            acc(test[request.test_forget], test_labels[request.test_forget])
        )
    else:
        assert "forget_test_acc" not in scores

    # The SVC attack, re-implemented from its definition in the README with the same seeded draws.
    rng = np.random.default_rng(5)
    member = _numpy_confidence(train, train_labels)[request.retain]
    nonmember = _numpy_confidence(test, test_labels)[request.test_retain]
    n = min(len(member), len(nonmember))
    x = np.concatenate([rng.choice(member, n, replace=False), rng.choice(nonmember, n, replace=False)])
    attack = SVC(C=3, gamma="auto", kernel="rbf").fit(x[:, None], np.r_[np.ones(n), np.zeros(n)])
    target = _numpy_confidence(train, train_labels)[request.forget]
    assert scores["mia_member_rate"] == pytest.approx(100.0 * attack.predict(target[:, None]).mean())
    assert 0.0 < scores["mia_member_rate"] < 100.0, "the fixture should give a non-degenerate attack"


def test_gap_is_the_mean_absolute_difference_over_reported_keys():
    method = {"forget_acc": 10.0, "retain_acc": 90.0, "test_acc": 80.0, "mia_member_rate": 5.0, "forget_test_acc": None}
    oracle = {"forget_acc": 0.0, "retain_acc": 100.0, "test_acc": 85.0, "mia_member_rate": 1.0, "forget_test_acc": 0.0}
    assert avg_gap(method, oracle) == pytest.approx(np.mean([10, 10, 5, 4]))
    method["forget_test_acc"] = 3.0
    assert avg_gap(method, oracle) == pytest.approx(np.mean([10, 10, 5, 4, 3]))


def test_stream_summary_forward_and_backward_failure():
    history = [[0.0, 90.0, 95.0], [30.0, 10.0, 90.0], [5.0, 40.0, 20.0]]
    rows = [
        RequestRecord(
            t=t + 1,
            status="ok",
            forget_classes=None,
            method={"forget_acc": history[t][t], "history": history[t], "gap": g},
            oracle={"forget_acc": o},
            single_shot=None,
        )
        for t, (g, o) in enumerate([(1.0, 0.0), (2.0, 0.0), (4.0, 2.0)])
    ]
    summary = stream_summary(rows)
    assert summary["forget_drift"] == pytest.approx(20.0)
    assert summary["forget_drift_vs_oracle"] == pytest.approx(18.0)
    assert "forward_failure" not in summary  # no single-shot counterfactual in these rows
    regressions = [30.0 - 0.0, 5.0 - 0.0, 40.0 - 10.0]
    assert summary["backward_failure_max"] == pytest.approx(max(regressions))
    assert summary["backward_failure_mean"] == pytest.approx(np.mean(regressions))
    assert summary["mean_gap"] == pytest.approx(7.0 / 3)


def test_evaluator_is_one_deterministic_eval_mode_pass(digits):
    model = build_model("smallcnn", digits).train()
    first, second = compute_logits(model, digits), compute_logits(model, digits)
    assert model.training, "the model's mode is restored"
    assert first.train.shape == (len(digits.train), 10) and first.test.shape == (len(digits.test), 10)
    np.testing.assert_array_equal(first.train, second.train)
    assert math.isfinite(float(first.test.sum()))


def _clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy.stats import beta

    a = 1 - level
    low = 0.0 if k == 0 else beta.ppf(a / 2, k, n - k + 1)
    high = 1.0 if k == n else beta.ppf(1 - a / 2, k + 1, n - k)
    return 100 * low, 100 * high


@pytest.mark.parametrize(
    ("kind", "size", "protocol"), [("classwise", 2, "salun"), ("classwise", 2, "loft"), ("random", 0.05, "salun")]
)
def test_svc_validity_and_advantage_equal_an_independent_computation(digits, fixed_logits, kind, size, protocol):
    from sklearn.metrics import balanced_accuracy_score

    stream = RequestStream(digits, kind, 3, size, seed=1)
    train_labels, test_labels = digits.train.labels.numpy(), digits.test.labels.numpy()
    request = stream.requests[1]
    scores = request_scores(
        fixed_logits, train_labels, test_labels, request, stream.requests, 10, mia_seed=5, mia_protocol=protocol
    )
    train_conf = _numpy_confidence(fixed_logits.train, train_labels)
    test_conf = _numpy_confidence(fixed_logits.test, test_labels)
    pool = request.test_retain if protocol == "salun" else np.arange(len(test_labels))
    member, nonmember = train_conf[request.retain], test_conf[pool]

    # the papers' number, with the protocol's non-members
    rng = np.random.default_rng(5)
    n = min(len(member), len(nonmember))
    x = np.concatenate([rng.choice(member, n, replace=False), rng.choice(nonmember, n, replace=False)])
    attack = SVC(C=3, gamma="auto", kernel="rbf").fit(x[:, None], np.r_[np.ones(n), np.zeros(n)])
    assert scores["mia_member_rate"] == pytest.approx(
        100.0 * attack.predict(train_conf[request.forget][:, None]).mean()
    )

    # validity: fit on half A, balanced accuracy on half B, exact binomial interval
    rng = np.random.default_rng([5, 1])
    m = min(len(member), len(nonmember)) // 2
    pm, pn = rng.permutation(len(member)), rng.permutation(len(nonmember))
    a_x = np.r_[member[pm[:m]], nonmember[pn[:m]]]
    half = SVC(C=3, gamma="auto", kernel="rbf").fit(a_x[:, None], np.r_[np.ones(m), np.zeros(m)])
    b_x, b_y = np.r_[member[pm[m : 2 * m]], nonmember[pn[m : 2 * m]]], np.r_[np.ones(m), np.zeros(m)]
    predicted = half.predict(b_x[:, None])
    assert scores["mia_validity"] == pytest.approx(100.0 * balanced_accuracy_score(b_y, predicted))
    low, high = _clopper_pearson(int((predicted == b_y).sum()), 2 * m)
    assert (scores["mia_validity_lo"], scores["mia_validity_hi"]) == (pytest.approx(low), pytest.approx(high))

    # advantage: member rate on F_t minus on unseen same-class samples the half-A SVC was not fit on
    if kind == "classwise":
        unseen = np.flatnonzero(np.isin(test_labels, request.forget_classes))
        unseen = unseen[~np.isin(unseen, pool[pn[:m]])]
        assert protocol == "loft" or len(unseen) == np.isin(test_labels, request.forget_classes).sum()
        unseen_conf = test_conf[unseen]
    else:
        unseen_conf = nonmember[pn[m : 2 * m]]
    expected = 100.0 * (
        half.predict(train_conf[request.forget][:, None]).mean() - half.predict(unseen_conf[:, None]).mean()
    )
    assert scores["mia_advantage"] == pytest.approx(expected)

    # its null interval: the same difference with "F_t" and "unseen" relabelled at random over the pooled calls
    calls = np.r_[half.predict(train_conf[request.forget][:, None]), half.predict(unseen_conf[:, None])]
    n_forget, n_unseen = len(request.forget), len(unseen_conf)
    shuffled = np.random.default_rng(9).permuted(np.tile(calls, (20000, 1)), axis=1)
    differences = 100.0 * (shuffled[:, :n_forget].mean(axis=1) - shuffled[:, n_forget:].mean(axis=1))
    step = 100.0 / n_forget + 100.0 / n_unseen  # one sample moved from one side to the other
    for key, quantile in (("mia_advantage_null_lo", 0.025), ("mia_advantage_null_hi", 0.975)):
        assert scores[key] == pytest.approx(np.quantile(differences, quantile), abs=step)


def _advantage(target: np.ndarray, seed: int) -> dict:
    """The SVC advantage of a model whose members (retain) are confident (p_y in [0.9, 1]) and non-members
    less so, on forget samples `target`, against 60 unseen samples of the non-members' kind."""
    from unlearnbench.evaluation.mia import svc_validity_and_advantage

    rng = np.random.default_rng(seed)
    members, nonmembers = rng.uniform(0.9, 1.0, 400), rng.uniform(0.2, 0.95, 400)
    unseen = rng.uniform(0.2, 0.95, 60)
    return svc_validity_and_advantage(
        members, nonmembers, np.arange(400), target, np.arange(400, 460), unseen, np.random.default_rng(seed)
    )


@pytest.mark.parametrize("seed", range(5))
def test_svc_advantage_interval_holds_zero_without_membership_and_excludes_it_with(seed):
    """F_t never seen (its confidences drawn like the unseen samples'): the interval contains 0 and the
    advantage; F_t memorized (drawn like the members'): the advantage lies above the interval."""
    rng = np.random.default_rng(100 + seed)
    never_seen = _advantage(rng.uniform(0.2, 0.95, 150), seed)
    assert never_seen["mia_advantage_null_lo"] < 0 < never_seen["mia_advantage_null_hi"]
    assert never_seen["mia_advantage_null_lo"] <= never_seen["mia_advantage"] <= never_seen["mia_advantage_null_hi"]
    memorized = _advantage(rng.uniform(0.9, 1.0, 150), seed)
    assert memorized["mia_advantage"] > memorized["mia_advantage_null_hi"] > 0


def test_gap_acc_leaves_the_attack_out():
    method = {"forget_acc": 10.0, "retain_acc": 90.0, "test_acc": 80.0, "mia_member_rate": 5.0, "forget_test_acc": 3.0}
    oracle = {"forget_acc": 0.0, "retain_acc": 100.0, "test_acc": 85.0, "mia_member_rate": 95.0, "forget_test_acc": 0.0}
    assert avg_gap(method, oracle, gap_keys(GAP_ACC)) == pytest.approx(np.mean([10, 10, 5, 3]))
    assert avg_gap(method, oracle) == pytest.approx(np.mean([10, 10, 5, 90, 3]))


def test_backward_failure_vs_oracle_subtracts_the_oracles_history():
    method_history = [[0.0, 90.0, 95.0], [30.0, 10.0, 90.0], [5.0, 40.0, 20.0]]
    oracle_history = [[1.0, 95.0, 96.0], [20.0, 2.0, 91.0], [9.0, 25.0, 3.0]]
    rows = [
        RequestRecord(
            t=t + 1,
            status="ok",
            forget_classes=None,
            method={"forget_acc": method_history[t][t], "history": method_history[t], "gap": 1.0, "gap_acc": 2.0},
            oracle={"forget_acc": oracle_history[t][t], "history": oracle_history[t]},
            single_shot=None,
        )
        for t in range(3)
    ]
    summary = stream_summary(rows)
    corrected = [method_history[t][s] - oracle_history[t][s] for t in range(3) for s in range(t)]
    assert summary["backward_failure_vs_oracle_max"] == pytest.approx(max(corrected))
    assert summary["backward_failure_vs_oracle_mean"] == pytest.approx(np.mean(corrected))
    raw = [method_history[t][s] - method_history[s][s] for t in range(3) for s in range(t)]
    assert summary["backward_failure_max"] == pytest.approx(max(raw))
    assert summary["mean_gap_acc"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(40.0, 60.0, False), (50.0, 70.0, False), (51.0, 60.0, True), (30.0, 45.0, True), (None, 60.0, False)],
)
def test_validity_is_significant_only_when_its_interval_excludes_chance(low, high, expected):
    assert significant(low, high) is expected
