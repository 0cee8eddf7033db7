"""Plots of a leaderboard group (matplotlib, Agg backend: no display needed), each as PNG at 200 dpi
(embedded in the Markdown and HTML pages) and as SVG beside it (for papers and slides):

- `history-<row>.png` (<row>: the method's name, and a short hash of the row's label where the row is not the
  method as it ships: `Entry.file_stem`): the T x T history matrix (accuracy on F_s after request t), mean over seeds,
  on a fixed 0–100 scale with the oracle's mean forget accuracy marked on it;
- `backward_eps-<row>.png`, `backward_rmia-<row>.png` (beside it, where the method has K >= 2
  unlearning chains saved with `--save-logits`): the backward-privacy matrices, the ε forget score
  (K >= 3) and the RMIA AUC of F_s at t against the oracles of t, on a fixed 0–1 scale, rows without
  oracles blank; the colour bar marks each one's target: the oracles' own F at this K
  (`privacy.eps_floor(K)`, never 1) and RMIA's chance, 0.5;
- `forget_acc.png`: forget_acc after each request t, every method and the oracle (dashed black, at
  the requests that have one, drawn on top of the methods' lines so it is never hidden);
- `update_norm.png`: ‖u_t‖ = ‖θ_t − θ_{t−1}‖ over t (from metrics.jsonl, or geometry.csv);
- `er.png`: ER_t (rank 1) over t in the basis of all the run's updates (`er_all_r1` of `geometry.csv`).

Axes are thinned to about ten labels, so a T = 100 stream stays readable.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unlearnbench.evaluation.privacy import eps_floor
from unlearnbench.figures import ANNOTATED_REQUESTS, heatmap_figure, history_heatmap_figure, pyplot, thinned_ticks

#: PNG resolution: sharp when a page scales a 6.4-inch figure up, still small (tens of kB)
PNG_DPI = 200


def _save(figure, path: Path) -> Path:
    """`path` (PNG at PNG_DPI) and the same figure as SVG beside it; returns the PNG's path."""
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=PNG_DPI)
    figure.savefig(path.with_suffix(".svg"))
    plt.close(figure)
    return path


def _mean_curve(curves: Sequence[Sequence[float | None]]) -> np.ndarray:
    """Mean over seeds of per-t curves (shorter curves and None ignored)."""
    length = max(len(c) for c in curves)
    matrix = np.full((len(curves), length), np.nan)
    for i, curve in enumerate(curves):
        matrix[i, : len(curve)] = [math.nan if v is None else v for v in curve]
    with np.errstate(all="ignore"):
        counts = np.sum(np.isfinite(matrix), axis=0)
        sums = np.nansum(matrix, axis=0)
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _wrapped(label: str) -> str:
    """A row's label in a legend or a title: a label naming many hyperparameters is wider than the figure, so it is
    broken into lines."""
    return textwrap.fill(label, LABEL_WIDTH)


#: characters per line of a row's label in a legend or a title
LABEL_WIDTH = 60


def _line_plot(series: dict[str, np.ndarray], ylabel: str, title: str, path: Path, dashed: Sequence[str] = ()) -> Path:
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6.4, 3.8))
    length = max((len(v) for v in series.values()), default=1)
    for label, values in series.items():
        ts = np.arange(1, len(values) + 1)
        reference = label in dashed  # the oracle: drawn above every method's line
        # A dashed (oracle) series may be sparse (`--oracle-every`): its points keep their markers at any T.
        ax.plot(
            ts,
            values,
            "--" if reference else "-",
            marker="o" if reference or length <= ANNOTATED_REQUESTS else None,
            markersize=3,
            label=_wrapped(label),
            color="black" if reference else None,
            zorder=3 if reference else 2,
        )
    ax.set_xlabel("request t")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([t + 1 for t in thinned_ticks(length)])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return _save(figure, path)


def write_group_plots(group, out_dir: Path) -> list[Path]:
    """Every plot of one leaderboard group (see the module docstring) into `out_dir`; the paths written."""
    out_dir = Path(out_dir)
    written: list[Path] = []  # the curves first, then the heatmaps
    heatmaps: list[Path] = []
    forget: dict[str, np.ndarray] = {}
    norms: dict[str, np.ndarray] = {}
    ers: dict[str, np.ndarray] = {}
    # the oracle row's runs: one per pretrained model and stream of the table, as its numbers
    oracle_forget = [
        [r.oracle.get("forget_acc") if r.oracle else None for r in run.scored_rows]
        for run in (group.oracle.runs if group.oracle is not None else [])
    ]
    oracle_level = float(np.nanmean(_mean_curve(oracle_forget))) if oracle_forget else None
    for entry in group.entries:
        runs = [run for run in entry.runs if run.status == "complete"]
        runs = runs or [run for run in entry.runs if run.scored_rows]  # nothing finished: what there is
        if not runs:
            continue
        histories = [run.history for run in runs if run.history is not None]
        if histories:
            rows = min(h.shape[0] for h in histories)
            mean = np.mean([h[:rows] for h in histories], axis=0)
            title = _wrapped(f"{entry.label}: history (mean of {len(histories)} seed(s))")
            figure = history_heatmap_figure(mean, title, oracle_level)
            heatmaps.append(_save(figure, out_dir / f"history-{entry.file_stem}.png"))
        if entry.privacy is not None:  # beside the history: the same axes, (t, F_s)
            heatmaps += _backward_privacy_heatmaps(entry, out_dir)
        forget[entry.label] = _mean_curve([[r.method.get("forget_acc") for r in run.scored_rows] for run in runs])
        norms[entry.label] = _mean_curve([run.update_norms() for run in runs])
        geometry = [run.geometry for run in runs if run.geometry]
        if geometry:
            ers[entry.label] = _mean_curve([[g.get("er_all_r1") for g in rows] for rows in geometry])
    if oracle_forget:
        forget = {"oracle (retrain)": _mean_curve(oracle_forget), **forget}
    if forget:
        title = f"forget_acc after each request\n{group.title}"
        written.append(_line_plot(forget, "forget_acc (%)", title, out_dir / "forget_acc.png", ["oracle (retrain)"]))
    if any(np.isfinite(v).any() for v in norms.values()):
        title = f"‖u_t‖ = ‖θ_t − θ_(t−1)‖\n{group.title}"
        written.append(_line_plot(norms, "‖u_t‖", title, out_dir / "update_norm.png"))
    if ers:
        written.append(
            _line_plot(ers, "ER_t (r = 1)", f"ER_t (rank 1, basis u_1..u_T)\n{group.title}", out_dir / "er.png")
        )
    return written + heatmaps


#: name -> (title, colour scale, colour bar label, reference level marked on it for K chains)
BACKWARD_PRIVACY = {
    "eps": (
        "ε forget score F of F_s at t",
        (0.0, 1.0),
        "F (the oracles' own F at this K marked)",
        lambda chains: (eps_floor(chains), f"oracles, K={chains}"),
    ),
    "rmia": ("RMIA AUC of F_s at t", (0.0, 1.0), "RMIA AUC (0.5 = chance)", lambda chains: (0.5, "chance")),
}


def _backward_privacy_heatmaps(entry, out_dir: Path) -> list[Path]:
    """`backward_eps-<row>.png` (with K >= 3 chains) and `backward_rmia-<row>.png`: the backward-privacy
    matrices of the variant's chains against the oracles of each t, on a fixed 0–1 scale."""
    paths = []
    for name, (what, scale, label, reference) in BACKWARD_PRIVACY.items():
        matrix = entry.privacy.backward[name]
        if not np.isfinite(matrix).any():
            continue
        title = _wrapped(f"{entry.label}: {what} ({entry.privacy.chains} chains)")
        figure = heatmap_figure(matrix, title, scale, label, "{:.2f}", reference(entry.privacy.chains))
        paths.append(_save(figure, out_dir / f"backward_{name}-{entry.file_stem}.png"))
    return paths
