"""benchmarks/tuned_vs_default.py, which docs/results.md's tuned-against-default table comes from: it pairs each
method's default and tuned rows of one stream's tables, across the CSVs they were published in, with the values the
leaderboard wrote."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLASSWISE = "fashionmnist (train_size=10000) · mlp · classwise (1 class per request, T=9)"
RANDOM = "fashionmnist (train_size=10000) · mlp · random (1% per request, T=30)"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("tuned_vs_default", ROOT / "benchmarks" / "tuned_vs_default.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, rows: list[dict]) -> Path:
    """`rows` in the published leaderboard's columns (its header, read from the file), the others empty."""
    with (ROOT / "docs" / "leaderboard" / "leaderboard.csv").open(newline="") as file:
        header = next(csv.reader(file))
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, header, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _row(group: str, method: str, gap: float | None, forget: float | None, status: str = "3 complete") -> dict:
    values = {"mean_gap_acc_mean": gap, "mean_gap_acc_std": 0.5, "forget_acc_mean": forget, "forget_acc_std": 1.0}
    values = {key: value for key, value in values.items() if gap is not None}
    seeds = {"n_seeds": 3 if gap is not None else 0, "seeds": "0 1 2"}
    return {"group": group, "method": method, **seeds, "status": status, **values}


def test_default_and_tuned_rows_of_one_stream_pair_up_across_csvs_sorted_by_the_tuned_gap(script, tmp_path):
    defaults = _write(
        tmp_path / "default.csv",
        [
            _row(CLASSWISE, "oracle (retrain)", 0.0, 0.0),
            _row(CLASSWISE, "ga", 46.8, 99.6),
            _row(CLASSWISE, "rl", 3.8, 15.8),
            _row(CLASSWISE, "scrub", 16.8, 0.0, "1 complete; diverged at t=8; diverged at t=9") | {"n_seeds": 1},
            _row(CLASSWISE, "neggrad_plus", None, None, "diverged at t=1; diverged at t=1; diverged at t=1"),
            _row(RANDOM, "ga", 4.0, 99.0),  # another stream's table: never read
        ],
    )
    tuned = _write(
        tmp_path / "tuned.csv",
        [
            _row(CLASSWISE, "ga (tuned, optim.epochs=4, optim.lr=0.00276386)", 9.6, 1.4),
            _row(CLASSWISE, "ga (optim.lr=0.1)", 1.0, 1.0),  # a default-setting variant: neither row
            _row(CLASSWISE, "rl (tuned)", 12.3, 60.0),
            _row(CLASSWISE, "scrub (tuned)", 29.3, 0.0),
            _row(CLASSWISE, "neggrad_plus (tuned)", 2.0, 3.0),
            _row(RANDOM, "rl (tuned)", 1.0, 80.0),
        ],
    )
    rows = script.read_rows([defaults, tuned], "classwise")
    lines = script.table(rows)
    labels = [line.split("|")[1].strip() for line in lines[2:]]
    assert labels == ["*oracle (retrain)*", "`neggrad_plus`", "`ga`", "`rl`", "`scrub`"]
    ga = [cell.strip() for cell in lines[3 + 1].strip("|").split("|")]
    assert ga[:5] == ["`ga`", "46.8 ± 0.5", "9.6 ± 0.5", "99.6 ± 1.0", "1.4 ± 1.0"]
    neggrad = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert neggrad[1:4] == ["diverged at t = 1, 1, 1", "2.0 ± 0.5", "—"]
    scrub = [cell.strip() for cell in lines[-1].strip("|").split("|")]
    assert scrub[1:4] == ["16.8 (1 of 3 seeds)", "29.3 ± 0.5", "0.0"], "a mean over the seeds that finished says so"
    forgets, closer, further = script.counts(rows)
    assert forgets.startswith("methods that forget") and forgets.endswith("2 of 4 at their defaults, 3 tuned")
    assert closer.endswith(": 1: ga") and further.endswith(": 2: rl, scrub")


def test_ends_keep_the_closest_and_the_furthest_tuned_methods_a_diverged_one_last(script, tmp_path):
    gaps = {"eu_k": 0.1, "rl": 0.6, "salun": 0.7, "finetune": 5.5, "ssd": 28.7, "ga": None}
    rows = [_row(CLASSWISE, "oracle (retrain)", 0.0, 0.0), _row(CLASSWISE, "original (pretrained)", 47.3, 99.5)]
    rows += [_row(CLASSWISE, method, 40.0, 99.0) for method in gaps]
    rows += [_row(CLASSWISE, f"{method} (tuned)", gap, 1.0, "diverged at t=2" if gap is None else "3 complete")
             for method, gap in gaps.items()]  # fmt: skip
    lines = script.table(script.read_rows([_write(tmp_path / "board.csv", rows)], "classwise"), ends=2)
    labels = [line.split("|")[1].strip() for line in lines[2:]]
    assert labels == ["*oracle (retrain)*", "*original (pretrained)*", "`eu_k`", "`rl`", "`ssd`", "`ga`"]
    assert len(script.table(script.read_rows([tmp_path / "board.csv"], "classwise"), ends=3)) == 2 + 2 + 6
    # every default row (40.0) and every tuned row that finished (0.1 ... 28.7) is more than a point below 47.3
    beat = script.counts(script.read_rows([tmp_path / "board.csv"], "classwise"))[-1]
    assert beat.startswith("beat doing nothing (mean gap_acc below the original's 47.3 by > 1): 6 of 6 at their ")
    assert "defaults, 5 tuned" in beat
