"""The method's code in a run's provenance: a finished run whose method changed says so; a partial one is not resumed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import unlearnbench
from tests.conftest import tiny_config
from unlearnbench import provenance
from unlearnbench.methods.base import UnlearningMethod
from unlearnbench.provenance import method_code, method_code_change
from unlearnbench.registry import GUARDS, METHODS
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import MethodCodeChangedError, Runner


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_method_code_hashes_the_import_closure_of_the_method_inside_the_methods_package():
    """SalUn trains as RL (its base), holds a mask (masks.py, a mixin) and steps through base.py and gradients.py."""
    code = method_code(METHODS.get("salun"))
    names = ("base", "gradients", "masks", "rl", "salun")
    methods = Path(unlearnbench.__file__).parent / "methods"
    expected = {
        f"unlearnbench.methods.{name}": _sha256(
            f"unlearnbench.methods.{name}".encode() + b"\0" + (methods / f"{name}.py").read_bytes()
        )
        for name in names
    }
    assert code["modules"] == expected
    assert code["source_sha256"] == _sha256(b"".join(value.encode() for value in expected.values()))
    assert code["package"] == "unlearnbench" and code["version"] == unlearnbench.__version__
    assert code["defaults"]["optim"]["lr"] == 0.013 and code["defaults"]["ratio"] == 0.5


def test_sfron_code_is_its_file_and_the_helpers_it_imports():
    assert set(method_code(METHODS.get("sfron"))["modules"]) >= {
        "unlearnbench.methods.sfron",
        "unlearnbench.methods.masks",
        "unlearnbench.methods.schedules",
        "unlearnbench.methods.base",
    }


def test_a_guards_modules_are_part_of_the_code_of_a_guarded_run():
    code = method_code(METHODS.get("rl"), [GUARDS.get("orthogonal")])
    assert {"unlearnbench.guards", "unlearnbench.guards.orthogonal", "unlearnbench.methods.rl"} <= set(code["modules"])


def _edited(monkeypatch, tmp_path, module: str) -> None:
    """`module`'s source as if edited (a copy with one more line): what a checkout with a changed helper holds."""
    original = provenance._source_file(module)
    copy = tmp_path / original.name
    copy.write_bytes(original.read_bytes() + b"\n# edited\n")
    source_file = provenance._source_file
    monkeypatch.setattr(provenance, "_source_file", lambda name: copy if name == module else source_file(name))


def test_editing_a_helper_module_changes_the_recorded_code(tmp_path, monkeypatch):
    """SFR-on's recorded code was sfron.py alone: an edit of masks.py went unseen and a partial run resumed across
    two versions."""
    before = method_code(METHODS.get("sfron"))
    _edited(monkeypatch, tmp_path, "unlearnbench.methods.masks")
    after = method_code(METHODS.get("sfron"))
    assert after["source_sha256"] != before["source_sha256"]
    assert method_code_change(before, after) == "unlearnbench.methods.masks changed"
    assert method_code(METHODS.get("finetune")) == method_code(METHODS.get("finetune"))  # finetune has no mask


def _held_methods(method: UnlearningMethod) -> list[UnlearningMethod]:
    """The methods `method` holds and runs (RUM's stages), at any depth: attributes, and tuples or lists of them."""
    values = [*vars(method).values(), *method.modules()]
    held = [v for value in values for v in (value if isinstance(value, tuple | list) else (value,))]
    direct = [v for v in held if isinstance(v, UnlearningMethod) and v is not method]
    return [m for v in direct for m in (v, *_held_methods(v))]


@pytest.mark.parametrize("name", METHODS.names())
def test_the_code_of_every_method_it_runs_is_in_its_recorded_code(name):
    """A method that finds others by name at run time (RUM's stages) declares them (`code_parts`): their modules are
    hashed into its recorded code, as the runner records it, which its import closure alone would miss."""
    method = METHODS.get(name)()
    modules = set(method_code(type(method), method.code_parts())["modules"])
    assert {type(held).__module__ for held in _held_methods(method)} <= modules


def test_editing_a_stage_methods_module_changes_rums_recorded_code(tmp_path, monkeypatch, shared_store):
    """RUM's stages (finetune, salun by default) are looked up by name: an edit of finetune.py, which rum.py never
    imports, is a change of a finished RUM run's code, named."""
    config = tiny_config(tmp_path, shared_store, "rum", requests=1, single_shot_every=0)
    first = Runner.from_config(config).run()
    recorded = json.loads((first.run_dir / "provenance.json").read_text())["method_code"]
    assert {"unlearnbench.methods.finetune", "unlearnbench.methods.salun"} <= set(recorded["modules"])
    _edited(monkeypatch, tmp_path, "unlearnbench.methods.finetune")
    note = Runner.from_config(config).run().stale_note()
    assert note is not None and "(unlearnbench.methods.finetune changed)" in note


def test_a_method_without_a_source_file_has_no_hash():
    """A class made at run time (exec, a notebook, the README example's test) still runs; nothing to hash."""
    namespace: dict = {"UnlearningMethod": UnlearningMethod}
    exec("class Made(UnlearningMethod):\n    pass\n", namespace)
    assert method_code(namespace["Made"])["source_sha256"] is None


def test_a_change_is_named_and_no_record_is_no_change():
    code = {"package": "p", "version": "1", "modules": {"p.m": "aa", "p.n": "cc"}, "source_sha256": "ac"}
    assert method_code_change(None, code) is None and method_code_change(dict(code), code) is None
    assert method_code_change(code | {"modules": {"p.m": "bb", "p.n": "cc"}}, code) == "p.m changed"
    assert method_code_change(code | {"modules": {"p.m": "aa"}}, code) == "p.n added"
    assert method_code_change(code | {"version": "0"}, code) == "version 0 -> 1"


def test_a_record_from_before_the_closure_is_compared_on_the_modules_it_hashed():
    """Runs recorded `modules` as the method's own modules with one hash: unchanged modules are no change, so those
    runs resume (and record the closure from then on); a changed one is named."""
    path = Path(unlearnbench.__file__).parent / "methods" / "finetune.py"
    own = {"modules": ["unlearnbench.methods.finetune"], "package": "unlearnbench", "version": unlearnbench.__version__}
    current = method_code(METHODS.get("finetune"))
    old = own | {"source_sha256": _sha256(b"unlearnbench.methods.finetune\0" + path.read_bytes())}
    assert method_code_change(old, current) is None
    assert method_code_change(own | {"source_sha256": "0" * 16}, current) == "unlearnbench.methods.finetune changed"


def _record_other_code(run_dir: Path) -> None:
    """What provenance.json would hold had the run been made by another version of the method."""
    path = run_dir / "provenance.json"
    data = json.loads(path.read_text())
    for session in [data, *data["sessions"]]:
        session["method_code"]["modules"]["unlearnbench.methods.gradients"] = "0" * 16
    path.write_text(json.dumps(data))


def test_a_finished_run_whose_method_changed_says_so_and_how_to_rerun(tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, "finetune")
    first = Runner.from_config(config).run()
    recorded = json.loads((first.run_dir / "provenance.json").read_text())["method_code"]
    assert recorded == method_code(METHODS.get("finetune"))
    assert Runner.from_config(config).run().stale_note() is None  # unchanged code: nothing to say
    _record_other_code(first.run_dir)
    note = Runner.from_config(config).run().stale_note()
    assert note is not None and "(unlearnbench.methods.gradients changed)" in note and "choose another --out" in note


def test_a_partial_run_whose_helper_module_changed_is_not_resumed(tmp_path, shared_store, monkeypatch):
    """One line names the changed module and the fix; nothing in the run directory changes."""
    config = tiny_config(tmp_path, shared_store, "finetune")
    append_row = RunDirectory.append_row

    def killed_at_the_second_row(self, row):
        if row.t == 2:
            raise RuntimeError("killed")
        append_row(self, row)

    monkeypatch.setattr(RunDirectory, "append_row", killed_at_the_second_row)
    with pytest.raises(RuntimeError):
        Runner.from_config(config).run()
    monkeypatch.undo()
    run_dir = RunDirectory(Runner.from_config(config).run_dir.path)
    assert len(run_dir.rows()) == 1
    before = {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file() and p.name != ".lock"}
    _edited(monkeypatch, tmp_path, "unlearnbench.methods.gradients")
    with pytest.raises(MethodCodeChangedError) as refused:
        Runner.from_config(config).run()
    message = str(refused.value)
    assert "\n" not in message and "(unlearnbench.methods.gradients changed)" in message
    assert message.endswith(
        "resuming would mix two versions' numbers: delete that folder or choose another --out to rerun"
    )
    assert {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file() and p.name != ".lock"} == before
