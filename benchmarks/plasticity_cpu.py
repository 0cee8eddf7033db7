"""The plasticity-collapse paper's protocol on a CPU: a random and a class-wise stream, five methods, on a tier.

    python benchmarks/plasticity_cpu.py [--tier fashionmnist|digits] [--out DIR] [--seeds 0 1 2] [--only rl salun rl+ewc]

Tiers: `fashionmnist` (default), the memorizing setting of `benchmarks/fashionmnist_mlp.yaml` (its
`common` block: 10,000 real Fashion-MNIST images, the `mlp` arch, no augmentation); `digits`, scikit-learn's
digits with smallcnn, where the random stream's oracle forgets nothing. Streams: random, 1% of the
train set per request, T = 40 (40% forgotten), and class-wise, one class per request, T = 9 (every
class but one); oracles and single-shot counterfactuals every 5 requests and at T, both baselines
(`--single-shot-baseline both`): the paper's single task (F_t alone, retain = train minus F_t) and
the cumulative-retain one. Methods: FT, NegGrad+, RL, SalUn, MUNBa at their defaults (`--only` picks others,
`method+guard` for a guarded one: `--only loft continual_loft rl+ewc rl+orthogonal`). It prints the
paper's table (single-task forget acc, continual last-task forget acc, gain; mean ± 95% t-interval
over the seeds) per stream and method, writes the leaderboard with the T×T history heatmaps under
OUT/leaderboard, and says for each of the paper's four key findings whether it is observed here,
with the numbers (the first seed's runs):

1. forward failure under random unlearning for every method: the mean gain over the scheduled
   requests t >= 2 is > 0 for each (the gain at T alone rests on one forget set);
2. hidden backward re-memorization for RL and SalUn on class-wise streams: at least one pair (t, s)
   with history[t][s] − history[s][s] above the 10-point threshold;
3. ER_t -> 0 with a shrinking ‖u_t‖ tracking the worsening (random streams): ER_t (r = 1, in the basis
   of all T updates: geometry.csv's `er_all_r1`) and ‖u_t‖ are both lower over the last quarter of
   the stream than over the first, while the gain grows;
4. CO_t sign alternation around re-memorization (class-wise): CO_t (first coordinate, same basis,
   `co_all_1`) changes sign at a request with a re-memorization event more often than at the other requests.

"Not observed" is a finding like any other: a CPU tier is not CIFAR-100 and VGG-16-BN.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from unlearnbench.rundir import RunDirectory
from unlearnbench.suite import run_suite

METHODS = ["finetune", "neggrad_plus", "rl", "salun", "munba"]
STREAMS = [{"stream": "random", "size": 0.01, "requests": 40}, {"stream": "classwise", "size": 1, "requests": 9}]
#: The memorizing tier's suite, whose `common` block is the tier's one definition.
TIER_SUITE = Path(__file__).resolve().parent / "fashionmnist_mlp.yaml"
#: What the tiers' settings are besides the published suite's: digits is the embedded smoke tier.
TIER_KEYS = ("dataset", "dataset_args", "arch", "arch_args", "recipe")


def tier(name: str) -> dict:
    """A tier's dataset, arch and their arguments: the memorizing tier suite's for `fashionmnist`."""
    if name == "digits":
        return {"dataset": "digits", "arch": "smallcnn"}
    common = yaml.safe_load(TIER_SUITE.read_text())["common"]
    return {key: common[key] for key in TIER_KEYS if key in common}


def suite_entry(name: str) -> str | dict:
    """A suite's method entry for `name`: `rl` as it is, `rl+ewc` as RL with the EWC guard (guards in order)."""
    method, *guards = name.split("+")
    return {"method": method, "guards": guards} if guards else method


def suite(
    seeds: list[int], methods: list[str], tier_name: str = "fashionmnist", kinds: tuple[str, ...] | None = None
) -> dict:
    """The protocol's suite; `kinds`: the stream kinds run (None: both), as the published runs are the same cells."""
    out = "runs/plasticity_cpu" + ("" if tier_name == "digits" else f"_{tier_name}")
    return {
        "out": out,
        "leaderboard": f"{out}/leaderboard",
        "common": {
            **tier(tier_name),
            "oracle_every": 5,
            "single_shot_baseline": "both",
            "logger": "none",
            "accelerator": "cpu",
        },
        "streams": [stream for stream in STREAMS if kinds is None or stream["stream"] in kinds],
        "methods": [suite_entry(name) for name in methods],
        "seeds": seeds,
    }


def interval(values: list[float | None]) -> str:
    """mean ± the half-width of its 95% t-interval over seeds (the mean alone with one seed)."""
    finite = np.array([v for v in values if v is not None], dtype=float)
    if len(finite) == 0:
        return "—"
    if len(finite) == 1:
        return f"{finite[0]:.1f}"
    half = stats.t.ppf(0.975, len(finite) - 1) * finite.std(ddof=1) / np.sqrt(len(finite))
    return f"{finite.mean():.1f} ± {half:.1f}"


def _quarters(values: list[float | None]) -> tuple[float, float]:
    finite = np.array([np.nan if v is None else v for v in values], dtype=float)
    quarter = max(1, len(finite) // 4)
    return float(np.nanmean(finite[:quarter])), float(np.nanmean(finite[-quarter:]))


def cell_numbers(run_dir: Path) -> dict | None:
    """The table's columns and each finding's evidence from one finished run directory, over its scored requests
    (None when the first request diverged: nothing was scored)."""
    run = RunDirectory(run_dir)
    rows = [row for row in run.rows() if row.status == "ok"]
    if not rows:
        return None
    summary, geometry = run.summary().scores, run.geometry()
    gains = [
        row.method.get("forward_gain") for row in rows if row.t >= 2 and row.method.get("forward_gain") is not None
    ]
    history = np.array([row.method["history"] for row in rows])
    events = {t for t in range(len(rows)) for s in range(t) if history[t, s] - history[s, s] > 10.0}
    co = [g.get("co_all_1") for g in geometry]
    flips = [t for t in range(1, len(co)) if co[t] is not None and co[t - 1] is not None and co[t] * co[t - 1] < 0]
    return {
        "single": summary.get("single_shot_forget_acc"),
        "continual": summary.get("continual_forget_acc"),
        "gain": summary.get("forward_failure"),
        "gain_mean": summary.get("forward_failure_mean"),
        "cumulative": summary.get("single_shot_cumulative_forget_acc"),
        "gain_cumulative": summary.get("forward_failure_cumulative"),
        "gain_cumulative_mean": summary.get("forward_failure_cumulative_mean"),
        "gain_first_last": (gains[0], gains[-1]) if gains else (None, None),
        "events": summary.get("rememorization_events"),
        "bwd_max": summary.get("backward_failure_max"),
        "er_first_last": _quarters([g.get("er_all_r1") for g in geometry]),
        "norm_first_last": _quarters([g.get("update_norm") for g in geometry]),
        "flip_at_event": sum(t in events for t in flips) / max(1, len(events)),
        "flip_elsewhere": sum(t not in events for t in flips) / max(1, len(co) - 1 - len(events)),
    }


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.1f}"


def findings(numbers: dict[tuple[str, str], dict]) -> list[str]:
    random = {m: n for (stream, m), n in numbers.items() if stream == "random"}
    classwise = {m: n for (stream, m), n in numbers.items() if stream == "classwise"}
    lines = []
    positive = [m for m, n in random.items() if n["gain_mean"] is not None and n["gain_mean"] > 0]
    lines.append(
        f"1. forward failure under random unlearning: observed for {len(positive)}/{len(random)} methods "
        f"({', '.join(positive) or 'none'}; mean gain over the scheduled requests, gain at T: "
        + ", ".join(f"{m} {_fmt(n['gain_mean'])}, {_fmt(n['gain'])}" for m, n in random.items())
        + ")"
    )
    hidden = {m: (n["events"], n["bwd_max"]) for m, n in classwise.items() if m in ("rl", "salun")}
    seen = bool(hidden) and all(events and events > 0 for events, _ in hidden.values())
    lines.append(
        f"2. hidden backward re-memorization for RL/SalUn class-wise: {'observed' if seen else 'not observed'} "
        f"({', '.join(f'{m}: {e} events, max {_fmt(b)}' for m, (e, b) in hidden.items())})"
    )
    shrinking = {
        m: n
        for m, n in random.items()
        if n["er_first_last"][1] < n["er_first_last"][0] and n["norm_first_last"][1] < n["norm_first_last"][0]
    }
    worsening = {m: n for m, n in shrinking.items() if None not in n["gain_first_last"]}
    worsening = {m: n for m, n in worsening.items() if n["gain_first_last"][1] > n["gain_first_last"][0]}
    lines.append(
        f"3. ER_t -> 0 with shrinking ||u_t|| tracking the worsening: ER and ||u_t|| shrink for "
        f"{len(shrinking)}/{len(random)} methods, and the gain grows with them for {len(worsening)} ("
        + ", ".join(
            f"{m}: ER {n['er_first_last'][0]:.2f}->{n['er_first_last'][1]:.2f}, "
            f"||u|| {n['norm_first_last'][0]:.2f}->{n['norm_first_last'][1]:.2f}, "
            f"gain {_fmt(n['gain_first_last'][0])}->{_fmt(n['gain_first_last'][1])}"
            for m, n in random.items()
        )
        + ")"
    )
    with_events = {m: n for m, n in classwise.items() if n["events"]}
    alternating = {m: n for m, n in with_events.items() if n["flip_at_event"] > n["flip_elsewhere"]}
    verdict = (
        f"observed for {len(alternating)}/{len(with_events)} methods with events"
        if with_events
        else "not testable here: no class-wise run has a re-memorization event"
    )
    lines.append(
        f"4. CO_t sign alternation around re-memorization: {verdict} ("
        + ", ".join(
            f"{m}: {n['events'] or 0} events, CO_1 sign flips at events {n['flip_at_event']:.2f}"
            f" vs elsewhere {n['flip_elsewhere']:.2f}"
            for m, n in classwise.items()
        )
        + ")"
    )
    return lines


#: The table's columns: (header, key of `cell_numbers`).
TABLE = (
    ("single-task forget acc", "single"),
    ("continual last-task forget acc", "continual"),
    ("gain at T", "gain"),
    ("mean gain t >= 2", "gain_mean"),
    ("cumulative-retain forget acc", "cumulative"),
    ("gain at T (cumulative)", "gain_cumulative"),
    ("mean gain (cumulative)", "gain_cumulative_mean"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=("fashionmnist", "digits"), default="fashionmnist")
    parser.add_argument(
        "--out", type=Path, default=None, help="folder of run directories (default runs/plasticity_cpu_<tier>)"
    )
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--only", nargs="*", default=METHODS, help="methods to run")
    kinds = [stream["stream"] for stream in STREAMS]
    parser.add_argument("--streams", nargs="*", choices=kinds, default=kinds, help="stream kinds to run")
    args = parser.parse_args()
    result = run_suite(suite(args.seeds, args.only, args.tier, tuple(args.streams)), out=args.out)
    per_seed: dict[tuple[str, str], list[dict]] = {}
    diverged = []
    for cell in result.cells:
        numbers = None if cell.status == "failed" else cell_numbers(cell.run_dir)
        if numbers is not None:
            label = "+".join([cell.config.method.name, *cell.config.guard_names])
            per_seed.setdefault((cell.config.stream.kind, label), []).append(numbers)
        elif cell.status != "failed":
            diverged.append(cell.run_dir.name)
    print(f"seeds {args.seeds}: mean ± 95% t-interval")
    print("| stream | method | " + " | ".join(header for header, _ in TABLE) + " |")
    print("|---|---|" + "---:|" * len(TABLE))
    for (stream, method), seeds in per_seed.items():
        cells = [interval([n[key] for n in seeds]) for _, key in TABLE]
        print(f"| {stream} | {method} | " + " | ".join(cells) + " |")
    for line in findings({key: seeds[0] for key, seeds in per_seed.items()}):
        print(line)
    for name in diverged:
        print(f"diverged at its first request (nothing scored): {name}")
    for cell in result.failed:
        print(f"failed: {cell.run_dir.name}: {cell.error}")


if __name__ == "__main__":
    main()
