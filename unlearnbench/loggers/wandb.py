"""`--logger wandb`: Lightning's WandbLogger, offline unless set up, every file inside the run directory."""

from __future__ import annotations

import math
import os
import secrets
import string
from pathlib import Path
from typing import Any

from unlearnbench.loggers import LoggerUnavailableError, RunLogger, request_metrics, with_step_offset, write_state
from unlearnbench.records import RequestRecord, RunIdentity
from unlearnbench.registry import LOGGERS

#: Folders W&B would otherwise put in the home directory, and where they go inside the run directory.
WANDB_DIRS = {
    "WANDB_CACHE_DIR": ".cache",
    "WANDB_CONFIG_DIR": ".config",
    "WANDB_DATA_DIR": ".data",
    "WANDB_ARTIFACT_DIR": ".artifacts",
}


@LOGGERS.register("wandb")
class WandbRunLogger(RunLogger):
    """Weights & Biases: offline unless WANDB_MODE or WANDB_API_KEY says otherwise; resumes the same W&B run."""

    kind = "wandb"

    def __init__(
        self, run_dir: Path, identity: RunIdentity, run_name: str, first_request: int = 1, project: str | None = None
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

    @classmethod
    def check_environment(cls) -> None:
        """Online W&B with no key would wait on a login prompt: refuse it before anything is loaded."""
        if os.environ.get("WANDB_MODE", "offline") in ("offline", "disabled", "dryrun"):
            return
        if os.environ.get("WANDB_API_KEY") or _netrc_has_wandb_key():
            return
        raise LoggerUnavailableError(
            f"--logger wandb with WANDB_MODE={os.environ['WANDB_MODE']} needs a W&B key (WANDB_API_KEY or "
            "`wandb login`); unset WANDB_MODE to log offline, or use --logger csv"
        )

    def _start(self, run_name: str, identity: RunIdentity, project: str | None) -> None:
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        if wandb.run is not None:  # left open by a run that crashed in this process
            wandb.finish(exit_code=1)
        if "wandb_id" not in self.state:
            alphabet = string.ascii_lowercase + string.digits
            self.state["wandb_id"] = "".join(secrets.choice(alphabet) for _ in range(8))
            write_state(self.run_dir, self.state)
        self._logger = with_step_offset(WandbLogger)(
            name=run_name,
            project=project or os.environ.get("WANDB_PROJECT", "unlearnbench"),
            save_dir=str(self.run_dir),
            dir=str(self.run_dir),
            id=self.state["wandb_id"],
            resume="allow",
            config=identity.to_json(),
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

    def log_request(self, row: RequestRecord) -> None:
        super().log_request(row)
        self._logger.experiment.log({"request": row.t, **request_metrics(row)})

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

        from unlearnbench.figures import history_heatmap_figure, pyplot
        from unlearnbench.rundir import RunDirectory

        run = self._logger.experiment
        run_directory = RunDirectory(self.run_dir)
        history = run_directory.history()
        if history is not None:
            figure = history_heatmap_figure(history, self.run_name)
            columns = ["t", *(f"F{s + 1}" for s in range(history.shape[1]))]
            table = wandb.Table(columns=columns, data=[[t + 1, *map(float, r)] for t, r in enumerate(history)])
            run.log({"history/heatmap": wandb.Image(figure), "history/table": table})
            pyplot().close(figure)
        geometry = run_directory.geometry()
        if geometry:
            columns = [c for c in geometry[0] if not c.startswith("norm/")]
            rows = [[entry.get(c) for c in columns] for entry in geometry]
            table = wandb.Table(columns=columns, data=rows)
            logged: dict[str, Any] = {"geometry/table": table}
            ts = [entry["t"] for entry in geometry]
            ers = [c for c in ("er_all_r1", "er_all_r2", "er_all_r3", "er_all_r90") if c in columns]
            if ers:
                ys = [[entry.get(c) if entry.get(c) is not None else math.nan for entry in geometry] for c in ers]
                logged["geometry/er"] = wandb.plot.line_series(
                    xs=ts, ys=ys, keys=ers, title="ER_t (basis u_1..u_T)", xname="t"
                )
            cos = [c for c in ("co_all_1", "co_all_2", "co_all_3") if c in columns]
            if cos:
                ys = [[entry.get(c) if entry.get(c) is not None else math.nan for entry in geometry] for c in cos]
                logged["geometry/co"] = wandb.plot.line_series(
                    xs=ts, ys=ys, keys=cos, title="CO_t (basis u_1..u_T)", xname="t"
                )
            if "update_norm" in columns:
                logged["geometry/update_norm"] = wandb.plot.line(table, "t", "update_norm", title="‖u_t‖")
            run.log(logged)


def _netrc_has_wandb_key() -> bool:
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
