"""DDP on CPU (gloo, 2 processes): each rank trains on its own shard; evaluation is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import tiny_config
from unlearnbench.config import Hardware
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
    hardware = Hardware(accelerator="cpu", devices=2, strategy="ddp")
    config = tiny_config(tmp_path, shared_store, "rl", requests=2, hardware=hardware)
    result = Runner(config).run()
    assert len(result.rows) == 2 and result.summary["status"] == "complete"

    single = Runner(tiny_config(tmp_path, shared_store, "rl", requests=2))
    model = single.trained_model(np.zeros(0, dtype=np.int64), "pretraining")
    single.method.attach(model, single.dataset.num_classes)
    single.method.load_state_dict(RunDirectory(result.run_dir).load_state(2))
    rescored = single.score(single.logits(single.method), single.stream.select(2))
    for key in ("forget_acc", "retain_acc", "test_acc", "forget_test_acc", "mia_member_rate", "history"):
        assert rescored[key] == result.rows[-1]["method"][key], key
