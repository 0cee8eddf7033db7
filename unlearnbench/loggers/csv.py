"""`--logger csv` (the default): Lightning's CSVLogger inside the run directory, a folder per session."""

from __future__ import annotations

from pathlib import Path

from unlearnbench.loggers import RunLogger, request_metrics, with_step_offset
from unlearnbench.records import RequestRecord, RunIdentity
from unlearnbench.registry import LOGGERS


@LOGGERS.register("csv")
class CsvRunLogger(RunLogger):
    """Per-step loss and one line per request in `csv_logs/from_t###/metrics.csv`: no service, no account."""

    kind = "csv"

    def __init__(self, run_dir: Path, identity: RunIdentity, run_name: str, first_request: int = 1):
        super().__init__(run_dir, identity, run_name, first_request)
        from lightning.pytorch.loggers import CSVLogger

        self._logger = with_step_offset(CSVLogger)(
            save_dir=str(self.run_dir), name="csv_logs", version=f"from_t{first_request:03d}"
        )
        self._logger.log_hyperparams(identity.to_json())

    @property
    def lightning_logger(self):
        return self._logger

    def log_request(self, row: RequestRecord) -> None:
        super().log_request(row)
        step = max(int(self.state.get("global_step", 0)), 0)
        self._logger.log_at_step({"request": row.t, **request_metrics(row)}, step)
        self._logger.save()

    def finish(self, failed: bool = False) -> None:
        if not self.closed:
            self._logger.finalize("failed" if failed else "success")
        super().finish(failed)
