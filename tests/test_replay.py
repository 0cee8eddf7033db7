"""A run replays from its own config.yaml: `unlearnbench run --config RUN_DIR/config.yaml --out ELSEWHERE` is the same
run (same identity, same folder name) and, run, gives the same numbers."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST_RECIPE
from unlearnbench.cli import RECORD_PARTS, main, parse_run_args, run_config, run_parser
from unlearnbench.plan import plan_run
from unlearnbench.records import RunIdentity
from unlearnbench.registry import METHODS


def _plan(argv: list[str]):
    return plan_run(run_config(parse_run_args(argv)), require_recipe=False)


def _write_record(plan, path: Path) -> Path:
    path.write_text(yaml.safe_dump(plan.identity.to_json(), sort_keys=False))
    return path


def test_every_field_of_a_record_is_a_run_option_or_spelled_out():
    """A field added to the run's identity is replayed: it is an option of `run` of its name, or a part that
    `_record_arguments` spells out."""
    options = {action.dest for action in run_parser(None)._actions}
    assert {field.name for field in fields(RunIdentity)} - set(RECORD_PARTS) <= options


def test_a_run_option_is_declared_once_by_its_run_config_field():
    """`run`'s options are built from the fields of `RunConfig`'s parts (`config.option`): each such field is an
    option of its name (`flag`, where the field's is another) and its dashed spelling, with the field's default and
    help, in its part's section of `--help`, and a suite key unless the grid sets it; `tune` spells the options it
    shares the same way; the options checked before torch is imported take the field's type. A run's options are a
    round trip: `from_options(config.options())` is the same run."""
    from dataclasses import MISSING

    from unlearnbench.cli import _early_options
    from unlearnbench.config import PARTS, RUN_OPTIONS, RunConfig
    from unlearnbench.grid import COMMON_KEYS, NOT_COMMON
    from unlearnbench.tune_options import tune_parser

    parser = run_parser(None)
    run_actions = {action.dest: action for action in parser._actions}
    tune_actions = {action.dest: action for action in tune_parser()._actions}
    sections = {action.dest: group.title for group in parser._action_groups for action in group._group_actions}
    headings = {part: heading for part, _, heading in PARTS}
    declared = [(name, part, spec) for name, (part, _, spec) in RUN_OPTIONS.items() if spec.metadata.get("help")]
    assert len(declared) > 30
    for name, part, spec in declared:
        action = run_actions[name]
        default = spec.default_factory() if spec.default is MISSING else spec.default
        assert action.default == default and action.help.startswith(spec.metadata["help"]), name
        assert f"--{name.replace('_', '-')}" in action.option_strings, name
        assert sections[name] == headings[part], name
        assert name in COMMON_KEYS or name in NOT_COMMON, name
        if name in tune_actions and name != "out":  # tune's `--out` is its own: the folder of tuned files
            assert tune_actions[name].default == default and tune_actions[name].help == action.help
    config = RunConfig.from_options(method="rl", stream="random", requests=3, seed=2, guards=["ewc"], devices=2)
    assert RunConfig.from_options(**config.options()) == config
    assert (config.stream.kind, config.stream.requests, config.seeds.seed, config.hardware.devices) == (
        "random",
        3,
        2,
        2,
    )
    assert "mlp" in run_actions["arch"].help and "random" in run_actions["stream"].help  # a registry's names
    assert _early_options()["requests"] is int and _early_options()["quantize_bits"] is list
    assert _early_options()["size"] is float and "logger" not in _early_options()


def test_a_run_config_is_frozen_once_built():
    """What `plan_run` checked is what runs: a field changed after the checks would name the run after other values."""
    from dataclasses import FrozenInstanceError

    from unlearnbench.config import RunConfig

    config = RunConfig.from_options(method="finetune")
    with pytest.raises(FrozenInstanceError):
        config.seeds = config.seeds
    with pytest.raises(FrozenInstanceError):
        config.seeds.seed = 1
    with pytest.raises(FrozenInstanceError):
        config.hardware.precision = "16-mixed"


@pytest.mark.parametrize("method", METHODS.names())
def test_every_methods_record_replays_as_the_same_run(method, tmp_path):
    stream = (getattr(METHODS.get(method), "streams", None) or ["classwise"])[0]
    original = _plan(["--method", method, "--stream", stream, "--requests", "2", "--out", str(tmp_path / "a")])
    record = _write_record(original, tmp_path / "config.yaml")
    replay = _plan(["--config", str(record), "--out", str(tmp_path / "b")])
    assert replay.identity == original.identity
    assert replay.run_dir.name == original.run_dir.name and replay.run_dir.parent == tmp_path / "b"


def test_a_record_replays_every_option_it_holds(tmp_path):
    """Dataset, arch, method-group, guard, seed-part, protocol and robustness-evaluation options all come back from
    the record; the command line after `--config` still wins, as with any config file."""
    argv = [
        "--method", "salun", "--salun.optim.lr", "0.05", "--salun.ratio", "0.3", "--stream", "random",
        "--size", "0.02", "--requests", "3", "--dataset.train_size", "1000", "--arch.width", "16",
        "--train-seed", "3", "--oracle-every", "2", "--single-shot-baseline", "both", "--mia-protocol", "loft",
        "--guard", "shrink_perturb", "--shrink_perturb.shrink", "0.5", "--recipe", json.dumps({"epochs": 2}),
        "--relearn-every", "2", "--relearn-steps", "30", "--relearn-fraction", "0.25", "--quantize-every", "3",
        "--quantize-bits", "[4]",
    ]  # fmt: skip
    original = _plan([*argv, "--out", str(tmp_path / "a")])
    record = _write_record(original, tmp_path / "config.yaml")
    assert _plan(["--config", str(record), "--out", str(tmp_path / "b")]).identity == original.identity
    assert (original.identity.relearn_fraction, original.identity.quantize_bits) == (0.25, [4])
    changed = _plan(["--config", str(record), "--salun.optim.lr", "0.01", "--out", str(tmp_path / "b")])
    assert changed.identity.method_args["optim"]["lr"] == 0.01 and changed.run_dir.name != original.run_dir.name


def test_a_tuning_trials_record_is_refused_by_run(tmp_path, capsys):
    original = _plan(["--method", "ga", "--out", str(tmp_path / "a")])
    record = tmp_path / "config.yaml"
    record.write_text(yaml.safe_dump({**original.identity.to_json(), "split": "validation"}))
    with pytest.raises(SystemExit) as exit:
        main(["run", "--config", str(record), "--out", str(tmp_path / "b")])
    assert exit.value.code == 2 and "tuning trial's run" in capsys.readouterr().err


#: Fields of a metrics row that measure time, not the run: they differ between two sessions of one run.
def _timing(key: str) -> bool:
    return key.endswith("_s") or key.startswith(("rte", "prepare"))


def _numbers(run_dir: Path) -> tuple[list, str]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        for scores in row.values():
            if isinstance(scores, dict):
                for key in [key for key in scores if _timing(key)]:
                    del scores[key]
    return rows, (run_dir / "history.csv").read_text()


def test_a_run_replayed_from_its_config_yaml_has_the_same_numbers(tmp_path):
    """T = 2 digits requests, then the replay into another --out with its own store: every non-timing number equal."""
    first = [
        "run", "--method", "ga", "--ga.optim.epochs", "1", "--ga.optim.lr", "0.02", "--requests", "2",
        "--guard", "shrink_perturb", "--recipe", json.dumps(FAST_RECIPE), "--quiet", "true",
    ]  # fmt: skip
    assert main([*first, "--out", str(tmp_path / "a")]) == 0
    (original,) = [path for path in (tmp_path / "a").iterdir() if path.name != "store"]
    replay = ["run", "--config", str(original / "config.yaml"), "--out", str(tmp_path / "b"), "--quiet", "true"]
    assert main(replay) == 0
    replayed = tmp_path / "b" / original.name  # the same run, so the same name
    assert (replayed / "config.yaml").read_text() == (original / "config.yaml").read_text()
    assert _numbers(replayed) == _numbers(original)
