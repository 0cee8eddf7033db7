"""The geometry files of a run directory: `updates.f32` + `updates.json` (the updates u_t) and `geometry.csv`.

They sit beside the run directory's own files (`rundir.py` reads `geometry.csv` through this module);
`evaluation/geometry.py` computes what goes into them. docs/diagnostics.md describes the columns.

`u_t = θ_t − θ_{t−1}` over the *trainable* parameters of the method's model (`requires_grad`
after the request was served; BN running statistics and `num_batches_tracked` are buffers, never
parameters). Row t of `updates.f32` (raw little-endian float32, C order, shape T x d, memory-mapped)
holds u_t at the fixed byte offset (t−1)·d·4, so serving request t again after a crash (resume)
overwrites the same row and never appends a duplicate. `updates.json` is the header:
`{"format", "dtype", "d", "T", "parameters": [{"name", "shape", "offset", "size"}], "rows": [t...]}`;
`rows` lists the requests whose u_t has been written (the runner only reads rows 1..t after request t,
so a row written before a crash and not yet committed is simply rewritten).
"""

from __future__ import annotations

import csv
import io
import json
import math
import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unlearnbench.errors import DamagedFileError
from unlearnbench.io import write_json_atomic, write_text_atomic

UPDATES_FILE = "updates.f32"
HEADER_FILE = "updates.json"
GEOMETRY_FILE = "geometry.csv"
FORMAT = "unlearnbench-updates/1"


class LayoutError(ValueError):
    """The trainable parameters of this request differ from those recorded in the header."""


def _is_header(header: object) -> bool:
    """`updates.json`'s object: d and T numbers, the rows written and the parameter layout lists."""
    if not isinstance(header, dict) or not {"d", "T", "rows", "parameters"} <= set(header):
        return False
    numbers = [header["d"], header["T"], *(header["rows"] if isinstance(header["rows"], list) else [None])]
    return all(isinstance(n, int) and not isinstance(n, bool) for n in numbers) and isinstance(
        header["parameters"], list
    )


class UpdateStore:
    """`updates.f32` (T x d float32 memmap) + `updates.json` header in a run directory.

    `write(t, u)` is idempotent: row t lives at a fixed offset, so writing it twice (a resumed
    run serving request t again) leaves one row, holding the last value.
    """

    def __init__(self, directory: Path, num_requests: int, finished: int = 0):
        """`finished`: requests already committed to the run; their rows must be on disk.

        A damaged pair is refused rather than repaired: numpy would pad a short `updates.f32` with
        zeros, and a missing header would make the writer start a new, empty file, either way
        changing the geometry of the requests already served without a word.
        """
        self.directory = Path(directory)
        self.num_requests = num_requests
        self.header: dict | None = None
        rerun = f"delete {self.directory} to rerun it"
        if self.header_path.exists():
            try:
                self.header = json.loads(self.header_path.read_bytes().decode("utf-8"))
            except ValueError:
                raise DamagedFileError(f"{self.header_path} is not readable JSON; {rerun}") from None
            if not _is_header(self.header):
                raise DamagedFileError(f"{self.header_path} is not an update header; {rerun}")
            if self.header.get("T") != num_requests:
                raise LayoutError(f"{self.header_path} was written for T={self.header.get('T')}, not {num_requests}")
            expected = num_requests * self.d * 4
            size = self.path.stat().st_size if self.path.exists() else None
            if size is None and self.d > 0:
                raise DamagedFileError(f"{self.path} is missing (the updates u_t of the served requests); {rerun}")
            if size is not None and size != expected:
                raise DamagedFileError(
                    f"{self.path} holds {size} bytes where its header {self.header_path.name} says "
                    f"{num_requests} x {self.d} float32 = {expected} (cut short?); {rerun}"
                )
        elif finished > 0 and self.path.exists():
            raise DamagedFileError(
                f"{self.header_path} is missing but {self.path.name} holds the updates of {finished} served "
                f"request(s); restore it, or {rerun}"
            )

    @property
    def path(self) -> Path:
        return self.directory / UPDATES_FILE

    @property
    def header_path(self) -> Path:
        return self.directory / HEADER_FILE

    @property
    def d(self) -> int:
        return 0 if self.header is None else int(self.header["d"])

    @property
    def rows_written(self) -> list[int]:
        return [] if self.header is None else list(self.header["rows"])

    @property
    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        if self.header is None:
            return []
        return [(p["name"], tuple(p["shape"])) for p in self.header["parameters"]]

    def _create(self, layout: Sequence[tuple[str, tuple[int, ...]]], d: int) -> None:
        parameters, offset = [], 0
        for name, shape in layout:
            size = math.prod(shape)
            parameters.append({"name": name, "shape": list(shape), "offset": offset, "size": size})
            offset += size
        if offset != d:
            raise LayoutError(f"layout holds {offset} numbers, the update {d}")
        self.directory.mkdir(parents=True, exist_ok=True)
        # The file's final size, allocated now: its rows are written through a memory map, where a disk that fills up
        # later (a sparse file) kills the process with SIGBUS and no message; here it is an OSError (ENOSPC), which
        # the run reports in one line, before request 1's row is stored.
        try:
            with open(self.path, "wb") as f:
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(f.fileno(), 0, self.num_requests * d * 4)
                else:  # macOS has no posix_fallocate: the file stays sparse there
                    f.truncate(self.num_requests * d * 4)
        except OSError:
            self.path.unlink(missing_ok=True)
            raise
        self.header = {
            "format": FORMAT,
            "dtype": "float32",
            "order": "C",
            "d": d,
            "T": self.num_requests,
            "parameters": parameters,
            "rows": [],
        }
        write_json_atomic(self.header_path, self.header)

    def memmap(self, mode: str = "r") -> np.memmap:
        return np.memmap(self.path, dtype="<f4", mode=mode, shape=(self.num_requests, self.d))

    def write(self, t: int, update: np.ndarray, layout: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        """Store u_t in row t (1-based). Raises `LayoutError` if the parameters changed."""
        if not 1 <= t <= self.num_requests:
            raise ValueError(f"t={t} outside 1..{self.num_requests}")
        update = np.asarray(update, dtype=np.float32).ravel()
        layout = [(name, tuple(shape)) for name, shape in layout]
        if self.header is None:
            self._create(layout, len(update))
        elif layout != self.layout or len(update) != self.d:
            raise LayoutError(f"request {t} changed the trainable parameters (d {self.d} -> {len(update)})")
        if self.d == 0:
            return
        rows = self.memmap("r+")
        rows[t - 1] = update
        rows.flush()
        del rows
        if t not in self.header["rows"]:
            self.header["rows"] = sorted([*self.header["rows"], t])
            write_json_atomic(self.header_path, self.header)

    def read(self, t: int) -> np.ndarray:
        return np.array(self.memmap()[t - 1])

    def layer_norms(self, t: int) -> dict[str, float]:
        """‖u_t‖ per parameter tensor (name -> L2 norm)."""
        rows = self.memmap()
        norms = {}
        for p in self.header["parameters"]:
            norms[p["name"]] = float(
                np.linalg.norm(rows[t - 1, p["offset"] : p["offset"] + p["size"]].astype(np.float64))
            )
            release_pages(rows)
        return norms

    @classmethod
    def of_run(cls, directory: Path) -> UpdateStore:
        """The store of a run directory as written, its T read from the header."""
        header = json.loads((Path(directory) / HEADER_FILE).read_text())
        return cls(directory, header["T"])


def release_pages(rows: np.ndarray) -> None:
    """Drop the resident pages of a memory-mapped update file after a chunk has been read.

    Pages of a file mapping count toward the process's RSS until the kernel reclaims them; a pass
    over a 2 GB `updates.f32` would otherwise hold it all. The file is unchanged: pages are reread
    from disk when needed.
    """
    if isinstance(rows, np.memmap) and isinstance(getattr(rows, "_mmap", None), mmap.mmap):
        rows._mmap.madvise(mmap.MADV_DONTNEED)


#: geometry.csv columns before the per-layer norms (`norm/<parameter name>`), in order. The `_all` columns
#: use the basis of every update so far (u_1..u_T once the run is done), so row s changes as requests
#: follow; the `_online` columns and `cos_prev` depend on u_1..u_s only and never change.
COLUMNS = (
    "t",
    "update_norm",
    "er_all_r1",
    "er_all_r2",
    "er_all_r3",
    "er_all_r90",
    "r90_all",
    "co_all_1",
    "co_all_2",
    "co_all_3",
    "er_online_r1",
    "er_online_r2",
    "er_online_r3",
    "er_online_r90",
    "r90_online",
    "cos_prev",
)


def geometry_csv(table: list[dict]) -> str:
    buffer = io.StringIO()
    if not table:
        return ""
    columns = [*COLUMNS, *(k for k in table[0] if k.startswith("norm/"))]
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for entry in table:
        writer.writerow(["" if entry.get(c) is None else _format(entry[c]) for c in columns])
    return buffer.getvalue()


def _format(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:.9g}"


def write_geometry_csv(directory: Path, table: list[dict]) -> None:
    write_text_atomic(Path(directory) / GEOMETRY_FILE, geometry_csv(table))


def read_geometry_csv(path: Path) -> list[dict]:
    """geometry.csv back as dicts (empty cell -> None, numbers parsed); [] when the run has none. A file that is
    not the table `geometry_csv` writes (a cell that is not a number, a row short of cells, not text) is a
    `DamagedFileError`: it is derived from `updates.f32`, so the run's next session rebuilds it."""
    if not Path(path).exists():
        return []
    try:
        with open(path, newline="") as f:
            return [
                {
                    k: (None if v == "" else (int(v) if k in ("t", "r90_all", "r90_online") else float(v)))
                    for k, v in row.items()
                }
                for row in csv.DictReader(f)
            ]
    except (ValueError, TypeError, UnicodeDecodeError) as error:  # TypeError: a short row's missing cell is None
        raise DamagedFileError(
            f"{path} is not a geometry table ({type(error).__name__}); rerun the same command to rebuild it"
        ) from None
