"""Update geometry (docs/diagnostics.md): u_t on disk, per-layer norms, and ER/CO from the T x T Gram matrix.

What is stored
--------------
`u_t = θ_t − θ_{t−1}` over the *trainable* parameters of the method's model (`requires_grad`
after the request was served; BN running statistics and `num_batches_tracked` are buffers, never
parameters). Row t of `updates.f32` (raw little-endian float32, C order, shape T x d, memory-mapped)
holds u_t at the fixed byte offset (t−1)·d·4, so serving request t again after a crash (resume)
overwrites the same row and never appends a duplicate. `updates.json` is the header:
`{"format", "dtype", "d", "T", "parameters": [{"name", "shape", "offset", "size"}], "rows": [t...]}`;
`rows` lists the requests whose u_t has been written (the runner only reads rows 1..t after request t,
so a row written before a crash and not yet committed is simply rewritten).

What is computed (U = [u_1 … u_t] as columns, d x t)
----------------------------------------------------
- G = UᵀU in float64, accumulated over column chunks of the memmap (peak memory ~ t·chunk·8 bytes,
  never d x d; d = 10M costs t passes over the file per request, nothing more).
- G = V Λ Vᵀ (eigh, descending); σ_i = sqrt(λ_i) are the singular values of U and V its right
  singular vectors. The top-r left singular vectors Q = U V_r Σ_r⁻¹ are never materialized:
  QᵀU = Σ_r V_rᵀ, hence CO_t = Qᵀu_t = (σ_i V[t, i])_i and
  ER_t = ‖QQᵀu_t‖²/‖u_t‖² = Σ_{i≤r} σ_i² V[t, i]² / G[t, t].
- r = 1, 2, 3 and r90 (the smallest r whose singular values hold ≥ 90% of ‖U‖_F²). Components with
  a numerically zero singular value are dropped, so ER_t = 1 whenever r ≥ rank(U) (in particular r ≥ t).
- Column signs of Q are fixed so that each column's entry of largest magnitude is positive (as
  sklearn's `svd_flip`); this needs one more chunked pass (d x r at a time, r ≤ 3), and fixes the
  sign of CO.
- Online ER_t: the basis is the top-r left singular vectors of U_{<t} = [u_1 … u_{t−1}] only, so it
  says whether u_t moves inside the subspace that earlier requests used:
  Q'ᵀu_t = Σ'_r⁻¹ V'_rᵀ G[:t−1, t], ER'_t = ‖Q'ᵀu_t‖²/G[t, t] (undefined at t = 1).
- cos_prev: cosine between u_t and u_{t−1} (sign flips show oscillation).

The per-request values after request t use the basis of the updates so far (u_1..u_t): the metrics
row's `er_r1`, `co_1`, `r90`. `geometry.csv` is written once, after request T, so it holds every row
in the basis U = [u_1 … u_T]; its columns are named `er_all_r1`, `co_all_1`, `r90_all` because they
are other numbers than the rows' (at t = 1 the row's
`er_r1` is 1 by construction, the final file's `er_all_r1` of row 1 is not). docs/diagnostics.md.

Methods that do not train by gradient descent
---------------------------------------------
Everything here needs only θ before and after a request, so it applies to any method whose
trainable weights change: SSD (no training, but dampened weights change) gets the full geometry.
A method whose update lives outside `model`'s trainable parameters (LOFT: frozen backbone, the
projection U is a plain tensor of the method) can expose it by defining
`geometry_parameters() -> Iterable[tuple[str, Tensor | None]]` (taken whether or not it requires grad);
a tensor created during request t counts from zero. Without that hook LOFT has no trainable
parameter: ‖u_t‖ = 0 and ER/CO do not apply. If a method changes no trainable weight, ‖u_t‖ = 0 and ER/CO are
undefined (empty cells / None), and if the parameter layout changes between requests (e.g. LOFT
choosing another rank s), geometry is reported as not applicable from that request on.
"""

from __future__ import annotations

import csv
import io
import json
import math
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unlearnbench.errors import DamagedFileError
from unlearnbench.io import write_json_atomic, write_text_atomic

UPDATES_FILE = "updates.f32"
HEADER_FILE = "updates.json"
GEOMETRY_FILE = "geometry.csv"
FORMAT = "unlearnbench-updates/1"
RANKS = (1, 2, 3)
ENERGY = 0.9
#: Bytes of float64 per Gram chunk (t x chunk): keeps the peak small whatever d is.
CHUNK_BYTES = 64 * 2**20


class LayoutError(ValueError):
    """The trainable parameters of this request differ from those recorded in the header."""


# --------------------------------------------------------------------------------------------
# The on-disk store


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


# --------------------------------------------------------------------------------------------
# Gram-based ER / CO


def release_pages(rows: np.ndarray) -> None:
    """Drop the resident pages of a memory-mapped update file after a chunk has been read.

    Pages of a file mapping count toward the process's RSS until the kernel reclaims them; a pass
    over a 2 GB `updates.f32` would otherwise hold it all. The file is unchanged: pages are reread
    from disk when needed.
    """
    if isinstance(rows, np.memmap) and isinstance(getattr(rows, "_mmap", None), mmap.mmap):
        rows._mmap.madvise(mmap.MADV_DONTNEED)


def gram(rows: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """G = U Uᵀ of the t x d row matrix (= UᵀU of the d x t column matrix), float64, chunked over d."""
    t, d = rows.shape
    chunk = max(1, chunk_bytes // (8 * max(t, 1)))
    G = np.zeros((t, t), dtype=np.float64)
    for start in range(0, d, chunk):
        block = np.asarray(rows[:, start : start + chunk], dtype=np.float64)
        G += block @ block.T
        release_pages(rows)
    return G


def gram_column(rows: np.ndarray, u: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """U u for the t x d row matrix U (float64, chunked over d): the new Gram column when u joins U."""
    t, d = rows.shape
    chunk = max(1, chunk_bytes // (8 * max(t, 1)))
    column = np.zeros(t, dtype=np.float64)
    for start in range(0, d, chunk):
        column += np.asarray(rows[:, start : start + chunk], dtype=np.float64) @ np.asarray(
            u[start : start + chunk], dtype=np.float64
        )
        release_pages(rows)
    return column


@dataclass
class Spectrum:
    """Eigendecomposition of a Gram matrix: σ descending, V columns, numerically non-zero only."""

    sigma: np.ndarray  # (k,)
    V: np.ndarray  # (t, k)

    @classmethod
    def of(cls, G: np.ndarray) -> Spectrum:
        if G.size == 0:
            return cls(np.zeros(0), np.zeros((len(G), 0)))
        eigenvalues, V = np.linalg.eigh(G)
        order = np.argsort(eigenvalues)[::-1]
        eigenvalues, V = eigenvalues[order], V[:, order]
        tolerance = max(eigenvalues[0], 0.0) * len(G) * np.finfo(np.float64).eps * 10
        keep = eigenvalues > tolerance
        return cls(np.sqrt(eigenvalues[keep]), V[:, keep])

    @property
    def rank(self) -> int:
        return len(self.sigma)

    def r_energy(self, energy: float = ENERGY) -> int:
        """Smallest r whose squared singular values hold ≥ `energy` of the total (0 if U = 0)."""
        if self.rank == 0:
            return 0
        cumulative = np.cumsum(self.sigma**2) / np.sum(self.sigma**2)
        return int(np.searchsorted(cumulative, energy - 1e-12) + 1)


def _top_entries(rows: np.ndarray, coefficients: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """For each column of Q = (rows.T @ coefficients), the entry of largest magnitude (chunked)."""
    t, d = rows.shape
    k = coefficients.shape[1]
    best = np.zeros(k)
    chunk = max(1, chunk_bytes // (8 * max(t + k, 1)))
    for start in range(0, d, chunk):
        q = np.asarray(rows[:, start : start + chunk], dtype=np.float64).T @ coefficients
        idx = np.argmax(np.abs(q), axis=0)
        candidates = q[idx, np.arange(k)]
        better = np.abs(candidates) > np.abs(best)
        best[better] = candidates[better]
        release_pages(rows)
    return best


def column_signs(rows: np.ndarray, spectrum: Spectrum, r: int) -> np.ndarray:
    """±1 per left singular vector q_i = U v_i / σ_i so that its largest-magnitude entry is positive."""
    r = min(r, spectrum.rank)
    if r == 0:
        return np.ones(0)
    top = _top_entries(rows, spectrum.V[:, :r] / spectrum.sigma[:r])
    return np.where(top < 0, -1.0, 1.0)


def energy_ratio(G: np.ndarray, spectrum: Spectrum, r: int) -> np.ndarray:
    """ER_t for every column t with the top-r basis (NaN where u_t = 0)."""
    r = min(r, spectrum.rank)
    captured = (spectrum.V[:, :r] ** 2) @ (spectrum.sigma[:r] ** 2)
    norms = np.diag(G)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, captured / np.where(norms > 0, norms, 1.0), np.nan)


def coordinates(spectrum: Spectrum, r: int, signs: np.ndarray | None = None) -> np.ndarray:
    """CO: (t, r) matrix whose row t is Qᵀu_t = σ_i V[t, i] (NaN beyond the rank)."""
    out = np.full((spectrum.V.shape[0], r), np.nan)
    k = min(r, spectrum.rank)
    values = spectrum.V[:, :k] * spectrum.sigma[:k]
    if signs is not None:
        values = values * signs[:k]
    out[:, :k] = values
    return out


def online_energy_ratio(G: np.ndarray, t: int, r: int | None) -> tuple[float, int]:
    """ER of u_t (1-based) in the top-r basis of u_1..u_{t−1} (r=None: r90 of that basis)."""
    if t < 2 or G[t - 1, t - 1] <= 0:
        return math.nan, 0
    past = Spectrum.of(G[: t - 1, : t - 1])
    if past.rank == 0:
        return 0.0, 0
    k = past.r_energy() if r is None else min(r, past.rank)
    projection = (past.V[:, :k].T @ G[: t - 1, t - 1]) / past.sigma[:k]
    return float(np.sum(projection**2) / G[t - 1, t - 1]), k


def geometry_table(rows: np.ndarray, *, chunk_bytes: int = CHUNK_BYTES) -> list[dict]:
    """One dict per row t of `rows` (t x d, e.g. a memmap slice): every geometry column but the layer norms."""
    G = gram(rows, chunk_bytes)
    basis = _Basis.of(rows, G)
    return [basis.entry(i) for i in range(len(G))]


def latest_geometry_row(rows: np.ndarray, G: np.ndarray) -> dict:
    """The last row of `geometry_table(rows)` from a Gram matrix the caller keeps (one pass over `rows` for
    the column signs instead of a whole Gram and t eigendecompositions)."""
    return _Basis.of(rows, G).entry(len(G) - 1)


@dataclass
class _Basis:
    """The top singular vectors of U = rows (sign-fixed) and what every row's entry reads from them."""

    G: np.ndarray
    r90: int
    co: np.ndarray
    ratios: dict[str, np.ndarray]

    @classmethod
    def of(cls, rows: np.ndarray, G: np.ndarray) -> _Basis:
        spectrum = Spectrum.of(G)
        r90 = spectrum.r_energy()
        co = coordinates(spectrum, max(RANKS), column_signs(rows, spectrum, max(RANKS)))
        ratios = {f"er_all_r{r}": energy_ratio(G, spectrum, r) for r in RANKS}
        ratios["er_all_r90"] = energy_ratio(G, spectrum, r90)
        return cls(G, r90, co, ratios)

    def entry(self, i: int) -> dict:
        G = self.G
        entry: dict = {"t": i + 1, "update_norm": math.sqrt(max(G[i, i], 0.0))}
        entry.update({key: _finite(values[i]) for key, values in self.ratios.items()})
        entry["r90_all"] = self.r90
        entry.update({f"co_all_{j + 1}": _finite(self.co[i, j]) for j in range(max(RANKS))})
        for r in RANKS:
            entry[f"er_online_r{r}"] = _finite(online_energy_ratio(G, i + 1, r)[0])
        value, k = online_energy_ratio(G, i + 1, None)
        entry["er_online_r90"], entry["r90_online"] = _finite(value), (k if i > 0 else None)
        if i > 0 and G[i, i] > 0 and G[i - 1, i - 1] > 0:
            entry["cos_prev"] = float(G[i, i - 1] / math.sqrt(G[i, i] * G[i - 1, i - 1]))
        else:
            entry["cos_prev"] = None
        return entry


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


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
#: The geometry keys of the method's metrics row of request t -> the table column they are read from, in the
#: row of t while the basis is u_1..u_t: `er_r1` is ER_t as it was at request t, which the `er_all_r1` of
#: row t in the final geometry.csv no longer is (its basis holds the later updates too).
ROW_KEYS = {
    **{f"er_r{r}": f"er_all_r{r}" for r in (*RANKS, 90)},
    "r90": "r90_all",
    **{f"co_{j}": f"co_all_{j}" for j in range(1, max(RANKS) + 1)},
    **{c: c for c in COLUMNS if "online" in c or c == "cos_prev"},
}


def _written_rows(store: UpdateStore, t: int) -> np.ndarray:
    """u_1..u_t from the store (a memmap slice), refused if any of them was never written."""
    missing = [s for s in range(1, t + 1) if s not in store.rows_written]
    if missing:
        raise LayoutError(f"updates of requests {missing} are missing from {store.path}")
    return store.memmap()[:t]


def compute_geometry(store: UpdateStore, t: int) -> list[dict]:
    """Geometry rows 1..t from the store (basis u_1..u_t), with per-layer norms as `norm/<name>`."""
    if store.header is None or store.d == 0:
        return []
    table = geometry_table(_written_rows(store, t))
    for entry in table:
        entry.update({f"norm/{name}": value for name, value in store.layer_norms(entry["t"]).items()})
    return table


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


class GeometryRecorder:
    """What the runner calls after each request: store u_t, return the row's geometry keys, and write
    geometry.csv once the last request is served.

    Per request it costs one pass over u_1..u_t (the new Gram row and the column signs), never a rewrite of
    a whole file: the Gram matrix grows by one row and column, and geometry.csv, whose `_all` columns
    change with every update, is written once, in the basis of all T updates, when request T is recorded.
    A run stopped before T has none yet (`recompute_geometry` builds it from `updates.f32`); its resume
    writes it.
    """

    def __init__(self, directory: Path, num_requests: int, finished: int = 0):
        self.directory = Path(directory)
        self.store = UpdateStore(directory, num_requests, finished)
        self.not_applicable: str | None = None
        self._gram = np.zeros((0, 0))  # G of u_1..u_t after request t; rebuilt from the store on resume

    def record(self, t: int, layout, update: np.ndarray) -> dict:
        empty = dict.fromkeys(ROW_KEYS)
        if self.not_applicable is None:
            try:
                self.store.write(t, update, layout)
            except LayoutError as error:
                self.not_applicable = str(error)
        if self.not_applicable is not None or self.store.d == 0:
            return empty | {"geometry_note": self.not_applicable or "no trainable parameters"}
        rows = _written_rows(self.store, t)
        self._gram = self._grown_gram(rows)
        latest = latest_geometry_row(rows, self._gram)
        if t == self.store.num_requests:
            write_text_atomic(self.directory / GEOMETRY_FILE, geometry_csv(compute_geometry(self.store, t)))
        return empty | {key: latest[column] for key, column in ROW_KEYS.items()}

    def _grown_gram(self, rows: np.ndarray) -> np.ndarray:
        """G of `rows` grown one column at a time from the one kept, or from column 1 after a (re)start: the
        same arithmetic either way, so a resumed run's rows equal an uninterrupted run's to the last bit."""
        t = len(rows)
        start = len(self._gram) if len(self._gram) < t else 0
        G = np.zeros((t, t))
        G[:start, :start] = self._gram[:start, :start]
        for s in range(start + 1, t + 1):
            G[s - 1, :s] = G[:s, s - 1] = gram_column(rows[:s], rows[s - 1])
        return G


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


def recompute_geometry(run_dir: Path) -> list[dict]:
    """geometry.csv's rows recomputed from `updates.f32` + `updates.json` alone (every written row, basis = all)."""
    header = json.loads((Path(run_dir) / HEADER_FILE).read_text())
    store = UpdateStore(run_dir, header["T"])
    rows = store.rows_written
    if rows != list(range(1, len(rows) + 1)):
        raise LayoutError(f"rows {rows} of {store.path} are not 1..t")
    return compute_geometry(store, len(rows))
