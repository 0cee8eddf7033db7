"""The pretrained model of a setting, per train seed: its train and test accuracy and its CPU cost.

    python benchmarks/pretraining.py --dataset fashionmnist --arch mlp \\
        --dataset-args '{"train_size": 10000, "test_size": 2000, "augment": false}' --seeds 0 1 2

How the recipes under `unlearnbench/recipes/` are measured: the model is exactly the one a run of
the setting pretrains (a `Runner` of a one-request random stream without oracles, its
`trained_model` with nothing excluded, same store key), in a fresh temporary store, so it is
always trained here. `--recipe '{"epochs": 20}'` overrides keys of the setting's recipe file;
`--arch-args '{"width": 32}'` sets arch arguments. CPU seconds are the process's user + system
time during the fit (every thread counted): set OMP_NUM_THREADS to the cores you measure on.
Train accuracy minus test accuracy is what an unlearning method can remove from a random forget
set: a model with no gap has memorized nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from unlearnbench.config import RunConfig
from unlearnbench.runner import Runner


def measure(dataset: str, arch: str, dataset_args: dict, arch_args: dict, recipe: dict, seed: int) -> dict:
    """Train accuracy, test accuracy (%), CPU and wall seconds of the setting's pretraining with train seed `seed`."""
    with tempfile.TemporaryDirectory() as out:
        config = RunConfig.from_options(
            method="finetune",
            stream="random",
            requests=1,
            size=0.01,
            oracle="none",
            single_shot_every=0,
            dataset=dataset,
            dataset_args=dataset_args,
            arch=arch,
            arch_args=arch_args,
            recipe=recipe,
            seed=seed,
            out=Path(out),
            logger="none",
            accelerator="cpu",
        )
        runner = Runner.from_config(config)
        cpu, wall = time.process_time(), time.perf_counter()
        model = runner.trained_model(np.array([], dtype=np.int64), "pretraining")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        logits = runner.logits(model)
    return {
        "seed": seed,
        "train_acc": 100 * float((logits.train.argmax(1) == runner.train_labels).mean()),
        "test_acc": 100 * float((logits.test.argmax(1) == runner.test_labels).mean()),
        "cpu_s": cpu,
        "wall_s": wall,
        "recipe": runner.recipe.as_dict(),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--dataset-args", type=json.loads, default={})
    parser.add_argument("--arch-args", type=json.loads, default={})
    parser.add_argument("--recipe", type=json.loads, default={})
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    rows = []
    for seed in args.seeds:
        row = measure(args.dataset, args.arch, args.dataset_args, args.arch_args, args.recipe, seed)
        print(
            f"seed {seed}: train {row['train_acc']:.2f}%  test {row['test_acc']:.2f}%  "
            f"gap {row['train_acc'] - row['test_acc']:.2f}  {row['cpu_s']:.1f} CPU-s  {row['wall_s']:.1f} s  "
            f"recipe {json.dumps(row['recipe'])}",
            flush=True,
        )
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
