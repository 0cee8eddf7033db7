"""The run directory: everything one run produced, enough to resume it and to rebuild any table.

Layout (documented in the README): `config.yaml`, `manifest.json`, `labels.npz`,
`metrics.jsonl` (one row per finished request), `history.csv`, `summary.json`, `provenance.json`,
`logits/t###.npz` (with `--save-logits`), `state/t###.pt` (the method after request t) and, for a
suite cell that failed, `error.json`; `updates.f32`, `updates.json` and `geometry.csv` are
`evaluation.geometry`'s, read here through it.
This class is the only code that names these files: the runner, the suite, the loggers, the
attacks recomputed from saved logits and the leaderboard all read and write through it, so a file
can change its name or format in one place (a test scans the package for their names).
Request t is finished when its row is in `metrics.jsonl`; its checkpoint is written first and the
previous one removed after, so a crash anywhere leaves the checkpoint that resume needs. A row is
appended as one line (write, flush, fsync), so the cost of a request's bookkeeping does not grow
with t; a line cut short by a kill (no final newline) is not a finished request: readers skip it
and the next append cuts it off.
`metrics.jsonl` is the source of truth: `history.csv` and `summary.json` are derived from it and
rewritten whenever they disagree with it. One process at a time works in a run directory (`.lock`,
an `flock` released by the kernel however the process ends); a second is refused, naming the first.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import math
import os
import pickle
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from unlearnbench.errors import ConfigError, DamagedFileError
from unlearnbench.evaluation.geometry import GEOMETRY_FILE, read_geometry_csv
from unlearnbench.io import load_yaml, write_atomic, write_json_atomic, write_text_atomic, write_yaml_atomic
from unlearnbench.records import MalformedRecordError, RequestRecord, RunIdentity, RunSummary

LOCK_FILE = ".lock"
_CONFIG = "config.yaml"
_MANIFEST = "manifest.json"
_LABELS = "labels.npz"
_METRICS = "metrics.jsonl"
_HISTORY = "history.csv"
_SUMMARY = "summary.json"
_ERROR = "error.json"
_PROVENANCE = "provenance.json"
_LOGITS = "logits"
_STATE = "state"
#: A run directory named by `RunConfig.run_path`: `...-seed<seed>-<identity_hash(identity)>`.
_HASHED_NAME = re.compile(r"-seed\d+-([0-9a-f]{8})$")


class RunDirectoryMismatchError(ConfigError):
    """The folder holds a run made with another configuration."""


class RunDirectoryBusyError(ConfigError):
    """Another process is running in this run directory."""


class UntrustedCheckpointError(DamagedFileError):
    """A checkpoint that is not plain tensors: refused, never unpickled."""


class DamagedIdentityError(DamagedFileError):
    """config.yaml cannot be read as a run's identity. `problem` says so in a few words, for a leaderboard
    cell; the message also names the folder and the fix, for the one line of `run`."""

    def __init__(self, message: str, problem: str):
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True)
class RunLabels:
    """`labels.npz`: the train and test labels in split order, which the saved logits are indexed like."""

    train: np.ndarray
    test: np.ndarray


@dataclass(frozen=True)
class SavedLogits:
    """`logits/t###.npz` of one request: split ("train", "test") -> float32 logits in split order, of the
    method and of the request's oracles in train-seed order (none at a request off the oracle schedule).

    On disk `method_{split}`, the first oracle's `oracle_{split}` and oracle k's `oracle{k}_{split}`
    (k = 1..K−1): the names of runs saved before K oracles existed, kept so they still read.
    """

    method: dict[str, np.ndarray]
    oracles: list[dict[str, np.ndarray]]

    def arrays(self) -> dict[str, np.ndarray]:
        arrays = {f"method_{split}": logits for split, logits in self.method.items()}
        for k, oracle in enumerate(self.oracles):
            arrays.update({f"oracle{k or ''}_{split}": logits for split, logits in oracle.items()})
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SavedLogits:
        method: dict[str, np.ndarray] = {}
        oracles: dict[int, dict[str, np.ndarray]] = {}
        for name, logits in arrays.items():
            model, split = name.rsplit("_", 1)
            if model == "method":
                method[split] = logits
            else:
                oracles.setdefault(int(model.removeprefix("oracle") or 0), {})[split] = logits
        return cls(method, [oracles[k] for k in range(len(oracles))])


def identity_hash(identity: RunIdentity) -> str:
    """The first 8 hex digits of the identity's sha256: the end of a run directory's name (`RunConfig.run_path`)."""
    return hashlib.sha256(json.dumps(identity.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:8]


def _initialization_leftover(name: str) -> bool:
    """A file `initialize` writes before config.yaml, the run's lock, or a temp file of an interrupted atomic write."""
    return name in (_MANIFEST, _LABELS, LOCK_FILE) or (name.startswith(".") and name.endswith(".tmp"))


class RunDirectory:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / _METRICS

    def initialized(self) -> bool:
        """Whether the run's identity is written: `initialize` writes config.yaml last, so its files are all there."""
        return (self.path / _CONFIG).exists()

    def is_run(self) -> bool:
        """Whether this folder is a run directory: its config.yaml names the method, unlike another tool's
        (W&B's `method: {value: ..}`). An unreadable one counts, so it is listed as damaged rather than dropped."""
        config = self.path / _CONFIG
        if config.is_dir() or not (config.exists() or config.is_symlink()):
            return False
        try:
            return isinstance(self._identity_object().get("method"), str)
        except DamagedIdentityError:
            return True

    def identity(self) -> RunIdentity:
        """config.yaml: everything the run's numbers depend on (`RunConfig.identity`)."""
        data = self._identity_object()
        try:
            return RunIdentity.from_json(data)
        except MalformedRecordError as error:
            raise DamagedIdentityError(
                f"{self.path / _CONFIG} is not a run's configuration ({error}); delete {self.path} to rerun",
                f"{_CONFIG} is not a run's configuration ({error})",
            ) from None

    def _identity_object(self) -> dict:
        """config.yaml's mapping, not yet checked as an identity."""
        path = self.path / _CONFIG
        try:
            data = load_yaml(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise DamagedIdentityError(
                f"{path} is not readable YAML ({error}); delete {self.path} to rerun",
                f"{_CONFIG} is not readable YAML ({type(error).__name__})",
            ) from None
        if not isinstance(data, dict):
            raise DamagedIdentityError(
                f"{path} is not a run's configuration; delete {self.path} to rerun",
                f"{_CONFIG} is not a run's configuration",
            )
        return data

    def check(self, identity: RunIdentity) -> None:
        """Refuse a folder that holds a run made with another configuration, naming what differs."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryMismatchError(f"{self.path} exists and is not a directory")
        if not self.initialized():
            # `initialize` writes config.yaml last: a run killed before it leaves only these, rewritten on resume
            if self.path.exists() and any(not _initialization_leftover(p.name) for p in self.path.iterdir()):
                raise RunDirectoryMismatchError(f"{self.path} is not empty and holds no run; choose another folder")
            return
        existing, wanted = self.identity().to_json(), identity.to_json()
        if existing != wanted:
            differing = sorted(k for k in set(existing) | set(wanted) if existing.get(k) != wanted.get(k))
            details = "; ".join(f"{k}: {existing.get(k)!r} there, {wanted.get(k)!r} now" for k in differing)
            raise RunDirectoryMismatchError(f"{self.path} holds a run with another configuration ({details})")

    def initialize(
        self, identity: RunIdentity, manifest: dict, train_labels: np.ndarray, test_labels: np.ndarray
    ) -> None:
        """Write config and manifest for a new run (after `check`); an existing run is left as it is."""
        self.check(identity)
        if self.initialized():
            return
        write_json_atomic(self.path / _MANIFEST, manifest)
        write_atomic(self.path / _LABELS, lambda f: np.savez(f, train=train_labels, test=test_labels))
        write_yaml_atomic(self.path / _CONFIG, identity.to_json())

    def manifest(self) -> dict:
        """manifest.json: every request of the stream (`RequestStream.manifest`)."""
        return json.loads((self.path / _MANIFEST).read_text())

    def labels(self) -> RunLabels:
        with np.load(self.path / _LABELS) as saved:
            return RunLabels(train=saved["train"], test=saved["test"])

    def damage(self, identity: RunIdentity) -> str | None:
        """What makes a run whose identity and rows read untrustworthy, in a few words; None when sound.

        A config.yaml edited after the run no longer hashes to its folder's name (a `--run-dir` name
        has no hash to compare); without manifest.json no request's forget set is known.
        """
        named = _HASHED_NAME.search(self.path.name)
        if named and named.group(1) != identity_hash(identity):
            return (
                f"{_CONFIG} does not match its folder (hash {identity_hash(identity)}, folder {named.group(1)}): "
                "edited after the run?"
            )
        if not (self.path / _MANIFEST).is_file():
            return f"{_MANIFEST} is missing"
        return None

    def problem_of(self, error: Exception) -> str:
        """A damaged file's error in a few words, for a table cell: its `problem` where it has one, else its
        message with file names relative to this folder and without the fix (what follows the `;`)."""
        if isinstance(error, DamagedIdentityError):
            return error.problem
        return str(error).replace(f"{self.path}{os.sep}", "").split(";")[0]

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory for this process; refuse, naming its pid, while another holds it.

        Two identical commands would otherwise both serve request 1 and append its row twice.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(20):  # the holder writes its pid right after taking the lock
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.05)
            os.close(fd)
            raise RunDirectoryBusyError(
                f"run directory {self.path} in use by pid {holder or '?'}; wait for it to finish, or stop it and rerun "
                "the same command to resume"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def rows(self) -> list[RequestRecord]:
        """The finished requests' records; a line that is not the record of request 1, 2, ... in order is refused.

        The last line may be torn by a kill during its append (it has no newline yet): that request
        is not finished, so the line is skipped. Any other bad line is damage from outside (an edit,
        a copy, a disk error); resuming after it, or publishing it, would give wrong numbers.
        """
        if not self.metrics_path.exists():
            return []
        try:
            text = self.metrics_path.read_text()
        except UnicodeDecodeError:
            raise DamagedFileError(f"{self.metrics_path} is not UTF-8 text; delete {self.path} to rerun") from None
        lines = text.split("\n")[:-1]  # whatever follows the last newline is an unfinished append
        rows = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            fix = f"delete line {number} and the lines after it to rerun from there, or delete {self.path}"
            try:
                row = RequestRecord.from_json(json.loads(line))
            except ValueError as error:  # not JSON (a torn line), or not a record (`MalformedRecordError` says why)
                problem = error if isinstance(error, MalformedRecordError) else "not JSON: torn?"
                raise DamagedFileError(
                    f"{self.metrics_path} line {number} is not a metrics row ({problem}); {fix}"
                ) from None
            if row.t != len(rows) + 1:
                raise DamagedFileError(
                    f"{self.metrics_path} line {number} holds request {row.t} where request "
                    f"{len(rows) + 1} belongs (a duplicate?); {fix}"
                )
            rows.append(row)
        return rows

    def append_row(self, row: RequestRecord) -> None:
        """Append request t's record to metrics.jsonl, then its line to history.csv: O(1) in t."""
        _append_line(self.metrics_path, json.dumps(row.to_json()) + "\n")
        line = _history_line(row)
        if line is None:
            return
        history = self.path / _HISTORY
        if history.exists():
            _append_line(history, line)
        else:
            write_text_atomic(history, _history_header(row) + line)

    def repair_derived(self, rows: list[RequestRecord], summary: RunSummary | None = None) -> list[str]:
        """Rewrite `history.csv` (and `summary.json`, when given) where they disagree with `metrics.jsonl`.

        A kill between the row and history.csv, or an edited or corrupt file, would otherwise stay
        wrong for good. Returns the names of the files rewritten.
        """
        expected = {_HISTORY: _history_text(rows)}
        if summary is not None:
            expected[_SUMMARY] = json_text(summary.to_json())
        repaired = []
        for name, text in expected.items():
            if text is None:
                continue
            try:
                current = (self.path / name).read_bytes().decode()  # no newline translation: csv writes \r\n
            except (OSError, UnicodeDecodeError):
                current = None
            if current != text:
                write_text_atomic(self.path / name, text)
                repaired.append(name)
        return repaired

    def history(self) -> np.ndarray | None:
        """history.csv as a (requests done) x T float array (NaN where a cell is empty), or None when absent."""
        path = self.path / _HISTORY
        if not path.exists():
            return None
        with path.open(newline="") as f:
            rows = [row for row in csv.reader(f)][1:]
        if not rows:
            return None
        return np.array([[float(v) if v not in ("", "None") else math.nan for v in row[1:]] for row in rows])

    def geometry(self) -> list[dict]:
        """geometry.csv's rows (`evaluation.geometry` writes and parses it); [] before request T is served."""
        return read_geometry_csv(self.path / GEOMETRY_FILE)

    def _state_path(self, t: int) -> Path:
        return self.path / _STATE / f"t{t:03d}.pt"

    def save_state(self, t: int, state: dict[str, torch.Tensor]) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        write_atomic(self._state_path(t), lambda f: f.write(buffer.getvalue()))

    def load_state(self, t: int) -> dict[str, torch.Tensor]:
        """The method's state after request t (weights only: a checkpoint cannot run code)."""
        path = self._state_path(t)
        if not path.is_file():
            raise DamagedFileError(
                f"{path} is missing, so the run cannot resume after request {t}; delete {self.path} to rerun it"
            )
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError) as error:
            raise UntrustedCheckpointError(
                f"{path} is not a weights-only checkpoint and was not loaded; delete {self.path} to rerun"
            ) from error

    def drop_states_before(self, t: int) -> None:
        for path in (self.path / _STATE).glob("t*.pt"):
            if path != self._state_path(t):
                path.unlink(missing_ok=True)

    def _logits_path(self, t: int) -> Path:
        return self.path / _LOGITS / f"t{t:03d}.npz"

    def save_logits(self, t: int, method: dict[str, np.ndarray], oracles: list[dict[str, np.ndarray]]) -> None:
        """The logits of the method and of the oracles after request t (`SavedLogits`), with `--save-logits`."""
        arrays = SavedLogits(method, oracles).arrays()
        write_atomic(self._logits_path(t), lambda f: np.savez_compressed(f, **arrays))

    def has_logits(self) -> bool:
        """Whether the run was made with `--save-logits`."""
        return (self.path / _LOGITS).is_dir()

    def saved_logits(self, t: int) -> SavedLogits | None:
        """The logits saved after request t; None when there are none (no `--save-logits`, or t not served)."""
        path = self._logits_path(t)
        if not path.exists():
            return None
        with np.load(path) as saved:
            return SavedLogits.from_arrays({name: saved[name] for name in saved.files})

    def record_session(self, first_request: int, method_code: dict | None = None) -> None:
        """Append this session (package version, git commit, device, method code, start) to `provenance.json`."""
        from unlearnbench.provenance import session_record

        session = session_record(first_request, method_code)
        write_json_atomic(self.path / _PROVENANCE, {**session, "sessions": [*self._sessions(), session]})

    def provenance(self) -> dict:
        """provenance.json: the first session's record and every session's (`sessions`); {} when missing or damaged."""
        return _read_json_object(self.path / _PROVENANCE) or {}

    def recorded_method_code(self) -> dict | None:
        """The method code of the last session that ran requests here (None for a run from before it was recorded)."""
        sessions = self._sessions()
        return sessions[-1].get("method_code") if sessions and isinstance(sessions[-1], dict) else None

    def _sessions(self) -> list:
        sessions = self.provenance().get("sessions", [])
        return sessions if isinstance(sessions, list) else []

    def write_summary(self, summary: RunSummary) -> None:
        write_text_atomic(self.path / _SUMMARY, json_text(summary.to_json()))

    def summary(self) -> RunSummary | None:
        """summary.json, written once the run is finished; None before (or when it is damaged: it is derived, so
        the leaderboard does without it, and the next session rewrites it)."""
        data = _read_json_object(self.path / _SUMMARY)
        try:
            return None if data is None else RunSummary.from_json(data)
        except MalformedRecordError:
            return None

    def write_error(self, message: str, traceback: str) -> None:
        """Record why a suite cell failed (`error.json`), so the leaderboard lists the run as failed."""
        write_json_atomic(self.path / _ERROR, {"error": message, "traceback": traceback})

    def clear_error(self) -> None:
        """Forget an earlier failure once the cell has run through."""
        (self.path / _ERROR).unlink(missing_ok=True)

    def error(self) -> dict | None:
        """error.json (`error`, `traceback`) of a failed suite cell; None when it did not fail (or it is damaged)."""
        return _read_json_object(self.path / _ERROR)


def _read_json_object(path: Path) -> dict | None:
    """A JSON object from `path`; None when it is missing, unreadable or not an object (a reader that tolerates
    the files a run rewrites whole and that the leaderboard can do without)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def json_text(data: dict) -> str:
    """A JSON file's text as `write_json_atomic` writes it, so a file can be compared with what it should hold."""
    return json.dumps(data, indent=1, allow_nan=True) + "\n"


def _history_header(row: RequestRecord) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(["t", *(f"F{s}" for s in range(1, len(row.method["history"]) + 1))])
    return buffer.getvalue()


def _history_line(row: RequestRecord) -> str | None:
    """Row t of history.csv: accuracy on every F_s after request t; None for a row without history."""
    if "history" not in row.method:
        return None
    buffer = io.StringIO()
    csv.writer(buffer).writerow([row.t, *(f"{value:.4f}" for value in row.method["history"])])
    return buffer.getvalue()


def _history_text(rows: list[RequestRecord]) -> str | None:
    """history.csv: row t holds accuracy on every F_s after request t (the matrix A); None without history."""
    rows = [row for row in rows if "history" in row.method]
    if not rows:
        return None
    return _history_header(rows[0]) + "".join(_history_line(row) for row in rows)


def _append_line(path: Path, line: str) -> None:
    """Append one line durably (write, flush, fsync), first cutting off a line a kill left without its newline."""
    created = not path.exists()
    with open(path, "ab+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # a torn append: only after a kill, so reading back to its start is rare
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
        f.write(line.encode())
        f.flush()
        os.fsync(f.fileno())
    if created:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
