"""Experiment loggers for a run: `--logger csv` (default), `wandb` or `none`. The only module that imports wandb.

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
import os
import secrets
import string
from pathlib import Path
from typing import Any

from unlearnbench.errors import ConfigError

LOGGERS = ("csv", "wandb", "none")
STATE_FILE = "logger.json"
#: Folders W&B would otherwise put in the home directory, and where they go inside the run directory.
WANDB_DIRS = {
    "WANDB_CACHE_DIR": ".cache",
    "WANDB_CONFIG_DIR": ".config",
    "WANDB_DATA_DIR": ".data",
    "WANDB_ARTIFACT_DIR": ".artifacts",
}


class LoggerUnavailableError(ConfigError):
    """The chosen experiment logger cannot start (no key for online W&B, no network)."""


def check_logger(kind: str) -> None:
    """Refuse, before anything is loaded, a W&B logger asked to go online with no key to log in with."""
    if kind != "wandb" or os.environ.get("WANDB_MODE", "offline") in ("offline", "disabled", "dryrun"):
        return
    if os.environ.get("WANDB_API_KEY") or _netrc_has_wandb_key():
        return
    raise LoggerUnavailableError(
        f"--logger wandb with WANDB_MODE={os.environ['WANDB_MODE']} needs a W&B key (WANDB_API_KEY or `wandb login`); "
        "unset WANDB_MODE to log offline, or use --logger csv"
    )


def _netrc_has_wandb_key() -> bool:
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _read_state(run_dir: Path) -> dict:
    path = run_dir / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_state(run_dir: Path, state: dict) -> None:
    from unlearnbench.io import write_json_atomic

    write_json_atomic(run_dir / STATE_FILE, state)


def request_metrics(row: dict) -> dict[str, float]:
    """The scalar keys of a metrics row, flattened to `method/<key>` and `oracle/<key>` (None, NaN and lists left out)."""
    flat: dict[str, float] = {}
    for side in ("method", "oracle"):
        for key, value in (row.get(side) or {}).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            flat[f"{side}/{key}"] = float(value)
    return flat


def _with_step_offset(cls: type) -> type:
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


class RunLogger:
    """`--logger none`: the interface the runner calls, doing nothing."""

    kind = "none"

    def __init__(self, run_dir: Path, identity: dict, run_name: str, first_request: int = 1):
        self.run_dir = Path(run_dir)
        self.identity, self.run_name, self.first_request = identity, run_name, first_request
        self.state = _read_state(self.run_dir)
        self.closed = False

    @property
    def lightning_logger(self):
        """What the unlearning Trainer gets as `logger=` (False: none)."""
        return False

    def begin_fit(self) -> None:
        """Called before each unlearning fit: its steps continue after the last step logged."""
        logger = self.lightning_logger
        if logger:
            logger.step_offset = max(int(self.state.get("global_step", -1)), logger.last_step) + 1

    def log_request(self, row: dict) -> None:
        """Called once the row of request t is in metrics.jsonl."""
        logger = self.lightning_logger
        if logger:
            self.state["global_step"] = max(int(self.state.get("global_step", -1)), logger.last_step)
            _write_state(self.run_dir, self.state)

    def finish(self, failed: bool = False) -> None:
        """Called once at the end of the run (or by a suite after a failed run, with `failed=True`)."""
        self.closed = True


class CsvRunLogger(RunLogger):
    kind = "csv"

    def __init__(self, run_dir: Path, identity: dict, run_name: str, first_request: int = 1):
        super().__init__(run_dir, identity, run_name, first_request)
        from lightning.pytorch.loggers import CSVLogger

        self._logger = _with_step_offset(CSVLogger)(
            save_dir=str(self.run_dir), name="csv_logs", version=f"from_t{first_request:03d}"
        )
        self._logger.log_hyperparams(identity)

    @property
    def lightning_logger(self):
        return self._logger

    def log_request(self, row: dict) -> None:
        super().log_request(row)
        step = max(int(self.state.get("global_step", 0)), 0)
        self._logger.log_at_step({"request": row["t"], **request_metrics(row)}, step)
        self._logger.save()

    def finish(self, failed: bool = False) -> None:
        if not self.closed:
            self._logger.finalize("failed" if failed else "success")
        super().finish(failed)


class WandbRunLogger(RunLogger):
    kind = "wandb"

    def __init__(
        self, run_dir: Path, identity: dict, run_name: str, first_request: int = 1, project: str | None = None
    ):
        super().__init__(run_dir, identity, run_name, first_request)
        self._saved_env = self._point_wandb_inside_run_dir()
        try:
            self._start(run_name, identity, project)
        except Exception as error:
            import wandb

            self._restore_env()
            if isinstance(error, wandb.errors.Error):  # W&B could not start: one line, not its traceback
                raise LoggerUnavailableError(f"--logger wandb could not start: {error}; use --logger csv") from error
            raise

    def _start(self, run_name: str, identity: dict, project: str | None) -> None:
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        if wandb.run is not None:  # left open by a run that crashed in this process
            wandb.finish(exit_code=1)
        if "wandb_id" not in self.state:
            alphabet = string.ascii_lowercase + string.digits
            self.state["wandb_id"] = "".join(secrets.choice(alphabet) for _ in range(8))
            _write_state(self.run_dir, self.state)
        self._logger = _with_step_offset(WandbLogger)(
            name=run_name,
            project=project or os.environ.get("WANDB_PROJECT", "unlearnbench"),
            save_dir=str(self.run_dir),
            dir=str(self.run_dir),
            id=self.state["wandb_id"],
            resume="allow",
            config=identity,
            job_type="unlearning",
        )
        run = self._logger.experiment
        run.define_metric("request")
        for prefix in ("method", "oracle"):
            run.define_metric(f"{prefix}/*", step_metric="request")

    def _point_wandb_inside_run_dir(self) -> dict[str, str | None]:
        wandb_dir = self.run_dir / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        wanted = {name: str(wandb_dir / sub) for name, sub in WANDB_DIRS.items()}
        wanted["WANDB_DIR"] = str(self.run_dir)
        if "WANDB_MODE" not in os.environ and "WANDB_API_KEY" not in os.environ:
            wanted["WANDB_MODE"] = "offline"
        wanted.setdefault("WANDB_SILENT", "true")
        if "WANDB_INIT_TIMEOUT" not in os.environ:
            wanted["WANDB_INIT_TIMEOUT"] = "60"
        saved = {name: os.environ.get(name) for name in wanted}
        for name, value in wanted.items():
            if name in WANDB_DIRS:
                Path(value).mkdir(parents=True, exist_ok=True)
            os.environ[name] = value
        return saved

    def _restore_env(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @property
    def lightning_logger(self):
        return self._logger

    @property
    def run_id(self) -> str:
        return self.state["wandb_id"]

    def log_request(self, row: dict) -> None:
        super().log_request(row)
        self._logger.experiment.log({"request": row["t"], **request_metrics(row)})

    def finish(self, failed: bool = False) -> None:
        if self.closed:
            return
        try:
            if not failed:
                self._log_final()
            self._logger.experiment.finish(exit_code=1 if failed else 0)
            import wandb

            wandb.teardown()  # the service started with this run's folders; the next run starts its own
        finally:
            self._restore_env()
            super().finish(failed)

    def _log_final(self) -> None:
        import wandb

        from unlearnbench.report.plots import history_heatmap_figure, read_geometry, read_history

        run = self._logger.experiment
        history = read_history(self.run_dir / "history.csv")
        if history is not None:
            figure = history_heatmap_figure(history, self.run_name)
            columns = ["t", *(f"F{s + 1}" for s in range(history.shape[1]))]
            table = wandb.Table(columns=columns, data=[[t + 1, *map(float, r)] for t, r in enumerate(history)])
            run.log({"history/heatmap": wandb.Image(figure), "history/table": table})
            _close(figure)
        geometry = read_geometry(self.run_dir / "geometry.csv")
        if geometry:
            columns = [c for c in geometry[0] if not c.startswith("norm/")]
            rows = [[entry.get(c) for c in columns] for entry in geometry]
            table = wandb.Table(columns=columns, data=rows)
            logged: dict[str, Any] = {"geometry/table": table}
            ts = [entry["t"] for entry in geometry]
            ers = [c for c in ("er_r1", "er_r2", "er_r3", "er_r90") if c in columns]
            if ers:
                ys = [[entry.get(c) if entry.get(c) is not None else math.nan for entry in geometry] for c in ers]
                logged["geometry/er"] = wandb.plot.line_series(xs=ts, ys=ys, keys=ers, title="ER_t", xname="t")
            cos = [c for c in ("co_1", "co_2", "co_3") if c in columns]
            if cos:
                ys = [[entry.get(c) if entry.get(c) is not None else math.nan for entry in geometry] for c in cos]
                logged["geometry/co"] = wandb.plot.line_series(xs=ts, ys=ys, keys=cos, title="CO_t", xname="t")
            if "update_norm" in columns:
                logged["geometry/update_norm"] = wandb.plot.line(table, "t", "update_norm", title="‖u_t‖")
            run.log(logged)


def _close(figure) -> None:
    import matplotlib.pyplot as plt

    plt.close(figure)


def describe_device() -> str:
    """The accelerator this process computes on, in words (recorded in provenance.json)."""
    import platform

    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu {platform.machine()} ({os.cpu_count()} cores)"


def record_provenance(run_dir: Path, first_request: int) -> None:
    """Append this session (package version, git commit, device, start time) to `provenance.json`."""
    import datetime as dt

    from unlearnbench import __version__
    from unlearnbench.io import write_json_atomic
    from unlearnbench.report.leaderboard import git_commit

    path = Path(run_dir) / "provenance.json"
    try:
        sessions = json.loads(path.read_text()).get("sessions", [])
    except (OSError, ValueError, AttributeError):
        sessions = []
    session = {
        "package_version": __version__,
        "git_commit": git_commit(),
        "device": describe_device(),
        "first_request": first_request,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    write_json_atomic(path, {**session, "sessions": [*sessions, session]})


def open_run_logger(kind: str, run_dir: Path, identity: dict, run_name: str, first_request: int = 1) -> RunLogger:
    """The logger of one run session, created once per run by the runner (which then owns `finish`)."""
    classes = {"none": RunLogger, "csv": CsvRunLogger, "wandb": WandbRunLogger}
    if kind not in classes:
        raise ValueError(f"unknown logger {kind!r}; choose one of: {', '.join(LOGGERS)}")
    record_provenance(Path(run_dir), first_request)
    return classes[kind](Path(run_dir), identity, run_name, first_request)
