"""The privacy table of a chains suite: every privacy number at every request, each method beside the oracle.

    unlearnbench suite benchmarks/suites/privacy_digits.yaml
    python benchmarks/privacy_table.py runs/privacy-digits [--backward rl]

For each method of the runs folder (K unlearning chains of one seed, saved with `--save-logits`,
K oracles per request) and each request t it prints the SVC member rate and the LiRA AUC (means
over the K chains of the per-run values in metrics.jsonl), and the RMIA AUC, ToW and ε score of
`evaluation.chains.chain_privacy` over the K chains (an RMIA some chains of which are degenerate
names how many; one all of whose chains are reads "degenerate"). The oracle's row beside them
holds each number's target at this K: its own member rate (mean over the chains' rows), chance
for LiRA and RMIA (it is its own reference), one oracle's ToW against another (`tow_oracles`) and
the oracle-versus-oracle ε floor (`privacy.eps_floor(K)`, docs/privacy.md), never 1.
`--backward METHOD` prints that method's backward-privacy matrices (RMIA AUC and ε of F_s at t).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from unlearnbench.evaluation.chains import chain_privacy
from unlearnbench.rundir import RunDirectory


def chains_by_method(root: Path) -> dict[str, list[RunDirectory]]:
    runs: dict[str, list[RunDirectory]] = {}
    for path in sorted(root.iterdir()):
        run = RunDirectory(path)
        if path.is_dir() and run.is_run() and run.has_logits():
            runs.setdefault(run.identity().method, []).append(run)
    return runs


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _cell(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _rmia_cell(entry: dict, chains: int) -> str:
    degenerate = entry.get("rmia_degenerate", 0)
    if degenerate == chains:
        return "degenerate"
    text = _cell(entry.get("rmia_auc"), 3)
    return f"{text} ({degenerate}/{chains} degenerate)" if degenerate else text


def table(runs: dict[str, list[RunDirectory]]) -> list[str]:
    lines = [
        "| method | t | SVC member rate (%) | LiRA AUC | RMIA AUC | ToW | ε score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    oracle_printed = False
    for method, chains in runs.items():
        rows = [chain.rows() for chain in chains]
        privacy = {entry["t"]: entry for entry in chain_privacy([chain.path for chain in chains])["requests"]}
        if not oracle_printed:
            for t in range(1, len(rows[0]) + 1):
                member = _mean([chain[t - 1].oracle["mia_member_rate"] for chain in rows])
                entry = privacy.get(t, {})
                references = f"{_cell(entry.get('tow_oracles'), 3)} | {_cell(entry.get('eps_forget_floor'), 3)}"
                lines.append(
                    f"| oracle (target at K={len(chains)}) | {t} | {_cell(member, 1)} | 0.500 | 0.500 | {references} |"
                )
            oracle_printed = True
        for t in range(1, len(rows[0]) + 1):
            member = _mean([chain[t - 1].method["mia_member_rate"] for chain in rows])
            lira = _mean([chain[t - 1].method.get("lira_auc") for chain in rows])
            entry = privacy.get(t, {})
            cells = [_rmia_cell(entry, len(chains)), *(_cell(entry.get(key), 3) for key in ("tow", "eps_score"))]
            lines.append(
                f"| {method} (K={len(chains)}) | {t} | {_cell(member, 1)} | {_cell(lira, 3)} | "
                + " | ".join(cells)
                + " |"
            )
    return lines


def backward(chains: list[RunDirectory]) -> list[str]:
    privacy = chain_privacy([chain.path for chain in chains])
    lines = []
    for key in ("backward_rmia", "backward_eps"):
        lines += [f"{key} (row t: F_1..F_t at t)"]
        for t, row in enumerate(privacy[key], start=1):
            lines.append(f"  t={t}: " + " ".join(_cell(value, 3) for value in row or []))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the suite's runs folder (its `out`)")
    parser.add_argument("--backward", help="also print this method's backward-privacy matrices")
    args = parser.parse_args()
    runs = chains_by_method(args.runs)
    print("\n".join(table(runs)))
    if args.backward:
        print("\n".join(backward(runs[args.backward])))


if __name__ == "__main__":
    main()
