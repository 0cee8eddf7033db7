"""The run directory: everything one run produced, enough to resume it and to rebuild any table.

Layout (documented in docs/guide.md, "The run directory"): `config.yaml`, `manifest.json`, `labels.npz`,
`metrics.jsonl` (one row per finished request), `history.csv`, `summary.json`, `provenance.json`,
`logits/t###.npz` (with `--save-logits`), `state/t###.pt` (the method after request t; on an interleaved stream
`state/t###-learned.pt` too, the method after the learning step before request t) and, for a
suite cell that failed, `error.json`; `updates.f32`, `updates.json` and `geometry.csv` are
`geometry_files`' (beside this module; `evaluation.geometry` computes what they hold), read here through it.
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
import glob
import hashlib
import io
import json
import math
import os
import pickle
import re
import time
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from unlearnbench.errors import ConfigError, DamagedFileError
from unlearnbench.geometry_files import (
    GEOMETRY_FILE,
    HEADER_FILE,
    LayoutError,
    UpdateStore,
    geometry_csv,
    read_geometry_csv,
)
from unlearnbench.io import load_yaml, write_atomic, write_json_atomic, write_text_atomic, write_yaml_atomic
from unlearnbench.records import (
    MalformedRecordError,
    RequestRecord,
    RunIdentity,
    RunSummary,
    ended_diverged,
    is_finished,
)

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


#: The files of a run directory that follow from its others, so a rerun of the same command rebuilds them where
#: they are damaged: the manifest and labels from the configuration and the data, the rest from `metrics.jsonl`
#: (and `updates.f32`). The others are what the run alone knows: damage there is refused, naming the file.
REBUILT_FILES = (_MANIFEST, _LABELS, _SUMMARY, _HISTORY, GEOMETRY_FILE)
#: Files only a run writes: one of them beside `metrics.jsonl` makes a folder a run directory whatever its
#: config.yaml says (or if it has none).
_RUN_OWN_FILES = (_MANIFEST, _LABELS)
#: The arrays of a logits file that say whose logits it holds: the request and the run (`identity_hash`).
_LOGITS_REQUEST, _LOGITS_RUN = "request", "run"


@dataclass(frozen=True)
class Damage:
    """A file of a run directory that is not what the run wrote (`RunDirectory.damages`).

    `file` is the name `damages` checks it under (`updates` for the pair updates.f32 + updates.json),
    `error` its reader's, naming the file and the fix, and `rebuilt` whether the rerun of the same
    command rebuilds it (`REBUILT_FILES`).
    """

    file: str
    error: Exception
    rebuilt: bool


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
    """The first 8 hex digits of the sha256 of the identity's `named_json`: the end of a run directory's name
    (`RunConfig.run_path`)."""
    return hashlib.sha256(json.dumps(identity.named_json(), sort_keys=True, default=str).encode()).hexdigest()[:8]


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
            return self._holds_run_files()  # config.yaml deleted: listed as damaged, never dropped
        if self._holds_run_files():
            return True
        try:
            return isinstance(self._identity_object().get("method"), str)
        except DamagedIdentityError:
            return True

    def _holds_run_files(self) -> bool:
        """Whether requests were served here (`metrics.jsonl`) beside another file only a run writes: a run whatever
        its config.yaml holds. (Without rows, a folder killed before its config.yaml was written holds no run.)"""
        return self.metrics_path.exists() and any((self.path / name).exists() for name in _RUN_OWN_FILES)

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
        if not path.exists():
            raise DamagedIdentityError(
                f"{path} is missing (the run's configuration); delete {self.path} to rerun",
                f"{_CONFIG} is missing",
            )
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
            if (self.path / _METRICS).exists():  # requests were served here: its configuration was deleted
                self._identity_object()
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
        """Write config, manifest and labels for a new run (after `check`). Of an existing run, the manifest and the
        labels are rewritten where they are missing or unreadable: both follow from its configuration and the data
        (this session's stream and dataset are the run's, `check` says so), and without them no table can be read."""
        self.check(identity)
        initialized = self.initialized()
        if not (initialized and _readable(self.manifest)):
            write_json_atomic(self.path / _MANIFEST, manifest)
        if not (initialized and _readable(self.labels)):
            write_atomic(self.path / _LABELS, lambda f: np.savez(f, train=train_labels, test=test_labels))
        if not initialized:
            write_yaml_atomic(self.path / _CONFIG, identity.to_json())

    def manifest(self) -> dict:
        """manifest.json: every request of the stream (`RequestStream.manifest`); a `DamagedFileError` when it is
        missing or not a manifest (an object whose `requests` are objects, each naming its `t` and `forget` set)."""
        path = self.path / _MANIFEST
        data = _read_json_object(path)
        requests = data.get("requests") if data is not None else None
        if not (
            isinstance(requests, list)
            and all(
                isinstance(r, dict) and _is_index(r.get("t")) and isinstance(r.get("forget"), list) for r in requests
            )
        ):
            problem = "is missing" if not path.exists() else "is not a stream manifest"
            raise DamagedFileError(f"{path} {problem}; rerun the same command to rebuild it")
        return data

    def labels(self) -> RunLabels:
        """labels.npz; a `DamagedFileError` when it is missing or does not hold 1-D integer `train` and `test`."""
        path = self.path / _LABELS
        try:
            with np.load(path) as saved:
                labels = RunLabels(train=saved["train"], test=saved["test"])
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            problem = "is missing" if not path.exists() else f"is not the run's labels ({type(error).__name__})"
            raise DamagedFileError(f"{path} {problem}; rerun the same command to rebuild it") from None
        if not all(a.ndim == 1 and np.issubdtype(a.dtype, np.integer) for a in (labels.train, labels.test)):
            raise DamagedFileError(f"{path} does not hold 1-D integer labels; rerun the same command to rebuild it")
        return labels

    def damages(self, identity: RunIdentity, rows: list[RequestRecord]) -> list[Damage]:
        """Every file of the run that is not what the run wrote, in the order of `RUN_FILES`; [] when all are sound.

        Called on a run whose identity and `metrics.jsonl` rows read (`rows()` refuses those itself) by
        the leaderboard, which lists a run with any damage as damaged, and by the runner before it serves
        or finishes a run, which rebuilds the damaged files that follow from the others (`Damage.rebuilt`)
        and refuses the rest. Each check is the reader of its file, so what is damage to a table is damage
        to a rerun. A config.yaml edited after the run no longer hashes to its folder's name (a `--run-dir`
        name has no hash to compare). The checks that need the run to be finished (the derived files, and
        the files written only once it is) apply only then.
        """
        checks = {
            _CONFIG: lambda: self._check_name(identity),
            _MANIFEST: self.manifest,
            _LABELS: self.labels,
            _METRICS: lambda: self._check_metrics(rows),
            _PROVENANCE: lambda: self._check_provenance(rows),
            "updates": lambda: self._check_updates(identity, rows),
            _STATE: lambda: self._check_state(identity, rows),
            _LOGITS: lambda: self._check_logits(identity, rows),
            _SUMMARY: lambda: self._check_summary(identity, rows),
            _HISTORY: lambda: self._check_history(identity, rows),
            GEOMETRY_FILE: lambda: self._check_geometry(identity, rows),
        }
        damages = []
        for name, check in checks.items():
            try:
                check()
            except DamagedFileError as error:
                damages.append(Damage(name, error, rebuilt=name in REBUILT_FILES))
        return damages

    def _check_name(self, identity: RunIdentity) -> None:
        named = _HASHED_NAME.search(self.path.name)
        if named and named.group(1) != identity_hash(identity):
            raise DamagedFileError(
                f"{self.path / _CONFIG} does not match its folder (hash {identity_hash(identity)}, folder "
                f"{named.group(1)}): edited after the run?; delete {self.path} to rerun"
            )

    def _check_metrics(self, rows: list[RequestRecord]) -> None:
        """metrics.jsonl holds every request its derived files record (they are written after it, so never more)."""
        summary = self.summary()
        recorded = summary.requests_done + (summary.status == "diverged") if summary is not None else 0
        if recorded > len(rows):
            what = "is missing" if not self.metrics_path.exists() else f"holds {len(rows)} request(s)"
            raise DamagedFileError(
                f"{self.metrics_path} {what} but {_SUMMARY} records {recorded}; delete {self.path} to rerun"
            )

    def _check_provenance(self, rows: list[RequestRecord]) -> None:
        """provenance.json is written before a run's first request: once one is served, who made it must be known."""
        path = self.path / _PROVENANCE
        data = _read_json_object(path)
        if rows and (data is None or not isinstance(data.get("sessions", []), list)):
            problem = "is missing" if not path.exists() else "is not a provenance record"
            raise DamagedFileError(
                f"{path} {problem}: who ran the run, with which code, is lost; delete {self.path} to rerun"
            )

    def _check_state(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """The method after the last request served: what a resume starts from. A finished run needs it for no number,
        so it may be left out (published run directories leave out the weights); one that is there must load."""
        served = [row.t for row in rows if row.status == "ok"]
        if served and not (is_finished(rows, identity.requests) and not self._state_path(served[-1]).exists()):
            self.load_state(served[-1], mmap=True)

    def _check_logits(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """With `--save-logits`, every request served has its logits, and they are its own (`saved_logits`)."""
        if not self.has_logits():
            return
        for row in rows:
            if row.status != "ok":
                continue
            if not self._logits_path(row.t).exists():
                raise DamagedFileError(
                    f"{self._logits_path(row.t)} is missing (the run saved its logits); delete {self.path} to rerun"
                )
            self._read_logits(row.t, identity, arrays=False)

    def _check_updates(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """updates.f32 and its header updates.json hold the u_t of the requests served (`UpdateStore` checks)."""
        if not rows:
            return
        try:
            UpdateStore(self.path, identity.requests, len(rows))
        except LayoutError as error:  # a header of another T: not this run's
            raise DamagedFileError(f"{error}; delete {self.path} to rerun") from None

    def _check_summary(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """summary.json is written once the run is finished, and counts its rows; rebuilt from them."""
        path = self.path / _SUMMARY
        summary = self.summary()
        finished = is_finished(rows, identity.requests)
        if summary is None and (finished or path.exists()):
            problem = "is missing" if not path.exists() else "is not a run summary"
            raise DamagedFileError(f"{path} {problem}; rerun the same command to rebuild it")
        if summary is not None and not (
            finished
            and summary.requests_done == sum(row.status == "ok" for row in rows)
            and (summary.status == "diverged") == ended_diverged(rows)
        ):
            raise DamagedFileError(f"{path} disagrees with {_METRICS}; rerun the same command to rebuild it")

    def _check_history(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """history.csv of a finished run is what its rows give (an unfinished run's may be one row short: a kill
        between the two appends; its resume rebuilds it)."""
        if not is_finished(rows, identity.requests):
            return
        path = self.path / _HISTORY
        expected = _history_text(rows)
        try:
            current = path.read_bytes().decode()  # as `repair_derived` compares it: csv writes \r\n
        except (OSError, UnicodeDecodeError):
            current = None
        if current != expected and not (expected is None and current is None):
            problem = "is missing" if current is None else f"disagrees with {_METRICS}"
            raise DamagedFileError(f"{path} {problem}; rerun the same command to rebuild it")

    def _check_geometry(self, identity: RunIdentity, rows: list[RequestRecord]) -> None:
        """geometry.csv is written with request T's row when every u_t is stored: then it holds rows 1..T."""
        if not rows or not is_finished(rows, identity.requests) or not _has_all_updates(self.path, identity.requests):
            return
        path = self.path / GEOMETRY_FILE
        served = [row["t"] for row in read_geometry_csv(path)]
        if served != list(range(1, identity.requests + 1)):
            problem = "is missing" if not path.exists() else f"holds rows {served[:3]}…, not 1..{identity.requests}"
            raise DamagedFileError(f"{path} {problem}; rerun the same command to rebuild it")

    def problem_of(self, error: Exception) -> str:
        """A damaged file's error in a few words, for a table cell: its `problem` where it has one, else its
        message with file names relative to this folder and without the fix (what follows the last `;`)."""
        if isinstance(error, DamagedIdentityError):
            return error.problem
        return str(error).replace(f"{self.path}{os.sep}", "").rsplit(";", 1)[0]

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

    def repair_derived(
        self,
        rows: list[RequestRecord],
        summary: RunSummary | None = None,
        recompute_geometry: Callable[[Path], list[dict]] | None = None,
    ) -> list[str]:
        """Rewrite `history.csv` (and `summary.json`, when given) where they disagree with `metrics.jsonl`, and,
        with the summary, `geometry.csv` where it is not the table of `updates.f32` (recomputed by
        `recompute_geometry`, the geometry's owner, which the caller passes: the run directory stores the
        geometry's files but does not compute it).

        A kill between the row and history.csv, or an edited or corrupt file, would otherwise stay
        wrong for good. Returns the names of the files rewritten.
        """
        repaired = []
        if summary is not None and recompute_geometry is not None:
            try:
                self._check_geometry(self.identity(), rows)
            except DamagedFileError:
                write_text_atomic(self.path / GEOMETRY_FILE, geometry_csv(recompute_geometry(self.path)))
                repaired.append(GEOMETRY_FILE)
        expected = {_HISTORY: _history_text(rows)}
        if summary is not None:
            expected[_SUMMARY] = json_text(summary.to_json())
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
        """history.csv as a (requests done) x T float array (NaN where a cell is empty), or None when absent; a
        `DamagedFileError` when it is not that table (a cell that is not a number, rows of unequal length)."""
        path = self.path / _HISTORY
        if not path.exists():
            return None
        try:
            with path.open(newline="") as f:
                rows = [row for row in csv.reader(f)][1:]
            if not rows:
                return None
            return np.array([[float(v) if v not in ("", "None") else math.nan for v in row[1:]] for row in rows])
        except (ValueError, UnicodeDecodeError):
            raise DamagedFileError(
                f"{path} is not a history table; rerun the same command to rebuild it from {_METRICS}"
            ) from None

    def geometry(self) -> list[dict]:
        """geometry.csv's rows (`geometry_files` writes and parses it); [] before request T is served."""
        return read_geometry_csv(self.path / GEOMETRY_FILE)

    def _state_path(self, t: int) -> Path:
        return self.path / _STATE / f"t{t:03d}.pt"

    def save_state(self, t: int, state: dict[str, torch.Tensor]) -> None:
        _write_state(self._state_path(t), state)

    def _learned_state_path(self, t: int) -> Path:
        # `t*.pt`: removed with the other states once request t's own is saved (`drop_states_before`)
        return self.path / _STATE / f"t{t:03d}-learned.pt"

    def save_learned_state(self, t: int, state: dict[str, torch.Tensor]) -> None:
        """The method's state after the learning step before request t (an interleaved stream's), so that a run killed
        between it and request t resumes from the learned model without learning again."""
        _write_state(self._learned_state_path(t), state)

    def has_learned_state(self, t: int) -> bool:
        return self._learned_state_path(t).is_file()

    def load_learned_state(self, t: int) -> dict[str, torch.Tensor]:
        """`save_learned_state`'s state (weights only, as `load_state`)."""
        return self.load_state(t, path=self._learned_state_path(t))

    def load_state(self, t: int, mmap: bool = False, path: Path | None = None) -> dict[str, torch.Tensor]:
        """The method's state after request t (weights only: a checkpoint cannot run code), or the one at `path`.
        `mmap`: the tensors stay on disk until read (a check that the file loads costs no copy of the model)."""
        path = self._state_path(t) if path is None else path
        if not path.is_file():
            raise DamagedFileError(
                f"{path} is missing, so the run cannot resume after request {t}; delete {self.path} to rerun it"
            )
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
            raise UntrustedCheckpointError(
                f"{path} is not a weights-only checkpoint and was not loaded; delete {self.path} to rerun"
            ) from error
        if not isinstance(state, dict):
            raise DamagedFileError(
                f"{path} holds a {type(state).__name__}, not a method's state; delete {self.path} to rerun"
            )
        return state

    def drop_states_before(self, t: int) -> None:
        for path in (self.path / _STATE).glob("t*.pt"):
            if path != self._state_path(t):
                path.unlink(missing_ok=True)

    def _logits_path(self, t: int) -> Path:
        return self.path / _LOGITS / f"t{t:03d}.npz"

    def save_logits(self, t: int, method: dict[str, np.ndarray], oracles: list[dict[str, np.ndarray]]) -> None:
        """The logits of the method and of the oracles after request t (`SavedLogits`), with `--save-logits`, and
        whose they are: the request t and the run's `identity_hash`, checked on read."""
        arrays = SavedLogits(method, oracles).arrays()
        whose = {_LOGITS_REQUEST: np.int64(t), _LOGITS_RUN: np.str_(identity_hash(self.identity()))}
        write_atomic(self._logits_path(t), lambda f: np.savez_compressed(f, **arrays, **whose))

    def has_logits(self) -> bool:
        """Whether the run was made with `--save-logits`."""
        return (self.path / _LOGITS).is_dir()

    def saved_logits(self, t: int, identity: RunIdentity | None = None) -> SavedLogits | None:
        """The logits saved after request t; None when there are none (no `--save-logits`, or t not served).

        A file that does not read, or that names another request or run than this one's (a file copied or
        swapped from elsewhere would silently change the privacy tables), is a `DamagedFileError`. Files saved
        before they named their request and run are read unchecked (`identity`: the run's, when the caller
        has it read already).
        """
        path = self._logits_path(t)
        return self._read_logits(t, identity, arrays=True) if path.exists() else None

    def _read_logits(self, t: int, identity: RunIdentity | None, arrays: bool) -> SavedLogits | None:
        """`saved_logits`'s checks; with `arrays` false, only the file's names and whose it is are read (a check that
        decompresses no logits), and None is returned."""
        path, fix = self._logits_path(t), f"delete {self.path} to rerun"
        try:
            with np.load(path) as saved:
                names = set(saved.files)
                whose = {name: saved[name] for name in (_LOGITS_REQUEST, _LOGITS_RUN) if name in names}
                logits = {name: saved[name] for name in sorted(names - set(whose))} if arrays else {}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise DamagedFileError(f"{path} is not a logits file ({type(error).__name__}); {fix}") from None
        if not {"method_train", "method_test"} <= names:
            raise DamagedFileError(f"{path} holds no method logits; {fix}")
        if _LOGITS_REQUEST in whose and int(whose[_LOGITS_REQUEST]) != t:
            raise DamagedFileError(f"{path} holds the logits of request {int(whose[_LOGITS_REQUEST])}, not {t}; {fix}")
        if _LOGITS_RUN in whose:
            run = identity_hash(identity or self.identity())
            if str(whose[_LOGITS_RUN]) != run:
                raise DamagedFileError(f"{path} holds the logits of run {whose[_LOGITS_RUN]}, not {run}; {fix}")
        if not arrays:
            return None
        try:
            return SavedLogits.from_arrays(logits)
        except ValueError:  # an array named as no model's logits
            raise DamagedFileError(
                f"{path} holds arrays that are not logits ({', '.join(sorted(names))}); {fix}"
            ) from None

    def record_session(self, session: dict) -> None:
        """Append this session (`provenance.session_record`: version, commit, device, method code, start) to
        `provenance.json`."""
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


def refuse_a_run_missing_metrics(
    path: Path, identity: RunIdentity, loaded: Collection[str], broken_plugins: Mapping[str, str]
) -> None:
    """Refuse the run a command means where its folder records user metrics in its gaps that are not `loaded` now
    because a metric plugin failed to import (`broken_plugins`: plugin -> why, `keys.load_metric_plugins`), in one
    line naming the plugin. The planner passes both (`plan.plan_run`): the run directory imports no metric.

    Without those metrics the identity, so the folder's hash, is another: the command would start that run afresh
    without them, beside the one it means. Looked at: `path` and the folders named like it but for the hash.
    Nothing is looked at while every metric plugin imports."""
    if not broken_plugins:
        return
    named = _HASHED_NAME.search(path.name)
    stem = path.name[: -len(named.group(1))] if named else None
    candidates = [path, *(sorted(path.parent.glob(glob.escape(stem) + "?" * 8)) if stem else [])]
    wanted = {key: value for key, value in identity.to_json().items() if key != "metrics"}
    for folder in candidates:
        try:
            recorded = RunDirectory(folder).identity().to_json() if (folder / _CONFIG).is_file() else None
        except ConfigError:  # damaged: not the run meant here, and listed as damaged where it is read
            continue
        if recorded is None:
            continue
        missing = sorted(set(recorded.pop("metrics", None) or {}) - set(loaded))
        if missing and recorded == wanted:
            raise ConfigError(
                f"{folder} holds this run, its gaps averaging metric(s) {', '.join(missing)}, which are not loaded: "
                f"{'; '.join(broken_plugins.values())}; fix the plugin to resume it"
            )


def _readable(read) -> bool:
    """Whether `read()` returns rather than finding its file damaged."""
    try:
        read()
    except DamagedFileError:
        return False
    return True


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _has_all_updates(path: Path, requests: int) -> bool:
    """Whether updates.json records every u_t (a method without trainable weights, or whose layout changed, has
    no geometry table)."""
    header = _read_json_object(path / HEADER_FILE) or {}
    return bool(header.get("d")) and header.get("rows") == list(range(1, requests + 1))


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


def _write_state(path: Path, state: dict[str, torch.Tensor]) -> None:
    """A method's state, written atomically (`torch.save` to memory first: a kill leaves the old file or the new)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomic(path, lambda f: f.write(buffer.getvalue()))
