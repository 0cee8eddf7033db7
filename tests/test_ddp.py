"""DDP on CPU (gloo, 2 processes): each rank trains on its own shard; evaluation is exact."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import FAST_RECIPE, tiny_config
from unlearnbench.data import base as data_base
from unlearnbench.rundir import RunDirectory
from unlearnbench.runner import Runner


@pytest.mark.parametrize("n", [1, 5, 64, 101])
def test_ranks_cover_every_index_with_equal_step_counts(monkeypatch, n):
    order = torch.randperm(n)
    shards = []
    for rank in range(3):
        monkeypatch.setattr(data_base, "_world", lambda rank=rank: (rank, 3))
        shards.append(data_base.shard_for_rank(order))
    assert len({len(shard) for shard in shards}) == 1 and len(shards[0]) == -(-n // 3)
    assert set(torch.cat(shards).tolist()) == set(order.tolist())
    assert len(torch.cat(shards)) - n < 3, "padding only to even out the ranks"


@pytest.mark.slow
def test_ddp_run_metrics_equal_a_single_process_evaluation(tmp_path, shared_store):
    hardware = {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}
    config = tiny_config(tmp_path, shared_store, "rl", requests=2, **hardware)
    result = Runner.from_config(config).run()
    assert len(result.rows) == 2 and result.summary.status == "complete"

    single = Runner.from_config(tiny_config(tmp_path, shared_store, "rl", requests=2))
    model = single.trained_model(np.zeros(0, dtype=np.int64), "pretraining")
    single.method.attach(model, single.dataset.num_classes)
    single.method.load_state_dict(RunDirectory(result.run_dir).load_state(2))
    rescored = single.score(single.logits(single.method), single.stream.select(2))
    for key in ("forget_acc", "retain_acc", "test_acc", "forget_test_acc", "mia_member_rate", "history"):
        assert rescored[key] == result.rows[-1].method[key], key


def _free_port() -> int:
    """A port p with p + 1 free too: the fits rendezvous on MASTER_PORT, the nodes' channel on the next."""
    while True:
        with socket.socket() as probe, socket.socket() as next_port:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            try:
                next_port.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


def _on_two_nodes(*argv: str, follower_delay_s: float = 0) -> list[str]:
    """`unlearnbench ARGV` as node 0 and node 1 (gloo on localhost); both must succeed; their outputs.

    `follower_delay_s` starts node 1 that much later, as a slow machine would.
    """
    command = [sys.executable, "-m", "unlearnbench.cli", *argv]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}
    nodes = []
    for rank in (0, 1):
        time.sleep(follower_delay_s if rank else 0)
        node_env = {**env, "NODE_RANK": str(rank)}
        nodes.append(subprocess.Popen(command, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [node.communicate(timeout=600)[0].decode() for node in nodes]
    except subprocess.TimeoutExpired:
        for node in nodes:
            node.kill()
        outputs = [node.communicate()[0].decode()[-3000:] for node in nodes]
        pytest.fail(f"the two nodes did not finish in 10 minutes; their output: {outputs}")
    assert [node.returncode for node in nodes] == [0, 0], outputs
    return outputs


def _run_on_two_nodes(method: str, out: Path, store: Path, follower_delay_s: float = 0) -> list[str]:
    outputs = _on_two_nodes(
        "run", "--method", method, "--requests", "2", "--size", "1", f"--{method}.optim.epochs", "2",
        "--recipe", json.dumps(FAST_RECIPE), "--out", str(out), "--store", str(store),
        "--accelerator", "cpu", "--devices", "1", "--strategy", "ddp", "--num_nodes", "2", "--logger", "none",
        follower_delay_s=follower_delay_s,
    )  # fmt: skip
    assert "node 1: followed node 0" in outputs[1]
    return outputs


@pytest.mark.slow
def test_two_nodes_train_together_and_equal_one_node_with_two_devices(tmp_path):
    """Two runner processes as nodes 0 and 1 (gloo on localhost): one DDP fit of world size 2 each time.

    Node 0 trains the pretrained model and the oracles with node 1 (a fresh store, so every model
    is trained), evaluates and writes; node 1 writes nothing. The numbers equal a one-node run on
    two devices, which has the same world size, shards and all-reduces.
    """
    _run_on_two_nodes("rl", tmp_path / "runs", tmp_path / "store")
    (run_dir,) = [path for path in (tmp_path / "runs").iterdir() if path.is_dir()]
    two_nodes = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(list((tmp_path / "store").glob("*.pt"))) == 3  # pretrained + 2 oracles, each trained once

    hardware = {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}
    config = tiny_config(tmp_path / "one-node", tmp_path / "store-one-node", "rl", requests=2, **hardware)
    one_node = Runner.from_config(config.replace(logger="none")).run().rows
    for ours, reference in zip(two_nodes, one_node, strict=True):
        for side in ("method", "oracle"):
            for key in ("forget_acc", "retain_acc", "test_acc", "forget_test_acc", "history"):
                assert ours[side][key] == getattr(reference, side)[key], (side, key)

    # Every model is in the store now: node 0 announces "load", both read the file, nothing is trained.
    _run_on_two_nodes("finetune", tmp_path / "runs", tmp_path / "store")
    assert len(list((tmp_path / "store").glob("*.pt"))) == 3
    (finetune_dir,) = [path for path in (tmp_path / "runs").iterdir() if path.is_dir() and path != run_dir]
    assert json.loads((finetune_dir / "summary.json").read_text())["status"] == "complete"
    # The same command again: the run is complete, node 0 says so and node 1 has nothing to follow. Node 0
    # serves the channel, so it waits for node 1 even when node 1 starts after node 0 has finished.
    outputs = _run_on_two_nodes("finetune", tmp_path / "runs", tmp_path / "store", follower_delay_s=8)
    assert "already finished" in outputs[0]


def test_several_nodes_need_the_rendezvous_environment(tmp_path, monkeypatch, capsys):
    from unlearnbench.cli import main

    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "rl", "--num_nodes", "2", "--strategy", "ddp", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "MASTER_ADDR, MASTER_PORT, NODE_RANK" in error and len(error.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_suite_on_two_nodes_is_written_by_node_0_only(tmp_path):
    suite = {
        "out": str(tmp_path / "runs"),
        "store": str(tmp_path / "store"),
        "common": {"requests": 1, "recipe": FAST_RECIPE, "logger": "none", "accelerator": "cpu"}
        | {"devices": 1, "strategy": "ddp", "num_nodes": 2},
        "methods": [{"finetune": {"optim": {"epochs": 1}}}, {"rl": {"optim": {"epochs": 1}}}],
        "streams": [{"stream": "classwise", "size": 1}],
    }
    (tmp_path / "suite.yaml").write_text(json.dumps(suite))  # JSON is YAML
    outputs = _on_two_nodes("suite", str(tmp_path / "suite.yaml"))
    record = json.loads((tmp_path / "runs" / "suite.json").read_text())
    assert [cell["status"] for cell in record["cells"]] == ["complete", "complete"]
    assert record["trained"] == 2  # pretrained + one oracle, trained by both nodes together, stored once
    assert "leaderboard:" in outputs[0] and "leaderboard:" not in outputs[1]
