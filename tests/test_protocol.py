"""The seeds' protocol: oracle and single-shot schedules, the forward-failure gain, its cache, resume."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tests.conftest import SimulatedCrashError, measured_rows, tiny_config
from unlearnbench.config import ConfigError
from unlearnbench.registry import METHODS
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import Runner


def test_oracles_exist_at_the_scheduled_requests_only_and_the_store_holds_exactly_those(tmp_path):
    store = tmp_path / "store"
    config = tiny_config(
        tmp_path,
        store,
        "finetune",
        requests=7,
        oracle_every=3,
        single_shot_every=0,
        method_args={"optim": {"epochs": 1}},
    )
    result = Runner.from_config(config).run()
    assert [row.t for row in result.rows if row.oracle is not None] == [3, 6, 7]
    for row in result.rows:  # absent elsewhere: never 0, never the last oracle's values carried over
        has_gap = {"gap", "gap_acc", "lira_auc"} & set(row.method)
        assert bool(has_gap) == (row.oracle is not None), row.t
    entries = [json.loads(path.read_text()) for path in store.glob("*.json")]
    forgotten = {t: len(Runner.from_config(config).stream.select(t).forgotten) for t in (3, 6, 7)}
    assert sorted(entry["num_excluded"] for entry in entries) == [0, *sorted(forgotten.values())]
    assert result.summary.scores["oracle_requests"] == 3
    assert result.summary.scores["mean_gap"] == pytest.approx(
        np.mean([result.rows[t - 1].method["gap"] for t in (3, 6, 7)])
    )


@pytest.mark.parametrize(("option", "value"), [("oracle_every", 0), ("oracle_every", 1.5), ("single_shot_every", -1)])
def test_a_bad_schedule_is_refused_before_anything_is_loaded(tmp_path, option, value, no_datasets):
    with pytest.raises(ConfigError, match=option):
        tiny_config(tmp_path, tmp_path / "store", "finetune", **{option: value}).validate()


def test_the_schedules_default_to_the_oracles_requests_and_always_include_t(tmp_path):
    def at(**options):
        config = tiny_config(tmp_path, tmp_path / "store", "finetune", requests=7, **options)
        return [t for t in range(1, 8) if config.oracle_at(t)], [t for t in range(1, 8) if config.single_shot_at(t)]

    assert at() == ([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7])
    assert at(oracle_every=3) == ([3, 6, 7], [3, 6, 7])
    assert at(oracle_every=3, single_shot_every=2) == ([3, 6, 7], [2, 4, 6, 7])
    assert at(oracle="none") == ([], [7])
    assert at(single_shot_every=0) == ([1, 2, 3, 4, 5, 6, 7], [])


def test_single_shot_at_t1_is_the_continual_row_and_a_fresh_single_shot_fit_gives_exactly_it(tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, "neggrad_plus", requests=2)
    result = Runner.from_config(config).run()
    first, last = result.rows
    runner = Runner.from_config(config)
    request = runner.stream.select(1)
    with threadpool_limits(limits=1, user_api="blas"):  # as in Runner.run: the norm's summation order is BLAS's
        method, served = runner.single_shot_fit(request, [])  # served now, not read from the cache
    fresh = runner.score(runner.logits(method), request)
    fresh.pop("history")
    assert fresh | {"update_norm": served["update_norm"]} == first.single_shot
    assert all(first.method[key] == value for key, value in first.single_shot.items())
    assert first.method["forward_gain"] == 0.0
    assert last.method["forward_gain"] == last.method["forget_acc"] - last.single_shot["forget_acc"]
    assert result.summary.scores["forward_failure"] == last.method["forward_gain"]
    assert result.summary.scores["single_shot_forget_acc"] == last.single_shot["forget_acc"]


def test_the_single_task_counterfactual_serves_f_t_alone_and_the_cumulative_one_request_t_as_it_came(
    tmp_path, monkeypatch
):
    """A class-wise T = 3 stream where the baselines differ: at t >= 2 the single-task fit retains every class but
    F_t's (F_1..F_{t-1} included) and sees no past, the cumulative fit retains train minus F_1..F_t and sees them."""
    served = []
    original_prepare = METHODS.get("finetune").prepare

    def recording(self, request, data):
        served.append((request.t, request.retain.copy(), [past.copy() for past in data.past_forget_sets()]))
        return original_prepare(self, request, data)

    monkeypatch.setattr(METHODS.get("finetune"), "prepare", recording)
    # a store of its own: another test's cached counterfactuals would skip the fits recorded here
    config = tiny_config(tmp_path, tmp_path / "store", "finetune", requests=3, single_shot_baseline="both")
    result = Runner.from_config(config).run()
    stream = Runner.from_config(config).stream
    train = np.arange(len(stream.dataset.train))
    forget = {t: stream.requests[t - 1].forget for t in (1, 2, 3)}
    # order per t >= 2: the continual fit, then the single-task and the cumulative counterfactuals
    fits = [(t, retain, past) for t, retain, past in served if t >= 2]
    assert [t for t, _, _ in fits] == [2, 2, 2, 3, 3, 3]
    for t, offset in ((2, 0), (3, 3)):
        continual, single_task, cumulative = fits[offset : offset + 3]
        cumulative_retain = np.setdiff1d(train, np.concatenate([forget[s] for s in range(1, t + 1)]))
        np.testing.assert_array_equal(single_task[1], np.setdiff1d(train, forget[t]))
        assert single_task[2] == []
        np.testing.assert_array_equal(cumulative[1], cumulative_retain)
        np.testing.assert_array_equal(continual[1], cumulative_retain)
        assert [len(p) for p in cumulative[2]] == [len(forget[s]) for s in range(1, t)]
    # the single-task model is scored on its own split: every test class but F_t's is retained
    alone = stream.alone(3)
    test_labels = stream.dataset.test.labels.numpy()
    assert set(test_labels[alone.test_forget]) == set(stream.requests[2].forget_classes)
    assert len(alone.test_retain) + len(alone.test_forget) == len(test_labels)
    for suffix, field in (("", "single_shot"), ("_cumulative", "single_shot_cumulative")):
        gains = [row.method[f"forward_gain{suffix}"] for row in result.rows]
        assert gains == [row.method["forget_acc"] - getattr(row, field)["forget_acc"] for row in result.rows]
        assert result.summary.scores[f"forward_failure{suffix}"] == gains[-1]
        assert result.summary.scores[f"forward_failure{suffix}_mean"] == pytest.approx(np.mean(gains[1:]))
        assert result.summary.scores[f"single_shot{suffix}_requests"] == 2  # t = 1's gain is 0 by construction


def test_the_default_baseline_is_single_task_and_a_bad_one_is_refused(tmp_path, no_datasets):
    config = tiny_config(tmp_path, tmp_path / "store", "finetune", requests=3)
    assert config.single_shot_kinds == ("single_task",)
    with pytest.raises(ConfigError, match="single_shot_baseline 'alone'; choose one of: single_task, cumulative, both"):
        tiny_config(tmp_path, tmp_path / "store", "finetune", single_shot_baseline="alone").validate()


def test_every_row_records_the_original_model_and_the_summary_its_t0_history(tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, "finetune", requests=2)
    result = Runner.from_config(config).run()
    runner = Runner.from_config(config)
    pretrained = runner.logits(runner.pretrained_model())
    for row in result.rows:
        request = runner.stream.select(row.t)
        expected = runner.score(pretrained, request)
        assert row.original["forget_acc"] == expected["forget_acc"]
        assert row.original["retain_acc"] == expected["retain_acc"] and row.original["test_acc"] == expected["test_acc"]
        assert row.original["gap_acc"] > 0  # the pretrained model has not forgotten F_t: far from the oracle
    assert result.summary.scores["original_history"] == expected["history"]  # the t = 0 row of history
    assert result.summary.scores["final_original"]["forget_acc"] == result.rows[-1].original["forget_acc"]
    assert result.summary.scores["mean_gap_acc_original"] == pytest.approx(
        np.mean([row.original["gap_acc"] for row in result.rows])
    )


def test_each_model_is_scored_once_per_request_the_oracle_too(tmp_path, shared_store, monkeypatch):
    """The row's oracle is scored once per request and its scores passed to both the method's and the
    original's comparisons against it, not scored again for the original's row."""
    scored = []
    score = Runner.score

    def counting(self, logits, request):
        scored.append((id(logits), request.t))
        return score(self, logits, request)

    monkeypatch.setattr(Runner, "score", counting)
    config = tiny_config(tmp_path, shared_store, "finetune", requests=2, single_shot_every=0)
    result = Runner.from_config(config).run()
    assert all(row.oracle is not None and "gap" in row.original for row in result.rows)
    assert len(scored) == 3 * 2  # method, oracle, original at each of the 2 requests
    assert len(set(scored)) == len(scored)


def test_single_shot_results_are_cached_for_reruns_and_longer_streams(tmp_path, shared_store, monkeypatch):
    Runner.from_config(tiny_config(tmp_path / "short", shared_store, "finetune", requests=2)).run()
    fits = []
    original = Runner.single_shot_fit

    def counting(self, request, past):
        fits.append(request.t)
        return original(self, request, past)

    monkeypatch.setattr(Runner, "single_shot_fit", counting)
    longer = Runner.from_config(tiny_config(tmp_path / "long", shared_store, "finetune", requests=3)).run()
    assert fits == [3]  # F_1 (the continual row itself) and F_2 come from the cache
    short = RunDirectory(next((tmp_path / "short").glob("finetune-*"))).rows()
    assert longer.rows[1].single_shot == short[1].single_shot


def test_a_killed_run_with_schedules_resumes_to_identical_rows(tmp_path, shared_store, monkeypatch):
    """Killed inside request 3's single-shot fit, with a torn row left behind: resumed, the rows are the same."""
    options = {"requests": 4, "oracle_every": 2, "single_shot_every": 3}
    reference = Runner.from_config(tiny_config(tmp_path / "a", tmp_path / "store_a", "rl", **options)).run()
    # The same store without its cached single-shot scores, so the resumed run serves them again.
    shutil.copytree(tmp_path / "store_a", tmp_path / "store_b", ignore=shutil.ignore_patterns("single_shot"))
    config = tiny_config(tmp_path / "b", tmp_path / "store_b", "rl", **options)
    original = Runner.single_shot_fit

    def crash(self, request, past):
        if request.t == 3:
            metrics = self.run_dir.metrics_path
            metrics.write_text(metrics.read_text() + '{"t": 3, "stat')  # a kill in the middle of an append
            raise SimulatedCrashError
        return original(self, request, past)

    with monkeypatch.context() as patch:
        patch.setattr(Runner, "single_shot_fit", crash)
        with pytest.raises(SimulatedCrashError):
            Runner.from_config(config).run()
    partial = Runner.from_config(config)
    assert len(partial.run_dir.rows()) == 2  # the torn line is not a finished request
    resumed = partial.run()
    assert [row.t for row in resumed.rows if row.oracle] == [2, 4]
    assert [row.t for row in resumed.rows if row.single_shot] == [3, 4]
    assert measured_rows(resumed.run_dir) == measured_rows(reference.run_dir)
    assert (resumed.run_dir / "history.csv").read_text() == (reference.run_dir / "history.csv").read_text()
    assert json.loads((resumed.run_dir / "summary.json").read_text()) | {"final": None} == json.loads(
        (reference.run_dir / "summary.json").read_text()
    ) | {"final": None}


def test_a_t100_heatmap_is_thinned_on_a_fixed_scale_with_the_oracle_marked():
    from unlearnbench.figures import history_heatmap_figure, pyplot

    history = np.random.default_rng(0).uniform(0, 60, (100, 100))
    figure = history_heatmap_figure(history, "T = 100", oracle_level=12.5)
    ax, bar = figure.axes
    assert not ax.texts  # no 10,000 numbers
    assert len(ax.get_xticks()) <= 10 and len(ax.get_yticks()) <= 10
    assert ax.images[0].get_clim() == (0, 100)  # not the data's 0–60
    (line,) = bar.lines
    assert line.get_ydata()[0] == 12.5
    small = history_heatmap_figure(history[:3, :3], "T = 3")
    assert len(small.axes[0].texts) == 9 and not small.axes[1].lines
    pyplot().close("all")


def test_long_streams_run_through_all_but_one_class_or_90_percent_of_train(no_datasets):
    """What the seed paper's long streams need: C − 1 class-wise requests, random ones until 90% is forgotten."""
    from unlearnbench.registry import STREAMS
    from unlearnbench.streams.kinds import StreamError

    STREAMS.get("classwise")().validate(50000, 100, 99, 1)
    STREAMS.get("random")().validate(50000, 100, 90, 0.01)
    with pytest.raises(StreamError, match="so that some classes are retained"):
        STREAMS.get("classwise")().validate(50000, 100, 100, 1)
    with pytest.raises(StreamError, match="so that some samples are retained"):
        STREAMS.get("random")().validate(50000, 100, 100, 0.01)
