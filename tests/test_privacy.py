"""The ε score, offline RMIA and ToW on constructed cases with a known answer, and against transcriptions."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from unlearnbench.evaluation.oracle_mia import auc_and_tpr
from unlearnbench.evaluation.privacy import (
    DELTA,
    EPSILON_CAP,
    bucket_points,
    eps_score,
    example_epsilons,
    forget_score,
    rmia_attack,
    rmia_scores,
    tow,
    tow_scores,
)
from unlearnbench.records import RequestRecord


def test_identical_distributions_score_one():
    phi = np.random.default_rng(0).normal(size=(8, 40))
    assert (example_epsilons(phi, phi.copy()) == 0).all()
    assert forget_score(phi, phi.copy()) == 1.0


def test_perfectly_separated_distributions_score_zero():
    rng = np.random.default_rng(1)
    retrained = rng.normal(size=(8, 30))
    unlearned = retrained + 20.0  # same spread, no overlap
    assert (example_epsilons(unlearned, retrained) == EPSILON_CAP).all()
    assert forget_score(unlearned, retrained) == 0.0


def test_known_overlap_by_hand():
    """N = 3. Example 0: retrained {0, 1, 2}, unlearned {1.5, 2.5, 3.5}: the best rule errs on one model
    each side (FPR = FNR = 1/3), so ε = log((1 − δ − 1/3) / (1/3)) = log(2 − 3δ) ≈ 0.693: bucket
    [0.5, 1), ½ point. Example 1: the same values on both sides, ε = 0, 1 point. Example 2: no
    overlap, ε = 50, 0 points. F = (½ + 1 + 0) / 3."""
    retrained = np.array([[0.0, 5.0, 0.0], [1.0, 6.0, 1.0], [2.0, 7.0, 2.0]])
    unlearned = np.array([[1.5, 5.0, 30.0], [2.5, 6.0, 31.0], [3.5, 7.0, 32.0]])
    epsilons = example_epsilons(unlearned, retrained)
    assert epsilons[0] == pytest.approx(math.log(2 - 3 * DELTA), rel=1e-12)
    assert epsilons[1:].tolist() == [0.0, EPSILON_CAP]
    assert forget_score(unlearned, retrained) == pytest.approx(0.5, abs=1e-12)
    utility = {"retain_acc": [90.0, 90.0, 90.0], "test_acc": [70.0, 80.0, 90.0]}
    reference = {"retain_acc": [100.0] * 3, "test_acc": [100.0] * 3}
    scores = eps_score(unlearned, retrained, utility, reference)
    assert scores == pytest.approx({"eps_forget_score": 0.5, "eps_score": 0.5 * 0.9 * 0.8})


def test_peaky_unlearned_distribution_gets_the_cap():
    retrained = np.array([[0.0], [1.0], [2.0], [3.0]])
    unlearned = np.array([[1.5], [1.5], [1.5], [1.501]])  # range under 1% of the other's
    assert example_epsilons(unlearned, retrained).tolist() == [EPSILON_CAP]


def test_bucket_points_follow_the_challenge():
    # N = 8: buckets stop at ceil(log 7) = 2, so [0, .5) 1, [.5, 1) ½, [1, 1.5) ¼, [1.5, 2) ⅛, beyond 0
    assert [bucket_points(e, 8) for e in (0.0, 0.49, 0.5, 1.2, 1.99, 2.0, 50.0)] == [1, 1, 0.5, 0.25, 0.125, 0, 0]
    # N = 512 (the challenge): ceil(log 511) = 7, fourteen buckets
    assert bucket_points(6.9, 512) == 0.5**13 and bucket_points(7.0, 512) == 0


def test_fewer_than_three_models_are_refused():
    with pytest.raises(ValueError, match="N >= 3"):
        forget_score(np.zeros((2, 4)), np.ones((2, 4)))


def _reference_epsilons(pos_all: np.ndarray, neg_all: np.ndarray) -> np.ndarray:
    """A transcription of `_get_epsilons` of google-deepmind/unlearning_evaluation `metric.py` (numpy,
    dense comparisons of every model with every threshold, as the reference does on the GPU)."""
    epsilons = []
    for i in range(pos_all.shape[1]):
        pos, neg = pos_all[:, i], neg_all[:, i]
        pos_diff, neg_diff = np.ptp(pos), np.ptp(neg)
        largest, smallest = max(pos_diff, neg_diff), min(pos_diff, neg_diff)
        if smallest / largest < 0.01:
            epsilons.append(50.0)
            continue
        # double threshold: the peakier side is "positive"
        p, n = (neg, pos) if pos_diff >= neg_diff else (pos, neg)
        width = smallest
        lo, hi = p.min() + width - 2.0, p.max() + 2.0
        right = np.linspace(lo, hi, int(np.ceil((hi - lo) * 100)))
        left = np.concatenate([np.linspace(r - width - 2.0, r - width + 2.0, 400) for r in right])
        right = np.repeat(right, 400)
        inside_p = (left[None] <= p[:, None]) & (p[:, None] <= right[None])
        inside_n = (left[None] <= n[:, None]) & (n[:, None] <= right[None])
        rates_d = inside_p.mean(0), (~inside_p).mean(0), inside_n.mean(0), (~inside_n).mean(0)
        # single threshold
        everything = np.concatenate([pos, neg])
        thresholds = np.linspace(everything.min(), everything.max(), int(np.ceil(np.ptp(everything) * 100)))
        rates_s = (
            (pos[:, None] >= thresholds).mean(0),
            (pos[:, None] < thresholds).mean(0),
            (neg[:, None] >= thresholds).mean(0),
            (neg[:, None] < thresholds).mean(0),
        )
        tpr, fnr, fpr, tnr = (np.concatenate([d, s]) for d, s in zip(rates_d, rates_s, strict=True))
        eps = np.zeros(len(tpr))
        eps[(fpr + fnr == 0) & (tpr + tnr == 2)] = np.inf
        eps[(eps == 0) & (fpr * fnr == 0)] = np.nan
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: both logs of ≤ 0
            bound = np.clip(
                np.nanmax([np.log(1 - DELTA - fpr) - np.log(fnr), np.log(1 - DELTA - fnr) - np.log(fpr)], axis=0),
                0,
                None,
            )
        eps = np.where(eps == 0, bound, eps)
        eps = eps[~np.isnan(eps)]
        assert len(eps)
        epsilons.append(np.nanmax(eps))
    return np.clip(epsilons, 0, 50)


def _reference_forget_score(unlearned: np.ndarray, retrained: np.ndarray) -> float:
    """A transcription of `compute_forget_score_from_confs` (same file)."""
    retrain_is_positive = np.median(retrained, axis=0) > np.median(unlearned, axis=0)
    eps = _reference_epsilons(
        np.where(retrain_is_positive, retrained, unlearned), np.where(retrain_is_positive, unlearned, retrained)
    )
    max_epsilon = np.ceil(np.log(unlearned.shape[0] - 1))
    buckets, start, points = {}, 0.0, 1.0
    while start + 0.5 <= max_epsilon:
        buckets[start], points, start = points, points / 2, start + 0.5
    score = 0.0
    for e in eps:
        for begin, value in buckets.items():
            if e < begin + 0.5:
                score += value
                break
    return score / unlearned.shape[1]


@pytest.mark.parametrize("models", [3, 6])
def test_epsilons_match_a_transcription_of_the_reference(models):
    rng = np.random.default_rng(models)
    examples = 25
    retrained = rng.normal(size=(models, examples)) * rng.uniform(0.3, 2.0, examples)
    shift = rng.choice([0.0, 0.5, 1.5, 4.0], examples)
    unlearned = rng.normal(size=(models, examples)) * rng.uniform(0.3, 2.0, examples) + shift
    unlearned[:, 0] = unlearned[0, 0] + np.arange(models) * 1e-4  # a peaky one
    np.testing.assert_allclose(
        example_epsilons(unlearned, retrained), _reference_epsilons_oriented(unlearned, retrained), rtol=1e-9
    )
    assert forget_score(unlearned, retrained) == pytest.approx(_reference_forget_score(unlearned, retrained))


def _reference_epsilons_oriented(unlearned, retrained):
    retrain_is_positive = np.median(retrained, axis=0) > np.median(unlearned, axis=0)
    return _reference_epsilons(
        np.where(retrain_is_positive, retrained, unlearned), np.where(retrain_is_positive, unlearned, retrained)
    )


def _reference_rmia(target_x, reference_x, target_z, reference_z, a=0.3):
    """ml_privacy_meter `run_rmia` with every reference OUT: mean over z of LR(x)/LR(z) > 1."""
    ratio_x = target_x / ((1 + a) / 2 * reference_x.mean(0) + (1 - a) / 2)
    ratio_z = target_z / ((1 + a) / 2 * reference_z.mean(0) + (1 - a) / 2)
    return np.average((ratio_x[:, None] / ratio_z) > 1.0, axis=1)


def test_rmia_scores_match_the_reference_formula():
    """Ours take log p_y and compare log LR; the reference compares LR in probabilities: the same scores."""
    rng = np.random.default_rng(3)
    target_x, target_z = rng.uniform(0.01, 1, 50), rng.uniform(0.01, 1, 200)
    reference_x, reference_z = rng.uniform(0.01, 1, (4, 50)), rng.uniform(0.01, 1, (4, 200))
    np.testing.assert_array_equal(
        rmia_scores(*map(np.log, (target_x, reference_x, target_z, reference_z))),
        _reference_rmia(target_x, reference_x, target_z, reference_z),
    )


def test_rmia_never_compares_a_sample_with_itself():
    target_z, reference_z = np.log([0.9, 0.5, 0.1]), np.log(np.full((1, 3), 0.5))
    scores = rmia_scores(target_z, reference_z, target_z, reference_z, x_in_population=np.arange(3))
    assert scores.tolist() == [1.0, 0.5, 0.0]  # of the two others: above both, one, none


def test_rmia_auc_is_chance_between_two_oracles_and_high_for_a_memorizing_model():
    """Two models that never saw F (alike per sample, up to noise) vs one far more confident on F only."""
    rng = np.random.default_rng(4)
    forget, population = 150, 400
    reference = rng.beta(4, 2, forget), rng.beta(4, 2, population)

    def auc(target):
        x, z, reference_x, reference_z = (
            np.log(target[0]),
            np.log(target[1]),
            np.log(reference[0]),
            np.log(reference[1]),
        )
        positive = rmia_scores(x, reference_x[None], z, reference_z[None])
        negative = rmia_scores(z, reference_z[None], z, reference_z[None], np.arange(population))
        return auc_and_tpr(positive, negative)[0]

    other_oracle = tuple(np.clip(p + rng.normal(0, 0.05, len(p)), 0.01, 0.99) for p in reference)
    assert abs(auc(other_oracle) - 0.5) < 0.07
    memorizing = (1 - (1 - reference[0]) * 0.2, other_oracle[1])
    assert auc(memorizing) > 0.9


def test_rmia_attack_on_logits_finds_a_forgotten_class_remembered():
    """Class-wise: F = train samples of class 0; the target still classifies them, the oracle does not."""
    rng = np.random.default_rng(5)
    train_labels, test_labels = rng.integers(0, 3, 300), rng.integers(0, 3, 150)

    def logits(labels, knows_class_0):
        z = rng.normal(size=(len(labels), 3))
        z[np.arange(len(labels)), labels] += np.where((labels == 0) & ~knows_class_0, -2.0, 3.0)
        return z

    forget = np.flatnonzero(train_labels == 0)
    oracle = (logits(train_labels, False), logits(test_labels, False))
    remembers = (logits(train_labels, True), logits(test_labels, False))  # F's class unseen on test
    result = rmia_attack(remembers, [oracle], train_labels, test_labels, forget, classwise=True)
    assert result["rmia_auc"] > 0.9 and result["rmia_auc_null_hi"] < result["rmia_auc"]
    other_oracle = (logits(train_labels, False), logits(test_labels, False))
    null = rmia_attack(other_oracle, [oracle], train_labels, test_labels, forget, classwise=True)
    assert null["rmia_auc_null_lo"] < null["rmia_auc"] < null["rmia_auc_null_hi"]
    assert null["rmia_tpr_at_1fpr"] is None  # ~50 negatives: no threshold has 1% false positives


def test_tow_on_hand_numbers():
    method = {"forget_acc": 10.0, "retain_acc": 90.0, "test_acc": 80.0, "mia_member_rate": 50.0}
    oracle = {"forget_acc": 0.0, "retain_acc": 100.0, "test_acc": 85.0, "mia_member_rate": 20.0}
    assert tow_scores(method, oracle) == pytest.approx({"tow": 0.9 * 0.9 * 0.95, "tow_mia": 0.7 * 0.9 * 0.95})
    assert tow(oracle, oracle) == 1.0
    assert tow({**method, "test_acc": None}, oracle) is None


def _write_chain(
    path, logits: list[dict], rows: list[RequestRecord], requests: list[dict], labels, unlearn_seed: int
) -> None:
    """A run directory as `--save-logits` leaves it, holding only what `chain_privacy` reads: chain `unlearn_seed`
    of seed 0."""
    import json

    import yaml

    identity = {
        "method": "finetune",
        "method_args": {"lr": 0.01},
        "stream": "random",
        "size": 0.1,
        "requests": len(requests),
        "dataset": "digits",
        "arch": "smallcnn",
        "seed": 0,
        "oracle": "retrain",
        "mia_protocol": "salun",
        "recipe": {"epochs": 4},
        "precision": "32-true",
        **({"unlearn_seed": unlearn_seed} if unlearn_seed else {}),
    }
    (path / "logits").mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(identity))
    (path / "manifest.json").write_text(json.dumps({"requests": requests}))
    np.savez(path / "labels.npz", train=labels[0], test=labels[1])
    (path / "metrics.jsonl").write_text("".join(json.dumps(row.to_json()) + "\n" for row in rows))
    for t, arrays in enumerate(logits, start=1):
        np.savez(path / "logits" / f"t{t:03d}.npz", **arrays)


def _tow_inputs(train: np.ndarray, test: np.ndarray, labels, requests: list[dict], t: int) -> dict:
    """ToW's inputs as a row holds them after request t, computed apart from the package's scoring: accuracies
    by argmax; the SVC member rate seeded as `Runner.score` seeds it (seed 0)."""
    from unlearnbench.evaluation.mia import svc_member_rate, true_label_confidence
    from unlearnbench.seeds import attack_seed

    forget = np.asarray(requests[t - 1]["forget"])
    retain = np.setdiff1d(np.arange(len(labels[0])), np.concatenate([r["forget"] for r in requests[:t]]))
    test_retain = np.setdiff1d(np.arange(len(labels[1])), requests[t - 1]["test_forget"])

    def accuracy(logits, indices, split_labels):
        return 100.0 * float(np.mean(logits[indices].argmax(axis=1) == split_labels[indices]))

    train_p, test_p = true_label_confidence(train, labels[0]), true_label_confidence(test, labels[1])
    member = svc_member_rate(
        train_p[retain], test_p[test_retain], train_p[forget], np.random.default_rng(attack_seed(0, t))
    )
    return {
        "forget_acc": accuracy(train, forget, labels[0]),
        "retain_acc": accuracy(train, retain, labels[0]),
        "test_acc": accuracy(test, test_retain, labels[1]),
        "mia_member_rate": member,
    }


def _tow_by_hand(method: dict, oracle: dict, key: str = "forget_acc") -> float:
    return float(np.prod([1 - abs(method[k] - oracle[k]) / 100 for k in (key, "retain_acc", "test_acc")]))


def test_chain_privacy_on_hand_built_run_directories(tmp_path):
    """Three chains whose models *are* the three oracles (F = 1, ε score = 1), and three that still hold
    F_1 and F_2 at +20 on the true logit (every example separated: F = 0), over T = 2 requests; written in
    reverse unlearn-seed order, which `chain_privacy` undoes."""
    from unlearnbench.evaluation.chains import chain_privacy
    from unlearnbench.evaluation.privacy import eps_floor

    rng = np.random.default_rng(7)
    labels = (rng.integers(0, 3, 200), rng.integers(0, 3, 150))
    forget = [np.arange(0, 20), np.arange(20, 40)]
    requests = [
        {"t": t, "forget": f.tolist(), "forget_classes": None, "test_forget": []} for t, f in enumerate(forget, 1)
    ]
    # a class-biased logit per oracle, so that the oracles' accuracies differ and so does ToW's pairing
    oracles = [
        [
            (rng.normal(size=(200, 3)) + np.array([0, k, 0]), rng.normal(size=(150, 3)) + np.array([0, k, 0]))
            for k in range(3)
        ]
        for _ in forget
    ]

    def chains(boost: float) -> tuple[list, list]:
        paths, inputs = [], []
        for j in reversed(range(3)):
            saved, rows, chain_inputs = [], [], []
            for t, models in enumerate(oracles, start=1):
                train = models[j][0].copy()
                held = np.concatenate(forget[:t])
                train[held, labels[0][held]] += boost
                names = {"oracle": models[0], "oracle1": models[1], "oracle2": models[2]}
                arrays = {
                    f"{name}_{split}": z[i] for name, z in names.items() for i, split in enumerate(("train", "test"))
                }
                saved.append({"method_train": train, "method_test": models[j][1], **arrays})
                chain_inputs.append(_tow_inputs(train, models[j][1], labels, requests, t))
                row_oracle = _tow_inputs(*models[0], labels, requests, t)
                rows.append(RequestRecord(t, "ok", None, chain_inputs[-1], row_oracle, None))
            path = tmp_path / f"boost{boost}-chain{j}"
            _write_chain(path, saved, rows, requests, labels, unlearn_seed=j)
            paths.append(path)
            inputs.insert(0, chain_inputs)
        return paths, inputs

    same_paths, _ = chains(0.0)
    same = chain_privacy(same_paths)
    assert [r["eps_forget_score"] for r in same["requests"]] == [1.0, 1.0]
    assert [r["eps_score"] for r in same["requests"]] == [1.0, 1.0]
    assert [r["eps_forget_floor"] for r in same["requests"]] == [eps_floor(3)] * 2
    assert same["backward_eps"] == [[1.0], [1.0, 1.0]]
    for t, request in enumerate(same["requests"], start=1):
        # chain i is oracle i: against its own oracle its ToW is exactly 1 (against oracle 0 it would not be)
        assert [request["tow"], request["tow_mia"]] == pytest.approx([1.0, 1.0], abs=1e-6)  # accuracies in float32
        oracle_inputs = [_tow_inputs(*models, labels, requests, t) for models in oracles[t - 1]]
        pairs = [(oracle_inputs[i], oracle_inputs[j]) for i in range(3) for j in range(i + 1, 3)]
        assert request["tow_oracles"] == pytest.approx(np.mean([_tow_by_hand(*pair) for pair in pairs]))
        assert request["tow_mia_oracles"] == pytest.approx(
            np.mean([_tow_by_hand(*pair, "mia_member_rate") for pair in pairs])
        )
        assert request["tow_oracles"] < 1.0
    references = [(z[0], z[1]) for z in oracles[1]]
    assert (
        same["requests"][1]["rmia_auc_chains"][2]
        == rmia_attack((oracles[1][2][0], oracles[1][2][1]), references, *labels, forget[1], classwise=False)[
            "rmia_auc"
        ]
    )
    held_paths, held_inputs = chains(20.0)
    held = chain_privacy(held_paths)
    for t, request in enumerate(held["requests"], start=1):
        oracle_inputs = [_tow_inputs(*models, labels, requests, t) for models in oracles[t - 1]]
        paired = [(held_inputs[i][t - 1], oracle_inputs[i]) for i in range(3)]
        assert request["tow"] == pytest.approx(np.mean([_tow_by_hand(*pair) for pair in paired]))
        assert request["tow_mia"] == pytest.approx(np.mean([_tow_by_hand(*pair, "mia_member_rate") for pair in paired]))
    assert held["backward_eps"] == [[0.0], [0.0, 0.0]]  # F_1 still identifiable at t = 2
    assert all(auc > 0.9 for row in held["backward_rmia"] for auc in row)


def test_chains_against_more_oracles_use_the_first_k_and_fewer_are_refused(tmp_path):
    """3 chains saved with 4 oracles per request (`--oracle-seeds 4`) give exactly what the same chains saved with
    the first 3 give (the oracles `--oracle-seeds 3` trains): the ε score counts 3 a side, RMIA has 3 references,
    ToW pairs chain i with oracle i. Saved with 2, they are refused."""
    from unlearnbench.evaluation.chains import chain_privacy

    rng = np.random.default_rng(5)
    labels = (rng.integers(0, 3, 120), rng.integers(0, 3, 90))
    requests = [{"t": 1, "forget": list(range(12)), "forget_classes": None, "test_forget": []}]
    oracles = [(rng.normal(size=(120, 3)), rng.normal(size=(90, 3))) for _ in range(4)]
    chains = [(rng.normal(size=(120, 3)) + 0.5 * k, rng.normal(size=(90, 3))) for k in range(3)]
    scores = {"forget_acc": 40.0, "retain_acc": 90.0, "test_acc": 80.0, "mia_member_rate": 50.0}

    def saved_with(count: int) -> list:
        paths = []
        for j, (train, test) in enumerate(chains):
            arrays = {
                f"oracle{k or ''}_{split}": oracles[k][i]
                for k in range(count)
                for i, split in enumerate(("train", "test"))
            }
            path = tmp_path / f"oracles{count}-chain{j}"
            rows = [RequestRecord(1, "ok", None, scores, scores, None)]
            _write_chain(path, [{"method_train": train, "method_test": test, **arrays}], rows, requests, labels, j)
            paths.append(path)
        return paths

    more, exact = chain_privacy(saved_with(4)), chain_privacy(saved_with(3))
    assert more == exact and more["requests"][0]["eps_forget_floor"] is not None
    with pytest.raises(ValueError, match="3 chains need at least 3 oracles per request"):
        chain_privacy(saved_with(2))


def test_chain_privacy_with_a_sparse_oracle_schedule_scores_only_the_requests_with_oracles(tmp_path):
    """`--oracle-every 2`, T = 3: oracles at t = 2 and 3 only. Request 1 has no number (absent from
    `requests`, its backward rows None); row t = 3 scores F_1, F_2, F_3 against the oracles of t = 3,
    the chains being those oracles plus +20 on F_1 (F_1 separated, F_2 and F_3 indistinguishable)."""
    from unlearnbench.evaluation.chains import chain_privacy

    rng = np.random.default_rng(11)
    labels = (rng.integers(0, 3, 120), rng.integers(0, 3, 90))
    forget = [np.arange(0, 10), np.arange(10, 20), np.arange(20, 30)]
    requests = [
        {"t": t, "forget": f.tolist(), "forget_classes": None, "test_forget": []} for t, f in enumerate(forget, 1)
    ]
    oracles = {t: [(rng.normal(size=(120, 3)), rng.normal(size=(90, 3))) for _ in range(3)] for t in (2, 3)}
    scores = {"forget_acc": 40.0, "retain_acc": 90.0, "test_acc": 80.0, "mia_member_rate": 50.0}
    rows = [RequestRecord(t, "ok", None, scores, None if t == 1 else scores, None) for t in (1, 2, 3)]
    paths = []
    for j in range(3):
        saved = [{"method_train": rng.normal(size=(120, 3)), "method_test": rng.normal(size=(90, 3))}]
        for t in (2, 3):
            train = oracles[t][j][0].copy()
            train[forget[0], labels[0][forget[0]]] += 20.0
            names = {f"oracle{k or ''}": z for k, z in enumerate(oracles[t])}
            arrays = {f"{name}_{split}": z[i] for name, z in names.items() for i, split in enumerate(("train", "test"))}
            saved.append({"method_train": train, "method_test": oracles[t][j][1], **arrays})
        _write_chain(tmp_path / f"chain{j}", saved, rows, requests, labels, unlearn_seed=j)
        paths.append(tmp_path / f"chain{j}")

    privacy = chain_privacy(paths)
    assert [r["t"] for r in privacy["requests"]] == [2, 3]
    assert privacy["backward_eps"][0] is None and privacy["backward_rmia"][0] is None
    assert privacy["backward_eps"][1:] == [[0.0, 1.0], [0.0, 1.0, 1.0]]
    assert [r["eps_forget_score"] for r in privacy["requests"]] == [1.0, 1.0]
    for t, s, references in ((2, 0, oracles[2]), (3, 0, oracles[3]), (3, 2, oracles[3])):  # the oracles of t
        aucs = []
        for path in paths:
            with np.load(path / "logits" / f"t{t:03d}.npz") as chain:
                target = (chain["method_train"], chain["method_test"])
                aucs.append(rmia_attack(target, references, *labels, forget[s], classwise=False)["rmia_auc"])
        assert privacy["backward_rmia"][t - 1][s] == pytest.approx(np.mean(aucs))
    assert privacy["backward_rmia"][2][0] > 0.9  # F_1 still held at t = 3


#: GA's learning rate in the K = 8 test: 2 epochs on F_1 (4 steps) leave it between the pretrained model and
#: the oracles (measured: lr 0.01 -> F 0, 0.03 -> 0.03, 0.1 -> 0.09; the oracles 0.23, the pretrained model 0).
GA_TINY_LR = 0.1


@pytest.mark.slow
def test_eps_score_on_digits_with_k8_train_seeds_orders_oracles_ga_and_the_pretrained_model(tmp_path):
    """K = 8 train seeds, class-wise, one request, the tests' fast recipe: the oracles of seeds 0..3 scored
    against those of seeds 4..7 (a perfect unlearning) get the highest F, the pretrained models of seeds
    0..3, never unlearned, F clearly lower, and 4 steps of GA from them sit between.

    Not "near 1": with 4 models a side the ε of an example is the largest over hundreds of rules
    estimated from 4 samples, so even two samples of one distribution score F ~ 0.2 (docs/privacy.md);
    the oracles' F is that floor (0.23 here)."""
    from tests.conftest import tiny_config
    from unlearnbench.evaluation.oracle_mia import logit_confidence
    from unlearnbench.runner import Runner

    runners = []
    for seed in range(4):  # GA from pretrained model `seed`; its run also trains the oracle of train seed `seed`
        config = tiny_config(
            tmp_path / "runs",
            tmp_path / "store",
            "ga",
            requests=1,
            train_seed=seed,
            single_shot_every=0,
            method_args={"optim": {"lr": GA_TINY_LR, "epochs": 2}},
        )
        runners.append(Runner.from_config(config))
        runners[-1].run()
    request = runners[0].stream.select(1)
    forget, labels = np.asarray(request.forget), runners[0].train_labels

    def phi(models) -> np.ndarray:
        return np.stack([logit_confidence(runners[0].logits(m).train[forget], labels[forget]) for m in models])

    retrained = phi(runners[0].trained_model(request.forgotten, "oracle", seed) for seed in range(4, 8))
    oracles = forget_score(
        phi(r.trained_model(request.forgotten, "oracle", r.config.seeds.train_seed) for r in runners), retrained
    )
    pretrained = forget_score(phi(r.pretrained_model() for r in runners), retrained)
    ga = forget_score(phi(r.method.model for r in runners), retrained)
    assert oracles >= 0.15  # the floor of independent samples of one distribution at N = 4
    assert pretrained <= oracles - 0.15
    assert pretrained < ga < oracles


def test_chain_privacy_of_two_chains_gives_rmia_and_tow_but_no_eps(tmp_path):
    """With N = 2 the ε buckets stop at ceil(log 1) = 0 (every F would be 0): None, never 0."""
    from unlearnbench.evaluation.chains import chain_privacy

    rng = np.random.default_rng(3)
    labels = (rng.integers(0, 3, 60), rng.integers(0, 3, 40))
    requests = [{"t": 1, "forget": list(range(10)), "forget_classes": None, "test_forget": []}]
    oracles = [(rng.normal(size=(60, 3)), rng.normal(size=(40, 3))) for _ in range(2)]
    arrays = {
        f"oracle{k or ''}_{split}": z[i] for k, z in enumerate(oracles) for i, split in enumerate(("train", "test"))
    }
    for j in range(2):
        saved = [{"method_train": oracles[j][0], "method_test": oracles[j][1], **arrays}]
        scores = _tow_inputs(*oracles[j], labels, requests, 1)
        oracle = _tow_inputs(*oracles[0], labels, requests, 1)
        rows = [RequestRecord(1, "ok", None, scores, oracle, None)]
        _write_chain(tmp_path / f"chain{j}", saved, rows, requests, labels, unlearn_seed=j)
    privacy = chain_privacy([tmp_path / "chain0", tmp_path / "chain1"])
    (request,) = privacy["requests"]
    assert request["eps_forget_score"] is None and request["eps_score"] is None
    assert request["eps_forget_floor"] is None
    assert privacy["backward_eps"] == [[None]]
    assert request["tow"] == pytest.approx(1.0, abs=1e-6) and 0 <= request["rmia_auc"] <= 1  # accuracies in float32


def _classwise_logits(rng, labels: np.ndarray, separation: float) -> np.ndarray:
    z = rng.normal(size=(len(labels), 3))
    z[np.arange(len(labels)), labels] += separation
    return z


def test_rmia_of_a_destroyed_model_is_degenerate_not_chance():
    """Class-wise, F = class 0. A model destroyed into huge logits that no longer depend on the input: p_y
    rounds to 0 for every sample and, in logs, is one value per class, so the target orders no (F, test)
    pair. RMIA used to score it exactly 0.5, the oracle's target; it is degenerate, with the reason."""
    rng = np.random.default_rng(12)
    train_labels, test_labels = rng.integers(0, 3, 300), rng.integers(0, 3, 150)
    forget = np.flatnonzero(train_labels == 0)
    oracle = (_classwise_logits(rng, train_labels, 2.0), _classwise_logits(rng, test_labels, 2.0))
    destroyed = np.tile([-4.6e4, 4.4e6, 0.0], (450, 1)).astype(np.float32)
    result = rmia_attack((destroyed[:300], destroyed[300:]), [oracle], train_labels, test_labels, forget, True)
    assert result["rmia_auc"] is None and result["rmia_tpr_at_1fpr"] is None
    assert result["rmia_auc_ties"] == 1.0
    assert result["rmia_auc_null_lo"] is not None  # the band is still there to read the ties against


def test_rmia_in_logs_scores_what_underflows_in_probabilities():
    """NegGrad+ on digits: true-label margins of 4.6e4–4.4e6, p_y exactly 0 in float64 for every sample, every
    RMIA score tied (AUC exactly 0.5). In logs the margins still order the samples: here F_t's margins are the
    smaller ones, so the model still treats F_t apart from unseen samples of its class, and RMIA says so."""
    from unlearnbench.evaluation.mia import true_label_confidence

    rng = np.random.default_rng(13)
    train_labels, test_labels = rng.integers(0, 3, 300), rng.integers(0, 3, 150)
    forget = np.flatnonzero(train_labels == 0)
    oracle = (_classwise_logits(rng, train_labels, 2.0), _classwise_logits(rng, test_labels, 2.0))

    def wrecked(labels: np.ndarray, low: float, high: float) -> np.ndarray:
        z = np.zeros((len(labels), 3), dtype=np.float32)
        z[np.arange(len(labels)), (labels + 1) % 3] = rng.uniform(low, high, len(labels))  # a wrong class on top
        return z

    target = (wrecked(train_labels, 4.6e4, 1e6), wrecked(test_labels, 1e6, 4.4e6))
    assert (true_label_confidence(target[0], train_labels) == 0).all()  # what the probabilities saw
    result = rmia_attack(target, [oracle], train_labels, test_labels, forget, True)
    assert result["rmia_auc_ties"] == 0.0
    assert result["rmia_auc"] > result["rmia_auc_null_hi"] and result["rmia_auc"] > 0.9


def _reference_floor(models: int, examples: int, seed: int) -> tuple[float, float]:
    """F of two samples of one standard normal through the transcription of the reference (`metric.py`)."""
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(examples):  # one example at a time: the transcription's score is a mean over examples
        unlearned, retrained = rng.standard_normal((2, models, 1))
        points.append(_reference_forget_score(unlearned, retrained))
    return float(np.mean(points)), float(np.std(points, ddof=1) / math.sqrt(examples))


@pytest.mark.parametrize("models", [4, 8])
def test_eps_floor_table_matches_a_fresh_simulation_of_one_distribution(models):
    """The oracle-versus-oracle floor at N: two samples of one distribution, scored by the reference's own
    transcription (not by `simulated_eps_floor`, which made the table), agree within 4 standard errors."""
    from unlearnbench.evaluation.privacy import EPS_FLOOR, eps_floor

    mean, error = _reference_floor(models, 200, seed=100 + models)
    assert eps_floor(models) == EPS_FLOOR[models]
    assert abs(EPS_FLOOR[models] - mean) <= 4 * error
    assert EPS_FLOOR[models] < 0.5  # a perfect unlearning is far from F = 1 at small N


def test_eps_floor_needs_three_models():
    from unlearnbench.evaluation.privacy import eps_floor

    with pytest.raises(ValueError, match="N >= 3"):
        eps_floor(2)


@pytest.mark.slow
@pytest.mark.parametrize("models", [3, 16, 64])
def test_eps_floor_table_is_its_documented_simulation(models):
    """`EPS_FLOOR` holds `simulated_eps_floor` at its defaults, rounded: regenerated here, entry for entry."""
    from unlearnbench.evaluation.privacy import EPS_FLOOR, simulated_eps_floor

    assert EPS_FLOOR[models] == round(simulated_eps_floor(models)[0], 3)


def test_the_console_prints_degenerate_and_every_null_band():
    """An AUC the ties decided reads "degenerate" with its reason, never a number; the SVC advantage carries its
    null interval as the AUCs carry theirs."""
    from unlearnbench.console import _cell

    degenerate = {"rmia_auc": None, "rmia_auc_null_lo": 0.5, "rmia_auc_null_hi": 0.5, "rmia_auc_ties": 1.0}
    assert _cell(degenerate, "rmia_auc") == "degenerate (100% of pairs tied)"
    scored = {"lira_auc": 0.63, "lira_auc_null_lo": 0.39, "lira_auc_null_hi": 0.61, "lira_auc_ties": 0.0}
    assert _cell(scored, "lira_auc") == "0.63 [0.39, 0.61]"
    advantage = {"mia_advantage": 5.0, "mia_advantage_null_lo": -12.6, "mia_advantage_null_hi": 12.6}
    assert _cell(advantage, "mia_advantage") == "5.00 [-12.60, 12.60]"
    assert _cell({key: None for key in degenerate}, "rmia_auc") == "—"  # the oracle's row: its own reference
