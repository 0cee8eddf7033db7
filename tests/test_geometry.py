"""Gram-based ER/CO against an explicit SVD; the on-disk update store and its resume behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from unlearnbench.evaluation.geometry import (
    ROW_KEYS,
    GeometryRecorder,
    Spectrum,
    compute_geometry,
    geometry_table,
    gram,
    online_energy_ratio,
)
from unlearnbench.evaluation.updates import parameter_update, snapshot
from unlearnbench.geometry_files import GEOMETRY_FILE, UpdateStore, read_geometry_csv


def explicit(U: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """ER (per column) and sign-fixed CO (t x r) from an explicit SVD of the d x t matrix U."""
    Q, _, _ = np.linalg.svd(U, full_matrices=False)
    Q = Q[:, :r]
    Q = Q * np.sign(Q[np.argmax(np.abs(Q), axis=0), np.arange(Q.shape[1])])
    co = Q.T @ U
    er = np.sum(co**2, axis=0) / np.sum(U**2, axis=0)
    return er, co.T


def random_rows(t: int = 7, d: int = 500, seed: int = 0) -> np.ndarray:
    """t x d rows with a decaying spectrum (so the top directions are well separated)."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(t, t)) * np.geomspace(5, 0.5, t)) @ rng.normal(size=(t, d))


@pytest.mark.parametrize("r", [1, 2, 3])
def test_gram_er_and_co_equal_explicit_svd(r):
    rows = random_rows()
    table = geometry_table(rows, chunk_bytes=8 * 7 * 64)  # many chunks
    er, co = explicit(rows.T, r)
    assert np.max(np.abs(np.array([e[f"er_all_r{r}"] for e in table]) - er)) < 1e-8
    ours = np.array([[e[f"co_all_{j}"] for j in range(1, r + 1)] for e in table])
    assert np.max(np.abs(ours - co)) < 1e-8
    # Up to column sign, an unsigned explicit SVD agrees as well.
    Q = np.linalg.svd(rows.T, full_matrices=False)[0][:, :r]
    assert np.max(np.abs(np.abs(ours) - np.abs(rows @ Q))) < 1e-8


def test_gram_is_chunk_independent_and_r90():
    rows = random_rows(5, 301, seed=1)
    np.testing.assert_allclose(gram(rows, chunk_bytes=8 * 5 * 7), rows @ rows.T, atol=1e-9)
    spectrum = Spectrum.of(gram(rows))
    energy = np.cumsum(spectrum.sigma**2) / np.sum(spectrum.sigma**2)
    r90 = spectrum.r_energy()
    assert energy[r90 - 1] >= 0.9 and (r90 == 1 or energy[r90 - 2] < 0.9)
    table = geometry_table(rows)
    er, _ = explicit(rows.T, r90)
    assert np.max(np.abs(np.array([e["er_all_r90"] for e in table]) - er)) < 1e-8


def test_er_is_one_when_r_reaches_t():
    rows = random_rows(3, 50, seed=2)
    table = geometry_table(rows)
    for entry in table:
        assert entry["er_all_r3"] == pytest.approx(1.0, abs=1e-12)
    # rank-deficient U: r >= rank suffices
    deficient = np.stack([rows[0], 2 * rows[0], -rows[0]])
    for entry in geometry_table(deficient):
        assert entry["er_all_r1"] == pytest.approx(1.0, abs=1e-12)
        assert entry["er_all_r2"] == pytest.approx(1.0, abs=1e-12)


def test_online_er_uses_only_earlier_updates():
    rows = random_rows(6, 200, seed=3)
    G = gram(rows)
    for t in range(2, 7):
        for r in (1, 2):
            k = min(r, t - 1)
            past = rows[: t - 1].T
            Q = np.linalg.svd(past, full_matrices=False)[0][:, :k]
            expected = np.sum((Q.T @ rows[t - 1]) ** 2) / np.sum(rows[t - 1] ** 2)
            assert abs(online_energy_ratio(G, t, r)[0] - expected) < 1e-8
    table = geometry_table(rows)
    assert table[0]["er_online_r1"] is None
    # u_t inside the span of the past updates: online ER over that span is 1
    inside = np.vstack([rows[:3], rows[0] - 2 * rows[2]])
    assert geometry_table(inside)[3]["er_online_r3"] == pytest.approx(1.0, abs=1e-10)
    # ... the cosine with the previous update is reported
    expected_cos = rows[1] @ rows[0] / np.linalg.norm(rows[1]) / np.linalg.norm(rows[0])
    assert table[1]["cos_prev"] == pytest.approx(expected_cos)


def test_zero_updates_have_undefined_er():
    rows = np.zeros((3, 20))
    rows[1, 3] = 1.0
    table = geometry_table(rows)
    assert table[0]["er_all_r1"] is None and table[0]["update_norm"] == 0.0
    assert table[1]["er_all_r1"] == pytest.approx(1.0)


def _layout(d1: int = 6, d2: int = 4):
    return [("a.weight", (2, d1 // 2)), ("b.bias", (d2,))]


def test_update_store_rows_are_idempotent_and_survive_reopening(tmp_path):
    T, rows = 4, random_rows(4, 10, seed=4).astype(np.float32)
    store = UpdateStore(tmp_path, T)
    store.write(1, rows[0], _layout())
    store.write(2, rows[1], _layout())
    store.write(2, rows[1] + 1, _layout())  # a crash after writing u_2, then resume serves request 2 again
    store.write(2, rows[1], _layout())
    reopened = UpdateStore(tmp_path, T)
    assert reopened.rows_written == [1, 2]
    assert (tmp_path / "updates.f32").stat().st_size == T * 10 * 4
    np.testing.assert_array_equal(reopened.read(2), rows[1])
    reopened.write(3, rows[2], _layout())
    np.testing.assert_array_equal(reopened.memmap()[:3], rows[:3])
    norms = reopened.layer_norms(3)
    assert norms["a.weight"] == pytest.approx(np.linalg.norm(rows[2][:6]), rel=1e-6)
    assert norms["b.bias"] == pytest.approx(np.linalg.norm(rows[2][6:]), rel=1e-6)
    with pytest.raises(ValueError, match="changed"):
        reopened.write(4, rows[3][:8], _layout(4, 4))


def test_recorder_resume_gives_the_same_geometry_csv(tmp_path):
    T, rows = 5, random_rows(5, 12, seed=5).astype(np.float32)
    straight = GeometryRecorder(tmp_path / "a", T)
    for t in range(1, T + 1):
        last = straight.record(t, _layout(6, 6), rows[t - 1])
    crashed = GeometryRecorder(tmp_path / "b", T)
    for t in (1, 2, 3):
        crashed.record(t, _layout(6, 6), rows[t - 1])
    resumed = GeometryRecorder(tmp_path / "b", T)  # row 3 was written but never committed: serve it again
    for t in (3, 4, 5):
        again = resumed.record(t, _layout(6, 6), rows[t - 1])
    assert last == again
    a, b = (read_geometry_csv(tmp_path / x / GEOMETRY_FILE) for x in "ab")
    assert a == b and [row["t"] for row in a] == [1, 2, 3, 4, 5]
    assert set(a[0]) >= {"er_all_r1", "co_all_1", "er_online_r1", "norm/a.weight", "norm/b.bias"}
    assert compute_geometry(resumed.store, 5)[-1]["er_all_r1"] == pytest.approx(last["er_r1"])


def test_recorder_writes_geometry_csv_once_and_its_rows_equal_the_whole_recomputation(tmp_path):
    """O(1) bookkeeping per request: no geometry.csv before request T (its `_all` columns would change with
    every update); each row's keys from the grown Gram equal the last row of a from-scratch table."""
    T, rows = 6, random_rows(6, 30, seed=9).astype(np.float32)
    recorder = GeometryRecorder(tmp_path, T)
    for t in range(1, T + 1):
        keys = recorder.record(t, [("w", (30,))], rows[t - 1])
        assert (tmp_path / GEOMETRY_FILE).exists() == (t == T)
        scratch = geometry_table(rows[:t])[-1]
        for key, column in ROW_KEYS.items():
            assert (keys[key] is None) == (scratch[column] is None), key
            if scratch[column] is not None:
                assert keys[key] == pytest.approx(scratch[column], rel=1e-9, abs=1e-12), key
    assert [row["t"] for row in read_geometry_csv(tmp_path / GEOMETRY_FILE)] == list(range(1, T + 1))


def test_metrics_er_is_the_basis_at_request_t_and_geometry_csv_er_all_the_basis_of_every_update(tmp_path):
    """`er_r1` of request 1's metrics row is ER in the basis {u_1} (1 by construction); `er_all_r1` of row 1 of
    geometry.csv after request 3 is ER in the basis u_1..u_3: two quantities, two names."""
    rows = random_rows(3, 40, seed=6)
    recorder = GeometryRecorder(tmp_path, 3)
    metrics = [recorder.record(t, [("w", (40,))], rows[t - 1].astype(np.float32)) for t in (1, 2, 3)]
    assert metrics[0]["er_r1"] == pytest.approx(1.0)
    final = read_geometry_csv(tmp_path / GEOMETRY_FILE)
    er_all, _ = explicit(rows.astype(np.float32).astype(np.float64).T, 1)
    assert final[0]["er_all_r1"] == pytest.approx(er_all[0], abs=1e-6) and final[0]["er_all_r1"] < 0.99
    assert "er_r1" not in final[0] and "er_all_r1" not in metrics[0]
    for t in (1, 2, 3):  # each metrics row: ER in the basis u_1..u_t, computed independently
        er_t, _ = explicit(rows[:t].astype(np.float32).astype(np.float64).T, 1)
        assert metrics[t - 1]["er_r1"] == pytest.approx(er_t[-1], abs=1e-6)


def test_parameter_update_takes_trainable_parameters_only():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    model[1].weight.requires_grad_(False)
    before = snapshot(model)
    with torch.no_grad():
        model[0].weight += 1.0
        model[1].running_mean += 5.0  # a buffer: never part of u_t
    layout, update = parameter_update(before, model)
    assert [name for name, _ in layout] == ["0.weight", "0.bias", "1.bias"]
    assert update.dtype == np.float32 and update.shape == (6 + 2 + 2,)
    np.testing.assert_allclose(update, np.r_[np.ones(6), np.zeros(4)], atol=1e-6)


def test_geometry_parameters_hook_covers_updates_outside_the_model():
    class Projection(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 2).requires_grad_(False)
            self.U = None

        def geometry_parameters(self):
            return [("U", self.U)]

    method = Projection()
    before = snapshot(method)
    method.U = torch.ones(3, 2)  # created during the request: counts from zero
    layout, update = parameter_update(before, method)
    assert layout == [("U", (3, 2))] and update.tolist() == [1.0] * 6
    before = snapshot(method)
    method.U = method.U * 3
    assert parameter_update(before, method)[1].tolist() == [2.0] * 6


def test_runner_records_geometry_and_resume_matches_an_uninterrupted_run(tmp_path, shared_store, monkeypatch):
    from tests.conftest import run_tiny
    from unlearnbench.rundir import RunDirectory

    straight = run_tiny(
        tmp_path / "straight", shared_store, "finetune", requests=2, method_args={"optim": {"epochs": 1}}
    )
    original = RunDirectory.append_row

    def crash_at_2(self, row):
        if row.t == 2:
            raise KeyboardInterrupt("simulated crash after u_2 was written")
        original(self, row)

    monkeypatch.setattr(RunDirectory, "append_row", crash_at_2)
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path / "resumed", shared_store, "finetune", requests=2, method_args={"optim": {"epochs": 1}})
    monkeypatch.setattr(RunDirectory, "append_row", original)
    resumed = run_tiny(tmp_path / "resumed", shared_store, "finetune", requests=2, method_args={"optim": {"epochs": 1}})

    store = UpdateStore(resumed.run_dir, 2)
    assert store.rows_written == [1, 2]
    assert (resumed.run_dir / "updates.f32").stat().st_size == 2 * store.d * 4
    a = read_geometry_csv(straight.run_dir / GEOMETRY_FILE)
    b = read_geometry_csv(resumed.run_dir / GEOMETRY_FILE)
    assert [row["t"] for row in b] == [1, 2]
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:  # None (no online value at t = 1) must stay None; pytest.approx refuses None
            assert (x[key] is None) == (y[key] is None), key
            if x[key] is not None:
                assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-9), key
    for row in resumed.rows:
        scores = row.method
        assert scores["update_norm"] == pytest.approx(b[row.t - 1]["update_norm"], rel=1e-5)
        assert 0.0 <= scores["er_r1"] <= 1.0 + 1e-9
        assert 0.0 <= scores["lira_auc"] <= 1.0 and row.oracle["lira_auc"] is None
        assert 0.0 <= row.oracle["phi_auc"] <= 1.0
    assert resumed.rows[0].method["er_online_r1"] is None
    assert resumed.rows[1].method["er_r2"] == pytest.approx(1.0)
    assert "rememorization_events" in resumed.summary.scores


def test_the_geometry_of_a_finished_run_needs_no_torch():
    """ER/CO of `updates.f32` (10M parameters x 50 requests in benchmarks/perf.py P5) in a numpy-only process."""
    import subprocess
    import sys

    code = "import sys, unlearnbench.evaluation.geometry; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
