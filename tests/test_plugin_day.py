"""A researcher's day with a plugin: install, run, kill, resume, edit, break; the CLI keeps working throughout.

The plugin is a package written here into a temporary folder (its own `pyproject.toml` declaring the
`unlearnbench.methods` entry point) and installed the way pip leaves it for `importlib.metadata`: a
`*.dist-info` folder with `entry_points.txt` and `top_level.txt` beside the module, on `PYTHONPATH`
(no network, nothing installed into this interpreter). Its method keeps a teacher the obvious way,
as a submodule copied in `prepare`, which once made every resume fail with `Unexpected key(s)
"teacher.*"`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import FAST_RECIPE, measured_rows

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = '''
"""A plugin package: distillation from the model before the request."""
import copy

import torch
import torch.nn.functional as F

from unlearnbench.methods.base import GradientMethod
from unlearnbench.streams.batches import BatchMode


class KeepTeacher(GradientMethod):
    """Plugin KD: CE and KL to the pre-request model on retain, minus CE on forget."""

    batch_mode = BatchMode.PAIRED

    def prepare(self, request, data):
        self.teacher = copy.deepcopy(self.model).eval().requires_grad_(False)  # a submodule: per-request scratch

    def loss(self, batch):
        forget, retain = batch["forget"], batch["retain"]
        logits = self(torch.cat([forget.x, retain.x]))  # one forward: BatchNorm sees both, as in pretraining
        forget_logits, retain_logits = logits[: len(forget.x)], logits[len(forget.x) :]
        with torch.no_grad():
            teacher = F.softmax(self.teacher(retain.x), dim=1)
        kl = F.kl_div(F.log_softmax(retain_logits, dim=1), teacher, reduction="batchmean")
        return F.cross_entropy(retain_logits, retain.y) + kl - 0.1 * F.cross_entropy(forget_logits, forget.y)
'''

PYPROJECT = """
[project]
name = "kd-plugin"
version = "0.1"
dependencies = ["unlearnbench"]

[project.entry-points."unlearnbench.methods"]
kd_plugin = "kd_plugin:KeepTeacher"
"""


def write_plugin(folder: Path) -> Path:
    """The package's source and what `pip install` would leave for importlib.metadata to find."""
    folder.mkdir()
    (folder / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (folder / "kd_plugin.py").write_text(textwrap.dedent(PLUGIN))
    info = folder / "kd_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kd-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        '[unlearnbench.methods]\nkd_plugin = "kd_plugin:KeepTeacher"\n'.replace('"', "")
    )
    (info / "top_level.txt").write_text("kd_plugin\n")
    return folder / "kd_plugin.py"


def unlearnbench(site: Path, *args: str, crash: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that sees the plugin; `crash` runs it under tests/crash_at.py."""
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    launcher = [str(ROOT / "tests" / "crash_at.py"), *crash, "--"] if crash else ["-m", "unlearnbench.cli"]
    return subprocess.run([sys.executable, *launcher, *args], capture_output=True, text=True, env=env, timeout=900)


def results(out: Path) -> list[dict]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "store"]
    return measured_rows(run_dir)


@pytest.mark.slow
def test_a_plugin_with_a_teacher_survives_kill_resume_edit_and_breakage(tmp_path):
    module = write_plugin(tmp_path / "kd_plugin_pkg")
    site = module.parent
    run = ["run", "--method", "kd_plugin", "--requests", "2", "--kd_plugin.optim.epochs", "2", "--recipe"]
    run += [json.dumps(FAST_RECIPE), "--oracle", "none", "--logger", "none", "--quiet", "true"]
    store = ["--store", str(tmp_path / "store")]

    reference = unlearnbench(site, *run, *store, "--out", str(tmp_path / "reference"))
    assert reference.returncode == 0, reference.stderr[-2000:]

    argv = [*run, *store, "--out", str(tmp_path / "out")]
    killed = unlearnbench(site, *argv, crash=("unlearnbench.rundir.RunDirectory.append_row", "2", "before"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = unlearnbench(site, *argv)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stderr == ""  # --quiet: no note, no warning, no Unexpected key(s) "teacher.*"
    assert results(tmp_path / "out") == results(tmp_path / "reference")

    again = unlearnbench(site, *argv)
    assert again.returncode == 0 and again.stderr == ""  # unchanged code: finished, nothing to say

    module.write_text(module.read_text().replace("- 0.1 * F.cross_entropy", "- 0.2 * F.cross_entropy"))
    edited = unlearnbench(site, *argv)
    assert edited.returncode == 0
    assert edited.stderr.startswith("unlearnbench: note: the method's code changed since ")
    assert "(kd_plugin changed)" in edited.stderr and "choose another --out" in edited.stderr  # names the module
    assert edited.stderr.count("\n") == 1

    module.write_text("import a_module_nobody_has\n" + module.read_text())
    listed = unlearnbench(site, "list")
    assert listed.returncode == 0 and "kd_plugin" in listed.stdout and "Traceback" not in listed.stderr
    broken = unlearnbench(site, *run, *store, "--out", str(tmp_path / "broken"))
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1
    assert "'kd_plugin' (plugin kd_plugin:KeepTeacher) failed to import: ModuleNotFoundError" in broken.stderr
    builtin = [*run, *store, "--out", str(tmp_path / "builtin")]
    builtin[builtin.index("kd_plugin")] = "finetune"
    builtin[builtin.index("--kd_plugin.optim.epochs")] = "--finetune.optim.epochs"
    finetune = unlearnbench(site, *builtin)
    assert finetune.returncode == 0, finetune.stderr[-2000:]
    assert len(results(tmp_path / "builtin")) == 2
