"""Tuned against default: each method's tuned row beside its reference-default row, one stream's table.

    python benchmarks/tuned_vs_default.py docs/leaderboard/leaderboard.csv [--stream classwise] [--ends 5]

Reads leaderboard CSVs (`unlearnbench leaderboard`; nothing is trained or scored here): the rows `<method>` and
`<method> (tuned, ...)` of the tables whose title names `--stream`, from one CSV or several (a default and a tuned
leaderboard built apart). Prints, sorted by the tuned mean gap_acc (diverged rows last), mean ± the standard
deviation over the seeds as the leaderboard gives them, then how many methods forget (forget accuracy at T below
`FORGETS`) at their defaults and tuned, how many end closer to or further from the oracle by more than `CLOSER`
points of mean gap_acc, and how many beat doing nothing (the original row's mean gap_acc, by more than `CLOSER`):
on a random stream, whose oracle forgets little, the count that says which methods remove anything.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from pathlib import Path

#: The columns shown, as (leaderboard key, header).
COLUMNS = (
    ("mean_gap_acc", "mean gap_acc"),
    ("forget_acc", "forget acc at T"),
    ("test_acc", "test acc at T"),
    ("rememorization_events", "re-mem. events"),
)
#: A method forgets when its forget accuracy at T is below this (percent).
FORGETS = 50.0
#: A tuned row is closer to (further from) the oracle when its mean gap_acc is lower (higher) by more than this.
CLOSER = 1.0
TUNED = " (tuned)"
REFERENCES = ("oracle (retrain)", "original (pretrained)")


def read_rows(paths: list[Path], stream: str) -> dict[str, dict]:
    """{label: CSV row} of the tables whose title names `stream` (`· <stream> (`), over every CSV: the references by
    their labels, a default row by its method's name, a tuned one (`<method> (tuned, optim.lr=...)`) as `<method> (tuned)`.
    A default-setting row with other hyperparameters (`<method> (lr=...)`) is neither, and is left out."""
    rows = {}
    for path in paths:
        with path.open(newline="") as file:
            for row in csv.DictReader(file):
                if f"· {stream} (" not in row["group"]:
                    continue
                label = row["method"]
                if label not in REFERENCES and " (" in label:
                    name, variant = label.split(" (", 1)
                    if not variant.startswith("tuned"):
                        continue
                    label = name + TUNED
                rows.setdefault(label, row)
    return rows


def value(row: dict | None, key: str) -> float | None:
    text = (row or {}).get(f"{key}_mean", "").strip()
    return float(text) if text else None


def cell(row: dict | None, key: str, first: bool) -> str:
    """ "mean ± std"; where the row has no value because every seed diverged, the requests they diverged at in the
    `first` column and "—" in the others; "—" without a row."""
    if row is None:
        return "—"
    mean = value(row, key)
    if mean is None:
        at = re.findall(r"diverged at t=(\d+)", row["status"])
        return f"diverged at t = {', '.join(at)}" if first and at else "—"
    std = (row.get(f"{key}_std") or "").strip()
    text = f"{mean:.1f} ± {float(std):.1f}" if std and int(row["n_seeds"]) > 1 else f"{mean:.1f}"
    seeds = len(row["seeds"].split())
    if first and int(row["n_seeds"]) < seeds:  # the others diverged: the mean is over the seeds that finished
        text += f" ({row['n_seeds']} of {seeds} seeds)"
    return text


def table(rows: dict[str, dict], ends: int | None = None) -> list[str]:
    """The table's lines; `ends`: only the `ends` methods closest to the oracle tuned and the `ends` furthest (a
    diverged tuned row counts as furthest), as a headline shows them."""
    methods = sorted({label.removesuffix(TUNED) for label in rows if label.endswith(TUNED)})

    def order(method: str) -> tuple[float, str]:
        gap = value(rows[method + TUNED], "mean_gap_acc")
        return (math.inf if gap is None else gap, method)

    methods = sorted(methods, key=order)
    if ends is not None and len(methods) > 2 * ends:
        methods = methods[:ends] + methods[-ends:]

    header = ["method", *(f"{title}, {side}" for _, title in COLUMNS for side in ("default", "tuned"))]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for label in REFERENCES:
        if label in rows:
            lines.append(
                f"| *{label}* | "
                + " | ".join(cell(rows[label], key, k == 0) for k, (key, _) in enumerate(COLUMNS) for _ in (0, 1))
                + " |"
            )
    for method in methods:
        cells = [
            cell(rows.get(side), key, k == 0) for k, (key, _) in enumerate(COLUMNS) for side in (method, method + TUNED)
        ]
        lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
    return lines


def counts(rows: dict[str, dict]) -> list[str]:
    methods = sorted(label.removesuffix(TUNED) for label in rows if label.endswith(TUNED))
    nothing = value(rows.get(REFERENCES[1]), "mean_gap_acc")  # what a method that removes nothing scores
    forgets = {side: 0 for side in ("default", "tuned")}
    beat = dict(forgets)
    closer, further = [], []
    for method in methods:
        default, tuned = rows.get(method), rows[method + TUNED]
        for side, row in (("default", default), ("tuned", tuned)):
            forget, gap = value(row, "forget_acc"), value(row, "mean_gap_acc")
            forgets[side] += forget is not None and forget < FORGETS
            beat[side] += None not in (gap, nothing) and gap < nothing - CLOSER
        before, after = value(default, "mean_gap_acc"), value(tuned, "mean_gap_acc")
        if before is not None and after is not None:
            if after < before - CLOSER:
                closer.append(method)
            elif after > before + CLOSER:
                further.append(method)
    lines = [
        f"methods that forget (forget acc at T < {FORGETS:g}): {forgets['default']} of {len(methods)} at their "
        f"defaults, {forgets['tuned']} tuned",
        f"closer to the oracle tuned (mean gap_acc lower by > {CLOSER:g}): {len(closer)}: {', '.join(closer)}",
        f"further (higher by > {CLOSER:g}): {len(further)}: {', '.join(further)}",
    ]
    if nothing is not None:
        lines.append(
            f"beat doing nothing (mean gap_acc below the original's {nothing:.1f} by > {CLOSER:g}): {beat['default']} "
            f"of {len(methods)} at their defaults, {beat['tuned']} tuned"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csvs", nargs="+", type=Path, help="leaderboard.csv files")
    parser.add_argument("--stream", default="classwise", help="stream kind of the tables read")
    parser.add_argument("--ends", type=int, help="only the N methods closest to the oracle tuned and the N furthest")
    args = parser.parse_args()
    rows = read_rows(args.csvs, args.stream)
    if not any(label.endswith(TUNED) for label in rows):
        raise SystemExit(f"no tuned rows on the {args.stream} stream in {', '.join(map(str, args.csvs))}")
    print("\n".join([*table(rows, args.ends), "", *counts(rows)]))


if __name__ == "__main__":
    main()
