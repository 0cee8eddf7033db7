"""What a person sees while a run goes: rich progress, a table per request, a summary at the end.

Rich renders live bars on a terminal and plain lines in CI logs (no terminal), and `quiet`
silences everything but errors.
"""

from __future__ import annotations

import logging
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from lightning.pytorch.callbacks import Callback
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from unlearnbench.evaluation.keys import METRIC_KEYS, console_keys, significant
from unlearnbench.records import RequestRecord, RunSummary


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(scores: dict, key: str) -> str:
    """A table cell in the metric's own decimals; the SVC validity reads "n.s." when its 95% interval contains chance,
    an AUC and the SVC advantage carry their null band, and an AUC the ties decided reads "degenerate"."""
    text = METRIC_KEYS[key].format(scores.get(key))
    lo, hi = scores.get("mia_validity_lo"), scores.get("mia_validity_hi")
    if key == "mia_validity" and scores.get(key) is not None and not significant(lo, hi):
        text += " n.s."
    if key in ("lira_auc", "rmia_auc") and scores.get(key) is None and scores.get(f"{key}_ties") is not None:
        return f"degenerate ({100 * scores[f'{key}_ties']:.0f}% of pairs tied)"
    if key in ("lira_auc", "rmia_auc", "mia_advantage") and scores.get(f"{key}_null_lo") is not None:
        text += f" [{scores[f'{key}_null_lo']:.2f}, {scores[f'{key}_null_hi']:.2f}]"  # the chance band beside it
    return text


def _styled(label: str) -> str:
    """Oracle retraining and pretraining stand out from the unlearning fits."""
    if label.startswith("oracle"):
        return f"[magenta]{label}[/magenta]"
    if label.startswith("pretraining"):
        return f"[cyan]{label}[/cyan]"
    return label


class FitProgress(Callback):
    """A progress bar for one Lightning fit (pretraining, an oracle, or an unlearning request)."""

    def __init__(self, progress: Progress, label: str):
        self.progress, self.label, self.task = progress, label, None

    def on_train_start(self, trainer, pl_module) -> None:
        self.task = self.progress.add_task(_styled(self.label), total=trainer.estimated_stepping_batches)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.progress.advance(self.task)

    def on_train_end(self, trainer, pl_module) -> None:
        self.progress.remove_task(self.task)


class FitLines(Callback):
    """Without a terminal (CI logs): one plain line when a fit starts and one when it ends, no animation."""

    def __init__(self, console: Console, label: str):
        self.console, self.label, self.start = console, label, 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()
        self.console.print(f"{self.label}: {trainer.max_epochs} epoch(s), {trainer.estimated_stepping_batches} steps")

    def on_train_end(self, trainer, pl_module) -> None:
        self.console.print(f"{self.label}: done in {time.perf_counter() - self.start:.1f}s")


def quiet_lightning_info() -> None:
    """Lightning's INFO lines (GPU available, TPU used, ...) on every fit of every request bury a run's output.

    Called by the commands that train, never at import (a library user keeps their logging
    configuration), and after Lightning's own import, which sets its loggers to INFO.
    """
    import lightning.pytorch  # noqa: F401  (configures its loggers; the levels below must come after)

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def silence_library_warnings() -> None:
    """`--quiet true` prints nothing but errors: the libraries' warnings (Lightning, matplotlib) too."""
    warnings.filterwarnings("ignore")


class Reporter:
    def __init__(self, quiet: bool = False, console: Console | None = None):
        self.quiet = quiet
        self.console = console or Console(quiet=quiet)
        if not self.console.is_terminal:
            self.console.width = max(self.console.width, 120)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=quiet or not self.console.is_terminal,
        )
        self.requests_task = None

    @contextmanager
    def live(self):
        try:
            with self.progress:
                yield self
        finally:
            for task in list(self.progress.task_ids):
                self.progress.remove_task(task)
            self.requests_task = None

    def start_run(self, name: str, num_requests: int, done: int = 0) -> None:
        """A bar of the requests served (t/T) that stays for the whole run; a plain line without a terminal."""
        if self.progress.disable:
            resumed = f", resuming after {done}" if done else ""
            self.console.print(f"run {name}: {num_requests} requests{resumed}")
            return
        self.requests_task = self.progress.add_task("[bold]requests[/bold]", total=num_requests, completed=done)

    def fit_callback(self, label: str) -> Callback:
        if not self.progress.disable:
            return FitProgress(self.progress, label)
        if self.quiet:
            return Callback()
        return FitLines(self.console, label)

    def message(self, text: str) -> None:
        self.console.print(text)

    def request(self, row: RequestRecord, num_requests: int) -> None:
        if getattr(self, "requests_task", None) is not None:
            self.progress.update(self.requests_task, completed=row.t)
        if self.quiet:  # rich would still lay the table out before discarding it
            return
        sides = {"oracle": row.oracle, "original": row.original, "single-shot": row.single_shot}
        table = Table(title=f"request {row.t}/{num_requests}", title_justify="left")
        for column in ("metric", "dir", "method", *sides):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for key in console_keys():  # "—" where this request has no oracle or no single-shot counterfactual
            if key in row.method:
                cells = (_cell(row.method, key), *(_cell(scores or {}, key) for scores in sides.values()))
                table.add_row(key, METRIC_KEYS[key].arrow, *cells)
        self.console.print(table)

    def summary(self, rows: list[RequestRecord], run_summary: RunSummary, run_dir: Path) -> None:
        summary = run_summary.scores
        keys = [k for k in console_keys() if any(k in row.method for row in rows)]  # sparse oracles: gap at some t
        table = Table(title="summary", title_justify="left")
        table.add_column("t", justify="right")
        table.add_column("model")
        for key in keys:
            table.add_column(f"{key}\n{METRIC_KEYS[key].arrow}", justify="right")
        for row in rows:
            table.add_row(str(row.t), "method", *(_cell(row.method, k) for k in keys))
            for side in ("oracle", "original", "single_shot"):  # rows only where the schedules put them
                scores = getattr(row, side)
                if scores:
                    name = side.replace("_", "-")
                    table.add_row("", f"[dim]{name}[/dim]", *(f"[dim]{_cell(scores, k)}[/dim]" for k in keys))
        self.console.print(table)
        lines = [_final_line(summary)]
        if "forward_failure" in summary:
            lines.append(
                f"forward failure (gain at T: forget_acc on F_T, continual {_fmt(summary['continual_forget_acc'])} − "
                f"single-shot {_fmt(summary['single_shot_forget_acc'])}): {_fmt(summary['forward_failure'])}"
            )
        if "forward_failure_mean" in summary:
            lines.append(
                f"forward failure, mean over the {summary['single_shot_requests']} single-shot requests t >= 2: "
                f"{_fmt(summary['forward_failure_mean'])}"
            )
        if "forward_failure_cumulative" in summary:
            lines.append(
                f"forward failure against the cumulative-retain counterfactual (at T / mean): "
                f"{_fmt(summary['forward_failure_cumulative'])} / {_fmt(summary.get('forward_failure_cumulative_mean'))}"
            )
        lines.append(f"forget drift (forget_acc T − 1): {_fmt(summary['forget_drift'])}")
        if "forget_drift_vs_oracle" in summary:
            lines.append(f"forget drift minus the oracle's: {_fmt(summary['forget_drift_vs_oracle'])}")
        lines.append(
            f"backward failure max / mean: {_fmt(summary['backward_failure_max'])} / "
            f"{_fmt(summary['backward_failure_mean'])}"
        )
        if "backward_failure_vs_oracle_max" in summary:
            lines.append(
                f"backward failure vs the oracle max / mean: {_fmt(summary['backward_failure_vs_oracle_max'])} / "
                f"{_fmt(summary['backward_failure_vs_oracle_mean'])}"
            )
        where = f"the {summary.get('oracle_requests')} requests with an oracle"
        if "mean_gap_acc" in summary:
            lines.append(f"mean gap_acc over {where}: {_fmt(summary['mean_gap_acc'])}")
        if "mean_gap" in summary:
            lines.append(f"mean gap over {where}: {_fmt(summary['mean_gap'])}")
        for line in lines:
            self.console.print(line)
        self.console.print(f"run directory: {run_dir}")


def _final_line(summary: dict) -> str:
    """The verdict at T: forget, retain and test accuracy of the method beside the oracle's and the original model's."""
    keys = ("forget_acc", "retain_acc", "test_acc")
    parts = [
        f"{name} {' / '.join(_fmt(summary[side].get(key)) for key in keys)}"
        for name, side in (("method", "final"), ("oracle", "final_oracle"), ("original", "final_original"))
        if side in summary
    ]
    return f"at T, forget / retain / test accuracy: {' · '.join(parts)}"
