"""Continual unlearning side by side: LOFT, continual LOFT, gradient methods, and the plasticity guards.

One script, the default dataset (digits, smallcnn), a class-wise stream (T=5, one class per request)
and a random stream (T=5, 2% of the train set per request). Rows: LOFT, continual LOFT, SalUn, RL,
NegGrad+, FT, and {RL, NegGrad+, SalUn, FT} x {orthogonal, shrink_perturb}, each with its defaults.
Every run goes through the package's Runner and shares one model store (pretrained model and the
T oracles per stream are trained once), so a second invocation only prints the table.

    python benchmarks/continual.py [--out runs/benchmarks-continual] [--store PATH] [--full-recipe]

Columns: final gap (Avg.Gap to the oracle after request T; lower is better), forward failure
(forget_acc at T minus at 1, and the same difference for the oracle beside it), backward failure
(max over s < t of history[t][s] − history[s][s]: how far an earlier forget set came back; lower is
better), rte_s (mean unlearning seconds per request, features/masks excluded: see prepare_s).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from unlearnbench.config import Hardware, RunConfig
from unlearnbench.runner import Runner

STREAMS = {"classwise": 1, "random": 0.02}
GUARDS = ("orthogonal", "shrink_perturb")
ROWS = [
    ("loft", []),
    ("continual_loft", []),
    ("salun", []),
    ("rl", []),
    ("neggrad_plus", []),
    ("finetune", []),  # the unguarded baseline of the FT + guard rows
    *[(method, [guard]) for method in ("rl", "neggrad_plus", "salun", "finetune") for guard in GUARDS],
]
#: Pretraining/oracle recipe of the CPU suite (digits' own recipe trains 30 epochs); --full-recipe uses that.
FAST_RECIPE = {"epochs": 8, "batch_size": 128, "lr": 0.1}


def run_row(method: str, guards: list[str], stream: str, args: argparse.Namespace) -> dict:
    config = RunConfig(
        method=method,
        stream=stream,
        size=STREAMS[stream],
        requests=args.requests,
        seed=args.seed,
        guards=guards,
        recipe={} if args.full_recipe else dict(FAST_RECIPE),
        out=args.out,
        store=args.store,
        logger="none",
        hardware=Hardware(accelerator=args.accelerator),
    )
    start = time.perf_counter()
    result = Runner(config).run()
    summary = result.summary
    rows = [row["method"] for row in result.rows if row.get("status", "ok") == "ok"]
    oracle_change = None
    if summary.get("forward_failure_vs_oracle") is not None:
        oracle_change = summary["forward_failure"] - summary["forward_failure_vs_oracle"]
    return {
        "stream": stream,
        "row": "+".join([method, *guards]),
        "status": summary.get("status", "complete"),
        "final_gap": summary.get("final", {}).get("gap"),
        "mean_gap": summary.get("mean_gap"),
        "forward_failure": summary.get("forward_failure"),
        "forward_failure_oracle": oracle_change,
        "backward_failure_max": summary.get("backward_failure_max"),
        "rte_s": float(np.mean([r["rte_s"] for r in rows])) if rows else None,
        "prepare_s": float(np.mean([r["prepare_s"] for r in rows])) if rows else None,
        "wall_s": time.perf_counter() - start,
        "run_dir": str(result.run_dir),
    }


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(results: list[dict]) -> str:
    header = "| stream | method (+guard) | final gap ↓ | forward failure (oracle) | backward failure max ↓ | rte_s / request |"
    lines = [header, "|---|---|---:|---:|---:|---:|"]
    for r in results:
        forward = f"{_fmt(r['forward_failure'], 1)} ({_fmt(r['forward_failure_oracle'], 1)})"
        note = "" if r["status"] == "complete" else f" [{r['status']}]"
        lines.append(
            f"| {r['stream']} | {r['row']}{note} | {_fmt(r['final_gap'])} | {forward} | "
            f"{_fmt(r['backward_failure_max'], 1)} | {_fmt(r['rte_s'], 3)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks-continual"))
    parser.add_argument("--store", type=Path, default=None, help="model store (default OUT/store)")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--full-recipe", action="store_true", help="digits' own 30-epoch pretraining/oracle recipe")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared box)")
    parser.add_argument("--only", nargs="*", default=None, help="row names to run (e.g. loft rl+orthogonal)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for stream in STREAMS:
        for method, guards in ROWS:
            name = "+".join([method, *guards])
            if args.only and name not in args.only:
                continue
            results.append(run_row(method, guards, stream, args))
            r = results[-1]
            print(f"done {stream:9s} {name:28s} gap {_fmt(r['final_gap'])} in {r['wall_s']:.0f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "continual.json").write_text(json.dumps(results, indent=2))
    (args.out / "continual.md").write_text(table(results) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
