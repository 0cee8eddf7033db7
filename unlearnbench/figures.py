"""Figures of one run's files, drawn during a run (the W&B logger's last step) and by the leaderboard.

Kept outside `report/`, which reads finished run directories only: nothing that runs during a run
imports it. matplotlib is imported on first use with the Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (it costs about a second)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def read_history(path: Path) -> np.ndarray | None:
    """history.csv as a (requests done) x T float array, or None when absent."""
    path = Path(path)
    if not path.exists():
        return None
    with path.open(newline="") as f:
        rows = [row for row in csv.reader(f)][1:]
    if not rows:
        return None
    return np.array([[float(v) if v not in ("", "None") else math.nan for v in row[1:]] for row in rows])


def history_heatmap_figure(history: np.ndarray, title: str):
    """A heatmap of the history matrix: rows = after request t, columns = forget set F_s."""
    plt = pyplot()
    rows, cols = history.shape
    size = max(3.2, 0.55 * cols + 1.8)
    figure, ax = plt.subplots(figsize=(size + 0.8, size * rows / max(cols, 1) + 0.6))
    image = ax.imshow(history, vmin=0, vmax=100, cmap="viridis", aspect="auto")
    for t in range(rows):
        for s in range(cols):
            value = history[t, s]
            if math.isfinite(value):
                color = "black" if value > 60 else "white"
                ax.text(s, t, f"{value:.0f}", ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(range(cols), [f"F{s + 1}" for s in range(cols)])
    ax.set_yticks(range(rows), [f"t={t + 1}" for t in range(rows)])
    ax.set_xlabel("forget set F_s")
    ax.set_ylabel("after request t")
    ax.set_title(title, fontsize=9)
    figure.colorbar(image, ax=ax, label="accuracy (%)")
    figure.tight_layout()
    return figure
