"""One request loop for every node: a follower walks the leader's loop, makes the same fits in the same order
and skips the leader's steps (evaluation, persistence, logging), deciding nothing by itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.conftest import tiny_config
from unlearnbench.nodes import NodeGroup
from unlearnbench.runner import Runner


@dataclass
class RecordedNodes(NodeGroup):
    """Two nodes talking through a dict instead of a TCPStore: the leader's announcements are the follower's."""

    board: dict[str, str] = field(default_factory=dict)

    def announce(self, key: str, value: object) -> None:
        self.board[key] = str(value)

    def wait(self, key: str) -> str:
        return self.board[key]

    def part(self) -> None:
        """Nothing to say goodbye on: there is no channel."""


def _fits(monkeypatch) -> list[str]:
    """The labels of every Lightning fit the runners make, in order."""
    labels: list[str] = []
    original = Runner.trainer

    def trainer(self, epochs, label, callbacks=(), logger=False):
        labels.append(label)
        return original(self, epochs, label, callbacks, logger)

    monkeypatch.setattr(Runner, "trainer", trainer)
    return labels


def test_a_follower_makes_the_leaders_fits_in_order_and_writes_nothing(tmp_path, monkeypatch):
    fits = _fits(monkeypatch)
    board: dict[str, str] = {}
    config = tiny_config(tmp_path / "runs", tmp_path / "store", "rl", requests=3, oracle_every=2)

    leader = Runner.from_config(config)
    leader.nodes = RecordedNodes(rank=0, size=2, scope="run", board=board)
    leader_result = leader.run()
    leader_fits, leader_files = list(fits), sorted(p.name for p in leader_result.run_dir.iterdir())
    # The single-shot counterfactuals follow the oracles' schedule: requests 2 and 3 (T).
    assert [label for label in leader_fits if label.startswith("single-shot")] == ["single-shot 2/3", "single-shot 3/3"]
    assert board["start"] == "1" and [board[f"request-{t}"] for t in (1, 2, 3)] == ["ok"] * 3
    assert {key: value for key, value in board.items() if key.startswith("single-shot")} == {
        "single-shot-single_task-2": "fit",
        "single-shot-single_task-3": "fit",
    }

    fits.clear()
    follower_dir = tmp_path / "follower-runs"
    follower = Runner.from_config(tiny_config(follower_dir, tmp_path / "store", "rl", requests=3, oracle_every=2))
    follower.nodes = RecordedNodes(rank=1, size=2, scope="run", board=board)
    result = follower.run()
    # The store decisions were the leader's ("train" for every model it trained): the follower trains them too.
    assert fits == leader_fits
    assert result.summary.status == "followed node 0 as node 1" and result.rows == []
    assert not follower_dir.exists()  # no run directory, no lock, no logs: the leader writes
    assert sorted(p.name for p in leader_result.run_dir.iterdir()) == leader_files


def test_a_follower_of_a_finished_run_makes_no_fit(tmp_path, monkeypatch):
    fits = _fits(monkeypatch)
    config = tiny_config(tmp_path / "runs", tmp_path / "store", "finetune", requests=1)
    Runner.from_config(config).run()
    board: dict[str, str] = {}
    leader = Runner.from_config(config)
    leader.nodes = RecordedNodes(rank=0, size=2, scope="run", board=board)
    assert leader.run().already_complete and board == {"start": "2"}
    fits.clear()
    follower = Runner.from_config(config)
    follower.nodes = RecordedNodes(rank=1, size=2, scope="run", board=board)
    assert follower.run().already_complete and fits == []
