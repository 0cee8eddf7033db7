"""`known_arguments.json`: what `run` knows of the built-in classes before importing them, and that it is never
more than the classes say.

The file is generated from the live registries; these tests regenerate it and compare, check each entry against
its class registry-wide, check that the early check accepts every class's defaults and a table of good values,
and that where it refuses, the full parse and `RunConfig.validate` refuse the same input in the same words.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json

import pytest

from unlearnbench import known_arguments
from unlearnbench.cli import _check_early, _option_text, parse_run_args, run_config
from unlearnbench.data.cache import dataset_parameters
from unlearnbench.errors import ConfigError
from unlearnbench.generate_known_arguments import generate
from unlearnbench.methods.base import group_settings
from unlearnbench.ranges import parameters, valid_ranges
from unlearnbench.registry import ARCHS, DATASETS, GUARDS, METHODS
from unlearnbench.training import arch_parameters

ENTRIES = [
    (section, name)
    for section, registry in (("methods", METHODS), ("guards", GUARDS), ("datasets", DATASETS), ("archs", ARCHS))
    for name in registry.builtins()
]


def test_the_file_is_what_the_live_registries_say():
    """Else: `python -m unlearnbench.generate_known_arguments` after changing a built-in's arguments, ranges or size.
    The hardware words of another Lightning than the one installed are not read (`hardware_choices`), only stale."""
    recorded, live = json.loads(known_arguments.KNOWN_ARGUMENTS.read_text()), generate()
    if recorded["lightning"]["version"] != live["lightning"]["version"]:
        recorded.pop("lightning"), live.pop("lightning")
    assert recorded == live


def test_the_hardware_words_are_judged_early_only_with_the_lightning_they_were_read_from(monkeypatch, tmp_path):
    argv = ["--method", "ga", "--precision", "99"]
    if known_arguments.hardware_choices() is not None:  # the file's version is the installed one (else: stale, unread)
        assert _refusal(_check_early, argv, tmp_path) == _refusal(_full, argv, tmp_path) is not None
    for other in ("0.0.1", None):  # another version, or none installed: the full check judges
        monkeypatch.setattr(known_arguments, "_lightning_version", lambda other=other: other)
        assert known_arguments.hardware_choices() is None
        assert _refusal(_check_early, argv, tmp_path) is None


def _json(value: object) -> object:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize(("section", "name"), ENTRIES, ids=[f"{s}:{n}" for s, n in ENTRIES])
def test_each_entry_says_what_its_class_says(section, name):
    options = known_arguments.options(section, name)
    defaults = {option: default for option, _, default in options}
    if section == "methods":
        cls = METHODS.get(name)
        assert defaults == _json({n: p.default for n, p in parameters(cls).items()})
        assert known_arguments.valid_ranges(name) == valid_ranges(cls)
        assert known_arguments.settings(name) == group_settings(cls)
    elif section == "guards":
        assert defaults == _json({n: p.default for n, p in inspect.signature(GUARDS.get(name)).parameters.items()})
    elif section == "datasets":
        assert {option: (kind, default) for option, kind, default in options} == dataset_parameters(name)
        size, known = getattr(DATASETS.get(name), "known_size", None), known_arguments.known_size(name)
        assert (known and vars(known)) == (size and dataclasses.asdict(size))
    else:
        assert defaults == _json(arch_parameters(name))


def _spelled_out(section: str, name: str) -> list[str]:
    """`run` options choosing `name` with every one of its arguments given its default."""
    key = {"datasets": "dataset_args", "archs": "arch_args"}.get(section, name)
    chosen = {
        "methods": ["--method", name],
        "guards": ["--method", "finetune", "--guard", name],
        "datasets": ["--method", "finetune", "--dataset", name],
        "archs": ["--method", "finetune", "--arch", name],
    }[section]
    options = known_arguments.options(section, name)
    return [*chosen, *(arg for option, _, d in options for arg in (f"--{key}.{option}", _option_text(d)))]


@pytest.mark.parametrize(("section", "name"), ENTRIES, ids=[f"{s}:{n}" for s, n in ENTRIES])
def test_every_default_passes_the_early_check(section, name):
    _check_early(_spelled_out(section, name))


#: Good values away from the defaults: the early check takes them (the full parse runs them).
GOOD_VALUES = [
    ["--method", "salun", "--salun.ratio", "1", "--salun.hold", "weights", "--salun.optim.lr", "1e-5"],
    ["--method", "salun", "--salun.optim.epochs", "1", "--salun.optim.momentum", "0", "--salun.exclude_true", "true"],
    ["--method", "finetune", "--guard", "ewc", "--ewc.ewc_lambda", "0", "--guard", "lwf"],
    [
        "--method",
        "ga",
        "--dataset",
        "fashionmnist",
        "--dataset_args.train_size",
        "60000",
        "--dataset_args.augment",
        "false",
    ],
    ["--method", "ga", "--dataset_args.test_size", "10", "--arch", "mlp", "--arch_args.width", "1"],
    ["--method", "salun", "--salun", '{"ratio": 1, "optim": {"lr": 0.00001}}', "--salun.optim", "{epochs: 1}"],
    ["--method", "finetune", "--guard", "ewc", "--ewc", "{ewc_lambda: 0}", "--requests", "9", "--precision", "16"],
]


@pytest.mark.parametrize("argv", GOOD_VALUES, ids=[" ".join(a) for a in GOOD_VALUES])
def test_good_values_pass_the_early_check(argv):
    _check_early(argv)


def _refusal(check, argv: list[str], tmp_path) -> str | None:
    """What `check` says of `run ARGV`: its refusal's message, or None."""
    try:
        check([*argv, "--out", str(tmp_path / "out")])
    except ConfigError as error:
        return str(error)
    return None


def _full(argv: list[str]) -> None:
    """The full parse and validation of `run ARGV`, as `unlearnbench run` does them before running."""
    run_config(parse_run_args(argv)).validate()


#: Bad values the early check refuses; the full parse and validation must refuse each in the same words.
BAD_VALUES = [
    ["--method", "salun", "--salun.ratio", "2"],
    ["--method", "salun", "--salun.ratio", "0"],
    ["--method", "salun", "--salun.optim.lr", "-1"],
    ["--method", "salun", "--salun.optim.batch_size", "0"],
    ["--method", "salun", "--salun.optim.momentum", "1"],
    ["--method", "salun", "--salun.nope", "1", "--salun.ratio", "3"],
    ["--method", "salun", "--salun.ratio", "abc"],
    ["--method", "salun", "--salun.optim.lr", "nan"],
    ["--method", "salun", "--salun.hold", "x"],
    ["--method", "salun", "--salun.lr", "0.1"],
    ["--method", "scrub", "--scrub.optim.lr=0.1", "--scrub.optim.lr", "-2"],
    ["--method", "finetune", "--guard", "ewc", "--ewc.ewc_lambda", "x"],
    ["--method", "finetune", "--guard", "ewc", "--ewc.nope", "1"],
    ["--method", "ga", "--dataset_args.test_size", "1"],
    ["--method", "ga", "--dataset_args.train_size", "abc"],
    ["--method", "ga", "--dataset", "cifar10", "--dataset_args.train_size", "50001"],
    ["--method", "ga", "--dataset_args.nope", "1"],
    ["--method", "ga", "--arch_args.width", "0"],
    ["--method", "ga", "--arch_args.width", "2.5"],
    ["--method", "ga", "--accelerator", "tpuu"],
    ["--method", "ga", "--strategy", "ddp_sideways"],
    ["--method", "ga", "--precision", "15-mixed"],
    ["--method", "salun", "--salun", '{"ratio": 3}'],
    ["--method", "salun", "--salun", '{"optim": {"lr": -1}}', "--salun.ratio", "0.3"],
    ["--method", "salun", "--salun.optim", "{momentum: 1}"],
    ["--method", "salun", "--salun", "{nope: 1}"],
    ["--method", "salun", "--salun", "{hold: x}"],
    ["--method", "finetune", "--guard", "ewc", "--ewc", "{ewc_lambda: x}"],
    ["--method", "ga", "--dataset_args", "{test_size: 1}"],
    ["--method", "ga", "--requests", "11"],
    ["--method", "ga", "--requests", "4", "--size", "3"],
    ["--method", "ga", "--stream", "random", "--size", "0.5", "--requests", "2"],
    ["--method", "ga", "--stream", "memorized_mixed", "--dataset_args.train_size", "20", "--size", "0.06"],
    ["--method", "ga", "--stream", "interleaved", "--requests", "2", "--size", "0.45", "--single-shot-every", "0"],
    [
        "--method",
        "ga",
        "--dataset",
        "cifar100",
        "--dataset_args.train_size",
        "150",
        "--stream",
        "random",
        "--size",
        "0.001",
    ],
]


@pytest.mark.parametrize("argv", BAD_VALUES, ids=[" ".join(a) for a in BAD_VALUES])
def test_the_early_refusal_is_the_full_one(argv, tmp_path):
    if {"--accelerator", "--strategy", "--precision"} & set(argv) and known_arguments.hardware_choices() is None:
        pytest.skip("the installed Lightning is not the one the file recorded the hardware words of")
    early = _refusal(_check_early, argv, tmp_path)
    assert early is not None and early == _refusal(_full, argv, tmp_path)


#: --config files whose groups the early check judges: the full parse and validation must say the same of each.
BAD_SECTIONS = [
    "method: salun\nsalun: {ratio: 3}\n",
    "method: salun\nsalun: {optim: {lr: -1}}\n",
    "method: salun\nsalun: {optim: 3}\n",
    "method: salun\nsalun: {ratio: null}\n",
    "method: salun\nsalun: 3\n",
    "method: salun\nsalun: [1]\n",
    "method: salun\nsalun: {nope: 1}\n",
    "method: finetune\nguards: [ewc]\newc: {ewc_lambda: x}\n",
    "method: finetune\nguards: [ewc]\newc: 3\n",
    "method: rum\nrum: {stage_args: 3}\n",
    "method: ga\ndataset_args: {test_size: 1}\n",
    "method: ga\ndataset_args: 3\n",
    "method: ga\narch: mlp\narch_args: {width: 0}\n",
    "method: ga\narch_args: x\n",
]


@pytest.mark.parametrize("config", BAD_SECTIONS)
def test_the_early_refusal_of_a_config_section_is_the_full_one(config, tmp_path):
    (tmp_path / "run.yaml").write_text(config)
    argv = ["--config", str(tmp_path / "run.yaml")]
    early = _refusal(_check_early, argv, tmp_path)
    assert early is not None and early == _refusal(_full, argv, tmp_path)


@pytest.mark.parametrize("argv", GOOD_VALUES, ids=[" ".join(a) for a in GOOD_VALUES])
def test_the_full_parse_takes_the_good_values_too(argv, tmp_path):
    assert _refusal(_full, argv, tmp_path) is None


def _probes() -> list[list[str]]:
    """Every option of every built-in method and guard given a value out of most ranges (-1) or of the wrong type;
    and, in the group given whole (`--salun '{"optim": {"lr": -1}}'`), one option of each type and depth per class:
    the whole group's parse differs from the option's by the value's type and nesting, not by the option's name, and
    a probe costs two parses (half a second)."""
    probes = []
    for section, name in ENTRIES:
        if section in ("methods", "guards"):
            chosen = ["--method", name] if section == "methods" else ["--method", "finetune", "--guard", name]
            shapes = set()
            for option, kind, _ in known_arguments.options(section, name):
                value = "-1" if kind in (int, float) else "{not: a value}"
                probes.append([*chosen, f"--{name}.{option}", value])
                *groups, last = option.split(".")
                if (kind, len(groups)) in shapes:
                    continue
                shapes.add((kind, len(groups)))
                whole = {}
                functools.reduce(lambda mapping, group: mapping.setdefault(group, {}), groups, whole)[last] = (
                    -1 if kind in (int, float) else {"not": "a value"}
                )
                probes.append([*chosen, f"--{name}", json.dumps(whole)])
    return probes


PROBES = _probes()


@pytest.mark.parametrize("argv", PROBES, ids=[" ".join(a) for a in PROBES])
def test_wherever_the_early_check_refuses_a_method_or_guard_argument_the_full_one_says_the_same(argv, tmp_path):
    early = _refusal(_check_early, argv, tmp_path)
    assert early is None or early == _refusal(_full, argv, tmp_path)
