"""Figures of one run's numbers (read through `RunDirectory`), drawn during a run (the W&B logger's last step)
and by the leaderboard.

Kept outside `report/`, which reads finished run directories only: nothing that runs during a run
imports it. matplotlib is imported on first use with the Agg backend (no display needed).
"""

from __future__ import annotations

import math

import numpy as np


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (it costs about a second)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


#: Above this many requests a heatmap drops its per-cell numbers and labels about `MAX_TICKS` rows and columns.
ANNOTATED_REQUESTS = 20
MAX_TICKS = 10


def thinned_ticks(count: int) -> range:
    """0-based positions of at most about `MAX_TICKS` evenly spaced labels over `count` requests."""
    return range(0, count, max(1, math.ceil(count / MAX_TICKS)))


def history_heatmap_figure(history: np.ndarray, title: str, oracle_level: float | None = None):
    """A heatmap of the history matrix: rows = after request t, columns = forget set F_s.

    The colour scale is fixed to 0–100 (%) so heatmaps of different methods compare by eye, and
    `oracle_level` (the oracle's forget accuracy, the value a method should match) is marked on it.
    """
    return heatmap_figure(history, title, (0.0, 100.0), "accuracy (%)", "{:.0f}", (oracle_level, "oracle"))


def heatmap_figure(
    matrix: np.ndarray,
    title: str,
    scale: tuple[float, float],
    label: str,
    cell_format: str,
    reference: tuple[float | None, str] = (None, ""),
):
    """A (request t) x (forget set F_s) heatmap on a fixed colour `scale`, `reference` = (level, name) marked on
    its colour bar; NaN cells (no value) are left blank.

    At T = 100 the cells are too small for numbers: above `ANNOTATED_REQUESTS` they are left out,
    the axes thinned and the figure size capped.
    """
    plt = pyplot()
    rows, cols = matrix.shape
    low, high = scale
    size = min(10.0, max(3.2, 0.55 * cols + 1.8))
    figure, ax = plt.subplots(figsize=(size + 0.8, min(10.0, size * rows / max(cols, 1)) + 0.6))
    image = ax.imshow(matrix, vmin=low, vmax=high, cmap="viridis", aspect="auto", interpolation="nearest")
    if cols <= ANNOTATED_REQUESTS:
        for t in range(rows):
            for s in range(cols):
                value = matrix[t, s]
                if math.isfinite(value):
                    color = "black" if value > low + 0.6 * (high - low) else "white"
                    ax.text(s, t, cell_format.format(value), ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(list(thinned_ticks(cols)), [f"F{s + 1}" for s in thinned_ticks(cols)])
    ax.set_yticks(list(thinned_ticks(rows)), [f"t={t + 1}" for t in thinned_ticks(rows)])
    ax.set_xlabel("forget set F_s")
    ax.set_ylabel("after request t")
    ax.set_title(title, fontsize=9)
    bar = figure.colorbar(image, ax=ax, label=label)
    level, name = reference
    if level is not None and math.isfinite(level):
        bar.ax.axhline(level, color="red", linewidth=2)
        bar.ax.text(
            -0.1, level, name, color="red", ha="right", va="center", fontsize=7, transform=bar.ax.get_yaxis_transform()
        )
    figure.tight_layout()
    return figure
