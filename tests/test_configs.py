"""The example configs under configs/ parse, print and resolve to a run, loading no data and writing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unlearnbench.cli import main, parse_run_args, run_config
from unlearnbench.plan import resolve_run

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(ROOT.glob("configs/*.yaml"))


def test_the_promised_examples_are_there():
    assert {path.stem for path in CONFIGS} >= {
        "quickstart",
        "plasticity_collapse_classwise",
        "plasticity_collapse_random",
        "loft_tinyimagenet",
        "guarded",
        "multi_gpu",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.name)
def test_config_prints_and_resolves_without_loading_or_writing(path, empty_cwd, no_datasets, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--config", str(path), "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    written = yaml.safe_load(path.read_text())
    for key, value in written.items():  # every key of the file reaches the parsed options unchanged
        assert printed[key] == value or (isinstance(value, dict) and value.items() <= printed[key].items()), key
    config = run_config(parse_run_args(["--config", str(path)]))
    identity, run_dir = resolve_run(config)
    assert identity.method == written["method"] and run_dir.parent == config.output.out
    for key in ("dataset", "arch", "stream", "requests"):
        assert getattr(identity, key) == written[key]
    assert list(empty_cwd.iterdir()) == []
