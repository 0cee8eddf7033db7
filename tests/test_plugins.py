"""Plugins through the `unlearnbench.methods` entry point: found without importing, one broken plugin breaks nothing else;
metric plugins through `unlearnbench.metrics`, loaded before a run is planned.

Each test installs plugins the way pip leaves them for `importlib.metadata`: a `*.dist-info` folder
with an `entry_points.txt`, beside the plugin's module, on the path of a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD = '''
"""A plugin method."""
import torch.nn.functional as F

from unlearnbench.methods.base import GradientMethod
from unlearnbench.streams.batches import BatchMode


class PluginAscent(GradientMethod):
    """Plugin GA: −CE on the forget set, from a separate package."""

    batch_mode = BatchMode.FORGET

    def loss(self, batch):
        forget = batch["forget"]
        return -F.cross_entropy(self(forget.x), forget.y)
'''


def install(site: Path, name: str, module_source: str, entry: str, group: str = "unlearnbench.methods") -> None:
    (site / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")


def unlearnbench(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    code = "import sys; from unlearnbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd)


@pytest.fixture
def site(tmp_path) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    install(folder, "good_plugin", GOOD, "plugin_ga = good_plugin:PluginAscent")
    install(folder, "broken_plugin", "import a_module_nobody_has\n", "broken_one = broken_plugin:Whatever")
    install(folder, "syntax_plugin", "def (:\n", "unparsable = syntax_plugin:Method")
    return folder


def test_list_names_every_plugin_and_marks_the_broken_ones_without_importing_them(site, tmp_path):
    result = unlearnbench(site, "list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.strip().startswith("│")}
    assert "Plugin GA: −CE on the forget set" in lines["plugin_ga"]
    assert "salun" in lines
    assert "BROKEN" in lines["unparsable"] and "SyntaxError" in lines["unparsable"]
    # The import error of broken_plugin shows only when it is used: listing imports no plugin.
    assert "broken_one" in lines and "Traceback" not in result.stderr


def test_a_broken_plugin_fails_its_own_name_in_one_line_and_nothing_else(site, tmp_path):
    broken = unlearnbench(site, "run", "--method", "broken_one", cwd=tmp_path)
    assert broken.returncode == 2
    assert broken.stderr.count("\n") == 1 and "Traceback" not in broken.stderr
    assert "'broken_one' (plugin broken_plugin:Whatever) failed to import: ModuleNotFoundError" in broken.stderr
    assert list(tmp_path.glob("runs")) == []
    helped = unlearnbench(site, "run", "--method", "rl", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--rl.optim.lr" in helped.stdout
    unknown = unlearnbench(site, "run", "--method", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "plugin_ga" in unknown.stderr and "broken_one" in unknown.stderr


def test_a_plugin_methods_arguments_are_left_to_the_full_parse(site, tmp_path):
    """A plugin's signature cannot be known before it is imported: its group passes the early check whatever it
    holds (the full parse, the authority, judges it), and nothing heavy is imported for that."""
    code = (
        "import sys; from unlearnbench.cli import _check_early; "
        "_check_early(['--method', 'plugin_ga', '--plugin_ga.optim.lr', '-1', '--plugin_ga.anything', 'x']); "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr[-2000:]
    full = unlearnbench(site, "run", "--method", "plugin_ga", "--plugin_ga.optim.lr", "-1", cwd=tmp_path)
    assert (
        full.returncode == 2
        and "method 'plugin_ga' argument optim.lr must satisfy optim.lr > 0, got -1.0" in full.stderr
    )


@pytest.mark.slow
def test_a_plugin_method_runs_beside_a_broken_one(site, tmp_path):
    result = unlearnbench(
        site,
        "run",
        "--method",
        "plugin_ga",
        "--requests",
        "1",
        "--plugin_ga.optim.epochs",
        "1",
        "--recipe",
        '{"epochs": 1}',
        "--oracle",
        "none",
        "--logger",
        "none",
        "--quiet",
        "true",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").glob("plugin_ga-*")
    assert (run_dir / "summary.json").exists()


METRIC = """
\"\"\"A plugin metric that enters the papers' gap.\"\"\"
from unlearnbench.evaluation.keys import GAP, MetricKey, register_metric


def forget_top_logit(inputs):
    return float(inputs.logits.train[inputs.request.forget].max(axis=1).mean())


register_metric(MetricKey("forget_top_logit", "mean top logit on F_t", False, True, gaps=(GAP,), compute=forget_top_logit))
"""

PLAN = (
    "from unlearnbench.cli import parse_run_args, run_config; from unlearnbench.plan import plan_run; "
    "plan = plan_run(run_config(parse_run_args(['--method', 'ga']))); print(plan.identity.metrics); print(plan.run_dir.name)"
)


def planned(site: Path | None, cwd: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([str(site)] if site else []), *sys.path])}
    result = subprocess.run([sys.executable, "-c", PLAN], capture_output=True, text=True, env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_a_metric_plugin_is_loaded_for_a_run_and_its_gap_is_part_of_the_runs_identity(tmp_path):
    """`unlearnbench run` registers a plugin's metrics before planning: the gap it enters names another run."""
    site = tmp_path / "site"
    site.mkdir()
    install(site, "metric_plugin", METRIC, "forget_top_logit = metric_plugin", group="unlearnbench.metrics")
    plain = planned(None, tmp_path)
    with_plugin = planned(site, tmp_path)
    assert plain[0] == "None" and with_plugin[0] == "{'forget_top_logit': ['gap']}"
    assert plain[1] != with_plugin[1] and plain[1].rsplit("-", 1)[0] == with_plugin[1].rsplit("-", 1)[0]


TINY_RUN = ("run", "--method", "ga", "--requests", "1", "--ga.optim.epochs", "1", "--recipe", '{"epochs": 1}')
TINY_RUN += ("--oracle", "none", "--single-shot-every", "0", "--logger", "none", "--quiet", "true")


def test_a_broken_metric_plugin_is_one_warning_line_and_a_run_without_it_runs(tmp_path):
    """A metric plugin that fails to import stops no run that never used it: one warning line names it and the fix,
    and the run computes the metrics that load (its identity names no user metric)."""
    site = tmp_path / "site"
    site.mkdir()
    install(site, "bad_metric", "import a_module_nobody_has\n", "bad = bad_metric", group="unlearnbench.metrics")
    result = unlearnbench(site, *TINY_RUN, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(
        "unlearnbench: warning: metric plugin 'bad' (bad_metric) failed to import: ModuleNotFoundError"
    )
    assert result.stderr.rstrip().endswith("runs go on without its metrics; fix or uninstall the plugin")
    (run_dir,) = (tmp_path / "runs").glob("ga-*")
    assert (run_dir / "summary.json").exists() and "metrics" not in (run_dir / "config.yaml").read_text()


@pytest.mark.slow
def test_a_run_whose_gaps_average_a_broken_plugins_metric_is_refused_not_redone_without_it(tmp_path):
    """A finished run made with a metric plugin whose metric enters a gap; the plugin then breaks: the same command,
    and the same command with `--run-dir` on that folder, are refused in one line naming the plugin and the folder,
    and no run starts afresh under the identity without the metric."""
    site = tmp_path / "site"
    site.mkdir()
    install(site, "metric_plugin", METRIC, "forget_top_logit = metric_plugin", group="unlearnbench.metrics")
    assert unlearnbench(site, *TINY_RUN, cwd=tmp_path).returncode == 0
    (run_dir,) = (tmp_path / "runs").glob("ga-*")
    (site / "metric_plugin.py").write_text("import a_module_nobody_has\n")
    for extra in ((), ("--run-dir", str(run_dir))):
        result = unlearnbench(site, *TINY_RUN, *extra, cwd=tmp_path)
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and len(lines) == 2 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith("unlearnbench: warning: metric plugin 'forget_top_logit' (metric_plugin) failed")
        folder = run_dir if extra else run_dir.relative_to(tmp_path)  # as the command names it: `--out runs`
        assert lines[1].startswith(f"unlearnbench: error: {folder} holds this run, its gaps averaging metric(s) ")
        assert "forget_top_logit, which are not loaded: metric plugin 'forget_top_logit'" in lines[1]
        assert lines[1].endswith("fix the plugin to resume it")
        assert list((tmp_path / "runs").glob("ga-*")) == [run_dir]
