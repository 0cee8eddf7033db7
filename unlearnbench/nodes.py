"""A run on several machines (nodes): node 0 leads, every other node follows it fit for fit.

Lightning spreads a fit over `num_nodes × devices` processes when every node calls `Trainer.fit`
at the same time. The runner is one process per node that starts its fit's workers itself (see
`Runner.strategy`), so a run on several nodes is the same command started on every node. Node 0,
the leader, does everything a one-node run does: the model store, the run directory, evaluation.
A follower makes the same fits in the same order (pretraining and oracles it must train,
`prepare` and the unlearning fit of every request) and writes nothing; after each fit its weights
equal the leader's, because DDP keeps every rank's weights equal.

Two things a follower cannot decide alone, because other processes may change the files at any
moment: where the run resumes, and whether a model must be trained or is already in the store.
The leader announces each on a key-value store (`torch.distributed.TCPStore`, served by the
leader at MASTER_ADDR:MASTER_PORT+1; the fits use MASTER_PORT itself) and the follower waits
for it, then trains with the leader or reads the same file. The model store and the run
directory must therefore be on a filesystem every node sees, as for sharded suites.

Every node needs MASTER_ADDR (node 0's address), MASTER_PORT (a free port there) and NODE_RANK
(0 … num_nodes − 1); a SLURM script sets them from `scontrol show hostnames` and SLURM_NODEID.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from unlearnbench.config import ConfigError
from unlearnbench.store import ModelSpec, ModelStore, Shapes

#: How long a follower waits for the leader between two fits: the leader may be waiting for the
#: store's file lock while another process (a suite shard) trains the model it needs.
FOLLOWER_TIMEOUT = timedelta(hours=24)
#: How long a node tries to reach the channel: a leader that failed to start must not keep its
#: followers waiting for a day.
CONNECT_TIMEOUT = timedelta(minutes=10)
ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
TRAIN, LOAD = "train", "load"

_channels: dict[tuple[str, int], dist.TCPStore] = {}


@dataclass
class NodeGroup:
    """This process's place among the nodes of a run; one node (the default) needs no channel."""

    rank: int = 0
    size: int = 1
    address: str = ""
    port: int = 0
    #: the run's name: every key is announced under it, so the runs of a suite never mix theirs
    scope: str = ""
    decisions: int = field(default=0, repr=False)

    @classmethod
    def from_environment(cls, num_nodes: int, scope: str) -> NodeGroup:
        """Read NODE_RANK, MASTER_ADDR and MASTER_PORT; raises ConfigError naming what is missing."""
        if num_nodes == 1:
            return cls(scope=scope)
        missing = [name for name in ENVIRONMENT if not os.environ.get(name)]
        if missing:
            raise ConfigError(
                f"--num_nodes {num_nodes} needs {', '.join(missing)} set on every node "
                "(MASTER_ADDR/MASTER_PORT: node 0's address and a free port; NODE_RANK: 0..num_nodes-1)"
            )
        rank, port = os.environ["NODE_RANK"], os.environ["MASTER_PORT"]
        if not (rank.isdigit() and int(rank) < num_nodes):
            raise ConfigError(f"NODE_RANK must be an integer in 0..{num_nodes - 1}, got {rank!r}")
        if not (port.isdigit() and 0 < int(port) < 65535):
            raise ConfigError(f"MASTER_PORT must be a port number below 65535, got {port!r}")
        return cls(int(rank), num_nodes, os.environ["MASTER_ADDR"], int(port), scope)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def _channel(self) -> dist.TCPStore:
        """One TCPStore per process, opened on first use (so building a Runner opens no socket)."""
        where = (self.address, self.port + 1)
        if where not in _channels:
            channel = dist.TCPStore(
                self.address, self.port + 1, is_master=self.leader, timeout=CONNECT_TIMEOUT, wait_for_workers=False
            )
            channel.set_timeout(FOLLOWER_TIMEOUT)
            _channels[where] = channel
        return _channels[where]

    def decide(self, key: str, value: object) -> str:
        """The leader's `value` under `key`, on every node: the leader announces it and a follower waits for it
        (a follower's own `value` is ignored: what it stands for is what a follower cannot know)."""
        if self.leader:
            self.announce(key, value)
            return str(value)
        return self.wait(key)

    def announce(self, key: str, value: object) -> None:
        """Leader: publish `value` under `key` (each key once per run)."""
        if self.size > 1:
            self._channel().set(f"{self.scope}/{key}", str(value))

    def wait(self, key: str) -> str:
        """Follower: the value the leader announced under `key`, waiting for it if need be."""
        return self._channel().get(f"{self.scope}/{key}").decode()

    def part(self) -> None:
        """End of a run on several nodes: no node leaves while another may still need the channel.

        The leader serves the channel, so it stays until every follower has said goodbye (a follower
        of an already complete run may connect only after the leader has announced and finished);
        a follower says goodbye once it has read everything it needs.
        """
        if self.size == 1:
            return
        goodbyes = [f"{self.scope}/left-{rank}" for rank in range(1, self.size)]
        if self.leader:
            try:  # a follower is at most one fit behind; one that died must not keep a finished run open
                self._channel().wait(goodbyes, CONNECT_TIMEOUT)
            except dist.DistStoreError:
                print(f"unlearnbench: a follower node did not finish within {CONNECT_TIMEOUT}", file=sys.stderr)
        else:
            self._channel().set(goodbyes[self.rank - 1], "1")

    def get_or_train(
        self,
        store: ModelStore,
        spec: ModelSpec,
        train: Callable[[], dict[str, torch.Tensor]],
        shapes: Shapes | None = None,
    ) -> dict[str, torch.Tensor]:
        """`store.get_or_train` in step on every node: the leader decides under the store's lock."""
        if self.size == 1:
            return store.get_or_train(spec, train, shapes)
        key = f"model-{self.decisions}"
        self.decisions += 1
        if not self.leader:
            if self.wait(key) == TRAIN:
                return train()  # the same DDP fit as the leader's, so the same weights
            state = store.load(spec, shapes)
            if state is None:
                raise ConfigError(f"node {self.rank} cannot read the model store at {store.root}: share it with node 0")
            return state
        trained = False

        def train_together() -> dict[str, torch.Tensor]:
            nonlocal trained
            trained = True
            self.announce(key, TRAIN)
            return train()

        state = store.get_or_train(spec, train_together, shapes)
        if not trained:
            self.announce(key, LOAD)
        return state
