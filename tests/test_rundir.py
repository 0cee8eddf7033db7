"""`RunDirectory`'s readers give back what its writers wrote, in the documented on-disk format, and tolerate
exactly what their callers did before: a missing or damaged summary/error/provenance is absent, a damaged
identity or metrics row is named in a few words."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
import yaml

from tests.conftest import tiny_config
from unlearnbench.errors import DamagedFileError
from unlearnbench.records import RequestRecord, RunIdentity
from unlearnbench.rundir import DamagedIdentityError, RunDirectory, RunLabels, SavedLogits, identity_hash

IDENTITY = RunIdentity.from_json(
    {
        "method": "finetune",
        "method_args": {"lr": 0.01},
        "stream": "classwise",
        "size": 1,
        "requests": 2,
        "dataset": "digits",
        "arch": "smallcnn",
        "seed": 0,
        "oracle": "retrain",
        "mia_protocol": "salun",
        "recipe": {"epochs": 2},
        "precision": "32-true",
    }
)
MANIFEST = {"requests": [{"t": 1, "forget": [0, 1]}, {"t": 2, "forget": [2]}]}


def initialized(path) -> RunDirectory:
    run_dir = RunDirectory(path)
    run_dir.initialize(IDENTITY, MANIFEST, np.array([0, 1, 2, 1]), np.array([2, 0]))
    return run_dir


def row(t: int) -> RequestRecord:
    return RequestRecord(t, "ok", None, {"forget_acc": 10.0 * t, "history": [12.34567, 50.0 + t]}, None, None)


def test_what_initialize_writes_reads_back(tmp_path):
    run_dir = initialized(tmp_path / "run")
    assert run_dir.initialized() and run_dir.is_run()
    assert run_dir.identity() == IDENTITY
    assert IDENTITY.to_json() == yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert run_dir.manifest() == MANIFEST
    labels = run_dir.labels()
    assert isinstance(labels, RunLabels)
    np.testing.assert_array_equal(labels.train, [0, 1, 2, 1])
    np.testing.assert_array_equal(labels.test, [2, 0])


def test_history_reads_the_rows_to_four_decimals(tmp_path):
    run_dir = initialized(tmp_path / "run")
    assert run_dir.history() is None
    for t in (1, 2):
        run_dir.append_row(row(t))
    np.testing.assert_array_equal(run_dir.history(), [[12.3457, 51.0], [12.3457, 52.0]])
    assert run_dir.rows() == [row(1), row(2)]


def test_saved_logits_use_the_documented_names_and_read_back(tmp_path):
    """README: `method_train`, `method_test`, `oracle_train`, `oracle_test`, `oracle1_*` ... per request, and whose
    they are: `request` and `run`."""
    rng = np.random.default_rng(0)
    run_dir = initialized(tmp_path / "run")
    assert not run_dir.has_logits()
    method = {"train": rng.normal(size=(4, 3)), "test": rng.normal(size=(2, 3))}
    oracles = [{"train": rng.normal(size=(4, 3)), "test": rng.normal(size=(2, 3))} for _ in range(3)]
    run_dir.save_logits(2, method, oracles)
    run_dir.save_logits(3, method, [])  # a request off the oracle schedule
    with np.load(tmp_path / "run" / "logits" / "t002.npz") as saved:
        on_disk = {name: saved[name] for name in saved.files}
    assert sorted(on_disk) == sorted(
        ["request", "run"]
        + [f"{model}_{split}" for model in ("method", "oracle", "oracle1", "oracle2") for split in ("train", "test")]
    )
    assert on_disk["request"] == 2 and str(on_disk["run"]) == identity_hash(IDENTITY)
    np.testing.assert_array_equal(on_disk["oracle1_test"], oracles[1]["test"])
    assert run_dir.has_logits() and run_dir.saved_logits(1) is None
    read = run_dir.saved_logits(2)
    assert isinstance(read, SavedLogits) and len(read.oracles) == 3
    for got, wanted in zip([read.method, *read.oracles], [method, *oracles], strict=True):
        assert sorted(got) == ["test", "train"]
        for split in ("train", "test"):
            np.testing.assert_array_equal(got[split], wanted[split])
    assert run_dir.saved_logits(3).oracles == []
    (tmp_path / "run" / "logits" / "t002.npz").replace(tmp_path / "run" / "logits" / "t003.npz")
    with pytest.raises(DamagedFileError, match=r"t003.npz holds the logits of request 2, not 3; delete .* to rerun"):
        run_dir.saved_logits(3)


def test_a_logits_file_written_by_hand_with_the_documented_names_reads(tmp_path):
    """A file saved before `SavedLogits` existed (one oracle: `oracle_*`) reads as method + one oracle."""
    (tmp_path / "logits").mkdir()
    a, b, c, d = (np.full((2, 2), value) for value in range(4))
    np.savez_compressed(tmp_path / "logits" / "t001.npz", method_train=a, method_test=b, oracle_train=c, oracle_test=d)
    saved = RunDirectory(tmp_path).saved_logits(1)
    assert (saved.method["train"] == 0).all() and (saved.method["test"] == 1).all()
    assert [sorted(o) for o in saved.oracles] == [["test", "train"]]
    assert (saved.oracles[0]["train"] == 2).all() and (saved.oracles[0]["test"] == 3).all()


@pytest.mark.parametrize("reader", ["summary", "error"])
@pytest.mark.parametrize(("text", "note"), [(None, "missing"), ("{", "torn"), ("[1, 2]", "not an object")])
def test_a_missing_or_damaged_summary_or_error_is_none(tmp_path, reader, text, note):
    if text is not None:
        (tmp_path / f"{reader}.json").write_text(text)
    assert getattr(RunDirectory(tmp_path), reader)() is None, note


def test_a_missing_or_damaged_provenance_is_empty_and_the_method_code_unknown(tmp_path):
    run_dir = RunDirectory(tmp_path)
    assert run_dir.provenance() == {} and run_dir.recorded_method_code() is None
    (tmp_path / "provenance.json").write_text('{"sessions": "not a list"}')
    assert run_dir.recorded_method_code() is None
    (tmp_path / "provenance.json").write_text('{"sessions": [{"method_code": {"sha": "1"}}]}')
    assert run_dir.recorded_method_code() == {"sha": "1"}


def test_a_suite_cell_error_is_written_cleared_and_read(tmp_path):
    run_dir = RunDirectory(tmp_path)
    run_dir.write_error("ValueError: boom", "Traceback ...\n")
    # the format a suite wrote before (and the leaderboard reads): indented JSON and a final newline
    expected = json.dumps({"error": "ValueError: boom", "traceback": "Traceback ...\n"}, indent=1) + "\n"
    assert (tmp_path / "error.json").read_text() == expected
    assert run_dir.error() == {"error": "ValueError: boom", "traceback": "Traceback ...\n"}
    run_dir.clear_error()
    run_dir.clear_error()  # nothing to clear: no error
    assert run_dir.error() is None and not (tmp_path / "error.json").exists()


@pytest.mark.parametrize(
    ("config", "is_run"),
    [
        (None, False),
        (b"method: finetune\n", True),
        (b"method: {value: finetune}\n", False),  # W&B's config.yaml under wandb/
        (b"\xff\xfe", True),  # unreadable: listed as damaged, never dropped
        (b"- a list\n", True),  # not a run's configuration: likewise
        ("folder", False),
    ],
)
def test_is_run_recognises_a_run_folder(tmp_path, config, is_run):
    if config == "folder":
        (tmp_path / "config.yaml").mkdir()
    elif config is not None:
        (tmp_path / "config.yaml").write_bytes(config)
    assert RunDirectory(tmp_path).is_run() is is_run


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"method: [x\n", "config.yaml is not readable YAML (ParserError)"),
        (b"\xff\xfe", "config.yaml is not readable YAML (UnicodeDecodeError)"),
        (b"just text\n", "config.yaml is not a run's configuration"),
    ],
)
def test_a_damaged_identity_is_named_briefly_for_a_table_and_with_its_fix_for_a_run(tmp_path, text, problem):
    (tmp_path / "config.yaml").write_bytes(text)
    run_dir = RunDirectory(tmp_path)
    with pytest.raises(DamagedIdentityError) as raised:
        run_dir.identity()
    assert run_dir.problem_of(raised.value) == problem
    folder = re.escape(str(tmp_path))
    with pytest.raises(DamagedFileError, match=rf"(?s)^{folder}/config.yaml is not .*; delete {folder} to rerun$"):
        run_dir.check(IDENTITY)


def test_a_damaged_metrics_row_is_named_relative_to_the_folder_without_its_fix(tmp_path):
    run_dir = initialized(tmp_path / "run")
    run_dir.append_row(row(1))
    (tmp_path / "run" / "metrics.jsonl").write_text(
        json.dumps(row(1).to_json()) + "\n" + json.dumps(row(1).to_json()) + "\n"
    )
    with pytest.raises(DamagedFileError) as raised:
        run_dir.rows()
    assert str(tmp_path) in str(raised.value)
    assert (
        run_dir.problem_of(raised.value)
        == "metrics.jsonl line 2 holds request 1 where request 2 belongs (a duplicate?)"
    )


def test_identity_hash_is_the_hash_that_names_a_run_directory(tmp_path):
    config = tiny_config(tmp_path, tmp_path / "store", "finetune")
    assert config.run_path(IDENTITY).name.endswith(f"-seed0-{identity_hash(IDENTITY)}")


def test_damages_name_an_edited_identity_and_a_missing_manifest(tmp_path):
    named = initialized(tmp_path / f"finetune-classwise-digits-smallcnn-T2-seed0-{identity_hash(IDENTITY)}")
    assert named.damages(IDENTITY, []) == []
    edited = replace(IDENTITY, seed=1)
    (damage,) = named.damages(edited, [])
    assert (damage.file, damage.rebuilt) == ("config.yaml", False) and named.problem_of(damage.error) == (
        f"config.yaml does not match its folder (hash {identity_hash(edited)}, folder {identity_hash(IDENTITY)}): "
        "edited after the run?"
    )
    chosen = initialized(tmp_path / "my-run")  # a --run-dir name: no hash to compare
    assert chosen.damages(edited, []) == []
    (tmp_path / "my-run" / "manifest.json").unlink()
    (damage,) = chosen.damages(IDENTITY, [])
    assert damage.rebuilt and chosen.problem_of(damage.error) == "manifest.json is missing"


def test_geometry_is_empty_until_written(tmp_path):
    run_dir = RunDirectory(tmp_path)
    assert run_dir.geometry() == []
    (tmp_path / "geometry.csv").write_text("t,update_norm,r90_all\n1,0.5,\n")
    assert run_dir.geometry() == [{"t": 1, "update_norm": 0.5, "r90_all": None}]


def test_each_session_records_the_versions_of_the_libraries_its_numbers_depend_on(tmp_path):
    from importlib.metadata import version

    from unlearnbench.provenance import session_record

    run_dir = RunDirectory(tmp_path)
    run_dir.record_session(session_record(1))
    versions = run_dir.provenance()["sessions"][0]["versions"]
    for name in ("torch", "lightning", "torchmetrics", "numpy", "scikit-learn", "optuna", "timm"):
        assert versions[name] == version(name)
    assert versions["python"].count(".") == 2


# ------------------------------------------------------------------ a run directory is always inside --out


@pytest.mark.parametrize(
    "names",
    [{"arch": "timm:x/../.."}, {"method": "plugin/../x"}, {"stream": "..\\x"}, {"dataset": "a/b"}, {"guards": ["g/h"]}],
    ids=["timm-arch", "plugin-method", "stream", "dataset", "guard"],
)
def test_a_name_with_a_path_separator_is_refused_before_it_names_a_folder(names, tmp_path):
    from unlearnbench.config import ConfigError

    config = tiny_config(tmp_path / "out", tmp_path / "store", "finetune").replace(**names)
    with pytest.raises(ConfigError, match="holds a path separator"):
        config.validate()
    assert not any(tmp_path.iterdir())


def test_a_run_directory_name_over_the_file_systems_limit_is_cut_before_its_hash_and_others_keep_theirs(tmp_path):
    from unlearnbench.config import NAME_MAX
    from unlearnbench.plan import resolve_run

    config = tiny_config(tmp_path / "out", tmp_path / "store", "finetune")
    identity, run_dir = resolve_run(config)
    digest = run_dir.name.rsplit("-", 1)[1]
    assert run_dir == tmp_path / "out" / f"finetune-classwise-digits-smallcnn-T2-seed0-{digest}"  # as it always was
    long = config.replace(guards=["shrink_perturb" * 20]).run_path(identity)
    assert long.parent == tmp_path / "out" and len(long.name.encode()) == NAME_MAX and long.name.endswith(f"-{digest}")


@pytest.mark.parametrize("where", ["a-long-folder-name", "a-deep-folder"])
def test_an_out_the_file_system_cannot_hold_is_refused_in_one_line(where, tmp_path):
    from unlearnbench.config import ConfigError

    out = tmp_path / ("x" * 300) if where == "a-long-folder-name" else tmp_path.joinpath(*["d" * 200] * 20)
    with pytest.raises(ConfigError, match="file system allows") as error:
        tiny_config(out, tmp_path / "store", "finetune").validate()
    assert "\n" not in str(error.value)
