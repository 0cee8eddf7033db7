"""Continual unlearning side by side: LOFT, continual LOFT, gradient methods, and the plasticity guards.

The grid is the suite file `benchmarks/suites/continual.yaml` (digits, smallcnn; a class-wise and a
random stream, T=5; LOFT, continual LOFT, SalUn, RL, NegGrad+, FT, and {RL, NegGrad+, SalUn, FT} x
{orthogonal, shrink_perturb}). This script runs it through `run_suite` (one model store: the
pretrained model and the T oracles per stream are trained once, so a second invocation only prints
the table) and prints the comparison the suite's leaderboard does not: the forward-failure gain
beside the forget drift and the oracle's own drift.

    python benchmarks/continual.py [--out runs/benchmarks-continual] [--full-recipe] [--only rl+orthogonal ...]

Columns: final gap (Avg.Gap to the oracle after request T; lower is better), forward failure
(forget_acc on F_T of the continual method minus of the same method serving F_T single-shot from
the pretrained model; lower is better), forget drift (forget_acc at T minus at 1, and the same
difference for the oracle beside it), backward failure
(max over s < t of history[t][s] − history[s][s]: how far an earlier forget set came back; lower is
better), rte_s (mean unlearning seconds per request, features/masks excluded: see prepare_s).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from unlearnbench.grid import load_suite
from unlearnbench.rundir import RunDirectory
from unlearnbench.suite import run_suite

SUITE = Path(__file__).resolve().parent / "suites" / "continual.yaml"


def _row_name(entry) -> str:
    if isinstance(entry, str):
        return entry
    return "+".join([entry["method"], *entry.get("guards", [])])


def result_row(cell) -> dict:
    """The comparison's columns for one finished suite cell, read from its run directory."""
    run = RunDirectory(cell.run_dir)
    summary = run.summary().scores
    scores = [row.method for row in run.rows() if row.status == "ok"]
    oracle_drift = None
    if summary.get("forget_drift_vs_oracle") is not None:
        oracle_drift = summary["forget_drift"] - summary["forget_drift_vs_oracle"]
    return {
        "stream": cell.config.stream.kind,
        "row": "+".join([cell.config.method.name, *cell.config.guard_names]),
        "status": cell.status.removeprefix("already "),
        "final_gap": summary.get("final", {}).get("gap"),
        "mean_gap": summary.get("mean_gap"),
        "forward_failure": summary.get("forward_failure"),
        "forget_drift": summary.get("forget_drift"),
        "forget_drift_oracle": oracle_drift,
        "backward_failure_max": summary.get("backward_failure_max"),
        "rte_s": float(np.mean([r["rte_s"] for r in scores])) if scores else None,
        "prepare_s": float(np.mean([r["prepare_s"] for r in scores])) if scores else None,
        "wall_s": cell.seconds,
        "run_dir": str(cell.run_dir),
    }


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(results: list[dict]) -> str:
    header = (
        "| stream | method (+guard) | final gap ↓ | forward failure ↓ | forget drift (oracle) | backward failure max ↓ "
        "| rte_s / request |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        drift = f"{_fmt(r['forget_drift'], 1)} ({_fmt(r['forget_drift_oracle'], 1)})"
        note = "" if r["status"] == "complete" else f" [{r['status']}]"
        lines.append(
            f"| {r['stream']} | {r['row']}{note} | {_fmt(r['final_gap'])} | {_fmt(r['forward_failure'], 1)} | {drift} | "
            f"{_fmt(r['backward_failure_max'], 1)} | {_fmt(r['rte_s'], 3)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder of run directories (default: the suite's)")
    parser.add_argument("--full-recipe", action="store_true", help="digits' own 30-epoch pretraining/oracle recipe")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared box)")
    parser.add_argument("--only", nargs="*", default=None, help="row names to run (e.g. loft rl+orthogonal)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    suite = load_suite(SUITE)
    if args.full_recipe:
        suite["common"].pop("recipe")
    if args.only:
        suite["methods"] = [entry for entry in suite["methods"] if _row_name(entry) in args.only]
    result = run_suite(suite, out=args.out)
    results = [result_row(cell) for cell in result.cells if cell.status != "failed"]
    out = result.cells[0].run_dir.parent
    (out / "continual.json").write_text(json.dumps(results, indent=2))
    (out / "continual.md").write_text(table(results) + "\n")
    print(table(results))
    for cell in result.failed:
        print(f"failed: {cell.run_dir.name}: {cell.error}")


if __name__ == "__main__":
    main()
