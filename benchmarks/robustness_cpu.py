"""Does forgotten knowledge stay forgotten? The robustness evaluations on the memorizing Fashion-MNIST tier, 3 seeds.

    unlearnbench suite benchmarks/robustness_fashionmnist_mlp.yaml      # the runs (OMP_NUM_THREADS=1, --shard i/2)
    python benchmarks/robustness_cpu.py [--out runs/robustness_fashionmnist_mlp]

Reads the suite's run directories (nothing is trained here) and prints, per method, mean ± the half-width of the
95% t-interval over the seeds (`plasticity_cpu.interval`):

1. the relearning attack after the last request of the class-wise stream (F_1..F_T, half held out): the held-out
   accuracy at k = 0, 5, 25 and 100 steps, the steps until it is back within 5% (the recorded margin) and within 30%
   of the original's accuracy, and the Anamnesis-style ratio method/oracle at each (recomputed from the stored
   curves with `relearn_scores`, as docs/reporting.md shows); the same on the most memorized stream;
2. the forget accuracy at T in float32 and with the weights rounded to 8 and 4 bits, per stream;
3. the interleaved stream: the forget gap (forget_acc on F_t minus the oracle's) by the model's age and its
   least-squares slope per learning step (`age_slope_forget_gap`);
4. the memorization-stratified streams: forget accuracy at T beside the oracle's and Avg.Gap over the accuracies
   (`gap_acc`) at T, most against least memorized.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml
from plasticity_cpu import interval

from unlearnbench.evaluation.relearn import relearn_scores
from unlearnbench.rundir import RunDirectory

SUITE = Path(__file__).resolve().parent / "robustness_fashionmnist_mlp.yaml"
#: The relearning attack's budget points shown in the curve columns.
CURVE_STEPS = (0, 5, 25, 100)
#: The reference rows every table shows beside the methods, in this order.
REFERENCES = ("original", "oracle")


def finished_runs(out: Path) -> tuple[dict[str, dict[str, list[RunDirectory]]], list[str]]:
    """{stream kind: {method: [run directories over the seeds]}} of the complete runs, and a line for each run that
    diverged (its rows stop before T, so it has no value at T: it is listed, never averaged in)."""
    runs: dict[str, dict[str, list[RunDirectory]]] = defaultdict(lambda: defaultdict(list))
    diverged = []
    for folder in sorted(out.iterdir()):
        if not (folder / "summary.json").exists():
            continue
        run = RunDirectory(folder)
        identity, summary = run.identity(), run.summary()
        if summary.status == "complete":  # a tuned run (robustness_tuned_fashionmnist_mlp.yaml) is its own row
            runs[identity.stream][identity.method + (" (tuned)" if identity.tuned else "")].append(run)
        elif summary.status == "diverged":
            diverged.append(
                f"{identity.method}, {identity.stream}, seed {identity.seed}: diverged at t = {summary.diverged_at}"
            )
    return runs, diverged


def last_row(run: RunDirectory):
    return [row for row in run.rows() if row.status == "ok"][-1]


def _sides(run: RunDirectory) -> dict[str, dict]:
    """The last row's method, oracle and original scores (the oracle's and original's are the same in every run of
    a seed: the table takes them from each method's run and so averages identical values per seed)."""
    row = last_row(run)
    return {"method": row.method, "oracle": row.oracle or {}, "original": row.original or {}}


def _relearn(run: RunDirectory, margin: float) -> dict[str, dict]:
    row = last_row(run)
    if "relearn_curve" not in row.method:
        return {}
    curves = {"method": row.method["relearn_curve"], "oracle": row.oracle["relearn_curve"]}
    return relearn_scores(curves, row.original["relearn_curve"][0], margin)


def relearning_table(by_method: dict[str, list[RunDirectory]]) -> list[str]:
    head = [f"k = {k}" for k in CURVE_STEPS] + ["steps, 5%", "steps, 30%", "ratio, 5%", "ratio, 30%"]
    lines = ["| model | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    table = Columns()
    for method, runs in sorted(by_method.items()):
        for run in runs:
            narrow, wide, seed = _relearn(run, 0.05), _relearn(run, 0.30), run.identity().seed
            if not narrow:
                continue
            for name, side in ((method, "method"), ("oracle", "oracle")):
                points = narrow[side]["relearn_curve"]
                table.add(
                    name,
                    seed,
                    [points[k] if k < len(points) else None for k in CURVE_STEPS]
                    + [narrow[side]["relearn_steps"], wide[side]["relearn_steps"]]
                    + [narrow[side]["relearn_ratio"], wide[side]["relearn_ratio"]],
                )
            table.add("original", seed, [narrow["original"]["relearn_curve"][0], None, None, None, 0, 0, 0.0, 0.0])
    for name in table.names():
        columns = table.columns(name)
        cells = [interval(list(column)) for column in columns[: len(CURVE_STEPS)]]
        cells += [_steps(column) for column in columns[len(CURVE_STEPS) : -2]]
        cells += [interval([None if v is None else float(v) for v in column]) for column in columns[-2:]]
        lines.append(f"| {_label(name)} | " + " | ".join(cells) + " |")
    return lines


def _steps(values) -> str:
    """Steps back within the margin over the seeds: their mean where every seed got there, else how many missed."""
    reached = [v for v in values if v is not None]
    if len(reached) == len(values):
        return interval(reached)
    return f"{len(values) - len(reached)} of {len(values)} missed" + (
        f" (others {interval(reached)})" if reached else ""
    )


class Columns:
    """Each model's values per seed: a method's from its own run, a reference model's (the same in every run of a
    seed) once per seed, so that the interval is over seeds and never over copies."""

    def __init__(self) -> None:
        self.values: dict[str, dict[int, list]] = defaultdict(dict)

    def add(self, name: str, seed: int, values: list) -> None:
        self.values[name].setdefault(seed, values)

    def names(self) -> list[str]:
        return [*[n for n in REFERENCES if n in self.values], *sorted(set(self.values) - set(REFERENCES))]

    def columns(self, name: str) -> list[list]:
        return [list(column) for column in zip(*self.values[name].values(), strict=True)]


def _label(name: str) -> str:
    return f"*{name}*" if name in REFERENCES else f"`{name}`"


def quantization_table(by_method: dict[str, list[RunDirectory]]) -> list[str]:
    head = ["forget, float32", "int8", "int4", "retain, float32", "int4", "test, float32", "int4"]
    keys = (
        "forget_acc",
        "int8_forget_acc",
        "int4_forget_acc",
        "retain_acc",
        "int4_retain_acc",
        "test_acc",
        "int4_test_acc",
    )
    lines = ["| model, at T | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    table = Columns()
    for method, runs in sorted(by_method.items()):
        for run in runs:
            sides = _sides(run)
            if "int4_forget_acc" not in sides["method"]:
                continue
            for name, side in (("original", "original"), ("oracle", "oracle"), (method, "method")):
                table.add(name, run.identity().seed, [sides[side].get(key) for key in keys])
    for name in table.names():
        columns = table.columns(name)
        lines.append(f"| {_label(name)} | " + " | ".join(interval(list(c)) for c in columns) + " |")
    return lines


def interleaved_table(by_method: dict[str, list[RunDirectory]]) -> list[str]:
    ages = next(iter(by_method.values()))[0].identity().requests
    head = [f"age {age}" for age in range(ages)] + ["slope per step"]
    lines = ["| model: forget gap to the oracle | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    table = Columns()
    for method, runs in sorted(by_method.items()):
        for run in runs:
            rows, seed = [row for row in run.rows() if row.status == "ok"], run.identity().seed
            by_age = [row.method["forget_acc"] - row.oracle["forget_acc"] for row in rows]
            table.add(method, seed, [*by_age, run.summary().scores.get("age_slope_forget_gap")])
            table.add(
                "original", seed, [row.original["forget_acc"] - row.oracle["forget_acc"] for row in rows] + [None]
            )
    for name in table.names():
        columns = table.columns(name)
        lines.append(f"| {_label(name)} | " + " | ".join(interval(list(c)) for c in columns) + " |")
    return lines


def stratified_table(runs: dict[str, dict[str, list[RunDirectory]]]) -> list[str]:
    strata = [kind for kind in ("memorized_most", "memorized_least") if kind in runs]
    head = [f"{kind.split('_')[1]}: {column}" for kind in strata for column in ("forget acc at T", "gap_acc at T")]
    lines = ["| model | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    tables = {kind: Columns() for kind in strata}
    for kind in strata:
        for method, method_runs in runs[kind].items():
            for run in method_runs:
                sides, seed = _sides(run), run.identity().seed
                for name, side in (("original", "original"), ("oracle", "oracle"), (method, "method")):
                    gap = 0.0 if name == "oracle" else sides[side].get("gap_acc")
                    tables[kind].add(name, seed, [sides[side].get("forget_acc"), gap])
    names = sorted({name for table in tables.values() for name in table.names()} - set(REFERENCES))
    for name in [*REFERENCES, *names]:
        cells = []
        for kind in strata:
            columns = tables[kind].columns(name) if name in tables[kind].values else [[], []]
            cells += [interval(column) for column in columns]
        lines.append(f"| {_label(name)} | " + " | ".join(cells) + " |")
    return lines


def seeds_of(by_method: dict[str, list[RunDirectory]]) -> str:
    seeds = sorted({run.identity().seed for runs in by_method.values() for run in runs})
    return ", ".join(str(s) for s in seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(yaml.safe_load(SUITE.read_text())["out"]))
    args = parser.parse_args()
    runs, diverged = finished_runs(args.out)
    if diverged:
        print("Diverged (no value at T):\n" + "\n".join(f"- {line}" for line in diverged))
    for kind in ("classwise", "memorized_most"):
        if kind in runs:
            print(f"\nRelearning attack after request T, {kind} (seeds {seeds_of(runs[kind])}):\n")
            print("\n".join(relearning_table(runs[kind])))
    for kind in ("classwise", "memorized_most", "memorized_least", "interleaved"):
        if kind in runs:
            print(f"\nQuantized weights, {kind} (seeds {seeds_of(runs[kind])}):\n")
            print("\n".join(quantization_table(runs[kind])))
    if "interleaved" in runs:
        print(f"\nInterleaved stream (seeds {seeds_of(runs['interleaved'])}):\n")
        print("\n".join(interleaved_table(runs["interleaved"])))
    print("\nMemorization-stratified streams:\n")
    print("\n".join(stratified_table(runs)))


if __name__ == "__main__":
    np.set_printoptions(precision=1)
    main()
