"""A run interrupted at any request boundary resumes to exactly the uninterrupted result."""

from __future__ import annotations

import copy
import json

import pytest
import torch.nn.functional as F

from tests.conftest import SimulatedCrashError, crash_before_request, measured_rows, tiny_config
from unlearnbench.methods.base import GradientMethod
from unlearnbench.registry import METHODS
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import Runner
from unlearnbench.streams.batches import BatchMode


@pytest.mark.parametrize("where", ["before_request", "after_checkpoint_before_row"])
def test_resume_equals_uninterrupted(tmp_path, shared_store, monkeypatch, where):
    config = tiny_config(tmp_path / "a", shared_store, "rl", requests=3)
    reference = Runner.from_config(config).run()

    interrupted_config = tiny_config(tmp_path / "b", shared_store, "rl", requests=3)
    with monkeypatch.context() as patch:
        if where == "before_request":
            crash_before_request(patch, 2)
        else:
            original = RunDirectory.append_row

            def append_row(self, row):
                if row.t == 2:
                    raise SimulatedCrashError
                return original(self, row)

            patch.setattr(RunDirectory, "append_row", append_row)
        with pytest.raises(SimulatedCrashError):
            Runner.from_config(interrupted_config).run()
    partial = Runner.from_config(interrupted_config)
    assert len(partial.run_dir.rows()) == 1
    resumed = partial.run()
    assert not resumed.already_complete
    assert measured_rows(resumed.run_dir) == measured_rows(reference.run_dir)
    assert (resumed.run_dir / "history.csv").read_text() == (reference.run_dir / "history.csv").read_text()
    assert [p.name for p in (resumed.run_dir / "state").glob("*.pt")] == ["t003.pt"]


def test_a_finished_run_is_left_alone(tmp_path, shared_store):
    config = tiny_config(tmp_path, shared_store, "finetune", requests=2)
    first = Runner.from_config(config).run()
    before = {p: p.read_bytes() for p in first.run_dir.rglob("*") if p.is_file()}
    again = Runner.from_config(config).run()
    assert again.already_complete
    assert {p: p.read_bytes() for p in first.run_dir.rglob("*") if p.is_file()} == before
    assert json.loads((first.run_dir / "summary.json").read_text())["requests_done"] == 2


def test_oracle_none_reports_no_gap(tmp_path, shared_store):
    result = Runner.from_config(tiny_config(tmp_path, shared_store, "finetune", oracle="none")).run()
    assert all(row.oracle is None and "gap" not in row.method for row in result.rows)
    assert "mean_gap" not in result.summary.scores


class TeacherAsSubmodule(GradientMethod):
    """A plugin written the obvious way: its teacher is a registered submodule, copied in prepare."""

    batch_mode = BatchMode.PAIRED

    def prepare(self, request, data) -> None:
        self.teacher = copy.deepcopy(self.model).eval().requires_grad_(False)

    def loss(self, batch):
        retain, forget = batch["retain"], batch["forget"]
        kept = F.kl_div(F.log_softmax(self(retain.x), 1), F.softmax(self.teacher(retain.x), 1), reduction="batchmean")
        return kept - 0.1 * F.cross_entropy(self(forget.x), forget.y)


@pytest.fixture
def teacher_plugin():
    METHODS.register("teacher_plugin")(TeacherAsSubmodule)
    yield "teacher_plugin"
    METHODS._entries.pop("teacher_plugin")


def test_a_teacher_kept_as_a_submodule_stays_out_of_the_resume_state(
    tmp_path, shared_store, monkeypatch, teacher_plugin
):
    """Per-request scratch is rebuilt by prepare: a resumed run neither stores nor refuses it."""
    reference = Runner.from_config(tiny_config(tmp_path / "a", shared_store, teacher_plugin, requests=3)).run()
    config = tiny_config(tmp_path / "b", shared_store, teacher_plugin, requests=3)
    with monkeypatch.context() as patch:
        crash_before_request(patch, 3)
        with pytest.raises(SimulatedCrashError):
            Runner.from_config(config).run()
    saved = RunDirectory(config.run_path(Runner.from_config(config).identity)).load_state(2)
    assert saved and all(key.startswith("model.") for key in saved)
    resumed = Runner.from_config(config).run()
    assert measured_rows(resumed.run_dir) == measured_rows(reference.run_dir)
