"""The console: a verdict per request and per stream that fits 100 columns, against the oracle and the original."""

from __future__ import annotations

import pytest

from tests.test_reliability import UB
from unlearnbench.cli import main
from unlearnbench.console import (
    DID_NOT_FORGET,
    FORGOT,
    NO_ORACLE,
    OVER_FORGOT,
    forgetting_verdict,
    oracle_band,
)


@pytest.mark.parametrize(
    ("method", "oracle", "original", "verdict"),
    [
        (0.5, 0.0, 90.0, FORGOT),  # inside one sample's worth of the oracle (100/200 = 0.5)
        (30.0, 0.0, 90.0, FORGOT),  # outside the band, but nearer the oracle than the original
        (60.0, 0.0, 90.0, DID_NOT_FORGET),  # nearer the original
        (97.0, 0.0, 90.0, DID_NOT_FORGET),  # past the original: learned harder
        (84.0, 85.0, 99.0, FORGOT),  # random forgetting: at the oracle's generalization, inside its band
        (60.0, 85.0, 99.0, OVER_FORGOT),  # far below it: the forget set stands out by being forgotten
        (99.0, 85.0, 99.0, DID_NOT_FORGET),
        (70.0, 85.0, 85.0, OVER_FORGOT),  # nothing to forget (the original is at the oracle), forgotten anyway
        (70.0, 85.0, None, OVER_FORGOT),  # a run made before the original was scored: the band alone decides
        (95.0, 85.0, None, DID_NOT_FORGET),
        (95.0, None, 99.0, NO_ORACLE),  # a request off the oracle schedule
    ],
)
def test_the_verdict_follows_the_documented_rule(method, oracle, original, verdict):
    assert forgetting_verdict(method, oracle, original, samples=200).verdict == verdict


def test_the_band_is_the_oracles_binomial_interval_never_under_one_sample():
    assert oracle_band(50.0, 100) == pytest.approx(1.96 * 5.0)
    assert oracle_band(0.0, 100) == pytest.approx(1.0)


def test_the_run_ends_with_a_verdict_that_fits_100_columns(tmp_path, monkeypatch, capsys):
    """finetune forgets nothing in one epoch: the verdict says so, and its zero backward failure is not good news."""
    monkeypatch.setenv("COLUMNS", "100")
    argv = [*UB, "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store"), "--quiet", "false"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100 and "…" not in out
    (verdict,) = [line for line in lines if line.startswith("│   2 │")]
    assert verdict.split("│")[2].strip() == DID_NOT_FORGET, verdict
    assert "after request 2, of F_1..F_2: 0 forgot · 2 did not forget · 0 over-forgot" in out
    (backward,) = [line for line in lines if line.startswith("backward failure max")]
    assert backward.endswith("(no request was forgotten: nothing could come back)")
