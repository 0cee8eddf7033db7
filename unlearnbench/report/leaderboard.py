"""`unlearnbench leaderboard RUNS_DIR [RUNS_DIR ...] [--out DIR]`: tables built from run directories alone.

Every folder under the RUNS_DIRs (searched recursively) holding a `config.yaml` is a run. A run is
its identity (`config.yaml`), not its folder: the same run reached twice (copied, or in two folders
given) is counted once and the other copy listed as a duplicate.

One table per setting: the runs whose identities agree on everything except the method and how it
was run (`ROW_FIELDS`: its hyperparameters, guards, tuning marker, precision and single-shot
counterfactuals) and the seeds (`SEED_FIELDS`). So a table fixes the data (dataset and its
arguments), the model (arch and its arguments, the pretraining recipe), the stream (kind, size, T)
and how every row is scored against the oracle (oracle kind, `oracle_every`, `oracle_seeds`, MIA
protocol): the oracle and original rows on top are then read from runs that share the pretrained
models and the oracles of the rows under them, and every ranked column compares like with like
(`mean_gap` averages over the oracle schedule, `gap` includes the MIA protocol's member rate).
Precision and the single-shot schedule stay inside a table: the store's pretrained models and
oracles do not depend on them (`store.ModelSpec`), and the columns they change (`single_acc`,
`fwd_fail`) are not ranked. The title names the setting: the dataset and arch with their arguments
(`fashionmnist (train_size=700, test_size=500) · smallcnn (pools=2) · classwise (1 class per
request, T=5)`), then the settings that depart from their defaults (`oracle_every=2`) or that tell
apart tables which would otherwise share a title (`recipe=1a2b3c`, `mia_protocol=...`).

Within a table each method (with its hyperparameters) is a row, the oracle (the retrained model) on
top and the original (pretrained) model under it, as papers put "Retrain" and "Original" beside the
methods; those two rows average one value per pretrained model and stream of the table (a train
seed and a stream seed, each `seed` where not given). Where a method has several variants, each
label names what sets it apart: the hyperparameters that differ from the method's defaults and any
other differing setting (`rl (lr=0.1)`), never a hash unless nothing else does.

What a cell shows, per method, over the seeds whose run finished:

- gap_acc (the headline, first column), forget_acc, forget_test_acc, retain_acc, test_acc,
  mia_member_rate, mia_validity, mia_advantage, gap: the value after the last request T (from
  `metrics.jsonl`); a mia_validity cell ends in "n.s." when, for some averaged seed, its 95% interval
  contains 50 (the attack tells members from non-members no better than a coin), a mia_advantage cell
  when, for some averaged seed, it lies inside its 95% permutation null interval (no evidence of
  membership either way at these sample sizes);
- mean_gap_acc, mean_gap: gap_acc and the Avg.Gap averaged over the requests with an oracle (every
  request unless `--oracle-every` schedules them);
- single_acc, fwd_fail, fwd_fail_mean: the plasticity-collapse paper's table, the forget accuracy on
  F_T of the same method serving it as a single task from the pretrained model (retain = train minus
  F_T alone), the gain (continual forget_acc − single-task, at T) and its mean over the scheduled
  requests t >= 2; the oracle's gain is 0 (retraining from scratch has no history to fail on);
- the original row: the pretrained model scored on request T's sets, and its gaps to the oracles
  averaged over the stream: what unlearning has to close;
- drift: forget_acc at T minus at 1 (two different forget sets); backward failure: the largest drop-back
  max over s < t of history[t][s] − history[s][s], and the same against the oracle's accuracy on
  F_s at t (`bwd_fail_vs_oracle`); the oracle row shows its own values;
- remem: re-memorization events, the pairs s < t where history[t][s] − history[s][s] exceeds 10
  points (`summary.json`'s `rememorization_events`);
- erosion, reversal: SAFER's knowledge erosion (the oracle's retain_acc drift from 1 to T minus the method's) and
  forgetting reversal (pairs s < t where F_s, forgotten at its request, is back more than 10 points above both its
  own accuracy then and the oracle's at t), as `stream_summary` defines them; the oracle's are 0 by construction;
- fgap/age (interleaved streams): the slope of the forget gap, forget_acc on F_t minus the oracle's, over the
  model's age (learning steps on new data before request t), in points per step (`summary.json`'s
  `age_slope_forget_gap`); the oracle's is 0 by construction;
- rte_s, rte_cpu_s: wall and CPU seconds of unlearning summed over the T requests; time is ranked by the CPU
  seconds, which a loaded machine does not stretch as it does the wall seconds (runs made before they were
  recorded show "—");
- `mean ± std` over seeds (std: sample standard deviation, ddof=1; none with one seed) and `n`, the
  number of runs averaged: the seeds, times the unlearning chains of each (a suite's `unlearn_seeds:
  K`, runs that differ only in unlearn seed, share their row).

A row whose K >= 2 chains of one seed were run with `--save-logits` and K or more oracles per request also
gets its privacy over the chains (`evaluation.chains.chain_privacy`, mean over seeds): a table of
the ε score beside its target at that K (`eps_forget_floor`, the oracles' own F), the RMIA AUC
beside the number of chains whose RMIA is degenerate, and ToW beside one oracle's ToW against
another, at each request with oracles; and the backward-privacy heatmaps beside its history
heatmap (`report/plots.py`).

The best method per column is marked (bold in Markdown, highlighted in HTML, listed in CSV): the
one closest to the oracle's mean where the oracle is the target (arrow `→oracle`), else the lowest
or highest by the column's direction, among at least two methods with a value there (a table's only
method is not "best" at anything, whatever its numbers). single_acc, fwd_fail, fwd_fail_mean, drift, bwd_fail,
remem, erosion, reversal and fgap/age are not marked: a method that forgets nothing (finetune) has none of either failure, so no
value there is better by itself. A run that is not finished (no `summary.json`), that
diverged (`"status": "diverged"`) or that failed in a suite (`error.json`) is never dropped: its row
says so in the status column and its numbers are left out of the means. Neither is a damaged run,
one with any file that is not what the run wrote (`RunDirectory.damages`: a `metrics.jsonl` line
that is torn or repeats a request, a `config.yaml` edited after the run so that it no longer
matches its folder's hash, a missing `manifest.json`, a `history.csv` or `summary.json` that
disagrees with `metrics.jsonl`, a logits file of another request or run, ...): its row names the
first damaged file, and a run whose `config.yaml` is missing or cannot be read at all is listed,
with its problem, under provenance.
Run directories behind symbolic links are followed.

Outputs in `--out` (default RUNS_DIR/leaderboard): `leaderboard.md`, `leaderboard.csv`,
`leaderboard.html` (one self-contained page: inline CSS/JS, sortable columns, no network) and
`plots/<group>/*.png` (+ `.svg`). A provenance section names the package version, git commit, every
run's config hash, seed, device and date (the start of its first session, from `provenance.json`).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import hashlib
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from unlearnbench.errors import ConfigError, DamagedFileError
from unlearnbench.evaluation.keys import HEADLINE, METRIC_KEYS, leaderboard_keys, significant
from unlearnbench.evaluation.scoring import stream_summary
from unlearnbench.io import check_writable_directory, write_text_atomic
from unlearnbench.provenance import git_commit
from unlearnbench.records import (
    MeasuredCost,
    RequestRecord,
    RunIdentity,
    RunSummary,
    legacy_method_args,
    run_status,
)
from unlearnbench.registry import STREAMS
from unlearnbench.report.plots import write_group_plots
from unlearnbench.report.privacy import PRIVACY_KEYS, ChainPrivacy, chain_privacy_of, privacy_caption, privacy_cell
from unlearnbench.rundir import DamagedIdentityError, RunDirectory, identity_hash


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    higher_is_better: bool
    oracle_is_target: bool
    description: str
    #: False where no value is better than another by itself: forward/backward failure and re-memorization are
    #: zero for a method that forgets nothing (finetune), so "closest to the oracle" would crown it
    ranked: bool = True
    #: decimals of its cells
    digits: int = 2

    @property
    def arrow(self) -> str:
        arrow = "↑" if self.higher_is_better else "↓"
        return f"{arrow}→oracle" if self.oracle_is_target else arrow


def _metric_column(key: str) -> Column:
    m = METRIC_KEYS[key]
    return Column(
        key,
        m.leaderboard,
        m.higher_is_better,
        m.oracle_is_target,
        m.description + " (after request T)",
        digits=m.digits,
    )


#: The columns computed over a run's whole stream (`stream_summary`), after the metric columns.
STREAM_COLUMNS: tuple[Column, ...] = (
    Column("mean_gap_acc", "mean_gap_acc", False, False, "gap_acc averaged over the T requests"),
    Column("mean_gap", "mean_gap", False, False, "Avg.Gap averaged over the T requests"),
    Column(
        "single_shot_forget_acc",
        "single_acc",
        False,
        True,
        "forget_acc on F_T of the same method serving it as a single task (retain = train minus F_T) from the "
        "pretrained model",
        ranked=False,
    ),
    Column(
        "forward_failure",
        "fwd_fail",
        False,
        True,
        "gain at T: forget_acc on F_T, continual − single-task",
        ranked=False,
    ),
    Column(
        "forward_failure_mean",
        "fwd_fail_mean",
        False,
        True,
        "the gain averaged over the scheduled requests t >= 2",
        ranked=False,
    ),
    Column("forget_drift", "drift", False, True, "forget_acc at T minus at 1", ranked=False),
    Column(
        "backward_failure_max",
        "bwd_fail",
        False,
        True,
        "max over s < t of history[t][s] − history[s][s]",
        ranked=False,
    ),
    Column(
        "backward_failure_vs_oracle_max",
        "bwd_fail_vs_oracle",
        False,
        False,
        "max over s < t of history[t][s] − the oracle's history[t][s]",
    ),
    Column(
        "rememorization_events",
        "remem",
        False,
        True,
        "re-memorization: pairs (t, s) where history[t][s] − history[s][s] exceeds 10 points (shown when computed)",
        ranked=False,
    ),
    Column(
        "knowledge_erosion",
        "erosion",
        False,
        True,
        "knowledge erosion (SAFER's name): the oracle's retain_acc drift from 1 to T minus the method's",
        ranked=False,
    ),
    Column(
        "forgetting_reversal_events",
        "reversal",
        False,
        True,
        "forgetting reversal (SAFER's name): pairs (t, s) where F_s, forgotten at its request, is back more than 10 "
        "points above its own and the oracle's accuracy at t",
        ranked=False,
    ),
    Column(
        "age_slope_forget_gap",
        "fgap/age",
        False,
        True,
        "interleaved streams: slope of the forget gap (forget_acc on F_t − the oracle's) over the model's age, in "
        "points per learning step on new data (positive: it forgets less well as it ages)",
        ranked=False,
    ),
    Column(
        "rte_s",
        "rte_s",
        False,
        False,
        "wall seconds of unlearning, summed over the T requests (not ranked: a loaded machine stretches it)",
        ranked=False,
    ),
    Column("rte_cpu_s", "rte_cpu_s", False, False, "CPU seconds of unlearning, summed over the T requests"),
)


#: The headline table's columns, in order, after method and n: the gap to the oracle, the three accuracies a reader
#: compares with the oracle and original rows above them, the membership advantage (marked n.s. inside its
#: permutation null interval) and the unlearning time in the CPU seconds time is ranked by. Not the wall seconds: a
#: shard paused while it unlearned (the published grid's, during test runs) shows the pause as unlearning time, one
#: tuned COUN run 1,084 wall seconds against its 9 CPU seconds. Eight columns in all, so a table reads without
#: scrolling; every other column, `rte_s` with them, follows in the full table below it.
HEADLINE_COLUMNS = ("gap_acc", "forget_acc", "retain_acc", "test_acc", "mia_advantage", "rte_cpu_s")


def columns() -> tuple[Column, ...]:
    """The leaderboard's columns: the metrics that declare a column (`METRIC_KEYS`), the headline first, then the
    stream columns. Read at every call, so a metric registered by a plugin or a test is a column at once."""
    metrics = sorted(leaderboard_keys(), key=lambda key: key != HEADLINE)
    return (*(_metric_column(key) for key in metrics), *STREAM_COLUMNS)


def column_keys() -> tuple[str, ...]:
    return tuple(column.key for column in columns())


ORACLE_LABEL = "oracle (retrain)"
#: the pretrained model before any request: the "Original" row of every paper table
ORIGINAL_LABEL = "original (pretrained)"


# --------------------------------------------------------------------------------------------- runs


@dataclass
class RunRecord:
    """One run directory as read from disk."""

    path: Path
    #: None where config.yaml cannot be read as an identity (then `problem` says why)
    identity: RunIdentity | None
    rows: list[RequestRecord]
    summary: RunSummary | None
    error: dict | None
    provenance: dict
    history: np.ndarray | None
    geometry: list[dict]
    #: what makes the run's files untrustworthy (published as "damaged", never averaged); None when sound
    problem: str | None = None
    #: the run directory holding the same run (same identity) that is counted instead of this one
    duplicate_of: Path | None = None

    #: the method's code as the run's last session recorded it (`provenance.method_code`; None: not recorded)
    method_code: dict | None = None

    @property
    def method_defaults(self) -> dict | None:
        """The method's hyperparameter defaults as the run recorded them (None: a run from before they were)."""
        defaults = self.method_code.get("defaults") if isinstance(self.method_code, dict) else None
        if not isinstance(defaults, dict):
            return None
        return legacy_method_args(defaults, method=self.identity.method if self.identity else None)

    @property
    def config_hash(self) -> str:
        return identity_hash(self.identity) if self.identity is not None else "none"

    @functools.cached_property
    def cost(self) -> MeasuredCost:
        """What the run's finished requests cost (`RequestRecord.cost`): summed once, read by the table's total and
        the run's provenance line."""
        return MeasuredCost.of(self.rows)

    @property
    def requests(self) -> int:
        return self.identity.requests if self.identity is not None else 0

    @property
    def scored_rows(self) -> list[RequestRecord]:
        return [row for row in self.rows if row.status == "ok" and "forget_acc" in row.method]

    @property
    def status(self) -> str:
        """complete | diverged | failed | unfinished | damaged | duplicate."""
        if self.duplicate_of is not None:
            return "duplicate"
        if self.problem is not None:
            return "damaged"
        # (a run that is neither has a summary.json that agrees with its rows: `RunDirectory.damages` checks it)
        return run_status(self.summary, self.requests, failed=self.error is not None)

    def status_detail(self) -> str:
        status = self.status
        if status == "duplicate":
            return f"duplicate of {self.duplicate_of}: counted once"
        if status == "damaged":
            return f"damaged: {self.problem}"
        if status == "diverged":
            at = (self.summary and self.summary.diverged_at) or next(
                (r.t for r in self.rows if r.status == "diverged"), "?"
            )
            return f"diverged at t={at}"
        if status == "failed":
            return f"failed after {len(self.scored_rows)}/{self.requests}: {self.error.get('error', '')}"[:160]
        if status == "unfinished":
            return f"unfinished ({len(self.scored_rows)}/{self.requests})"
        return "complete"

    def update_norms(self) -> list[float | None]:
        if self.geometry:
            return [g.get("update_norm") for g in self.geometry]
        return [row.method.get("update_norm") for row in self.scored_rows]

    def method_values(self) -> dict[str, float | None]:
        rows = self.scored_rows
        last = rows[-1].method
        values: dict[str, float | None] = {k: last.get(k) for k in leaderboard_keys()}
        summary = stream_summary(rows)
        for key in ("single_shot_forget_acc", "forward_failure", "forward_failure_mean", "forget_drift"):
            values[key] = summary.get(key)
        values["backward_failure_max"] = summary["backward_failure_max"]
        values["backward_failure_vs_oracle_max"] = summary.get("backward_failure_vs_oracle_max")
        values["mean_gap"] = summary.get("mean_gap")
        values["mean_gap_acc"] = summary.get("mean_gap_acc")
        values["mia_validity_ns"] = _not_significant(last)
        values["mia_advantage_ns"] = _inside_null(last)
        values["rememorization_events"] = summary.get("rememorization_events")
        values["knowledge_erosion"] = summary.get("knowledge_erosion")
        values["forgetting_reversal_events"] = summary.get("forgetting_reversal_events")
        values["age_slope_forget_gap"] = summary.get("age_slope_forget_gap")
        for key in ("rte_s", "rte_cpu_s"):  # runs made before CPU time was recorded have none: "—"
            times = [row.method.get(key) for row in rows]
            values[key] = float(sum(times)) if all(v is not None for v in times) else None
        return values

    def oracle_values(self) -> dict[str, float | None] | None:
        """The oracle's row from the run's last request, which every schedule gives an oracle."""
        rows = self.scored_rows
        if not rows or not rows[-1].oracle:
            return None
        last = rows[-1].oracle
        values: dict[str, float | None] = {k: last.get(k) for k in leaderboard_keys()}
        every = all(row.oracle for row in rows)  # the stream-wide columns need an oracle at every t
        # the oracle's own stream: its scores in the method's place, and nothing to compare them with
        as_method = [replace(row, method=row.oracle, oracle=None, single_shot=None) for row in rows]
        summary = stream_summary(as_method) if every else {}
        values["forget_drift"] = summary.get("forget_drift")
        values["backward_failure_max"] = summary.get("backward_failure_max")
        values["rememorization_events"] = summary.get("rememorization_events")
        values["backward_failure_vs_oracle_max"] = 0.0 if every and len(rows) > 1 else None
        # the oracle against itself: no erosion beyond its own, and nothing above its own accuracy to come back to
        values["knowledge_erosion"] = 0.0 if every else None
        values["forgetting_reversal_events"] = 0 if every and all("history" in row.oracle for row in rows) else None
        # its forget gap to itself is 0 at every age
        values["age_slope_forget_gap"] = (
            0.0 if every and len(rows) > 1 and all("age" in r.method for r in rows) else None
        )
        # Retraining from scratch is its own single-shot counterfactual: the same model, so the gain is 0.
        values["single_shot_forget_acc"] = last.get("forget_acc")
        values["forward_failure"] = values["forward_failure_mean"] = 0.0
        values["gap"] = values["mean_gap"] = values["gap_acc"] = values["mean_gap_acc"] = 0.0
        values["mia_validity_ns"] = _not_significant(last)
        values["mia_advantage_ns"] = _inside_null(last)
        values["rte_s"] = values["rte_cpu_s"] = None
        return values

    def original_values(self) -> dict[str, float | None] | None:
        """The pretrained model's row: its scores on request T's sets, its mean gaps to the oracles over the stream.

        What unlearning has to close: a method no nearer the oracle than this row has removed nothing. The
        stream-wide columns (forward and backward failure, drift, time) belong to methods and stay empty.
        Runs made before the original model was recorded have none.
        """
        rows = self.scored_rows
        if not rows or not rows[-1].original:
            return None
        last = rows[-1].original
        values: dict[str, float | None] = {k: last.get(k) for k in leaderboard_keys()}
        summary = stream_summary(rows)
        values["mean_gap"] = summary.get("mean_gap_original")
        values["mean_gap_acc"] = summary.get("mean_gap_acc_original")
        values["mia_validity_ns"] = _not_significant(last)
        return values


def _not_significant(scores: dict) -> bool:
    return scores.get("mia_validity") is not None and not significant(
        scores.get("mia_validity_lo"), scores.get("mia_validity_hi")
    )


def _inside_null(scores: dict) -> bool:
    """The SVC advantage lies inside its permutation null interval (rows made before it existed have none)."""
    low, high = scores.get("mia_advantage_null_lo"), scores.get("mia_advantage_null_hi")
    return scores.get("mia_advantage") is not None and low is not None and low <= scores["mia_advantage"] <= high


def read_run(path: Path) -> RunRecord:
    """A run directory as read from disk; whatever makes it untrustworthy is its `problem`: the first of its files
    that is not what the run wrote (`RunDirectory.damages`), so one damaged file makes one damaged run."""
    run_dir = RunDirectory(path)
    problem = None
    try:
        identity = run_dir.identity()
    except DamagedIdentityError as error:
        identity, problem = None, run_dir.problem_of(error)
    rows: list[RequestRecord] = []
    try:
        rows = run_dir.rows()
    except (OSError, DamagedFileError) as error:
        problem = problem or run_dir.problem_of(error)
    if problem is None:
        damages = run_dir.damages(identity, rows)
        problem = run_dir.problem_of(damages[0].error) if damages else None
    return RunRecord(
        path=path,
        identity=identity,
        rows=rows,
        summary=run_dir.summary(),
        error=run_dir.error(),
        provenance=run_dir.provenance(),
        method_code=run_dir.recorded_method_code(),
        history=_derived(run_dir.history, None),
        geometry=_derived(run_dir.geometry, []),
        problem=problem,
    )


def _derived(read, damaged):
    """A derived file's content, or `damaged` where it is not readable: it is checked (and the run listed as
    damaged) only once the run is finished, and an unfinished run's resume rebuilds it."""
    try:
        return read()
    except DamagedFileError:
        return damaged


def collect_runs(runs_dirs: Path | Sequence[Path]) -> list[RunRecord]:
    """Every run directory under `runs_dirs` (recursively, through symbolic links, each folder once), in path order.

    A run is its identity, not its folder: the same run reached twice (a copy, two folders listed that
    overlap) is counted once, the finished copy first, else the first by path; the others are marked
    `duplicate_of` it, listed under provenance and never averaged. A damaged copy stays "damaged".
    """
    runs, seen = [], set()
    for runs_dir in [runs_dirs] if isinstance(runs_dirs, str | os.PathLike) else runs_dirs:
        for folder, subfolders, _files in os.walk(runs_dir, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:  # a link back up the tree, two links to one run, or a folder listed twice
                subfolders[:] = []
                continue
            seen.add(real)
            subfolders.sort()
            if RunDirectory(Path(folder)).is_run():
                run = read_run(Path(folder))
                # runs on a validation split (tune trials) chose hyperparameters: never reported as held out
                if run.identity is None or run.identity.split == "test":
                    runs.append(run)
    runs.sort(key=lambda run: str(run.path))
    counted: dict[str, RunRecord] = {}
    for run in sorted(runs, key=lambda run: (run.status != "complete", str(run.path))):
        if run.identity is None or run.problem is not None:
            continue  # no readable identity, or damaged files: listed with its problem, never matched
        first = counted.setdefault(run.config_hash, run)
        if first is not run:
            run.duplicate_of = first.path
    return runs


# ------------------------------------------------------------------------------------------- tables


@dataclass
class Cell:
    mean: float | None
    std: float | None
    n: int
    note: str = ""  # "n.s." on a validity cell whose interval contains chance

    def text(self, digits: int = 2) -> str:
        if self.mean is None:
            return "—"
        note = f" {self.note}" if self.note else ""
        if self.std is None:
            return f"{self.mean:.{digits}f}{note}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}{note}"


def aggregate(values: list[float | None]) -> Cell:
    """Mean and sample std (ddof=1) over the seeds that have a finite value."""
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(finite) == 0:
        return Cell(None, None, 0)
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else None
    return Cell(float(np.mean(finite)), std, len(finite))


@dataclass
class Entry:
    """One row of a table: a method (with its hyperparameters) or the oracle, over seeds."""

    label: str
    runs: list[RunRecord]
    cells: dict[str, Cell] = field(default_factory=dict)
    best: set[str] = field(default_factory=set)
    is_oracle: bool = False
    #: the original (pretrained) model's row, pinned under the oracle's
    is_original: bool = False
    #: the privacy numbers over the row's unlearning chains (None without K >= 2 chains saved with their logits)
    privacy: ChainPrivacy | None = None
    #: the method joined by its guards (`rl+orthogonal`), which the label may follow with what sets the row apart
    name: str = ""

    @property
    def file_stem(self) -> str:
        """The row's part of its plots' file names: the name alone for the method as it ships (`salun`), else the
        name and a short hash of the label (`finetune-3f9a1c`). A label is no file name (its values may hold `/`, be
        of any length); its hash is the same for the same label and unique in the table, as labels are."""
        name = _slug(self.name or self.label)
        if self.label == (self.name or self.label):
            return name
        return f"{name}-{hashlib.sha256(self.label.encode()).hexdigest()[:6]}"

    @property
    def n(self) -> int:
        return len([run for run in self.runs if run.status == "complete"])

    @property
    def n_text(self) -> str:
        """n, or "n of m" where some of the row's m runs are unfinished or damaged: the headline table has no
        status column, so its count says that a row averages fewer runs than it has."""
        if self.is_reference or self.n == len(self.runs):
            return str(self.n)
        return f"{self.n} of {len(self.runs)}"

    @property
    def is_reference(self) -> bool:
        """The oracle's or the original model's row: a reference every method is read against, never ranked."""
        return self.is_oracle or self.is_original

    @property
    def status(self) -> str:
        if self.is_reference:
            return f"{self.n} seed(s)"
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.status] = counts.get(run.status, 0) + 1
        parts = [f"{counts.pop('complete')} complete"] if "complete" in counts else []
        parts += [d for run in self.runs if run.status != "complete" for d in [run.status_detail()]]
        return "; ".join(parts)

    @property
    def seeds(self) -> list[int]:
        return sorted({run.identity.seed for run in self.runs})


@dataclass
class Group:
    """One table: the runs of one setting (`_setting`), its methods as rows under the oracle and original rows."""

    #: the setting, as JSON with sorted keys: what every run of the table shares
    key: str
    title: str
    #: the table's name in file and HTML ids (`plots/<slug>/`), unique among the leaderboard's tables
    slug: str
    entries: list[Entry]
    oracle: Entry | None
    columns: tuple[Column, ...]
    original: Entry | None = None

    @property
    def references(self) -> list[Entry]:
        """The oracle's and the original model's rows, where the runs have them: pinned on top of a table."""
        return [entry for entry in (self.oracle, self.original) if entry is not None]

    @property
    def rows(self) -> list[Entry]:
        return self.references + self.entries

    @property
    def headline_columns(self) -> tuple[Column, ...]:
        """The table's `HEADLINE_COLUMNS` that have a value, in that order."""
        shown = {column.key: column for column in self.columns}
        return tuple(shown[key] for key in HEADLINE_COLUMNS if key in shown)


#: What a row averages over: the seed, and the unlearn seed of a suite's unlearning chains (`unlearn_seeds: K`).
REPLICATE_KEYS = ("seed", "unlearn_seed")

#: The identity fields in which the rows of one table may differ: the method and how it was run. Precision and the
#: single-shot counterfactuals are among them: the store's pretrained models and oracles do not depend on them
#: (`store.ModelSpec`), and the columns they change (single_acc, fwd_fail) are not ranked. So are the robustness
#: evaluations (the relearning attack, quantization): they add columns and change no other.
ROW_FIELDS = (
    "method",
    "method_args",
    "guards",
    "tuned",
    "precision",
    "single_shot_every",
    "single_shot_baseline",
    *(f"relearn_{part}" for part in ("every", "steps", "fraction", "margin")),
    "quantize_every",
    "quantize_bits",
)

#: The seeds: a row averages over the first two; the train and stream seeds (each `seed` where not given) pick the
#: pretrained model, the stream and the oracles of a run, and the reference rows average one value per such pair.
SEED_FIELDS = (*REPLICATE_KEYS, "train_seed", "stream_seed")

#: The setting fields a title shows in its first part (the others follow it where needed: `_group_titles`).
_TITLE_FIELDS = ("dataset", "dataset_args", "arch", "arch_args", "stream", "size", "requests")


def _setting(identity: RunIdentity) -> dict:
    """What a table compares its methods in: the whole identity except `ROW_FIELDS` and `SEED_FIELDS` (the data, the
    model and its recipe, the stream, the oracles and how rows are scored against them), as `to_json` gives it."""
    return {k: v for k, v in identity.to_json().items() if k not in (*ROW_FIELDS, *SEED_FIELDS)}


def _reference_replicate(identity: RunIdentity) -> tuple[int, int]:
    """What a run's pretrained model, stream and oracles depend on beyond its table's setting: (train seed, stream
    seed), each the run's `seed` where not given."""
    return tuple(identity.seed if value is None else value for value in (identity.train_seed, identity.stream_seed))


def _variant_key(identity: RunIdentity) -> str:
    """What distinguishes two rows of one table: the whole identity except the seeds it averages over.

    The seed and the unlearn seed are what a row averages over (K unlearning chains of one seed are
    K runs of the row, and its backward-privacy numbers come from them); anything else that differs
    (hyperparameters, guards and their arguments, oracle, precision, ...) is another variant, so a
    guarded run never shares a row, a mean or an n with an unguarded run of the same method and seed.
    """
    payload = {k: v for k, v in identity.to_json().items() if k not in REPLICATE_KEYS}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:6]


def _variant_name(identity: RunIdentity) -> str:
    """The method, joined by its guards in the order they were applied: `rl+orthogonal`."""
    return "+".join([identity.method, *identity.guard_names])


def _variant_labels(first_runs: dict[tuple[str, str], RunRecord]) -> dict[tuple[str, str], str]:
    """Row labels: the name and every hyperparameter that departs from the method's defaults, alone in its table or
    not (`salun (batches=mixed)`: a row labelled plain `salun` is the method as it ships), and where the name has
    several variants, what else sets each apart; a tuned row says so first (`finetune (tuned, lr=0.03)`).

    The defaults are those the run directory records (`RunRecord.method_defaults`), so a label never depends on
    today's code; for a run from before they were recorded, the hyperparameters that differ among the variants
    are named. Then every other setting whose value differs among the variants (`rl (lr=0.1, epochs=3)`,
    `salun (precision=16-mixed)`). Two variants no such text tells apart keep their identity hash.
    """
    labels = {}
    for (name, digest), run in first_runs.items():
        siblings = [other.identity.to_json() for (other_name, _), other in first_runs.items() if other_name == name]
        tuned = ["tuned"] if run.identity.tuned else []  # a tuned row sits beside the method's default one
        parts = tuned + _differences(run.identity.to_json(), siblings, run.method_defaults)
        labels[(name, digest)] = f"{name} ({', '.join(parts)})" if parts else name
    counts = list(labels.values())
    return {key: label if counts.count(label) == 1 else f"{label} [{key[1]}]" for key, label in labels.items()}


def _differences(identity: dict, siblings: list[dict], defaults: dict | None) -> list[str]:
    """What sets a variant apart from its siblings (all as `RunIdentity.to_json`), as `key=value` texts."""
    args = identity["method_args"]
    if defaults is None:  # no defaults recorded: what differs among the variants
        defaults = {k: v for k, v in args.items() if all(s["method_args"].get(k) == v for s in siblings)}
    parts = []
    for key, value in sorted(args.items()):
        default = defaults.get(key, object())
        if isinstance(value, dict) and isinstance(default, dict):  # a group (`optim`): the fields that differ
            parts += [f"{key}.{k}={_short(v)}" for k, v in sorted(value.items()) if default.get(k, object()) != v]
        elif default != value:
            parts.append(f"{key}={_short(value)}")
    for key in sorted({k for s in siblings for k in s} - {*REPLICATE_KEYS, "method", "method_args", "tuned"}):
        if len({json.dumps(s.get(key), sort_keys=True, default=str) for s in siblings}) > 1:
            parts.append(f"{key}={_short(identity.get(key, 'none'))}")
    return parts


def _short(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else json.dumps(value, default=str).strip('"')
    return text if len(text) <= 40 else text[:39] + "…"


def _with_args(name: str, args: dict | None) -> str:
    """`smallcnn (width=32, pools=2)`; the name alone without arguments."""
    return f"{name} ({', '.join(f'{k}={_short(v)}' for k, v in args.items())})" if args else name


def _group_title(identity: RunIdentity) -> str:
    """The first part of a table's title: dataset and arch with their arguments, the stream."""
    size, kind = identity.size, identity.stream
    known = isinstance(size, int | float) and kind in STREAMS
    what = STREAMS.get(kind)().describe_size(size) if known else f"size {size}"
    dataset, arch = _with_args(identity.dataset, identity.dataset_args), _with_args(identity.arch, identity.arch_args)
    return f"{dataset} · {arch} · {identity.stream} ({what}, T={identity.requests})"


#: The identity fields every config.yaml holds (no default to depart from): a title names them only where they tell
#: two tables apart.
_REQUIRED_FIELDS = frozenset(f.name for f in fields(RunIdentity) if f.default is MISSING)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:6]


def _setting_parts(setting: dict, siblings: list[dict]) -> list[tuple[str, str]]:
    """What a table states beyond the title's first part, as (field, value): the fields its runs record as departing
    from their defaults (`oracle_every`, `oracle_seeds`), and those whose value differs among `siblings` (the
    settings of the tables that share that first part, its own included). The recipe is named by its hash."""
    names = sorted({name for sibling in siblings for name in sibling} - set(_TITLE_FIELDS))
    parts = []
    for name in names:
        differs = len({_digest(sibling.get(name)) for sibling in siblings}) > 1
        if name in setting and (differs or name not in _REQUIRED_FIELDS):
            parts.append((name, _digest(setting[name]) if name == "recipe" else _short(setting[name])))
    return parts


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _group_names(first: dict[str, RunIdentity]) -> dict[str, tuple[str, str]]:
    """Each table's (title, slug), both unique, from the first run of each setting (table key -> its identity).

    The title is `_group_title`, then `_setting_parts` after a `·`; the slug says the same in a file name's
    letters (`fashionmnist-train_size700-test_size500-smallcnn-pools2-classwise-size1-T5`), so a setting with no
    arguments and nothing else to state keeps the title and slug it had before arguments were shown. Tables that
    would still share a title or slug (sizes that print alike) get their setting's hash appended.
    """
    by_title: dict[str, list[str]] = {}
    for key, identity in first.items():
        by_title.setdefault(_group_title(identity), []).append(key)
    titles, slugs = {}, {}
    for title, keys in by_title.items():
        siblings = [_setting(first[key]) for key in keys]
        for key in keys:
            ident, parts = first[key], _setting_parts(_setting(first[key]), siblings)
            titles[key] = title + (" · " + ", ".join(f"{k}={v}" for k, v in parts) if parts else "")
            args = [f"{k}{_short(v)}" for k, v in (ident.dataset_args or {}).items()]
            arch_args = [f"{k}{_short(v)}" for k, v in (ident.arch_args or {}).items()]
            words = [ident.dataset, *args, ident.arch, *arch_args, ident.stream, f"size{ident.size}"]
            slugs[key] = _slug("-".join([*words, f"T{ident.requests}", *(f"{k}{v}" for k, v in parts)]))
    for names, marked in ((titles, "{} [{}]"), (slugs, "{}-{}")):
        taken = list(names.values())
        for key, name in names.items():
            if taken.count(name) > 1:
                names[key] = marked.format(name, _digest(key))
    return {key: (titles[key], slugs[key]) for key in first}


def build_groups(runs: list[RunRecord]) -> list[Group]:
    """Runs into tables, one per setting (`_setting`); methods as rows, the oracle and the original model on top."""
    by_group: dict[str, list[RunRecord]] = {}
    for run in runs:
        if run.identity is None or run.duplicate_of is not None:
            continue  # no readable configuration, or counted in another folder: listed under provenance only
        key = json.dumps(_setting(run.identity), sort_keys=True, default=str)
        by_group.setdefault(key, []).append(run)
    first = {key: group_runs[0].identity for key, group_runs in by_group.items()}
    names = _group_names(first)

    def order(key: str) -> tuple:
        ident = first[key]
        return (ident.dataset, ident.arch, ident.stream, float(ident.size), ident.requests, names[key][0])

    return [_build_group(key, *names[key], by_group[key]) for key in sorted(by_group, key=order)]


def _build_group(key: str, title: str, slug: str, runs: list[RunRecord]) -> Group:
    variants: dict[tuple[str, str], list[RunRecord]] = {}  # (name, identity hash without the seed) -> its runs
    for run in sorted(runs, key=lambda r: (r.identity.method, r.identity.seed, str(r.path))):
        # a tuned run is its own row (`tuned` is in its identity), labelled as such, beside the method's default row
        variants.setdefault((_variant_name(run.identity), _variant_key(run.identity)), []).append(run)
    labels = _variant_labels({variant: method_runs[0] for variant, method_runs in variants.items()})
    entries = []
    for variant, method_runs in variants.items():
        entry = Entry(labels[variant], method_runs, name=variant[0])
        complete = [run for run in method_runs if run.status == "complete"]
        values = [run.method_values() for run in complete]
        entry.cells = {k: aggregate([v.get(k) for v in values]) for k in column_keys()}
        _note_validity(entry.cells, values)
        entry.privacy = chain_privacy_of(complete)
        entries.append(entry)
    oracle = _reference_entry(ORACLE_LABEL, runs, RunRecord.oracle_values, is_oracle=True)
    original = _reference_entry(ORIGINAL_LABEL, runs, RunRecord.original_values, is_original=True)
    # A column no row has a value for (forget_test_acc on a random stream, keys an older run lacks) is left out.
    rows = [*entries, *(entry for entry in (oracle, original) if entry is not None)]
    shown = tuple(c for c in columns() if any(e.cells[c.key].mean is not None for e in rows))
    _mark_best(entries, oracle, shown)
    return Group(key, title, slug, entries, oracle, shown, original)


def _reference_entry(label: str, runs: list[RunRecord], values_of, **role: bool) -> Entry | None:
    """The oracle's or the original model's row of a table's `runs`: one value per pretrained model and stream
    (`_reference_replicate`; every method run on them shares the pretrained model and the oracles, the table's
    setting fixing the rest), read from the first complete run that has it."""
    per_replicate: dict[tuple[int, int], dict] = {}
    reference_runs = []
    for run in sorted(runs, key=lambda r: str(r.path)):
        replicate = _reference_replicate(run.identity)
        if run.status == "complete" and replicate not in per_replicate:
            values = values_of(run)
            if values is not None:
                per_replicate[replicate] = values
                reference_runs.append(run)
    if not per_replicate:
        return None
    entry = Entry(label, reference_runs, **role)
    entry.cells = {k: aggregate([v.get(k) for v in per_replicate.values()]) for k in column_keys()}
    _note_validity(entry.cells, list(per_replicate.values()))
    return entry


def _note_validity(cells: dict[str, Cell], values: list[dict]) -> None:
    for key in ("mia_validity", "mia_advantage"):
        if any(v.get(f"{key}_ns") for v in values):
            cells[key].note = "n.s."


def _mark_best(entries: list[Entry], oracle: Entry | None, columns: tuple[Column, ...]) -> None:
    for column in columns:
        candidates = [e for e in entries if e.cells[column.key].mean is not None]
        if len(candidates) < 2 or not column.ranked:
            continue  # a lone method is not "best": nothing was compared (SalUn at 97% forget_acc, alone)
        target = oracle.cells[column.key].mean if oracle is not None and column.oracle_is_target else None
        if target is not None:
            score = {id(e): abs(e.cells[column.key].mean - target) for e in candidates}
        elif column.higher_is_better:
            score = {id(e): -e.cells[column.key].mean for e in candidates}
        else:
            score = {id(e): e.cells[column.key].mean for e in candidates}
        best = min(score.values())
        for entry in candidates:
            if math.isclose(score[id(entry)], best, rel_tol=1e-9, abs_tol=1e-12):
                entry.best.add(column.key)


# --------------------------------------------------------------------------------------- provenance


#: The provenance table's columns: a run's entry of `provenance()["runs"]`, key for key.
PROVENANCE_COLUMNS = ("run", "config_hash", "seed", "status", "device", "version", "commit", "date", "cpu_s")

#: What `provenance()["cost"]` is the cost of, said after it in the markdown and html provenance.
COST_NOTE = (
    "a request's cost: its fits, the oracles and counterfactuals it trained, its evaluation; `cpu_s`: a run's "
    "CPU seconds, every thread"
)


def provenance(runs: list[RunRecord], runs_dirs: Sequence[Path]) -> dict:
    from unlearnbench import __version__

    return {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "package_version": __version__,
        "git_commit": git_commit(),
        "runs_dir": ", ".join(str(folder) for folder in runs_dirs),
        "cost": sum((run.cost for run in runs if run.duplicate_of is None), MeasuredCost()).describe(),
        "runs": [
            {
                "run": run.path.name,
                "config_hash": run.config_hash,
                "method": run.identity.method if run.identity is not None else None,
                "seed": run.identity.seed if run.identity is not None else None,
                "status": run.status_detail(),
                "device": run.provenance.get("device", "unknown"),
                "version": run.provenance.get("package_version", "unknown"),
                "commit": run.provenance.get("git_commit") or "unknown",
                "date": _run_date(run),
                "cpu_s": f"{run.cost.cpu_s:.0f}" if run.cost.measured else "—",
            }
            for run in runs
        ],
    }


def _run_date(run: RunRecord) -> str:
    """When the run was made: the start of its first session (`provenance.json`), not a file's mtime, which a
    copy, a checkout or a sync changes."""
    sessions = run.provenance.get("sessions") or [run.provenance]
    started = sessions[0].get("started") if isinstance(sessions[0], dict) else None
    try:
        return dt.datetime.fromisoformat(started).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError):
        return "unknown"


# ------------------------------------------------------------------------------------------ writers

INTRO = (
    "One table per setting (data, model, recipe, stream, oracles): its oracle and original rows come from its "
    "runs alone. "
    "Headline: `gap_acc`, the mean |method − oracle| over the accuracy columns; `gap` (the papers' "
    "Avg.Gap) also averages the SVC member rate, which on well-fit data re-measures confident "
    "correctness rather than membership (read it with `mia_valid`: n.s. = no better than chance; `mia_adv` "
    "n.s. = inside its permutation null interval). "
    "Values after the last request T, mean ± sample std over seeds (n = runs averaged: seeds × unlearning chains); "
    "`mean_gap` averages the gap over the requests with an oracle; `fwd_fail` = forget_acc on F_T of the "
    "continual method − of the same method serving F_T as a single task from the pretrained model (`single_acc`; "
    "retain = train minus F_T), `fwd_fail_mean` its mean over the scheduled requests t >= 2; "
    "`drift` = forget_acc at T − at 1; "
    "`bwd_fail` = max over s < t of history[t][s] − history[s][s]; `remem` = re-memorization events, "
    "pairs s < t with history[t][s] − history[s][s] > 10 points; `rte_s` / `rte_cpu_s` = unlearning wall / CPU "
    "seconds summed over the stream (time is ranked by CPU seconds). The *original (pretrained)* row is the model before any request, scored on request T's sets: "
    "what unlearning has to close (a method no nearer the oracle than it removed nothing). "
    "Arrows: ↑/↓ better; →oracle: the target is the oracle's value (the top row). "
    "Each table opens with its headline columns; every column, with each row's status, follows under "
    '*All columns* (n = "2 of 3": a row with unfinished or damaged runs). '
    "**Bold** = best per column (closest to the oracle where it is the target), among two methods or more; "
    "`single_acc`, `fwd_fail`, "
    "`drift`, `bwd_fail` and `remem` are not marked, since a method that forgets nothing has no failure either."
)


def _header(column: Column) -> str:
    return f"{column.title} {column.arrow}"


def _md_escape(text: object) -> str:
    """Text safe inside a Markdown table cell: HTML escaped (Markdown renders raw HTML), one line, `|` escaped."""
    import html

    return " ".join(html.escape(str(text), quote=False).split()).replace("|", "\\|")


def _markdown_table(group: Group, columns: tuple[Column, ...], status: bool) -> list[str]:
    lines = ["| method | n | " + " | ".join(_header(c) for c in columns) + (" | status |" if status else " |")]
    lines.append("|---|---:|" + "---:|" * len(columns) + ("---|" if status else ""))
    for entry in group.rows:
        cells = []
        for column in columns:
            text = entry.cells[column.key].text(column.digits)
            cells.append(f"**{text}**" if column.key in entry.best else text)
        label = f"*{_md_escape(entry.label)}*" if entry.is_reference else _md_escape(entry.label)
        line = f"| {label} | {entry.n_text} | " + " | ".join(cells) + " |"
        lines.append(line + (f" {_md_escape(entry.status)} |" if status else ""))
    return lines


def render_markdown(groups: list[Group], prov: dict, plots: dict[str, list[Path]], out_dir: Path) -> str:
    """Per table: the headline (`HEADLINE_COLUMNS`), then every column with each row's status folded under
    a `<details>` element (GitHub renders the Markdown table inside it), the plots and the privacy tables."""
    lines = ["# unlearnbench leaderboard", "", INTRO, ""]
    if not groups:
        lines += ["No run directories found.", ""]
    for group in groups:
        lines += [f"## {_md_escape(group.title)}", ""]
        lines += _markdown_table(group, group.headline_columns, status=False)
        lines += ["", f"<details><summary>All {len(group.columns)} columns, with each row's status</summary>", ""]
        lines += _markdown_table(group, group.columns, status=True)
        lines += ["", "</details>", ""]
        for path in plots.get(group.slug, []):
            relative = path.relative_to(out_dir).as_posix()
            lines.append(f"![{path.stem}]({relative})")
        lines.append("")
        for entry in group.entries:
            if entry.privacy is not None:
                lines += _privacy_markdown(entry)
    lines += _provenance_markdown(prov)
    return "\n".join(lines) + "\n"


def _privacy_markdown(entry: Entry) -> list[str]:
    privacy = entry.privacy
    lines = [f"### {_md_escape(privacy_caption(entry))}", "", "| t | " + " | ".join(PRIVACY_KEYS) + " |"]
    lines.append("|---:|" + "---:|" * len(PRIVACY_KEYS))
    for t in range(len(privacy.requests[PRIVACY_KEYS[0]])):
        cells = [privacy_cell(key, privacy.requests[key][t]) for key in PRIVACY_KEYS]
        lines.append(f"| {t + 1} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _provenance_markdown(prov: dict) -> list[str]:
    lines = [
        "## Provenance",
        "",
        f"Generated {prov['generated']} by unlearnbench {prov['package_version']}"
        + (f", commit {prov['git_commit']}" if prov.get("git_commit") else "")
        + f", from the run directories under `{_md_escape(prov['runs_dir'])}`. Their finished requests cost "
        + f"{prov['cost']} ({COST_NOTE}).",
        "",
        "| " + " | ".join(PROVENANCE_COLUMNS) + " |",
        "|" + "|".join("---:" if key in ("seed", "cpu_s") else "---" for key in PROVENANCE_COLUMNS) + "|",
    ]
    for run in prov["runs"]:
        lines.append("| " + " | ".join(_md_escape(run[key]) for key in PROVENANCE_COLUMNS) + " |")
    return lines


def render_csv(groups: list[Group]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["group", "method", "is_oracle", "is_original", "n_seeds", "seeds", "status"]
    keys = column_keys()
    for key in keys:
        header += [f"{key}_mean", f"{key}_std"]
    writer.writerow([*header, "best"])
    for group in groups:
        for entry in group.rows:
            row = [
                group.title,
                entry.label,
                int(entry.is_oracle),
                int(entry.is_original),
                entry.n,
                " ".join(map(str, entry.seeds)),
                entry.status,
            ]
            for key in keys:
                cell = entry.cells.get(key, Cell(None, None, 0))
                row += ["" if cell.mean is None else f"{cell.mean:.6g}", "" if cell.std is None else f"{cell.std:.6g}"]
            writer.writerow([*row, " ".join(k for k in keys if k in entry.best)])
    return buffer.getvalue()


@dataclass
class Leaderboard:
    groups: list[Group]
    provenance: dict
    files: dict[str, Path]
    plots: dict[str, list[Path]]


def build_leaderboard(runs_dirs: Path | Sequence[Path], out_dir: Path | None = None, plots: bool = True) -> Leaderboard:
    """Read every run under `runs_dirs` and write leaderboard.{md,csv,html} (+ plots) into `out_dir`
    (default: the first folder's `leaderboard/`)."""
    from unlearnbench.report.html import render_html

    runs_dirs = [Path(runs_dirs)] if isinstance(runs_dirs, str | os.PathLike) else [Path(d) for d in runs_dirs]
    out_dir = Path(out_dir) if out_dir is not None else runs_dirs[0] / "leaderboard"
    runs = collect_runs(runs_dirs)
    groups = build_groups(runs)
    prov = provenance(runs, runs_dirs)
    written_plots: dict[str, list[Path]] = {}
    if plots:
        for group in groups:
            written_plots[group.slug] = write_group_plots(group, out_dir / "plots" / group.slug)
    files = {
        "md": out_dir / "leaderboard.md",
        "csv": out_dir / "leaderboard.csv",
        "html": out_dir / "leaderboard.html",
    }
    write_text_atomic(files["md"], render_markdown(groups, prov, written_plots, out_dir))
    write_text_atomic(files["csv"], render_csv(groups))
    write_text_atomic(
        files["html"], render_html(groups, prov, written_plots, out_dir, INTRO, PROVENANCE_COLUMNS, COST_NOTE)
    )
    return Leaderboard(groups, prov, files, written_plots)


def leaderboard_command(argv: list[str]) -> int:
    """`unlearnbench leaderboard RUNS_DIR [--out DIR] [--plots false]`; ConfigError for bad input (nothing written)."""
    from jsonargparse import ArgumentError

    from unlearnbench.parsers import command_parser

    parser = command_parser("leaderboard", "Tables and plots from run directories.")
    parser.add_argument(
        "runs_dirs", type=Path, nargs="+", help="folders searched recursively for run directories (one or more)"
    )
    parser.add_argument(
        "--out", type=Path | None, default=None, help="output folder (default: the first folder's leaderboard/)"
    )
    parser.add_argument("--plots", type=bool, default=True, help="write the PNG plots")
    try:
        args = parser.parse_args(argv)
    except ArgumentError as error:
        raise ConfigError(str(error)) from error
    for folder in args.runs_dirs:
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a directory of runs")
    check_output_folder(args.out if args.out is not None else args.runs_dirs[0] / "leaderboard")
    board = build_leaderboard(args.runs_dirs, args.out, plots=args.plots)
    runs = len(board.provenance["runs"])
    print(f"{runs} run(s) in {len(board.groups)} table(s): {board.files['md']} (+ .csv, .html, plots/)")
    for run in board.provenance["runs"]:
        if run["status"].startswith(("damaged", "duplicate")):
            print(f"not published: {run['run']}: {run['status']}")
    return 0


def check_output_folder(path: Path) -> None:
    """The leaderboard's folder is, or can be made, a writable directory (not a file): ConfigError otherwise."""
    check_writable_directory(Path(path))
