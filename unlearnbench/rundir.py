"""The run directory: everything one run produced, enough to resume it and to rebuild any table.

Layout (documented in the README): `config.yaml`, `manifest.json`, `labels.npz`,
`metrics.jsonl` (one row per finished request), `history.csv`, `summary.json`,
`logits/t###.npz` (with `--save-logits`) and `state/t###.pt` (the method after request t).
Request t is finished when its row is in `metrics.jsonl`; its checkpoint is written first and the
previous one removed after, so a crash anywhere leaves the checkpoint that resume needs.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
from pathlib import Path

import numpy as np
import torch
import yaml

from unlearnbench.io import write_atomic, write_json_atomic, write_text_atomic, write_yaml_atomic


class RunDirectoryMismatchError(ValueError):
    """The folder holds a run made with another configuration."""


class UntrustedCheckpointError(ValueError):
    """A checkpoint that is not plain tensors: refused, never unpickled."""


def _initialization_leftover(name: str) -> bool:
    """A file `initialize` writes before config.yaml, or a temp file of an interrupted atomic write."""
    return name in ("manifest.json", "labels.npz") or (name.startswith(".") and name.endswith(".tmp"))


class RunDirectory:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def check(self, identity: dict) -> None:
        """Refuse a folder that holds a run made with another configuration, naming what differs."""
        config_path = self.path / "config.yaml"
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryMismatchError(f"{self.path} exists and is not a directory")
        if not config_path.exists():
            # `initialize` writes config.yaml last: a run killed before it leaves only these, rewritten on resume
            if self.path.exists() and any(not _initialization_leftover(p.name) for p in self.path.iterdir()):
                raise RunDirectoryMismatchError(f"{self.path} is not empty and holds no run; choose another folder")
            return
        existing = yaml.safe_load(config_path.read_text())
        if existing != identity:
            differing = sorted(k for k in set(existing) | set(identity) if existing.get(k) != identity.get(k))
            details = "; ".join(f"{k}: {existing.get(k)!r} there, {identity.get(k)!r} now" for k in differing)
            raise RunDirectoryMismatchError(f"{self.path} holds a run with another configuration ({details})")

    def initialize(self, identity: dict, manifest: dict, train_labels: np.ndarray, test_labels: np.ndarray) -> None:
        """Write config and manifest for a new run (after `check`); an existing run is left as it is."""
        self.check(identity)
        if (self.path / "config.yaml").exists():
            return
        write_json_atomic(self.path / "manifest.json", manifest)
        write_atomic(self.path / "labels.npz", lambda f: np.savez(f, train=train_labels, test=test_labels))
        write_yaml_atomic(self.path / "config.yaml", identity)

    def rows(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def append_row(self, row: dict) -> None:
        rows = [*self.rows(), row]
        write_text_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in rows))
        self._write_history(rows)

    def _write_history(self, rows: list[dict]) -> None:
        """history.csv: row t holds accuracy on every F_s after request t (the matrix A)."""
        rows = [row for row in rows if "history" in row["method"]]
        if not rows:
            return
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["t", *(f"F{s}" for s in range(1, len(rows[0]["method"]["history"]) + 1))])
        for row in rows:
            writer.writerow([row["t"], *(f"{value:.4f}" for value in row["method"]["history"])])
        write_text_atomic(self.path / "history.csv", buffer.getvalue())

    def _state_path(self, t: int) -> Path:
        return self.path / "state" / f"t{t:03d}.pt"

    def save_state(self, t: int, state: dict[str, torch.Tensor]) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        write_atomic(self._state_path(t), lambda f: f.write(buffer.getvalue()))

    def load_state(self, t: int) -> dict[str, torch.Tensor]:
        """The method's state after request t (weights only: a checkpoint cannot run code)."""
        path = self._state_path(t)
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError) as error:
            raise UntrustedCheckpointError(
                f"{path} is not a weights-only checkpoint and was not loaded; delete {self.path} to rerun"
            ) from error

    def drop_states_before(self, t: int) -> None:
        for path in (self.path / "state").glob("t*.pt"):
            if path != self._state_path(t):
                path.unlink(missing_ok=True)

    def save_logits(self, t: int, method: dict[str, np.ndarray], oracle: dict[str, np.ndarray] | None) -> None:
        arrays = {f"method_{split}": logits for split, logits in method.items()}
        arrays.update({f"oracle_{split}": logits for split, logits in (oracle or {}).items()})
        write_atomic(self.path / "logits" / f"t{t:03d}.npz", lambda f: np.savez_compressed(f, **arrays))

    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.path / "summary.json", summary)
