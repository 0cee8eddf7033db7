"""Valid ranges of method hyperparameters: declared for every numeric one, enforced before data loads, shown in help."""

from __future__ import annotations

import pytest

from unlearnbench.cli import main
from unlearnbench.ranges import Range, numeric_parameters, parameters, valid_ranges
from unlearnbench.registry import METHODS
from unlearnbench.search_space import Float, Int

NUMERIC = [(method, name) for method in METHODS.names() for name in numeric_parameters(METHODS.get(method))]


def _outside(valid: Range, default: object) -> float:
    """A value just outside `valid`, of the default's type (a whole number stays one)."""
    step = 1 if isinstance(default, int) else 0.5
    if valid.low is not None:
        return valid.low if valid.low_open else valid.low - step
    return valid.high if valid.high_open else valid.high + step


@pytest.mark.parametrize("method", METHODS.names())
def test_every_numeric_hyperparameter_has_a_range_holding_its_default(method):
    cls = METHODS.get(method)
    ranges = valid_ranges(cls)
    assert set(numeric_parameters(cls)) <= set(ranges), (
        f"{method}: no valid range for {set(numeric_parameters(cls)) - set(ranges)}"
    )
    for name in numeric_parameters(cls):
        assert ranges[name].low is not None or ranges[name].high is not None, f"{method}.{name}: an unbounded range"
        default = parameters(cls)[name].default
        assert default is None or ranges[name].contains(default), f"{method}.{name} default {default} outside its range"


@pytest.mark.parametrize("method", METHODS.names())
def test_every_search_space_lies_inside_the_valid_range(method):
    cls = METHODS.get(method)
    ranges = valid_ranges(cls)
    for name, distribution in cls.search_space.items():
        if isinstance(distribution, Float | Int) and name in ranges:
            assert ranges[name].contains(distribution.low) and ranges[name].contains(distribution.high), (method, name)


@pytest.mark.parametrize(("method", "name"), NUMERIC, ids=[f"{m}.{n}" for m, n in NUMERIC])
def test_an_out_of_range_value_is_refused_before_data_loads(method, name, tmp_path, monkeypatch, capsys):
    cls = METHODS.get(method)
    default = parameters(cls)[name].default
    bad = _outside(valid_ranges(cls)[name], default if default is not None else 1)
    stream = (cls.streams or ("classwise",))[0]

    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the input was checked")

    monkeypatch.setattr("unlearnbench.data.cache.DatasetCache.load", no_data)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "run",
                "--method",
                method,
                "--stream",
                stream,
                f"--{method}.{name}",
                str(bad),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {name} must " in err, err
    assert not (tmp_path / "o").exists()


def test_ranges_accept_their_ends_as_declared():
    ratio = Range(0, 1, low_open=True)
    assert [ratio.contains(v) for v in (0, 1e-9, 1, 1.5)] == [False, True, True, False]
    momentum = Range(0, 1, high_open=True)
    assert [momentum.contains(v) for v in (0, 0.99, 1)] == [True, True, False]
    assert ratio.describe("ratio") == "0 < ratio <= 1"
    assert Range(1).describe("k") == "k >= 1" and Range(0, low_open=True).describe("lr") == "lr > 0"


def test_salun_ratio_1_5_is_one_line_naming_the_range(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--method", "salun", "--salun.ratio", "1.5", "--out", str(tmp_path / "o")])
    assert capsys.readouterr().err == (
        "unlearnbench: error: method 'salun' argument ratio must satisfy 0 < ratio <= 1, got 1.5\n"
    )


def test_method_help_describes_each_hyperparameter_and_its_range(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "salun", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0
    assert (
        "share of the weights (largest forget-gradient magnitudes) that training may change; valid: 0 < ratio <= 1"
        in out
    )
    assert "learning rate of the method's optimizer" in out  # the SGD settings' Args, by their group
    assert "--salun.optim.lr LR" in out and "valid: optim.lr > 0" in out
    assert "<class" not in out


@pytest.mark.parametrize("command", ["run", "suite", "leaderboard", "tune"])
def test_command_help_names_types_plainly(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0 and "<class" not in out and f"usage: unlearnbench {command}" in out
    if command == "run":
        assert "run --method NAME --help" in out
    if command == "suite":
        assert "unlearnbench/grid.py" in out and "unlearnbench/suite.py" not in out


def test_list_help_works(capsys):
    assert main(["list", "--help"]) == 0
    assert "usage: unlearnbench list" in capsys.readouterr().out
