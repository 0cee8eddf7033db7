"""`unlearnbench leaderboard RUNS_DIR [--out DIR]`: tables built from run directories alone.

Every folder under RUNS_DIR (searched recursively) holding a `config.yaml` is a run. Runs are grouped
into one table per setting (dataset, arch, stream, size, T, pretraining recipe); within a table each
method (with its hyperparameters) is a row, the oracle (the retrained model) on top.

What a cell shows, per method, over the seeds whose run finished:

- gap_acc (the headline, first column), forget_acc, forget_test_acc, retain_acc, test_acc,
  mia_member_rate, mia_validity, mia_advantage, gap: the value after the last request T (from
  `metrics.jsonl`); a mia_validity cell ends in "n.s." when, for some averaged seed, its 95% interval
  contains 50 (the attack tells members from non-members no better than a coin);
- mean_gap_acc, mean_gap: gap_acc and the Avg.Gap averaged over the T requests;
- forward failure: forget_acc at T minus at 1; backward failure: the largest drop-back
  max over s < t of history[t][s] − history[s][s], and the same against the oracle's accuracy on
  F_s at t (`bwd_fail_vs_oracle`); the oracle row shows its own values;
- rte_s: wall seconds of unlearning summed over the T requests;
- `mean ± std` over seeds (std: sample standard deviation, ddof=1; none with one seed) and `n`, the
  number of seeds averaged.

The best method per column is marked (bold in Markdown, highlighted in HTML, listed in CSV): the
one closest to the oracle's mean where the oracle is the target (arrow `→oracle`), else the lowest
or highest by the column's direction. A run that is not finished (no `summary.json`), that
diverged (`"status": "diverged"`) or that failed in a suite (`error.json`) is never dropped: its row
says so in the status column and its numbers are left out of the means.

Outputs in `--out` (default RUNS_DIR/leaderboard): `leaderboard.md`, `leaderboard.csv`,
`leaderboard.html` (one self-contained page: inline CSS/JS, sortable columns, no network) and
`plots/<group>/*.png`. A provenance section names the package version, git commit, every run's
config hash, seed, device and date.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from unlearnbench.evaluation.keys import METRIC_KEYS, significant
from unlearnbench.evaluation.scoring import stream_summary
from unlearnbench.report.plots import read_geometry, read_history, write_group_plots


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    higher_is_better: bool
    oracle_is_target: bool
    description: str

    @property
    def arrow(self) -> str:
        arrow = "↑" if self.higher_is_better else "↓"
        return f"{arrow}→oracle" if self.oracle_is_target else arrow


def _metric_column(key: str, title: str | None = None) -> Column:
    m = METRIC_KEYS[key]
    return Column(key, title or key, m.higher_is_better, m.oracle_is_target, m.description + " (after request T)")


COLUMNS: tuple[Column, ...] = (
    _metric_column("gap_acc"),
    _metric_column("forget_acc"),
    _metric_column("forget_test_acc"),
    _metric_column("retain_acc"),
    _metric_column("test_acc"),
    _metric_column("mia_member_rate", "mia"),
    _metric_column("mia_validity", "mia_valid"),
    _metric_column("mia_advantage", "mia_adv"),
    _metric_column("gap"),
    Column("mean_gap_acc", "mean_gap_acc", False, False, "gap_acc averaged over the T requests"),
    Column("mean_gap", "mean_gap", False, False, "Avg.Gap averaged over the T requests"),
    Column("forward_failure", "fwd_fail", False, True, "forget_acc at T minus at 1"),
    Column("backward_failure_max", "bwd_fail", False, True, "max over s < t of history[t][s] − history[s][s]"),
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
        "re-memorization: pairs (t, s) where history[t][s] − history[s][s] exceeds the threshold (shown when computed)",
    ),
    Column("rte_s", "rte_s", False, False, "wall seconds of unlearning, summed over the T requests"),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
ORACLE_LABEL = "oracle (retrain)"


# --------------------------------------------------------------------------------------------- runs


@dataclass
class RunRecord:
    """One run directory as read from disk."""

    path: Path
    identity: dict
    rows: list[dict]
    summary: dict | None
    error: dict | None
    provenance: dict
    history: np.ndarray | None
    geometry: list[dict]

    @property
    def config_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode()).hexdigest()[:8]

    @property
    def requests(self) -> int:
        return int(self.identity.get("requests", 0))

    @property
    def scored_rows(self) -> list[dict]:
        return [row for row in self.rows if row.get("status", "ok") == "ok" and "forget_acc" in row.get("method", {})]

    @property
    def status(self) -> str:
        """complete | diverged | failed | unfinished."""
        if self.summary is not None and (
            self.summary.get("status") == "diverged" or any(r.get("status") == "diverged" for r in self.rows)
        ):
            return "diverged"
        if self.summary is not None and len(self.scored_rows) >= self.requests:
            return "complete"
        if self.error is not None:
            return "failed"
        return "unfinished"

    def status_detail(self) -> str:
        status = self.status
        if status == "diverged":
            at = (self.summary or {}).get("diverged_at") or next(
                (r["t"] for r in self.rows if r.get("status") == "diverged"), "?"
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
        return [row["method"].get("update_norm") for row in self.scored_rows]

    def method_values(self) -> dict[str, float | None]:
        rows = self.scored_rows
        last = rows[-1]["method"]
        values: dict[str, float | None] = {k: last.get(k) for k in COLUMN_KEYS if k in METRIC_KEYS}
        summary = stream_summary(rows)
        values["forward_failure"] = summary["forward_failure"]
        values["backward_failure_max"] = summary["backward_failure_max"]
        values["backward_failure_vs_oracle_max"] = summary.get("backward_failure_vs_oracle_max")
        values["mean_gap"] = summary.get("mean_gap")
        values["mean_gap_acc"] = summary.get("mean_gap_acc")
        values["mia_validity_ns"] = _not_significant(last)
        values["rememorization_events"] = summary.get("rememorization_events")
        times = [row["method"].get("rte_s") for row in rows]
        values["rte_s"] = float(sum(times)) if all(v is not None for v in times) else None
        return values

    def oracle_values(self) -> dict[str, float | None] | None:
        rows = self.scored_rows
        if not rows or not all(row.get("oracle") for row in rows):
            return None
        last = rows[-1]["oracle"]
        values: dict[str, float | None] = {k: last.get(k) for k in COLUMN_KEYS if k in METRIC_KEYS}
        summary = stream_summary([{"method": row["oracle"]} for row in rows])
        values["forward_failure"] = summary["forward_failure"]
        values["backward_failure_max"] = summary["backward_failure_max"]
        values["rememorization_events"] = summary.get("rememorization_events")
        values["backward_failure_vs_oracle_max"] = 0.0 if len(rows) > 1 else None
        values["gap"] = values["mean_gap"] = values["gap_acc"] = values["mean_gap_acc"] = 0.0
        values["mia_validity_ns"] = _not_significant(last)
        values["rte_s"] = None
        return values


def _not_significant(scores: dict) -> bool:
    return scores.get("mia_validity") is not None and not significant(
        scores.get("mia_validity_lo"), scores.get("mia_validity_hi")
    )


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_run(path: Path) -> RunRecord | None:
    """A run directory, or None when `path` holds no readable config.yaml."""
    try:
        identity = yaml.safe_load((path / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(identity, dict) or "method" not in identity:
        return None
    rows: list[dict] = []
    metrics = path / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break  # a torn last line: everything before it is valid
    return RunRecord(
        path=path,
        identity=identity,
        rows=rows,
        summary=_read_json(path / "summary.json"),
        error=_read_json(path / "error.json"),
        provenance=_read_json(path / "provenance.json") or {},
        history=read_history(path / "history.csv"),
        geometry=read_geometry(path / "geometry.csv"),
    )


def collect_runs(runs_dir: Path) -> list[RunRecord]:
    """Every run directory under `runs_dir` (recursively), in path order."""
    runs = []
    for config in sorted(Path(runs_dir).rglob("config.yaml")):
        if not (config.parent / "manifest.json").exists():
            continue  # not a run directory (e.g. the config.yaml inside a W&B run folder)
        run = read_run(config.parent)
        if run is not None:
            runs.append(run)
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

    @property
    def n(self) -> int:
        return len([run for run in self.runs if run.status == "complete"])

    @property
    def status(self) -> str:
        if self.is_oracle:
            return f"{self.n} seed(s)"
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.status] = counts.get(run.status, 0) + 1
        parts = [f"{counts.pop('complete')} complete"] if "complete" in counts else []
        parts += [d for run in self.runs if run.status != "complete" for d in [run.status_detail()]]
        return "; ".join(parts)

    @property
    def seeds(self) -> list[int]:
        return sorted({int(run.identity.get("seed", 0)) for run in self.runs})


@dataclass
class Group:
    key: tuple
    title: str
    entries: list[Entry]
    oracle: Entry | None
    columns: tuple[Column, ...]

    @property
    def slug(self) -> str:
        dataset, arch, stream, size, requests, recipe = self.key
        text = f"{dataset}-{arch}-{stream}-size{size}-T{requests}"
        if " recipe " in self.title:
            text += f"-recipe{recipe}"
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)

    @property
    def rows(self) -> list[Entry]:
        return ([self.oracle] if self.oracle else []) + self.entries


def _recipe_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity.get("recipe"), sort_keys=True).encode()).hexdigest()[:6]


def _variant_key(identity: dict) -> str:
    """What distinguishes two rows of the same method: its hyperparameters, oracle and precision."""
    payload = {k: identity.get(k) for k in ("method_args", "oracle", "precision")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:6]


def _group_title(identity: dict) -> str:
    size = identity.get("size")
    if identity.get("stream") == "classwise":
        plural = "class" if size == 1 else "classes"
        what = f"{size:g} {plural} per request" if isinstance(size, int | float) else f"size {size}"
    else:
        what = f"{100 * size:g}% of train per request" if isinstance(size, int | float) else f"size {size}"
    return (
        f"{identity.get('dataset')} · {identity.get('arch')} · {identity.get('stream')} "
        f"({what}, T={identity.get('requests')})"
    )


def build_groups(runs: list[RunRecord]) -> list[Group]:
    """Runs into tables: one per (dataset, arch, stream, size, T, recipe); methods and the oracle as rows."""
    by_group: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        ident = run.identity
        key = (
            ident.get("dataset"),
            ident.get("arch"),
            ident.get("stream"),
            ident.get("size"),
            ident.get("requests"),
            _recipe_hash(ident),
        )
        by_group.setdefault(key, []).append(run)
    titles = {key: _group_title(runs[0].identity) for key, runs in by_group.items()}
    groups = []
    for key in sorted(by_group, key=lambda k: tuple(str(x) for x in k)):
        group_runs = by_group[key]
        title = titles[key]
        if list(titles.values()).count(title) > 1:
            title += f" recipe {key[-1]}"
        groups.append(_build_group(key, title, group_runs))
    return groups


def _build_group(key: tuple, title: str, runs: list[RunRecord]) -> Group:
    variants: dict[tuple[str, str], list[RunRecord]] = {}
    for run in sorted(runs, key=lambda r: (r.identity.get("method"), r.identity.get("seed", 0), str(r.path))):
        variants.setdefault((run.identity["method"], _variant_key(run.identity)), []).append(run)
    methods = [m for m, _ in variants]
    entries = []
    for (method, variant), method_runs in variants.items():
        label = method if methods.count(method) == 1 else f"{method} [{variant}]"
        entry = Entry(label, method_runs)
        complete = [run for run in method_runs if run.status == "complete"]
        values = [run.method_values() for run in complete]
        entry.cells = {k: aggregate([v.get(k) for v in values]) for k in COLUMN_KEYS}
        _note_validity(entry.cells, values)
        entries.append(entry)
    # The oracle: one value per seed (every method on the same seed shares the same oracles).
    per_seed: dict[int, dict] = {}
    oracle_runs = []
    for run in sorted(runs, key=lambda r: str(r.path)):
        seed = int(run.identity.get("seed", 0))
        if run.status == "complete" and seed not in per_seed:
            values = run.oracle_values()
            if values is not None:
                per_seed[seed] = values
                oracle_runs.append(run)
    oracle = None
    if per_seed:
        oracle = Entry(ORACLE_LABEL, oracle_runs, is_oracle=True)
        oracle.cells = {k: aggregate([v.get(k) for v in per_seed.values()]) for k in COLUMN_KEYS}
        _note_validity(oracle.cells, list(per_seed.values()))
    # A column no row has a value for (forget_test_acc on a random stream, keys an older run lacks) is left out.
    rows = [*entries, *([oracle] if oracle else [])]
    columns = tuple(c for c in COLUMNS if any(e.cells[c.key].mean is not None for e in rows))
    _mark_best(entries, oracle, columns)
    return Group(key, title, entries, oracle, columns)


def _note_validity(cells: dict[str, Cell], values: list[dict]) -> None:
    if any(v.get("mia_validity_ns") for v in values):
        cells["mia_validity"].note = "n.s."


def _mark_best(entries: list[Entry], oracle: Entry | None, columns: tuple[Column, ...]) -> None:
    for column in columns:
        candidates = [e for e in entries if e.cells[column.key].mean is not None]
        if not candidates:
            continue
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


def git_commit() -> str | None:
    """The commit of the checkout this package runs from (with `-dirty` for local changes), if any."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(runs: list[RunRecord], runs_dir: Path) -> dict:
    from unlearnbench import __version__

    return {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "package_version": __version__,
        "git_commit": git_commit(),
        "runs_dir": str(runs_dir),
        "runs": [
            {
                "run": run.path.name,
                "config_hash": run.config_hash,
                "method": run.identity.get("method"),
                "seed": run.identity.get("seed"),
                "status": run.status_detail(),
                "device": run.provenance.get("device", "unknown"),
                "version": run.provenance.get("package_version", "unknown"),
                "commit": run.provenance.get("git_commit") or "unknown",
                "date": _run_date(run),
            }
            for run in runs
        ],
    }


def _run_date(run: RunRecord) -> str:
    for name in ("summary.json", "metrics.jsonl", "config.yaml"):
        path = run.path / name
        if path.exists():
            stamp = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
            return stamp.strftime("%Y-%m-%d %H:%M UTC")
    return "unknown"


# ------------------------------------------------------------------------------------------ writers

INTRO = (
    "Headline: `gap_acc`, the mean |method − oracle| over the accuracy columns; `gap` (the papers' "
    "Avg.Gap) also averages the SVC member rate, which on well-fit data re-measures confident "
    "correctness rather than membership (read it with `mia_valid`: n.s. = no better than chance). "
    "Values after the last request T, mean ± sample std over seeds (n = seeds averaged); "
    "`mean_gap` averages the gap over the T requests; `fwd_fail` = forget_acc at T − at 1; "
    "`bwd_fail` = max over s < t of history[t][s] − history[s][s]; `rte_s` = unlearning seconds summed "
    "over the stream. Arrows: ↑/↓ better; →oracle: the target is the oracle's value (the top row). "
    "**Bold** = best per column (closest to the oracle where it is the target)."
)


def _header(column: Column) -> str:
    return f"{column.title} {column.arrow}"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(groups: list[Group], prov: dict, plots: dict[str, list[Path]], out_dir: Path) -> str:
    lines = ["# unlearnbench leaderboard", "", INTRO, ""]
    if not groups:
        lines += ["No run directories found.", ""]
    for group in groups:
        lines += [f"## {group.title}", ""]
        lines.append("| method | n | " + " | ".join(_header(c) for c in group.columns) + " | status |")
        lines.append("|---|---:|" + "---:|" * len(group.columns) + "---|")
        for entry in group.rows:
            cells = []
            for column in group.columns:
                text = entry.cells[column.key].text()
                cells.append(f"**{text}**" if column.key in entry.best else text)
            label = f"*{entry.label}*" if entry.is_oracle else entry.label
            lines.append(
                f"| {_md_escape(label)} | {entry.n} | " + " | ".join(cells) + f" | {_md_escape(entry.status)} |"
            )
        lines.append("")
        for path in plots.get(group.slug, []):
            relative = path.relative_to(out_dir).as_posix()
            lines.append(f"![{path.stem}]({relative})")
        lines.append("")
    lines += _provenance_markdown(prov)
    return "\n".join(lines) + "\n"


def _provenance_markdown(prov: dict) -> list[str]:
    lines = [
        "## Provenance",
        "",
        f"Generated {prov['generated']} by unlearnbench {prov['package_version']}"
        + (f", commit {prov['git_commit']}" if prov.get("git_commit") else "")
        + f", from the run directories under `{prov['runs_dir']}`.",
        "",
        "| run | config hash | seed | status | device | version | commit | date |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for run in prov["runs"]:
        lines.append(
            f"| {run['run']} | {run['config_hash']} | {run['seed']} | {_md_escape(run['status'])} | "
            f"{run['device']} | {run['version']} | {run['commit']} | {run['date']} |"
        )
    return lines


def render_csv(groups: list[Group]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["group", "method", "is_oracle", "n_seeds", "seeds", "status"]
    for key in COLUMN_KEYS:
        header += [f"{key}_mean", f"{key}_std"]
    writer.writerow([*header, "best"])
    for group in groups:
        for entry in group.rows:
            row = [
                group.title,
                entry.label,
                int(entry.is_oracle),
                entry.n,
                " ".join(map(str, entry.seeds)),
                entry.status,
            ]
            for key in COLUMN_KEYS:
                cell = entry.cells.get(key, Cell(None, None, 0))
                row += ["" if cell.mean is None else f"{cell.mean:.6g}", "" if cell.std is None else f"{cell.std:.6g}"]
            writer.writerow([*row, " ".join(k for k in COLUMN_KEYS if k in entry.best)])
    return buffer.getvalue()


@dataclass
class Leaderboard:
    groups: list[Group]
    provenance: dict
    files: dict[str, Path]
    plots: dict[str, list[Path]]


def build_leaderboard(runs_dir: Path, out_dir: Path | None = None, plots: bool = True) -> Leaderboard:
    """Read every run under `runs_dir` and write leaderboard.{md,csv,html} (+ PNG plots) into `out_dir`."""
    from unlearnbench.io import write_text_atomic
    from unlearnbench.report.html import render_html

    runs_dir = Path(runs_dir)
    out_dir = Path(out_dir) if out_dir is not None else runs_dir / "leaderboard"
    runs = collect_runs(runs_dir)
    groups = build_groups(runs)
    prov = provenance(runs, runs_dir)
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
    write_text_atomic(files["html"], render_html(groups, prov, written_plots, out_dir, INTRO))
    return Leaderboard(groups, prov, files, written_plots)


def leaderboard_command(argv: list[str]) -> int:
    """`unlearnbench leaderboard RUNS_DIR [--out DIR] [--plots false]`; ValueError for bad input."""
    from jsonargparse import ArgumentError, ArgumentParser

    parser = ArgumentParser(
        prog="unlearnbench leaderboard", description="Tables and plots from run directories.", exit_on_error=False
    )
    parser.add_argument("runs_dir", type=Path, help="folder searched recursively for run directories")
    parser.add_argument("--out", type=Path | None, default=None, help="output folder (default RUNS_DIR/leaderboard)")
    parser.add_argument("--plots", type=bool, default=True, help="write the PNG plots")
    try:
        args = parser.parse_args(argv)
    except ArgumentError as error:
        raise ValueError(str(error)) from error
    if not args.runs_dir.is_dir():
        raise ValueError(f"{args.runs_dir} is not a directory of runs")
    board = build_leaderboard(args.runs_dir, args.out, plots=args.plots)
    runs = len(board.provenance["runs"])
    print(f"{runs} run(s) in {len(board.groups)} table(s): {board.files['md']} (+ .csv, .html, plots/)")
    return 0
