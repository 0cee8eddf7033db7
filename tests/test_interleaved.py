"""Interleaved streams: a held-out half of train released in chunks between requests and learned before the next one;
the pretrained model and every oracle trained on exactly what was seen minus what was deleted; a run killed between a
learning step and its request resumes to the uninterrupted run's numbers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FAST_RECIPE, run_tiny, tiny_config
from tests.test_reliability import _only_run_dir, _results
from unlearnbench import runner as runner_module
from unlearnbench.cli import main
from unlearnbench.runner import Runner
from unlearnbench.store import ModelStore
from unlearnbench.streams import RequestStream
from unlearnbench.streams.interleaved import HELD_OUT

ROOT = Path(__file__).resolve().parent.parent


def test_chunks_forget_sets_and_retain_sets_follow_what_was_released(digits):
    """Half of train held out and cut into T − 1 disjoint chunks, released after requests 1..T − 1; forget sets from
    the pretrained part; retain = released so far minus forgotten; the learning set = the release plus as many
    replayed retain samples of the request before."""
    n, requests = len(digits.train), 4
    stream = RequestStream(digits, "interleaved", requests, 0.02, seed=1)
    held_out = set(stream.pretraining_excluded.tolist())
    assert len(held_out) == round(HELD_OUT * n)
    released = [set(stream.released_before(t).tolist()) for t in range(1, requests + 1)]
    assert released[0] == set() and all(released[1:])
    assert set().union(*released) == held_out and sum(map(len, released)) == len(held_out)  # disjoint, all of it
    forgotten: set[int] = set()
    for t, request in enumerate(stream.requests, start=1):
        forget = set(request.forget.tolist())
        assert len(forget) == round(0.02 * n) and not forget & held_out and not forget & forgotten
        forgotten |= forget
        seen = set(range(n)) - held_out | set().union(*released[:t])
        assert set(request.retain.tolist()) == seen - forgotten
        assert set(request.excluded.tolist()) == forgotten | (set(range(n)) - seen)
        assert stream.age(t) == t - 1
        learning = set(stream.learning_set(t, seed=7).tolist())
        assert learning >= released[t - 1] and len(learning) == 2 * len(released[t - 1])
        assert t == 1 or learning - released[t - 1] <= set(stream.requests[t - 2].retain.tolist())
    assert stream.learning_set(3, seed=7).tolist() == stream.learning_set(3, seed=7).tolist()
    assert stream.learning_set(3, seed=7).tolist() != stream.learning_set(3, seed=8).tolist()


def test_other_kinds_learn_nothing_and_their_oracles_exclude_the_forgotten(digits):
    for kind, size in (("random", 0.05), ("classwise", 2)):
        stream = RequestStream(digits, kind, 3, size, seed=0)
        assert len(stream.pretraining_excluded) == 0 and not stream.learns_between_requests
        assert all(len(stream.released_before(t)) == 0 and stream.age(t) == 0 for t in (1, 2, 3))
        assert all(np.array_equal(r.excluded, r.forgotten) for r in stream.requests)
        assert "held_out" not in stream.manifest() and all("released" not in r for r in stream.manifest()["requests"])


def test_the_pretrained_model_and_each_oracle_exclude_exactly_the_unreleased_and_the_deleted(tmp_path, monkeypatch):
    """Recomputed from the manifest alone: pretraining leaves out the held-out part; request t's oracle leaves out
    F_1..F_t and the chunks not yet released (every released chunk is in it); both are in the store under those keys.
    The rows record the model's age and the summary its slopes, recomputed here."""
    trained = []
    trained_model = Runner.trained_model

    def recording(self, excluded, label, *args, **kwargs):
        trained.append((label, set(excluded.tolist())))
        return trained_model(self, excluded, label, *args, **kwargs)

    monkeypatch.setattr(Runner, "trained_model", recording)
    store = tmp_path / "store"
    result = run_tiny(tmp_path / "runs", store, "finetune", "interleaved", requests=3, single_shot_every=0)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    held_out = set(manifest["held_out"])
    assert [label for label, _ in trained] == ["pretraining", "oracle 1/3 (retraining)", "oracle 2/3 (retraining)",
                                              "oracle 3/3 (retraining)"]  # fmt: skip
    assert trained[0][1] == held_out
    released: set[int] = set()
    forgotten: set[int] = set()
    config = tiny_config(tmp_path / "runs", store, "finetune", "interleaved", requests=3, single_shot_every=0)
    runner = Runner.from_config(config)
    for t, request in enumerate(manifest["requests"], start=1):
        released |= set(request["released"])
        forgotten |= set(request["forget"])
        assert trained[t][1] == forgotten | (held_out - released)
        assert not trained[t][1] & released - forgotten
        spec = runner.model_spec(np.array(sorted(trained[t][1]), dtype=np.int64), 0)
        assert ModelStore(store).load(spec) is not None
    assert released == held_out
    assert ModelStore(store).load(runner.model_spec(np.array(sorted(held_out), dtype=np.int64), 0)) is not None

    rows = result.rows
    assert [row.method["age"] for row in rows] == [0, 1, 2]
    assert all("age" not in row.oracle for row in rows)
    gaps = [row.method["forget_acc"] - row.oracle["forget_acc"] for row in rows]
    slope = sum((age - 1) * (gap - np.mean(gaps)) for age, gap in enumerate(gaps)) / 2  # Σ(x − x̄)² = 2 at ages 0..2
    assert result.summary.scores["age_slope_forget_gap"] == pytest.approx(slope)
    assert result.summary.scores["final_age"] == 2
    assert sorted(path.name for path in (result.run_dir / "state").iterdir()) == ["t003.pt"]


def test_other_kinds_keep_their_rows_and_summary_keys(tmp_path, shared_store):
    result = run_tiny(tmp_path, shared_store, "finetune", "random", logger="none")
    assert all("age" not in row.method for row in result.rows)
    assert not {key for key in result.summary.scores if "age" in key}


def _argv(out: Path, store: Path) -> list[str]:
    return [
        "run", "--method", "finetune", "--stream", "interleaved", "--requests", "3", "--size", "0.05",
        "--single-shot-every", "0", "--finetune.optim.epochs", "2", "--recipe", json.dumps(FAST_RECIPE),
        "--out", str(out), "--store", str(store), "--logger", "none",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    base = tmp_path_factory.mktemp("uninterrupted")
    assert main([*_argv(base / "out", base / "store"), "--quiet", "true"]) == 0
    return _results(_only_run_dir(base / "out")), base / "store"


@pytest.mark.parametrize(
    ("when", "relearned"),
    [("after", 1), ("before", 2)],
    ids=["learned-state-written", "learned-in-memory-only"],
)
def test_a_run_killed_between_a_learning_step_and_its_request_resumes_to_the_same_numbers(
    tmp_path, uninterrupted, monkeypatch, capsys, when, relearned
):
    """SIGKILLed right after (or right before) the learned model of request 2 is checkpointed: the rerun starts at
    request 2 from that checkpoint without learning again (or learns again, from request 1's state), and ends with the
    uninterrupted run's rows and summary; its console shows the age line."""
    (expected_rows, expected_summary), store = uninterrupted
    argv = _argv(tmp_path / "out", store)
    target = "unlearnbench.rundir.RunDirectory.save_learned_state"
    killed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "crash_at.py"), target, "1", when, "--", *argv, "--quiet", "true"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = _only_run_dir(tmp_path / "out")
    assert (run_dir / "state" / "t002-learned.pt").exists() == (when == "after")
    learned = []
    learn = runner_module.Runner.learn
    monkeypatch.setattr(runner_module.Runner, "learn", lambda self, t: learned.append(t) or learn(self, t))
    assert main(argv) == 0
    assert learned == [2, 3][-relearned:]
    assert _results(run_dir) == (expected_rows, expected_summary)
    assert "over age (2 learning steps), slope per step: forget gap " in capsys.readouterr().out
    assert sorted(path.name for path in (run_dir / "state").iterdir()) == ["t003.pt"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--requests", "1", "--single-shot-every", "0"], "interleaved streams learn new data between requests, so "
                                                          "they need requests >= 2, got 1"),
        (["--size", "0.2", "--single-shot-every", "0"], "requests x size must be below 0.5, got 3 x 0.2"),
        ([], "stream 'interleaved' has no single-shot counterfactual"),
        (["--single-shot-every", "2"], "add --single-shot-every 0"),
    ],
)  # fmt: skip
def test_an_impossible_interleaved_run_is_refused_in_one_line_before_data_is_loaded(
    options, message, tmp_path, no_datasets, capsys
):
    argv = ["run", "--method", "finetune", "--stream", "interleaved", "--requests", "3", *options]
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and error.count("\n") == 1 and message in error, error
    assert not (tmp_path / "out").exists()
