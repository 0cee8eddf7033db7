"""What a person sees while a run goes: rich progress, a table per request, a verdict at the end.

Rich renders live bars on a terminal and plain lines in CI logs (no terminal), and `quiet`
silences everything but errors. Everything printed fits in 100 columns (`WIDTH`), so no cell is
cut short with `…`: the per-request table shows the null band of the method's cells only, and
the run ends with a verdict per request and per stream (`forgetting_verdict`) and the stream's
summary lines rather than a table of every metric at every request, which stays in the run
directory (its rows; `unlearnbench leaderboard` tabulates them).
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch.callbacks import Callback
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from unlearnbench.early_checks import QUANTIZATION_BITS
from unlearnbench.evaluation.keys import METRIC_KEYS, console_keys, significant
from unlearnbench.evaluation.quantization import quantized_key
from unlearnbench.records import RequestRecord, RunSummary

#: The console's width where it is not a terminal and COLUMNS is unset (CI logs, a pipe): what every line fits in.
WIDTH = 100


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(scores: dict, key: str, band: bool = True) -> str:
    """A table cell in the metric's own decimals; the SVC validity reads "n.s." when its 95% interval contains chance,
    an AUC and the SVC advantage carry their null band (`band`: the method's column only, so the table fits), and an
    AUC the ties decided reads "degenerate"."""
    text = METRIC_KEYS[key].format(scores.get(key))
    lo, hi = scores.get("mia_validity_lo"), scores.get("mia_validity_hi")
    if key == "mia_validity" and scores.get(key) is not None and not significant(lo, hi):
        text += " n.s."
    if key in ("lira_auc", "rmia_auc") and scores.get(key) is None and scores.get(f"{key}_ties") is not None:
        return f"degenerate ({100 * scores[f'{key}_ties']:.0f}% of pairs tied)"
    if band and key in ("lira_auc", "rmia_auc", "mia_advantage") and scores.get(f"{key}_null_lo") is not None:
        text += f" [{scores[f'{key}_null_lo']:.2f}, {scores[f'{key}_null_hi']:.2f}]"  # the chance band beside it
    return text


#: The three verdicts on a forget set, and "—" where there is no oracle to judge against.
FORGOT, DID_NOT_FORGET, OVER_FORGOT, NO_ORACLE = "forgot", "did not forget", "over-forgot", "—"


@dataclass(frozen=True)
class Verdict:
    """What the method's accuracy on a forget set says, against the oracle's and the original model's on it."""

    verdict: str
    method: float | None
    oracle: float | None
    original: float | None
    #: the oracle's 95% band, in accuracy points (`oracle_band`)
    band: float | None


def oracle_band(oracle: float, samples: int) -> float:
    """The half-width, in accuracy points, of the 95% binomial interval of the oracle's accuracy on `samples`
    samples (1.96·sqrt(p(1−p)/n)), and never less than one sample's worth (100/n): a method whose accuracy is
    inside it cannot be told from the oracle at this forget-set size."""
    p = min(max(oracle / 100, 0.0), 1.0)
    return max(196 * math.sqrt(p * (1 - p) / samples), 100 / samples)


def forgetting_verdict(method: float | None, oracle: float | None, original: float | None, samples: int) -> Verdict:
    """forgot / did not forget / over-forgot, from the accuracy (%) on a forget set of `samples` samples.

    The rule (docs/reporting.md): with m, o, g the method's, the oracle's and the original (pretrained)
    model's accuracy and b the oracle's band (`oracle_band`),

    - forgot: |m − o| ≤ b, or m is nearer the oracle than the original (|m − o| < |m − g|) without
      passing it;
    - over-forgot: m is past the oracle, on the side away from the original, by more than b
      (o − m > b when the original is at or above the oracle, as it is wherever there is
      something to forget): the forget set stands out by being forgotten too hard;
    - did not forget: otherwise, m is outside the band and no nearer the oracle than the original.

    Without an oracle at the request (`--oracle-every`) there is no verdict ("—"); without the
    original (runs made before it was scored) only the band decides.
    """
    if method is None or oracle is None:
        return Verdict(NO_ORACLE, method, oracle, original, None)
    band = oracle_band(oracle, samples)
    away = 1.0 if original is None or original >= oracle else -1.0  # the direction from the original to the oracle
    if abs(method - oracle) <= band:
        verdict = FORGOT
    elif away * (oracle - method) > band:
        verdict = OVER_FORGOT
    elif original is not None and abs(method - oracle) < abs(method - original):
        verdict = FORGOT
    else:
        verdict = DID_NOT_FORGET
    return Verdict(verdict, method, oracle, original, band)


def request_verdicts(rows: list[RequestRecord], forget_sizes: list[int]) -> list[Verdict]:
    """The verdict on F_t after request t, for every scored request (`forget_sizes[t − 1]` = |F_t|)."""
    return [
        forgetting_verdict(
            row.method.get("forget_acc"),
            (row.oracle or {}).get("forget_acc"),
            (row.original or {}).get("forget_acc"),
            forget_sizes[row.t - 1],
        )
        for row in rows
        if row.status == "ok"
    ]


def stream_verdicts(rows: list[RequestRecord], forget_sizes: list[int]) -> list[Verdict]:
    """The verdict on every F_s after the last request served (its `history` row against the oracle's and the
    original model's): a forget set learned again later reads "did not forget" here, whatever it read at s."""
    scored = [row for row in rows if row.status == "ok"]
    if not scored:
        return []
    last = scored[-1]
    method, oracle = last.method.get("history") or [], (last.oracle or {}).get("history") or []
    original = (scored[0].original or {}).get("history") or []  # the pretrained model's, kept at t = 1
    return [
        forgetting_verdict(
            method[s],
            oracle[s] if s < len(oracle) else None,
            original[s] if s < len(original) else None,
            forget_sizes[s],
        )
        for s in range(min(last.t, len(method)))
    ]


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
    """`--quiet true` silences the libraries' warnings (Lightning, matplotlib); the commands' own problems stay on stderr."""
    warnings.filterwarnings("ignore")


class Reporter:
    def __init__(self, quiet: bool = False, console: Console | None = None):
        self.quiet = quiet
        self.console = console or Console(quiet=quiet)
        if not self.console.is_terminal and console is None and "COLUMNS" not in os.environ:
            self.console.width = WIDTH  # rich's 80 would wrap the per-request table in a CI log
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
                cells = (_cell(row.method, key), *(_cell(scores or {}, key, band=False) for scores in sides.values()))
                table.add_row(key, METRIC_KEYS[key].arrow, *cells)
        self.console.print(table)

    def summary(self, rows: list[RequestRecord], run_summary: RunSummary, run_dir: Path) -> None:
        """The run's verdict: per request and per stream (`forgetting_verdict`), accuracy at T beside the oracle's and
        the original's, and the stream's failures, each line within 100 columns. Every metric at every request is
        in the run directory's rows (and in the leaderboard)."""
        from unlearnbench.rundir import RunDirectory

        summary = run_summary.scores
        sizes = [len(request["forget"]) for request in RunDirectory(run_dir).manifest()["requests"]]
        per_request, per_stream = request_verdicts(rows, sizes), stream_verdicts(rows, sizes)
        self.console.print(_verdict_table(per_request, per_stream))
        judged = [v.verdict for v in per_stream if v.verdict != NO_ORACLE]
        if judged:
            counts = " · ".join(f"{judged.count(word)} {word}" for word in (FORGOT, DID_NOT_FORGET, OVER_FORGOT))
            self.console.print(f"after request {rows[-1].t}, of F_1..F_{len(per_stream)}: {counts}")
        self.console.print(_final_table(summary))
        forgot_any = any(v.verdict in (FORGOT, OVER_FORGOT) for v in per_request)
        lines = []
        if "forward_failure" in summary:
            lines.append(
                f"forward failure at T (forget_acc on F_T, continual − single-shot): {_fmt(summary['forward_failure'])}"
                f" = {_fmt(summary['continual_forget_acc'])} − {_fmt(summary['single_shot_forget_acc'])}"
            )
        if "forward_failure_mean" in summary:
            lines.append(
                f"forward failure, mean over the {summary['single_shot_requests']} single-shot requests t >= 2: "
                f"{_fmt(summary['forward_failure_mean'])}"
            )
        if "forward_failure_cumulative" in summary:
            lines.append(
                f"forward failure, cumulative-retain counterfactual (at T / mean): "
                f"{_fmt(summary['forward_failure_cumulative'])} / {_fmt(summary.get('forward_failure_cumulative_mean'))}"
            )
        lines.append(f"forget drift (forget_acc T − 1): {_fmt(summary['forget_drift'])}")
        if "forget_drift_vs_oracle" in summary:
            lines.append(f"forget drift minus the oracle's: {_fmt(summary['forget_drift_vs_oracle'])}")
        nothing_forgotten = "" if forgot_any else " (no request was forgotten: nothing could come back)"
        lines.append(
            f"backward failure max / mean: {_fmt(summary['backward_failure_max'])} / "
            f"{_fmt(summary['backward_failure_mean'])}{nothing_forgotten}"
        )
        if "backward_failure_vs_oracle_max" in summary:
            lines.append(
                f"backward failure vs the oracle max / mean: {_fmt(summary['backward_failure_vs_oracle_max'])} / "
                f"{_fmt(summary['backward_failure_vs_oracle_mean'])}"
            )
        if "retain_drift" in summary:
            lines.append(f"retain drift (retain_acc T − 1): {_fmt(summary['retain_drift'])}")
        if "knowledge_erosion" in summary:
            lines.append(
                f"knowledge erosion (the oracle's retain drift − the method's): {_fmt(summary['knowledge_erosion'])}"
            )
        if "forgetting_reversal_events" in summary:
            lines.append(
                f"forgetting reversal: {summary['forgetting_reversal_events']} events, "
                f"{summary['forgetting_reversal_sets']} sets forgotten at their request and recognized again"
            )
        if "final_age" in summary:
            slopes = " · ".join(
                f"{name} {_fmt(summary.get(f'age_slope_{key}'))}"
                for key, name in (("forget_gap", "forget gap"), ("gap", "gap"), ("forget_acc", "forget_acc"))
            )
            lines.append(f"over age ({summary['final_age']} learning steps), slope per step: {slopes}")
        lines += _robustness_lines(summary)
        where = f"the {summary.get('oracle_requests')} requests with an oracle"
        if "mean_gap_acc" in summary:
            lines.append(f"mean gap_acc over {where}: {_fmt(summary['mean_gap_acc'])}")
        if "mean_gap" in summary:
            lines.append(f"mean gap over {where}: {_fmt(summary['mean_gap'])}")
        for line in lines:
            self.console.print(line)
        self.console.print("every metric at every request is in the run directory (`unlearnbench leaderboard`)")
        self.console.print(f"run directory: {run_dir}")


def _robustness_lines(summary: dict) -> list[str]:
    """At T, where they ran: the relearning attack's steps (method / oracle) and Anamnesis Index, and the forget
    accuracy of the quantized weights beside the unquantized one (method / oracle / original)."""
    final, oracle, original = (summary.get(side) or {} for side in ("final", "final_oracle", "final_original"))
    lines = []
    if "relearn_steps" in final:
        lines.append(
            f"relearning attack at T: {METRIC_KEYS['relearn_steps'].format(final['relearn_steps'])} steps back to "
            f"the original (oracle: {METRIC_KEYS['relearn_steps'].format(oracle.get('relearn_steps'))}), "
            f"Anamnesis Index {_fmt(final.get('relearn_ratio'))}"
        )
    for bits in QUANTIZATION_BITS:
        key = quantized_key(bits, "forget_acc")
        if key in final:
            values = " / ".join(_fmt(side.get(key)) for side in (final, oracle, original))
            lines.append(f"forget_acc at T, {bits}-bit weights (method / oracle / original): {values}")
    return lines


def _verdict_table(per_request: list[Verdict], per_stream: list[Verdict]) -> Table:
    """Forget accuracy (%) on F_t after request t and on F_t at the end, beside the oracle's and the original's."""
    table = Table(
        title="summary: forgot = within the oracle's 95% band, or nearer the oracle than the original",
        title_justify="left",
    )
    for column in ("F_t", "after request t", "method", "oracle", "original", "band", "at the end", "method"):
        table.add_column(column, justify="left" if column in ("after request t", "at the end") else "right")
    for t, (now, end) in enumerate(zip(per_request, per_stream + [None] * len(per_request), strict=False), start=1):
        band = "—" if now.band is None else f"±{now.band:.1f}"
        at_end = (end.verdict, _fmt(end.method)) if end is not None else ("—", "—")
        table.add_row(str(t), now.verdict, _fmt(now.method), _fmt(now.oracle), _fmt(now.original), band, *at_end)
    return table


def _final_table(summary: dict) -> Table:
    """At T: forget, retain and test accuracy of the method beside the oracle's and the original model's."""
    table = Table(title="at T, accuracy (%)", title_justify="left")
    for column in ("model", "forget", "retain", "test"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, side in (("method", "final"), ("oracle", "final_oracle"), ("original", "final_original")):
        if side in summary:
            table.add_row(name, *(_fmt(summary[side].get(key)) for key in ("forget_acc", "retain_acc", "test_acc")))
    return table
