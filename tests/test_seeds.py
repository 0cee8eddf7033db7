"""Decoupled seeds (train, unlearn, stream) and K oracles per request, on tiny digits runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tiny_config
from unlearnbench.config import ConfigError, RunConfig
from unlearnbench.evaluation.privacy import rmia_attack
from unlearnbench.runner import Runner


def test_seed_alone_keeps_the_identity_it_had_before_seeds_were_split():
    """The name (identity hash) of a `--seed 3` run as it was before the seed parts existed."""
    config = RunConfig.from_options(method="finetune", seed=3, out=Path("runs"))
    identity = config.identity({"lr": 0.01}, {"epochs": 2}, 1)
    assert config.run_path(identity).name == "finetune-classwise-digits-smallcnn-T5-seed3-f78b21dc"
    explicit = RunConfig.from_options(
        method="finetune", seed=3, train_seed=3, unlearn_seed=3, stream_seed=3, out=Path("runs")
    )
    assert explicit.identity({"lr": 0.01}, {"epochs": 2}, 1) == identity  # the same numbers, the same run


@pytest.mark.parametrize("part", ["train_seed", "unlearn_seed", "stream_seed"])
def test_each_seed_part_enters_the_identity(part):
    config = RunConfig.from_options(method="finetune", seed=3, out=Path("runs"), **{part: 4})
    identity = config.identity({}, {}, 1)
    assert getattr(identity, part) == 4 and identity.seed == 3
    plain = RunConfig.from_options(method="finetune", seed=3, out=Path("runs"))
    assert config.run_path(identity) != plain.run_path(plain.identity({}, {}, 1))  # another run, another folder


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"train_seed": -1}, "train_seed must be"),
        ({"unlearn_seed": 1.5}, "unlearn_seed"),
        ({"oracle_seeds": 0}, ">= 1"),
    ],
)
def test_bad_seed_parts_are_refused_before_loading(values, message, no_datasets, tmp_path):
    with pytest.raises(ConfigError, match=message):
        Runner.from_config(RunConfig.from_options(method="finetune", out=tmp_path, **values))
    assert not any(tmp_path.iterdir())


def _forget_sets(run_dir: Path) -> list[list[int]]:
    return [r["forget"] for r in json.loads((run_dir / "manifest.json").read_text())["requests"]]


def test_unlearn_seed_reuses_the_pretrained_model_and_changes_the_numbers(tmp_path):
    store = tmp_path / "store"
    first = Runner.from_config(tiny_config(tmp_path / "a", store, "finetune", requests=1, oracle="none"))
    base = first.run()
    assert first.store.trained == 1  # the pretrained model
    again = Runner.from_config(
        tiny_config(tmp_path / "b", store, "finetune", requests=1, oracle="none", unlearn_seed=1)
    )
    other = again.run()
    assert again.store.trained == 0  # a store hit: the train seed did not change
    assert _forget_sets(other.run_dir) == _forget_sets(base.run_dir)  # nor did the stream
    method = [result.rows[0].method for result in (base, other)]
    assert (method[0]["retain_acc"], method[0]["test_acc"]) != (method[1]["retain_acc"], method[1]["test_acc"])


def test_stream_seed_changes_the_manifest_only_and_train_seed_the_model(tmp_path):
    store = tmp_path / "store"
    base = Runner.from_config(tiny_config(tmp_path / "a", store, "finetune", requests=2, oracle="none"))
    stream = Runner.from_config(
        tiny_config(tmp_path / "b", store, "finetune", requests=2, oracle="none", stream_seed=7)
    )
    assert [r.forget_classes for r in base.stream.requests] != [r.forget_classes for r in stream.stream.requests]
    base.run()
    stream.run()
    assert stream.store.trained == 0  # same pretrained model
    trained = Runner.from_config(
        tiny_config(tmp_path / "c", store, "finetune", requests=1, oracle="none", train_seed=9)
    )
    trained.run()
    assert trained.store.trained == 1


def test_k_oracles_are_trained_once_saved_and_used_as_rmia_references(tmp_path):
    store = tmp_path / "store"
    runner = Runner.from_config(
        tiny_config(tmp_path / "a", store, "finetune", requests=1, oracle_seeds=2, save_logits=True)
    )
    result = runner.run()
    assert runner.store.trained == 1 + 2  # pretrained + K oracles for each of T = 1 requests
    labels = np.load(result.run_dir / "labels.npz")
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    for row in result.rows:
        with np.load(result.run_dir / "logits" / f"t{row.t:03d}.npz") as saved:
            assert {"oracle_train", "oracle1_train", "oracle1_test"} <= set(saved.files)
            assert not np.array_equal(saved["oracle_train"], saved["oracle1_train"])  # two train seeds
            recomputed = rmia_attack(
                (saved["method_train"], saved["method_test"]),
                [(saved[f"{name}_train"], saved[f"{name}_test"]) for name in ("oracle", "oracle1")],
                labels["train"],
                labels["test"],
                np.asarray(manifest["requests"][row.t - 1]["forget"]),
                classwise=True,
            )
        assert {k: row.method[k] for k in recomputed} == recomputed  # live value == recomputed value
        assert row.oracle["rmia_auc"] is None and 0 <= row.method["tow"] <= 1
    other = Runner.from_config(tiny_config(tmp_path / "b", store, "rl", requests=1, oracle_seeds=2))
    other.run()
    assert other.store.trained == 0  # every method shares the K oracles through the store


def test_unlearn_seeds_make_k_chains_that_differ_only_in_unlearn_seed(tmp_path):
    from unlearnbench.plan import check_suite

    suite = {"out": str(tmp_path), "seeds": [0, 2], "unlearn_seeds": 3, "methods": ["finetune"]}
    cells = check_suite(suite)
    assert [(c.config.seeds.seed, c.config.seeds.resolved("unlearn_seed")) for c in cells] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (2, 2),
        (2, 3),
        (2, 4),
    ]
    assert cells[0].identity.unlearn_seed is None and cells[1].identity.unlearn_seed == 1  # chain 0: the plain run
    assert len({c.run_dir for c in cells}) == 6
    with pytest.raises(ConfigError, match="unlearn_seeds"):
        check_suite({**suite, "unlearn_seeds": 0})


@pytest.mark.slow
def test_chain_privacy_recomputes_the_live_numbers_from_saved_logits(tmp_path):
    """K = 3 chains (unlearn seeds 0, 1, 2) with K = 3 oracles, T = 2, saved with --save-logits."""
    from unlearnbench.evaluation.chains import chain_privacy
    from unlearnbench.evaluation.privacy import eps_floor

    store = tmp_path / "store"
    results = [
        Runner.from_config(
            tiny_config(tmp_path / "runs", store, "finetune", oracle_seeds=3, save_logits=True, unlearn_seed=seed)
        ).run()
        for seed in range(3)
    ]
    privacy = chain_privacy([result.run_dir for result in results])
    assert privacy["chains"] == 3 and len(privacy["requests"]) == 2
    for t, request in enumerate(privacy["requests"]):
        live = [result.rows[t].method for result in results]
        assert request["rmia_auc_chains"] == [row["rmia_auc"] for row in live]  # live == recomputed
        # chain 0 meets oracle 0, its row's oracle, rescored from its saved logits as the runner scored it: its
        # live ToW; chains 1 and 2 meet oracles 1 and 2 (RUM's pairing), which their live rows never saw
        assert [request["tow_chains"][0], request["tow_mia_chains"][0]] == pytest.approx(
            [live[0]["tow"], live[0]["tow_mia"]]
        )
        assert request["tow"] == pytest.approx(np.mean(request["tow_chains"]))
        assert 0 < request["tow_oracles"] <= 1 and request["eps_forget_floor"] == eps_floor(3)
        assert 0 <= request["eps_forget_score"] <= 1
        assert privacy["backward_eps"][t][t] == request["eps_forget_score"]
        assert privacy["backward_rmia"][t][t] == pytest.approx(request["rmia_auc"])
    assert [len(row) for row in privacy["backward_eps"]] == [1, 2]
    two = chain_privacy([result.run_dir for result in results[:2]])  # against the first 2 of the 3 oracles
    assert two["chains"] == 2 and all(request["eps_score"] is None for request in two["requests"])
    for pair, trio in zip(two["requests"], privacy["requests"], strict=True):  # chains 0 and 1 meet oracles 0 and 1
        assert pair["tow_chains"] == pytest.approx(trio["tow_chains"][:2])


def test_every_derived_stream_of_a_request_draws_its_own_numbers():
    """Defect: the SVC attack's subsampling and the forget set's batch order were both `(seed, t, 1)`, so a run whose
    `--unlearn-seed` is its `--seed` (the default) drew the same numbers for both."""
    from unlearnbench import seeds

    assert len(set(seeds.SALTS.values())) == len(seeds.SALTS)
    for seed in (0, 1, 7):
        for t in (1, 2, 30):
            drawn = [
                seeds.attack_seed(seed, t),
                seeds.relearn_seed(seed, t),
                seeds.learning_seed(seed, t),
                *(seeds.batch_order_seed(seed, t, batches) for batches in ("forget", "retain", "other")),
            ]
            assert len(set(drawn)) == len(drawn), (seed, t)
