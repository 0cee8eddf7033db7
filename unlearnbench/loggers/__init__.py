"""Experiment loggers for a run, registered by name: `--logger csv` (default), `wandb` or `none`.

A logger is a `RunLogger` subclass in a module of this package, registered with
`@LOGGERS.register("name")` (third-party loggers the same way, from their own module imported
before the run). `loggers/wandb.py` is the only module that imports wandb.

Every logger writes inside the run directory and nothing else:

- `csv` (the default: no extra service, no account, cheapest): Lightning's `CSVLogger` writes
  `csv_logs/from_t###/metrics.csv` (a new folder per session, so a resumed run never overwrites
  the log of the session before it) with the per-step unlearning loss (`train/loss`, the step
  counted over the whole stream) and one line per request with every method and oracle key
  (`method/forget_acc`, `oracle/forget_acc`, ..., `request`). The run directory's own files
  (`metrics.jsonl`, `history.csv`, `summary.json`) stay the source of truth either way.
- `wandb`: Lightning's `WandbLogger`. **Offline unless the user asked otherwise**: `WANDB_MODE` is
  set to `offline` when neither `WANDB_MODE` nor `WANDB_API_KEY` is set, so no account and no
  network are needed; `wandb sync <run_dir>/wandb/offline-run-*` publishes it later. W&B's files,
  cache, config, data and artifact folders all live under `<run_dir>/wandb/` for the duration of
  the run (nothing in the home directory). The W&B run id is stored in `<run_dir>/logger.json`, so a
  resumed run continues the same W&B run (`id=..., resume="allow"`). Logged: the per-step
  unlearning loss, every per-request method/oracle key against `request`, and at the end the
  history matrix as a heatmap image and a `wandb.Table`, and the ER_t / update-norm curves and
  table when `geometry.csv` exists.
- `none`: nothing beyond the run directory.

`import wandb` takes seconds, so it happens only when the wandb logger is chosen. Asked to log
online (`WANDB_MODE=online`) without a key (`WANDB_API_KEY` or `wandb login`'s netrc entry), the run
is refused before any data is loaded instead of waiting on a login prompt; W&B's own start-up is
bounded (`WANDB_INIT_TIMEOUT`, 60 s unless set) and its failure is one line, exit 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from unlearnbench.errors import ConfigError
from unlearnbench.records import RequestRecord, RunIdentity
from unlearnbench.registry import LOGGERS

STATE_FILE = "logger.json"


class LoggerUnavailableError(ConfigError):
    """The chosen experiment logger cannot start (no key for online W&B, no network)."""


def read_state(run_dir: Path) -> dict:
    path = run_dir / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_state(run_dir: Path, state: dict) -> None:
    from unlearnbench.io import write_json_atomic

    write_json_atomic(run_dir / STATE_FILE, state)


def request_metrics(row: RequestRecord) -> dict[str, float]:
    """The scalar keys of a request's record, flattened to `method/<key>`, `oracle/<key>`, `single_shot/<key>`, ...
    (`RequestRecord.scored_models`; None, NaN and lists left out; a side the request has no counterpart for is absent)."""
    flat: dict[str, float] = {}
    for side, scores in row.scored_models.items():
        for key, value in (scores or {}).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            flat[f"{side}/{key}"] = float(value)
    return flat


def with_step_offset(cls: type) -> type:
    """A subclass of a Lightning logger whose step counts over the whole stream, not per fresh Trainer."""

    class StreamStepLogger(cls):
        step_offset = 0
        last_step = -1

        def log_metrics(self, metrics, step=None):
            if step is not None:
                step = int(step) + self.step_offset
                self.last_step = max(self.last_step, step)
            super().log_metrics(metrics, step)

        def log_at_step(self, metrics, step: int) -> None:
            """Log at a step already counted over the stream (no offset added)."""
            super().log_metrics(metrics, step)

    StreamStepLogger.__name__ = StreamStepLogger.__qualname__ = f"Stream{cls.__name__}"
    return StreamStepLogger


@LOGGERS.register("none")
class RunLogger:
    """Nothing beyond the run directory; the interface every logger implements."""

    kind = "none"

    def __init__(self, run_dir: Path, identity: RunIdentity, run_name: str, first_request: int = 1):
        self.run_dir = Path(run_dir)
        self.identity, self.run_name, self.first_request = identity, run_name, first_request
        self.state = read_state(self.run_dir)
        self.closed = False

    @classmethod
    def check_environment(cls) -> None:
        """Refuse, before any data is loaded, a logger that cannot start here (raise LoggerUnavailableError)."""

    @property
    def lightning_logger(self):
        """What the unlearning Trainer gets as `logger=` (False: none)."""
        return False

    def begin_fit(self) -> None:
        """Called before each unlearning fit: its steps continue after the last step logged."""
        logger = self.lightning_logger
        if logger:
            logger.step_offset = max(int(self.state.get("global_step", -1)), logger.last_step) + 1

    def log_request(self, row: RequestRecord) -> None:
        """Called once the record of request t is in metrics.jsonl."""
        logger = self.lightning_logger
        if logger:
            self.state["global_step"] = max(int(self.state.get("global_step", -1)), logger.last_step)
            write_state(self.run_dir, self.state)

    def finish(self, failed: bool = False) -> None:
        """Called once at the end of the run (or by a suite after a failed run, with `failed=True`)."""
        self.closed = True


def open_run_logger(
    kind: str, run_dir: Path, identity: RunIdentity, run_name: str, first_request: int = 1
) -> RunLogger:
    """The logger of one run session, created once per run by the runner (which then owns `finish`)."""
    return LOGGERS.get(kind)(Path(run_dir), identity, run_name, first_request)
