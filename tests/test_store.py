"""Model store: content keys, atomic verified writes, weights-only loads, train-once under a lock."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading

import pytest
import torch

from unlearnbench.store import ModelSpec, ModelStore

SPEC = ModelSpec("digits", "smallcnn", {"epochs": 1}, seed=0, excluded=(3, 1, 2))


def _state() -> dict[str, torch.Tensor]:
    return {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)}


def test_key_depends_on_every_input_but_not_on_index_order():
    assert SPEC.key() == ModelSpec("digits", "smallcnn", {"epochs": 1}, 0, (1, 2, 3)).key()
    for other in (
        ModelSpec("digits", "smallcnn", {"epochs": 2}, 0, (1, 2, 3)),
        ModelSpec("digits", "smallcnn", {"epochs": 1}, 1, (1, 2, 3)),
        ModelSpec("digits", "smallcnn", {"epochs": 1}, 0, (1, 2)),
        ModelSpec("digits", "other", {"epochs": 1}, 0, (1, 2, 3)),
    ):
        assert other.key() != SPEC.key()


def test_trains_once_then_loads(tmp_path):
    store, calls = ModelStore(tmp_path), []
    first = store.get_or_train(SPEC, lambda: calls.append(1) or _state())
    second = ModelStore(tmp_path).get_or_train(SPEC, lambda: calls.append(1) or _state())
    assert calls == [1]
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not list(tmp_path.glob("*.tmp")), "no temp files left behind"


@pytest.mark.parametrize("damage", ["truncate", "edit", "missing_meta"])
def test_a_damaged_entry_is_retrained_never_loaded(tmp_path, damage):
    store = ModelStore(tmp_path)
    store.get_or_train(SPEC, _state)
    weights, meta = tmp_path / f"{SPEC.key()}.pt", tmp_path / f"{SPEC.key()}.json"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:50])
    elif damage == "edit":
        data = bytearray(weights.read_bytes())
        data[-20] ^= 0xFF
        weights.write_bytes(bytes(data))
    else:
        meta.unlink()
    assert store.load(SPEC) is None
    retrained = store.get_or_train(SPEC, lambda: {"w": torch.zeros(1)})
    assert torch.equal(retrained["w"], torch.zeros(1))
    assert json.loads(meta.read_text())["sha256"]


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_pickle_that_runs_code_is_refused_even_with_a_matching_hash(tmp_path):
    store = ModelStore(tmp_path)
    store.get_or_train(SPEC, _state)
    weights, meta = tmp_path / f"{SPEC.key()}.pt", tmp_path / f"{SPEC.key()}.json"
    payload = pickle.dumps({"w": _RunsCode()})
    weights.write_bytes(payload)
    meta.write_text(json.dumps({"sha256": hashlib.sha256(payload).hexdigest()}))
    assert store.load(SPEC) is None
    assert torch.equal(store.get_or_train(SPEC, _state)["b"], torch.ones(3))


def test_parallel_callers_train_once(tmp_path):
    calls, results = [], []

    def train():
        calls.append(1)
        return _state()

    threads = [
        threading.Thread(target=lambda: results.append(ModelStore(tmp_path).get_or_train(SPEC, train)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 4
