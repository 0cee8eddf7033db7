"""Update geometry (docs/diagnostics.md): per-layer norms of u_t and ER/CO from the T x T Gram matrix.

The updates are stored in, and geometry.csv written to, the files `geometry_files.py` owns.

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

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unlearnbench.geometry_files import (
    COLUMNS,
    LayoutError,
    UpdateStore,
    release_pages,
    write_geometry_csv,
)

RANKS = (1, 2, 3)
ENERGY = 0.9
#: Bytes of float64 per Gram chunk (t x chunk): keeps the peak small whatever d is.
CHUNK_BYTES = 64 * 2**20


# --------------------------------------------------------------------------------------------
# Gram-based ER / CO


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
            write_geometry_csv(self.directory, compute_geometry(self.store, t))
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


def recompute_geometry(run_dir: Path) -> list[dict]:
    """geometry.csv's rows recomputed from `updates.f32` + `updates.json` alone (every written row, basis = all)."""
    store = UpdateStore.of_run(run_dir)
    rows = store.rows_written
    if rows != list(range(1, len(rows) + 1)):
        raise LayoutError(f"rows {rows} of {store.path} are not 1..t")
    return compute_geometry(store, len(rows))
