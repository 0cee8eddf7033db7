"""Streams: manifests are pure functions of their arguments; forget sets are disjoint; bad streams refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from unlearnbench.registry import STREAMS
from unlearnbench.streams import RequestStream, StreamError
from unlearnbench.streams.base import reads_memorization
from unlearnbench.streams.batches import BatchMode

SIZES = {
    "classwise": 2,
    "random": 0.05,
    "memorized_most": 0.05,
    "memorized_least": 0.05,
    "memorized_mixed": 0.05,
    "interleaved": 0.05,
}


def make_stream(dataset, kind: str, requests: int, size: float, seed: int) -> RequestStream:
    """A stream of any registered kind; a kind that reads the memorization estimate gets a fixed one (its manifest
    is a pure function of it: tests/test_memorized.py checks the estimate the runner stores)."""
    memorization = np.random.default_rng(0).random(len(dataset.train)) if reads_memorization(kind) else None
    return RequestStream(dataset, kind, requests, size, seed=seed, memorization=memorization)


def test_every_kind_has_a_size_here():
    assert set(SIZES) == set(STREAMS.names())


@pytest.mark.parametrize("kind", STREAMS.names())
def test_manifest_is_a_pure_function_of_its_arguments(digits, kind):
    first = make_stream(digits, kind, 3, SIZES[kind], seed=7).manifest()
    again = make_stream(digits, kind, 3, SIZES[kind], seed=7).manifest()
    other_seed = make_stream(digits, kind, 3, SIZES[kind], seed=8).manifest()
    assert json.dumps(first) == json.dumps(again)
    assert first["requests"] != other_seed["requests"]


@pytest.mark.parametrize("kind", STREAMS.names())
def test_forget_sets_are_disjoint_and_retain_is_the_rest(digits, kind):
    """Retain = every train sample released by request t (all of them, but on a kind whose data arrive over the
    stream) minus F_1..F_t; the oracle leaves out exactly the rest; a forget set was released before its request."""
    stream = make_stream(digits, kind, 4, SIZES[kind], seed=3)
    seen: set[int] = set()
    all_train = set(range(len(digits.train)))
    for request in stream.requests:
        forget = set(request.forget.tolist())
        assert forget and not forget & seen
        seen |= forget
        unseen = set(request.unseen.tolist())
        assert set(request.forgotten.tolist()) == seen and not forget & unseen
        assert set(request.retain.tolist()) == all_train - seen - unseen
        assert set(request.excluded.tolist()) == seen | unseen


@pytest.mark.parametrize("kind", STREAMS.names())
def test_a_kind_declares_what_its_requests_are(digits, kind):
    """`class_based` says whether requests name their classes; the kind, not its name, decides that."""
    stream_kind = STREAMS.get(kind)()
    stream = make_stream(digits, kind, 3, SIZES[kind], seed=1)
    assert all((request.forget_classes is not None) == stream_kind.class_based for request in stream.requests)
    assert all((len(request.test_forget) > 0) == stream_kind.class_based for request in stream.requests)
    description = stream_kind.describe_size(SIZES[kind])
    assert f"{SIZES[kind] * (1 if stream_kind.class_based else 100):g}" in description and "per request" in description


def test_classwise_forgets_whole_classes_and_splits_test_by_class(digits):
    stream = RequestStream(digits, "classwise", 3, 2, seed=0)
    labels, test_labels = digits.train.labels.numpy(), digits.test.labels.numpy()
    forgotten_classes: set[int] = set()
    for request in stream.requests:
        assert len(request.forget_classes) == 2
        assert set(labels[request.forget]) == set(request.forget_classes)
        assert np.isin(labels, request.forget_classes).sum() == len(request.forget)
        forgotten_classes |= set(request.forget_classes)
        assert set(test_labels[request.test_forget]) == forgotten_classes
        assert not set(test_labels[request.test_retain]) & forgotten_classes
        assert len(request.test_forget) + len(request.test_retain) == len(test_labels)


def test_random_draws_the_requested_fraction(digits):
    stream = RequestStream(digits, "random", 5, 0.01, seed=0)
    expected = round(0.01 * len(digits.train))
    assert all(len(r.forget) == expected for r in stream.requests)
    assert all(r.forget_classes is None and len(r.test_retain) == len(digits.test) for r in stream.requests)


@pytest.mark.parametrize(
    ("kind", "requests", "size", "message"),
    [
        ("classwise", 10, 1, "classes"),
        ("classwise", 3, 4, "classes"),
        ("classwise", 2, 1.5, "whole number"),
        ("random", 10, 0.1, "requests x size < 1"),
        ("random", 2, 1.2, "fraction in (0, 1)"),
        ("random", 2, 0.0, "fraction in (0, 1)"),
        ("classwise", 0, 1, "requests must be >= 1"),
    ],
)
def test_impossible_streams_are_refused(digits, kind, requests, size, message):
    with pytest.raises(StreamError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RequestStream(digits, kind, requests, size, seed=0)


@pytest.mark.parametrize("mode", list(BatchMode))
def test_batches_follow_the_declared_mode(digits, mode):
    stream = RequestStream(digits, "random", 2, 0.05, seed=0)
    request = stream.select(2)
    stream.configure_batches(mode, 64)
    batches = list(stream.train_dataloader())
    assert len(batches) == len(stream.train_dataloader())
    forget_seen = np.concatenate([b["forget"].idx.numpy() for b in batches if "forget" in b] or [np.zeros(0)])
    retain_seen = np.concatenate([b["retain"].idx.numpy() for b in batches if "retain" in b] or [np.zeros(0)])
    assert np.isin(forget_seen, request.forget).all() and np.isin(retain_seen, request.retain).all()
    if mode in (BatchMode.RETAIN, BatchMode.MIXED):
        assert sorted(retain_seen.tolist()) == sorted(request.retain.tolist())
    if mode in (BatchMode.FORGET, BatchMode.MIXED):
        assert sorted(forget_seen.tolist()) == sorted(request.forget.tolist())
    if mode is BatchMode.PAIRED:
        assert all(len(b["forget"].y) and len(b["retain"].y) for b in batches)
        assert set(forget_seen.tolist()) == set(request.forget.tolist())


def test_method_view_hides_the_test_set_and_future_requests(digits):
    stream = RequestStream(digits, "classwise", 3, 1, seed=0)
    request = stream.select(2)
    view = stream.view()
    assert [f.tolist() for f in view.past_forget_sets()] == [stream.requests[0].forget.tolist()]
    public = request.public()
    assert not hasattr(public, "test_forget") and not hasattr(public, "test_retain")
    with pytest.raises(ValueError, match="outside"):
        view.loader("forget", indices=stream.requests[2].forget)


def test_eval_and_train_transforms_are_kept_apart(digits):
    stream = RequestStream(digits, "classwise", 1, 1, seed=0)
    stream.select(1)
    eval_a = next(iter(stream.view().loader("retain"))).x
    eval_b = next(iter(stream.view().loader("retain"))).x
    assert eval_a.equal(eval_b), "eval transforms are deterministic"
    augmented = next(iter(stream.loader(stream.current.retain[:512], batch_size=512, augment=True)))
    plain = digits.normalize(digits.train.images[augmented.idx])
    assert not augmented.x.equal(plain), "training batches are augmented"


def test_forget_then_retain_serves_every_forget_batch_before_any_retain_batch(digits):
    stream = RequestStream(digits, "classwise", 2, 1, seed=0)
    request = stream.select(1)
    stream.configure_batches(BatchMode.FORGET_THEN_RETAIN, 64)
    batches = list(stream.train_dataloader())
    sides = [next(iter(b)) for b in batches]
    assert all(len(b) == 1 for b in batches), "each step sees one side only"
    n_forget = -(-len(request.forget) // 64)
    assert sides == ["forget"] * n_forget + ["retain"] * (-(-len(request.retain) // 64))
    assert len(batches) == len(stream.train_dataloader())
    forget_seen = np.concatenate([b["forget"].idx.numpy() for b in batches[:n_forget]])
    retain_seen = np.concatenate([b["retain"].idx.numpy() for b in batches[n_forget:]])
    assert sorted(forget_seen.tolist()) == sorted(request.forget.tolist())
    assert sorted(retain_seen.tolist()) == sorted(request.retain.tolist())
