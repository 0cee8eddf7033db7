"""Six methods at their former defaults and at their references', each beside the oracle, on the default stream.

    python benchmarks/fidelity.py [--out runs/fidelity] [--seed 0]

The default stream is digits, class-wise, T = 5, smallcnn (single-shot counterfactuals off: this
table needs none). "former" is what our code did before its defaults were compared with the
reference code: NegGrad+ as SCRUB's α-mixture (α 0.999, lr 0.01, 5 epochs, batch 256, momentum
0.9, wd 5e-4), RL and SalUn over one shuffled pass of forget ∪ retain, LOFT with lr 0.05, 200
steps, a PCA start and re-projection every 10 steps; FT and MUNBa kept theirs. "reference" is
each method's default now (its docstring cites the code it follows). Each cell is the mean over
the T requests of the per-request value in metrics.jsonl; "max forget" is the largest forget
accuracy over the requests; "n.s." counts the requests where the SVC attack's validity interval
contains chance (50%) and, for the advantage, where it lies inside its 95% null interval (no
evidence of membership either way). The oracle row reads the same keys of the oracle's scores.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from unlearnbench.config import RunConfig
from unlearnbench.records import RequestRecord
from unlearnbench.runner import Runner

FORMER = {
    "finetune": None,
    "neggrad_plus": {
        "formulation": "scrub",
        "alpha": 0.999,
        "optim": {"lr": 0.01, "epochs": 5, "batch_size": 256, "momentum": 0.9, "weight_decay": 5e-4},
    },
    "rl": {"batches": "mixed"},
    "salun": {"batches": "mixed"},
    "munba": None,
    "loft": {"lr": 0.05, "steps": 200, "init": "pca", "stabilize": 10},
}
COLUMNS = (
    "| method | defaults | mean forget | max forget | mean gap | mean gap_acc | SVC validity (n.s./T) "
    "| SVC advantage (n.s./T) |"
)


def run(method: str, method_args: dict, out: Path, seed: int) -> list[RequestRecord]:
    config = RunConfig(method=method, method_args=method_args, single_shot_every=0, seed=seed, out=out)
    return Runner(config).run().rows


def line(label: str, defaults: str, scores: list[dict]) -> str:
    def mean(key: str) -> float:
        return float(np.mean([s[key] for s in scores]))

    not_significant = sum(s["mia_validity_lo"] <= 50 <= s["mia_validity_hi"] for s in scores)
    inside = sum(s["mia_advantage_null_lo"] <= s["mia_advantage"] <= s["mia_advantage_null_hi"] for s in scores)
    forget = [s["forget_acc"] for s in scores]
    gaps = (f"{mean('gap'):.2f} | {mean('gap_acc'):.2f}") if "gap" in scores[0] else "0 | 0"
    return (
        f"| {label} | {defaults} | {np.mean(forget):.1f} | {max(forget):.1f} | {gaps} | "
        f"{mean('mia_validity'):.1f} ({not_significant}/{len(scores)}) | "
        f"{mean('mia_advantage'):+.1f} ({inside}/{len(scores)}) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fidelity"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lines, oracle = [COLUMNS, "|---|---|---:|---:|---:|---:|---:|---:|"], None
    for method, former in FORMER.items():
        for defaults, method_args in (("former", former), ("reference", {})):
            if method_args is None:
                continue
            rows = run(method, method_args, args.out, args.seed)
            oracle = oracle or [row.oracle for row in rows]
            label = "unchanged" if former is None else defaults
            lines.append(line(method, label, [row.method for row in rows]))
    lines.insert(2, line("oracle", "—", oracle))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
