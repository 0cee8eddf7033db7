"""The typed records write exactly the JSON (and YAML) of a real run, and refuse an object that is not one, naming what
is wrong."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from unlearnbench.errors import DamagedFileError
from unlearnbench.records import (
    _IDENTITY_CHECKS,
    MalformedRecordError,
    MeasuredCost,
    RequestRecord,
    RunIdentity,
    RunSummary,
    run_status,
)
from unlearnbench.rundir import DamagedIdentityError, RunDirectory, identity_hash, json_text

#: Run folders written by the runner (finetune and ga, T = 3, with oracles and single-shot counterfactuals).
OLD_RUNS = sorted((Path(__file__).parent / "fixtures" / "old_runs").iterdir())


@pytest.mark.parametrize("run", OLD_RUNS, ids=[run.name.split("-")[0] for run in OLD_RUNS])
def test_a_real_runs_lines_round_trip_to_identical_json_text(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json(json.loads(line)) for line in lines]
    assert [json.dumps(record.to_json()) for record in records] == lines
    assert [record.t for record in records] == [1, 2, 3] and records[-1].single_shot is not None
    text = (run / "summary.json").read_text()
    summary = RunSummary.from_json(json.loads(text))
    assert json_text(summary.to_json()) == text
    assert (summary.requests_done, summary.status, summary.diverged_at) == (3, "complete", None)


def test_a_diverged_runs_summary_writes_where_it_stopped_last():
    summary = RunSummary(requests_done=1, scores={"forget_drift": 0.0}, status="diverged", diverged_at=2)
    assert list(summary.to_json()) == ["requests_done", "forget_drift", "status", "diverged_at"]
    assert RunSummary.from_json(summary.to_json()) == summary


def _row() -> dict:
    return json.loads((OLD_RUNS[0] / "metrics.jsonl").read_text().splitlines()[0])


# (case, how the row is damaged, what the message must say)
MALFORMED = [
    ("missing key", lambda row: row.pop("oracle"), "missing key 'oracle'"),
    ("unknown key", lambda row: row.update(seed=0), "unknown key 'seed'"),
    ("t not a number", lambda row: row.update(t="1"), "'t' is '1', not a request number"),
    ("unknown status", lambda row: row.update(status="done"), "'status' is 'done', not one of ok, diverged"),
    ("classes not a list", lambda row: row.update(forget_classes=3), "'forget_classes' is 3, not a list"),
    ("method not scores", lambda row: row.update(method=[1.0]), "'method' is list, not an object of scores"),
    ("oracle not scores", lambda row: row.update(oracle=0.5), "'oracle' is float, not an object of scores or null"),
    ("a score as text", lambda row: row["method"].update(gap="1.0"), "method['gap'] is '1.0', not a number"),
    ("cost without cpu", lambda row: row.update(cost={"wall_s": 1.0}), "'cost' is {'wall_s': 1.0}, not an object"),
    ("cost as text", lambda row: row.update(cost={"wall_s": 1.0, "cpu_s": "2"}), "'cost' is {'wall_s': 1.0, 'cpu_s'"),
]


def test_a_rows_cost_round_trips_and_runs_add_up_their_measured_rows():
    """A row written with its cost reads back to the same line; rows written before costs were have none and are
    counted apart, so a sum over a grid says on how many requests it was measured."""
    row = _row() | {"cost": {"wall_s": 5.5, "cpu_s": 9.0}}
    record = RequestRecord.from_json(row)
    assert record.cost == {"wall_s": 5.5, "cpu_s": 9.0} and json.dumps(record.to_json()) == json.dumps(row)
    assert "cost" not in record.scored_models  # a cost is no model's scores
    old = RequestRecord.from_json(_row())
    assert old.cost is None and "cost" not in old.to_json()
    total = MeasuredCost.of([record, record]) + MeasuredCost.of([old])
    assert total == MeasuredCost(wall_s=11.0, cpu_s=18.0, measured=2, rows=3)
    assert total.describe() == "0.01 CPU-hours (0.00 wall-hours) measured on 2 of 3 requests"
    assert MeasuredCost.of([old]).describe() == "nothing measured (no row records its cost)"


@pytest.mark.parametrize(("damage", "message"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
def test_a_malformed_row_is_refused_naming_the_problem(damage, message):
    row = _row()
    damage(row)
    with pytest.raises(MalformedRecordError, match=f"^{re.escape(message)}"):
        RequestRecord.from_json(row)


def test_a_run_directory_names_the_line_and_the_problem_of_a_malformed_row(tmp_path):
    run = shutil.copytree(OLD_RUNS[0], tmp_path / OLD_RUNS[0].name)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    second = json.loads(lines[1])
    del second["single_shot"]
    (run / "metrics.jsonl").write_text("\n".join([lines[0], json.dumps(second), lines[2]]) + "\n")
    run_dir = RunDirectory(run)
    with pytest.raises(DamagedFileError) as raised:
        run_dir.rows()
    assert run_dir.problem_of(raised.value) == "metrics.jsonl line 2 is not a metrics row (missing key 'single_shot')"


def test_a_summary_that_is_not_one_reads_as_absent(tmp_path):
    run = shutil.copytree(OLD_RUNS[0], tmp_path / OLD_RUNS[0].name)
    assert RunDirectory(run).summary() is not None
    (run / "summary.json").write_text(json.dumps({"requests_done": "3", "status": "complete"}))
    with pytest.raises(MalformedRecordError, match="'requests_done' is '3'"):
        RunSummary.from_json(json.loads((run / "summary.json").read_text()))
    assert RunDirectory(run).summary() is None


def test_only_a_built_in_methods_flat_sgd_settings_are_read_as_its_optim_group():
    """Records of the built-ins written before the SGD settings were a group spell them flat and are read nested; a
    plugin that takes `lr` ... `weight_decay` as its own arguments keeps them flat, so its record replays and its
    leaderboard label names them as its signature does."""
    record = yaml.safe_load((OLD_RUNS[0] / "config.yaml").read_text())
    flat = {"lr": 0.1, "epochs": 2, "batch_size": 64, "momentum": 0.9, "weight_decay": 0.0, "steps": 3}
    built_in = RunIdentity.from_json({**record, "method_args": flat})
    plugin = RunIdentity.from_json({**record, "method": "my_sgd_method", "method_args": flat})
    assert built_in.method_args == {"optim": {k: v for k, v in flat.items() if k != "steps"}, "steps": 3}
    assert plugin.method_args == flat and plugin.named_json()["method_args"] == flat


@pytest.mark.parametrize("run", OLD_RUNS, ids=[run.name.split("-")[0] for run in OLD_RUNS])
def test_a_real_runs_identity_round_trips_to_its_file_and_its_folders_hash(run):
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    identity = RunDirectory(run).identity()
    # written before the SGD settings were a group: read nested, named as then (`named_json`, flat), so it resumes
    assert ("optim" in identity.method_args) == ("lr" in recorded["method_args"])
    assert identity.named_json() == recorded and RunIdentity.from_json(identity.to_json()) == identity
    assert run.name.endswith(f"-{identity_hash(identity)}")
    assert (identity.method, identity.requests, identity.guards, identity.split) == (
        run.name.split("-")[0],
        3,
        None,
        "test",
    )


def test_every_identity_field_has_its_check_and_only_departures_from_defaults_are_written():
    assert list(_IDENTITY_CHECKS) == [field.name for field in fields(RunIdentity)]
    data = yaml.safe_load((OLD_RUNS[0] / "config.yaml").read_text())
    guarded = RunIdentity.from_json({**data, "guards": [{"orthogonal": {"rank": 3}}], "oracle_every": 2})
    assert list(guarded.to_json())[-2:] == ["oracle_every", "guards"] and guarded.guard_names == ["orthogonal"]
    assert RunIdentity.from_json(guarded.to_json()) == guarded


# (case, how config.yaml's mapping is damaged, what the message must say)
MALFORMED_IDENTITIES = [
    ("missing key", lambda data: data.pop("mia_protocol"), "missing key 'mia_protocol'"),
    ("unknown key", lambda data: data.update(colour="red"), "unknown key 'colour'"),
    ("seed as text", lambda data: data.update(seed="0"), "'seed' is '0', not a seed"),
    ("size as a flag", lambda data: data.update(size=True), "'size' is True, not a number"),
    ("guards not a list", lambda data: data.update(guards="orthogonal"), "'guards' is 'orthogonal', not a list"),
]


@pytest.mark.parametrize(
    ("damage", "message"), [case[1:] for case in MALFORMED_IDENTITIES], ids=[case[0] for case in MALFORMED_IDENTITIES]
)
def test_a_malformed_identity_is_a_damaged_run_naming_the_problem(tmp_path, damage, message):
    run = shutil.copytree(OLD_RUNS[0], tmp_path / OLD_RUNS[0].name)
    data = yaml.safe_load((run / "config.yaml").read_text())
    damage(data)
    with pytest.raises(MalformedRecordError, match=f"^{re.escape(message)}"):
        RunIdentity.from_json(data)
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(DamagedIdentityError, match=re.escape(message)) as raised:
        RunDirectory(run).identity()
    assert raised.value.problem.startswith(f"config.yaml is not a run's configuration ({message}")
    assert RunDirectory(run).is_run()  # listed as damaged by the leaderboard, not dropped


@pytest.mark.parametrize(
    ("summary", "failed", "status"),
    [
        (None, False, "unfinished"),  # a first session under way, or killed before it ended
        (RunSummary(1, {}, "complete"), False, "unfinished"),  # a session ended after request 1 of 3
        (None, True, "failed"),
        (RunSummary(1, {}, "complete"), True, "failed"),
        (RunSummary(3, {}, "complete"), False, "complete"),
        (RunSummary(3, {}, "complete"), True, "complete"),  # an older version's error does not undo a finished run
        (RunSummary(1, {}, "diverged", diverged_at=2), False, "diverged"),
        (RunSummary(1, {}, "diverged", diverged_at=2), True, "diverged"),
    ],
)
def test_a_runs_status_is_read_from_its_summary_and_error_alone(summary, failed, status):
    """`suite --check` and the leaderboard read where a run of T = 3 stands with this one function."""
    assert run_status(summary, 3, failed) == status
