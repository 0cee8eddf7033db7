#!/usr/bin/env bash
# GPU smoke test and throughput table: a short CIFAR-shaped class-wise stream with oracles.
#
#   benchmarks/gpu_smoke.sh                 # CUDA: all visible GPUs (DDP when more than one)
#   benchmarks/gpu_smoke.sh --cpu-check     # tiny sizes on the CPU, to check the script end to end
#
# Options: --arch A (default resnet18; smallcnn with --cpu-check), --requests T (2), --epochs E
# (2; 1 with --cpu-check), --batch-size B (256; 128), --devices N (all GPUs), --precision P
# (bf16-mixed on GPU, 32-true on CPU), --data-dir DIR, --out DIR (a fresh temporary folder).
#
# Uses CIFAR-10 when DIR/cifar-10-batches-py exists, else `synthetic_cifar` (seeded tensors in
# CIFAR-10's shape, 50,000/10,000 images): nothing is downloaded. Unlearning is fine-tuning on the
# retain set (FT), so its images are epochs x |retain|; oracle training counts every model trained
# from scratch (the pretrained model and one oracle per request); evaluation is the logits pass
# over train + test. Prints a table of images/s and writes it as JSON to OUT/smoke.json.
set -euo pipefail

cpu_check=0
arch="" requests=2 epochs="" batch_size="" devices="" precision="" out=""
data_dir="${UNLEARNBENCH_DATA:-data}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --cpu-check) cpu_check=1; shift ;;
        --arch) arch="$2"; shift 2 ;;
        --requests) requests="$2"; shift 2 ;;
        --epochs) epochs="$2"; shift 2 ;;
        --batch-size) batch_size="$2"; shift 2 ;;
        --devices) devices="$2"; shift 2 ;;
        --precision) precision="$2"; shift 2 ;;
        --data-dir) data_dir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "gpu_smoke.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [[ $cpu_check -eq 1 ]]; then
    accelerator=cpu dataset=synthetic_cifar_mini
    arch="${arch:-smallcnn}" epochs="${epochs:-1}" batch_size="${batch_size:-128}"
    devices="${devices:-1}" precision="${precision:-32-true}"
else
    gpus="$(python -c 'import torch; print(torch.cuda.device_count())')"
    if [[ "$gpus" -eq 0 ]]; then
        echo "gpu_smoke.sh: no CUDA device visible; use --cpu-check for a CPU run" >&2
        exit 2
    fi
    accelerator=gpu
    dataset=synthetic_cifar
    [[ -f "$data_dir/cifar-10-batches-py/data_batch_1" ]] && dataset=cifar10
    arch="${arch:-resnet18}" epochs="${epochs:-2}" batch_size="${batch_size:-256}"
    devices="${devices:-$gpus}" precision="${precision:-bf16-mixed}"
fi
strategy=auto
[[ "$devices" -gt 1 ]] && strategy=ddp
out="${out:-$(mktemp -d -t unlearnbench-smoke.XXXXXX)}"
mkdir -p "$out"

# A file, not stdin: Lightning's DDP launcher starts the other ranks by re-running this command.
script="$out/gpu_smoke.py"
cat > "$script" <<'PYTHON'
"""Runs one stream through unlearnbench's Runner and times its three phases (rank 0 prints)."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only

from unlearnbench.config import Hardware, RunConfig
from unlearnbench.runner import Runner

(accelerator, devices, strategy, precision, dataset, data_dir, arch, requests, epochs, batch_size, out) = sys.argv[1:]
epochs, batch_size, requests = int(epochs), int(batch_size), int(requests)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


config = RunConfig(
    method="finetune",
    stream="classwise",
    dataset=dataset,
    data_dir=Path(data_dir),
    arch=arch,
    requests=requests,
    size=1,
    method_args={"optim": {"epochs": epochs, "batch_size": batch_size, "lr": 0.01}},
    recipe={"epochs": epochs, "batch_size": batch_size, "lr": 0.1},
    out=Path(out) / "runs",
    hardware=Hardware(accelerator, int(devices), strategy, 1, precision),
)
runner = Runner.from_config(config)
timed = {"oracle training": [0, 0.0, 0], "evaluation": [0, 0.0, 0]}  # images, seconds, calls
num_train, num_test = len(runner.dataset.train), len(runner.dataset.test)
train_model, logits = runner.trained_model, runner.logits


def timed_trained_model(excluded, label, train_seed=None, batched=False):
    before = runner.store.trained
    sync()
    start = time.perf_counter()
    model = train_model(excluded, label, train_seed, batched)
    sync()
    if runner.store.trained > before:  # trained now, not read from the store
        entry = timed["oracle training"]
        entry[0] += runner.recipe.epochs * (num_train - len(excluded))
        entry[1] += time.perf_counter() - start
        entry[2] += 1
    return model


def timed_logits(model):
    sync()
    start = time.perf_counter()
    result = logits(model)
    sync()
    entry = timed["evaluation"]
    entry[0] += num_train + num_test
    entry[1] += time.perf_counter() - start
    entry[2] += 1
    return result


runner.trained_model, runner.logits = timed_trained_model, timed_logits
wall = time.perf_counter()
result = runner.run()
wall = time.perf_counter() - wall

if rank_zero_only.rank == 0:
    rows = [row for row in result.rows if row.status == "ok"]
    retained = [len(request.retain) for request in runner.stream.requests[: len(rows)]]
    unlearning = [epochs * sum(retained), sum(row.method["rte_s"] for row in rows), len(rows)]
    phases = {"unlearning (FT)": unlearning, **timed}
    device = torch.cuda.get_device_name(0) if accelerator == "gpu" else "cpu"
    print(f"\nunlearnbench smoke: {dataset} x {arch}, {requests} requests, {devices} x {device}, {strategy}, {precision}")
    print(f"{'phase':<18}{'calls':>6}{'images':>12}{'seconds':>10}{'images/s':>12}")
    table = {}
    for phase, (images, seconds, calls) in phases.items():
        rate = images / seconds if seconds > 0 else float("nan")
        table[phase] = {"calls": calls, "images": images, "seconds": round(seconds, 3), "images_per_s": round(rate, 1)}
        print(f"{phase:<18}{calls:>6}{images:>12,}{seconds:>10.2f}{rate:>12,.0f}")
    last = rows[-1]
    print(
        f"wall {wall:.1f}s; request {last.t}: forget_acc {last.method['forget_acc']:.1f} "
        f"(oracle {last.oracle['forget_acc']:.1f}), test_acc {last.method['test_acc']:.1f} "
        f"(oracle {last.oracle['test_acc']:.1f}); run directory {result.run_dir}"
    )
    finite = all(np.isfinite(row.method["forget_acc"]) for row in rows)
    summary = {
        "dataset": dataset,
        "arch": arch,
        "devices": int(devices),
        "device": device,
        "strategy": strategy,
        "precision": precision,
        "requests_done": len(rows),
        "wall_s": round(wall, 1),
        "throughput": table,
    }
    (Path(out) / "smoke.json").write_text(json.dumps(summary, indent=2) + "\n")
    if len(rows) != requests or not finite:
        sys.exit(f"smoke test failed: {len(rows)}/{requests} requests scored")
PYTHON

PYTHONWARNINGS=ignore python "$script" "$accelerator" "$devices" "$strategy" "$precision" "$dataset" "$data_dir" "$arch" \
    "$requests" "$epochs" "$batch_size" "$out"
