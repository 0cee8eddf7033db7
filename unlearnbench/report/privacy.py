"""The privacy numbers of a leaderboard row's unlearning chains: `evaluation.chains.chain_privacy` per
seed over the row's K chains saved with `--save-logits`, the mean over seeds, and how its table
reads (shared by the Markdown and the HTML page)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

#: The per-request privacy numbers of `chain_privacy` a variant's table shows, each beside its reference at this K:
#: the ε score beside the oracles' own F (`eps_forget_floor`, the target of both ε columns), RMIA beside the chains
#: whose RMIA is degenerate (left out of its mean), ToW beside one oracle's ToW against another.
PRIVACY_KEYS = (
    "eps_forget_score",
    "eps_forget_floor",
    "eps_score",
    "rmia_auc",
    "rmia_degenerate",
    "tow",
    "tow_oracles",
    "tow_mia",
    "tow_mia_oracles",
)
#: Counts of chains, shown without decimals (a mean over seeds keeps its fraction).
_COUNT_KEYS = ("rmia_degenerate",)


@dataclass
class ChainPrivacy:
    """`evaluation.chains.chain_privacy` over a variant's unlearning chains, the mean over seeds; NaN where a
    request has no oracles (or, for ε, where there are 2 chains)."""

    chains: int
    #: the oracles per request the runs saved (`--oracle-seeds`), of which the numbers use the first `chains`
    oracles: int
    seeds: list[int]
    #: PRIVACY_KEYS -> the value at each request t (index t − 1)
    requests: dict[str, np.ndarray]
    #: "eps" and "rmia" -> the T x T backward-privacy matrix: [t − 1, s − 1] = the number of F_s at t, s <= t
    backward: dict[str, np.ndarray]


def chain_privacy_of(runs: list) -> ChainPrivacy | None:
    """The privacy numbers of a variant's complete runs: per seed, its K >= 2 unlearning chains saved with
    `--save-logits` and at least K oracles per request (`chain_privacy`, which takes the first K); None where no
    seed has them."""
    from unlearnbench.evaluation.chains import chain_privacy
    from unlearnbench.rundir import RunDirectory

    by_seed: dict[int, list] = {}
    for run in runs:
        if RunDirectory(run.path).has_logits():
            by_seed.setdefault(run.identity.seed, []).append(run)
    chains = {
        seed: chain
        for seed, chain in by_seed.items()
        if len(chain) >= 2 and all(run.identity.oracle_seeds >= len(chain) for run in chain)
    }
    if not chains:
        return None
    requests = runs[0].requests
    results = [chain_privacy([run.path for run in chain]) for chain in chains.values()]
    per_request = {key: np.full((len(results), requests), np.nan) for key in PRIVACY_KEYS}
    backward = {name: np.full((len(results), requests, requests), np.nan) for name in ("eps", "rmia")}
    for i, result in enumerate(results):
        for request in result["requests"]:
            for key in PRIVACY_KEYS:
                per_request[key][i, request["t"] - 1] = np.nan if request[key] is None else request[key]
        for name in backward:
            for t, row in enumerate(result[f"backward_{name}"]):
                backward[name][i, t, : len(row or [])] = [np.nan if v is None else v for v in row or []]
    with warnings.catch_warnings():  # a cell no seed has (no oracle at t, s > t) stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return ChainPrivacy(
            chains=len(next(iter(chains.values()))),
            oracles=runs[0].identity.oracle_seeds,
            seeds=sorted(chains),
            requests={key: np.nanmean(values, axis=0) for key, values in per_request.items()},
            backward={name: np.nanmean(values, axis=0) for name, values in backward.items()},
        )


def privacy_caption(entry) -> str:
    """The heading of a leaderboard row's privacy table (`leaderboard.Entry` with `privacy`)."""
    privacy = entry.privacy
    oracles = (
        f"{privacy.chains}" if privacy.oracles == privacy.chains else f"the first {privacy.chains} of {privacy.oracles}"
    )
    return (
        f"{entry.label}: privacy over {privacy.chains} unlearning chains against {oracles} oracles per request "
        f"(seed(s) {', '.join(map(str, privacy.seeds))}; — = no oracle at t; eps_forget_floor = the oracles' own F "
        f"at K = {privacy.chains}, the target of both ε columns, never 1)"
    )


def privacy_cell(key: str, value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:g}" if key in _COUNT_KEYS else f"{value:.3f}"
