"""The method's code in a run's provenance: a finished run whose method changed says so; a partial one is not resumed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import unlearnbench
from tests.conftest import tiny_config
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.provenance import method_code, method_code_change
from unlearnbench.registry import METHODS
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import MethodCodeChangedError, Runner


def test_method_code_hashes_the_modules_of_the_method_and_its_method_ancestors():
    code = method_code(METHODS.get("salun"), UnlearningMethod)
    assert code["modules"] == ["unlearnbench.methods.rl", "unlearnbench.methods.salun"]  # SalUn trains as RL
    methods = Path(unlearnbench.__file__).parent / "methods"
    expected = hashlib.sha256()
    for name in ("rl", "salun"):
        expected.update(f"unlearnbench.methods.{name}".encode() + b"\0" + (methods / f"{name}.py").read_bytes())
    assert code["source_sha256"] == expected.hexdigest()[:16]
    assert code["package"] == "unlearnbench" and code["version"] == unlearnbench.__version__


def test_a_method_without_a_source_file_has_no_hash():
    """A class made at run time (exec, a notebook, the README example's test) still runs; nothing to hash."""
    namespace: dict = {"UnlearningMethod": UnlearningMethod}
    exec("class Made(UnlearningMethod):\n    pass\n", namespace)
    assert method_code(namespace["Made"], UnlearningMethod)["source_sha256"] is None


def test_a_change_is_named_and_no_record_is_no_change():
    code = {"package": "p", "version": "1", "modules": ["p.m"], "source_sha256": "aa"}
    assert method_code_change(None, code) is None and method_code_change(dict(code), code) is None
    assert method_code_change(code | {"source_sha256": "bb"}, code) == "source_sha256 bb -> aa"


def _record_other_code(run_dir: Path) -> None:
    """What provenance.json would hold had the run been made by another version of the method."""
    path = run_dir / "provenance.json"
    data = json.loads(path.read_text())
    for session in [data, *data["sessions"]]:
        session["method_code"]["source_sha256"] = "0" * 16
    path.write_text(json.dumps(data))


def test_a_finished_run_whose_method_changed_says_so_and_how_to_rerun(tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, "finetune")
    first = Runner(config).run()
    recorded = json.loads((first.run_dir / "provenance.json").read_text())["method_code"]
    assert recorded == method_code(METHODS.get("finetune"), UnlearningMethod)
    assert Runner(config).run().stale_note() is None  # unchanged code: nothing to say
    _record_other_code(first.run_dir)
    note = Runner(config).run().stale_note()
    assert note is not None and "source_sha256 0000000000000000 -> " in note and "choose another --out" in note


def test_a_partial_run_whose_method_changed_is_not_resumed(tmp_path, shared_store, monkeypatch):
    config = tiny_config(tmp_path, shared_store, "finetune")
    append_row = RunDirectory.append_row

    def killed_at_the_second_row(self, row):
        if row.t == 2:
            raise RuntimeError("killed")
        append_row(self, row)

    monkeypatch.setattr(RunDirectory, "append_row", killed_at_the_second_row)
    with pytest.raises(RuntimeError):
        Runner(config).run()
    monkeypatch.undo()
    run_dir = RunDirectory(Runner(config).run_dir.path)
    assert len(run_dir.rows()) == 1
    _record_other_code(run_dir.path)
    before = {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file() and p.name != ".lock"}
    with pytest.raises(MethodCodeChangedError, match="resuming would mix two versions' numbers"):
        Runner(config).run()
    assert {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file() and p.name != ".lock"} == before
