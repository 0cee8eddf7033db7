"""`RequestStream`: the sequence of unlearning requests, and what a method may see of it.

The manifest (every index list of every request) is a pure function of (dataset, kind,
num_requests, size, seed) through one explicit `numpy.random.Generator`, so every method on the
same stream faces exactly the same requests; a memorization-stratified kind (`streams.memorized`) also
reads the train set's memorization estimate, stored data the runner hands it, and its manifest names it
by digest. As in Avalanche, a method only sees an
`UnlearningRequest` and a `StreamView`: the current and past forget sets and the retain set, never
the test set, future requests or the oracle.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace

import lightning as L
import numpy as np
import torch

from unlearnbench.data.base import ImageDataset, InMemoryLoader
from unlearnbench.registry import STREAMS
from unlearnbench.seeds import batch_order_seed
from unlearnbench.streams.batches import BatchMode, RequestBatches
from unlearnbench.streams.kinds import StreamError

__all__ = [
    "Request",
    "RequestStream",
    "StreamError",
    "StreamView",
    "UnlearningRequest",
    "check_stream",
    "reads_memorization",
]


@dataclass(frozen=True, eq=False)
class UnlearningRequest:
    """The part of request t a method may see (train indices only)."""

    t: int
    forget: np.ndarray
    forgotten: np.ndarray
    retain: np.ndarray
    forget_classes: tuple[int, ...] | None


@dataclass(frozen=True, eq=False)
class Request(UnlearningRequest):
    """Request t as the evaluator sees it: adds the test indices of forgotten / retained classes."""

    test_forget: np.ndarray
    test_retain: np.ndarray
    #: train indices not yet released at request t (`streams.interleaved`): neither forget nor retain, never trained on
    unseen: np.ndarray = field(default_factory=lambda: np.array([], dtype=np.int64))

    def public(self) -> UnlearningRequest:
        return UnlearningRequest(**{f.name: getattr(self, f.name) for f in fields(UnlearningRequest)})

    @property
    def excluded(self) -> np.ndarray:
        """What request t's oracle is trained without: everything forgotten so far and everything not yet released
        (= `forgotten` on a stream whose data were all learned before it began)."""
        return np.union1d(self.forgotten, self.unseen)


def reads_memorization(kind: str) -> bool:
    """Whether the stream kind draws its requests from the train set's memorization estimate (`streams.memorized`),
    which the runner then computes or reads from the model store before building the stream."""
    return getattr(STREAMS.get(kind), "reads_memorization", False)


def check_stream(dataset: ImageDataset, kind: str, num_requests: int, size: float) -> None:
    """Refuses a stream that cannot exist on `dataset` (a `StreamError`), before anything is built."""
    if num_requests < 1:
        raise StreamError(f"requests must be >= 1, got {num_requests}")
    STREAMS.get(kind)().validate(len(dataset.train), dataset.num_classes, num_requests, size)


def build_requests(
    dataset: ImageDataset,
    kind: str,
    num_requests: int,
    size: float,
    seed: int,
    memorization: np.ndarray | None = None,
) -> list[Request]:
    """The stream's requests: a pure function of its arguments (validated first); `memorization`, the train set's
    memorization estimate, for a kind that `reads_memorization` (and only for one)."""
    check_stream(dataset, kind, num_requests, size)
    stream_kind = STREAMS.get(kind)()
    if reads_memorization(kind) != (memorization is not None):
        raise StreamError(f"stream kind {kind!r} {'needs' if reads_memorization(kind) else 'takes no'} memorization")
    train_labels = dataset.train.labels.cpu().numpy()
    test_labels = dataset.test.labels.cpu().numpy()
    inputs = {} if memorization is None else {"memorization": memorization}
    forget_sets = stream_kind.build(
        train_labels, dataset.num_classes, num_requests, size, np.random.default_rng(seed), **inputs
    )
    requests, forgotten, classes_so_far = [], np.array([], dtype=np.int64), ()
    all_train = np.arange(len(train_labels))
    for t, forget_set in enumerate(forget_sets, start=1):
        forget = np.asarray(forget_set.indices, dtype=np.int64)
        forgotten = np.union1d(forgotten, forget)
        classes_so_far += forget_set.classes or ()
        test_forget = np.flatnonzero(np.isin(test_labels, classes_so_far))
        unseen = np.array([], dtype=np.int64) if forget_set.unseen is None else np.sort(forget_set.unseen)
        requests.append(
            Request(
                t=t,
                forget=forget,
                forgotten=forgotten,
                retain=np.setdiff1d(np.setdiff1d(all_train, forgotten, assume_unique=True), unseen, assume_unique=True),
                forget_classes=forget_set.classes,
                test_forget=test_forget,
                test_retain=np.setdiff1d(np.arange(len(test_labels)), test_forget, assume_unique=True),
                unseen=unseen.astype(np.int64),
            )
        )
    return requests


class StreamView:
    """What a method's `prepare` may load: the current request's forget/retain sets and past forget sets."""

    def __init__(self, stream: RequestStream):
        self._stream = stream

    @property
    def num_classes(self) -> int:
        return self._stream.dataset.num_classes

    @property
    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(mean, std) per channel: batches hold (pixel/255 − mean)/std, so x·std + mean is in [0, 1]."""
        return self._stream.dataset.mean, self._stream.dataset.std

    def past_forget_sets(self) -> list[np.ndarray]:
        """F_1 .. F_{t-1}: what continual methods may remember of earlier requests (none for a request served alone)."""
        return [request.forget for request in self._stream.past]

    def loader(self, which: str, *, batch_size: int = 512, augment: bool = False, indices=None) -> InMemoryLoader:
        """Eval-transform (or augmented) batches of `forget`, `retain`, or given train indices of them."""
        allowed = {"forget": self._stream.current.forget, "retain": self._stream.current.retain}
        chosen = allowed[which] if indices is None else np.asarray(indices)
        if not np.isin(chosen, allowed[which]).all():
            raise ValueError(f"indices outside the current {which} set")
        return self._stream.loader(chosen, batch_size=batch_size, augment=augment)


class NarrowedView(StreamView):
    """The request's view with its forget set narrowed to `subset` (what one stage of a meta-method such as RUM sees)."""

    def __init__(self, view: StreamView, subset: np.ndarray):
        super().__init__(view._stream)
        self.subset = subset

    def loader(self, which: str, *, indices=None, **kwargs) -> InMemoryLoader:
        narrowed = self.subset if which == "forget" and indices is None else indices
        return super().loader(which, indices=narrowed, **kwargs)


class RequestStream(L.LightningDataModule):
    """T unlearning requests over one dataset; `select(t)` makes request t current.

    The train dataloader yields the current request's batches in the `BatchMode` the method
    declared (set with `configure_batches`); loaders are reseeded from (seed, t), so a fit that
    resumes after a crash sees exactly the same batches.
    """

    def __init__(
        self,
        dataset: ImageDataset,
        kind: str,
        num_requests: int,
        size: float | None = None,
        seed: int = 0,
        batch_seed: int | None = None,
        memorization: np.ndarray | None = None,
    ):
        """`seed` draws the manifest; `batch_seed` (default `seed`), the unlearning's batch order; `memorization`, the
        train set's memorization estimate, for a kind that reads it (`reads_memorization`)."""
        super().__init__()
        self.dataset = dataset
        self.kind = kind
        self.num_requests = num_requests
        self.size = STREAMS.get(kind).default_size if size is None else size
        self.seed = seed
        self.batch_seed = seed if batch_seed is None else batch_seed
        self.requests = build_requests(dataset, kind, num_requests, self.size, seed, memorization)
        #: which estimate the requests were drawn from (None: the kind reads none), recorded in the manifest
        self.memorization_digest = (
            None
            if memorization is None
            else hashlib.sha256(np.asarray(memorization, dtype=np.float64).tobytes()).hexdigest()
        )
        self.current: Request = self.requests[0]
        #: the requests served before `current` (what `StreamView.past_forget_sets` shows)
        self.past: list[Request] = []
        self.batch_mode = BatchMode.RETAIN
        self.batch_size = 64

    @property
    def pretraining_excluded(self) -> np.ndarray:
        """The train indices the pretrained model is trained without: those not released before request 1 (none on a
        stream whose data were all learned before it began)."""
        return self.requests[0].unseen

    def released_before(self, t: int) -> np.ndarray:
        """The train indices released between request t − 1 and request t, which the model learns before serving t
        (`Runner.learn`); none at t = 1 and on every kind whose data do not arrive over the stream."""
        if t == 1:
            return np.array([], dtype=np.int64)
        return np.setdiff1d(self.requests[t - 2].unseen, self.requests[t - 1].unseen, assume_unique=True)

    @property
    def learns_between_requests(self) -> bool:
        """Whether new train data arrive over the stream (`streams.interleaved`): its rows then record the model's age."""
        return len(self.pretraining_excluded) > 0

    def age(self, t: int) -> int:
        """The model's age at request t: the learning steps taken before it (releases of new data since request 1)."""
        return sum(len(self.released_before(s)) > 0 for s in range(2, t + 1))

    def learning_set(self, t: int, seed: int) -> np.ndarray:
        """The train indices the learning step before request t fits on (`StreamKind.learning_set`): the release, and
        what the kind replays of request t − 1's retain set (never a forgotten sample); none where nothing arrived."""
        released = self.released_before(t)
        if not len(released):
            return released
        return STREAMS.get(self.kind)().learning_set(released, self.requests[t - 2].retain, np.random.default_rng(seed))

    def select(self, t: int) -> Request:
        self.current, self.past = self.requests[t - 1], self.requests[: t - 1]
        return self.current

    def alone(self, t: int) -> Request:
        """Request t as if it were the only request ever made: forget F_t, retain = train minus F_t alone.

        The plasticity-collapse paper's "single-task unlearning", the baseline of the forward-failure
        gain: the forget set and the seeds are request t's, and the test split is divided by F_t's own
        classes (class-wise), not by every class forgotten up to t.
        """
        request = self.requests[t - 1]
        test_labels = self.dataset.test.labels.cpu().numpy()
        test_forget = np.flatnonzero(np.isin(test_labels, request.forget_classes or ()))
        return replace(
            request,
            forgotten=request.forget,
            retain=np.setdiff1d(np.arange(len(self.dataset.train)), request.forget),
            test_forget=test_forget,
            test_retain=np.setdiff1d(np.arange(len(test_labels)), test_forget, assume_unique=True),
        )

    @contextmanager
    def serving(self, request: Request, past: list[Request]) -> Iterator[Request]:
        """Inside the block `request` is current with `past` before it (a counterfactual fit); the selected
        request and its past are restored after it."""
        selected = self.current, self.past
        self.current, self.past = request, past
        try:
            yield request
        finally:
            self.current, self.past = selected

    def configure_batches(self, mode: BatchMode | str, batch_size: int) -> None:
        self.batch_mode = BatchMode(mode)
        self.batch_size = batch_size

    def view(self) -> StreamView:
        return StreamView(self)

    def loader(self, indices: np.ndarray, *, batch_size: int, augment: bool, batches: str = "other") -> InMemoryLoader:
        return self.dataset.loader(
            self.dataset.train,
            torch.as_tensor(indices, dtype=torch.long),
            batch_size,
            augment=augment,
            shuffle=augment,
            seed=batch_order_seed(self.batch_seed, self.current.t, batches),
        )

    def train_dataloader(self) -> RequestBatches:
        forget = self.loader(self.current.forget, batch_size=self.batch_size, augment=True, batches="forget")
        retain = self.loader(self.current.retain, batch_size=self.batch_size, augment=True, batches="retain")
        return RequestBatches(forget, retain, self.batch_mode)

    def manifest(self) -> dict:
        """Every index list of the stream, as saved in `manifest.json`."""
        return {
            "dataset": self.dataset.name,
            "kind": self.kind,
            "num_requests": self.num_requests,
            "size": self.size,
            "seed": self.seed,
            "num_train": len(self.dataset.train),
            "num_test": len(self.dataset.test),
            # only a kind that reads it: every other manifest is byte for byte what it was
            **({} if self.memorization_digest is None else {"memorization": self.memorization_digest}),
            # only a kind whose data arrive over the stream: the part held out of pretraining, and each release
            **({"held_out": self.pretraining_excluded.tolist()} if self.learns_between_requests else {}),
            "requests": [
                {
                    "t": request.t,
                    "forget": request.forget.tolist(),
                    "forget_classes": list(request.forget_classes) if request.forget_classes else None,
                    "test_forget": request.test_forget.tolist(),
                    **({"released": self.released_before(request.t).tolist()} if self.learns_between_requests else {}),
                }
                for request in self.requests
            ],
        }
