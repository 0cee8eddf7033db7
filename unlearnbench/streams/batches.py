"""How one request's training batches pair forget and retain samples.

A method declares one `BatchMode`; the stream builds the matching iterable. Every step yields
`{"forget": Batch, "retain": Batch}` (a side the mode does not use is absent):

- `retain` / `forget`: one epoch over that set only (FT; GA).
- `paired`: one forget batch and one retain batch per step; the epoch runs over the longer set
  and the shorter one is cycled, reshuffled at each pass (NegGrad+, SCRUB-style methods).
- `mixed`: one shuffled pass over forget ∪ retain, each batch split by membership, so the forget
  share of a batch follows its share of the data (RL and SalUn by default: SalUn's reference code
  concatenates the relabelled forget set and the retain set into one dataset, for CIFAR-10 in the
  code the paper's numbers were made with, for CIFAR-100 and Tiny-ImageNet still today).
- `forget_then_retain`: every forget batch (forget side only), then every retain batch (retain
  side only), one optimizer step each (RL's and SalUn's `batches` option: SalUn's reference
  `RL.py` on 10-class data since f31f82e, after the paper).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

import torch

from unlearnbench.data.base import Batch, InMemoryLoader, shard_for_rank, shard_size


class BatchMode(str, Enum):
    RETAIN = "retain"
    FORGET = "forget"
    PAIRED = "paired"
    MIXED = "mixed"
    FORGET_THEN_RETAIN = "forget_then_retain"


class RequestBatches:
    """The training iterable of one request for one `BatchMode`."""

    def __init__(self, forget: InMemoryLoader, retain: InMemoryLoader, mode: BatchMode):
        self.forget = forget
        self.retain = retain
        self.mode = BatchMode(mode)

    def __len__(self) -> int:
        if self.mode is BatchMode.RETAIN:
            return len(self.retain)
        if self.mode is BatchMode.FORGET:
            return len(self.forget)
        if self.mode is BatchMode.PAIRED:
            return max(len(self.forget), len(self.retain))
        if self.mode is BatchMode.FORGET_THEN_RETAIN:
            return len(self.forget) + len(self.retain)
        return -(-shard_size(len(self.forget.indices) + len(self.retain.indices)) // self.retain.batch_size)

    def __iter__(self) -> Iterator[dict[str, Batch]]:
        if self.mode is BatchMode.RETAIN:
            return ({"retain": batch} for batch in self.retain)
        if self.mode is BatchMode.FORGET:
            return ({"forget": batch} for batch in self.forget)
        if self.mode is BatchMode.PAIRED:
            return self._paired()
        if self.mode is BatchMode.FORGET_THEN_RETAIN:
            return self._forget_then_retain()
        return self._mixed()

    def _paired(self) -> Iterator[dict[str, Batch]]:
        longer, shorter = ("forget", "retain") if len(self.forget) >= len(self.retain) else ("retain", "forget")
        loaders = {"forget": self.forget, "retain": self.retain}
        cycled = _reshuffled_cycle(loaders[shorter])
        for batch in loaders[longer]:
            yield {longer: batch, shorter: next(cycled)}

    def _forget_then_retain(self) -> Iterator[dict[str, Batch]]:
        yield from ({"forget": batch} for batch in self.forget)
        yield from ({"retain": batch} for batch in self.retain)

    def _mixed(self) -> Iterator[dict[str, Batch]]:
        union = torch.cat([self.forget.indices, self.retain.indices])
        is_forget = torch.zeros(len(self.retain.split), dtype=torch.bool, device=union.device)
        is_forget[self.forget.indices] = True
        order = union[torch.randperm(len(union), generator=self.retain.generator, device=union.device)]
        for chunk in shard_for_rank(order).split(self.retain.batch_size):
            member = is_forget[chunk]
            yield {"forget": self.forget.batch(chunk[member]), "retain": self.retain.batch(chunk[~member])}


def _reshuffled_cycle(loader: InMemoryLoader) -> Iterator[Batch]:
    while True:
        yield from loader
