#!/usr/bin/env bash
# GPU smoke test and throughput table: a short CIFAR-shaped class-wise stream with oracles.
#
#   benchmarks/gpu_smoke.sh                     # CUDA: all visible GPUs (DDP when more than one)
#   benchmarks/gpu_smoke.sh --tier memorizing   # the memorizing tier on one GPU, then on the CPU
#   benchmarks/gpu_smoke.sh --cpu-check         # tiny sizes on the CPU, to check the script end to end
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
#
# --tier memorizing: the published leaderboard's setting instead (Fashion-MNIST, 10,000 train and 2,000
# test images without augmentation, the `mlp` arch, its recipe and FT's defaults; --arch, --epochs,
# --batch-size and --precision do not apply), run on one GPU and then on the CPU, each table printed and
# the GPU's images/s over the CPU's per phase (OUT/smoke.json, OUT/smoke_cpu.json). The four idx files
# must be under DIR (DIR/FashionMNIST/raw/ or DIR itself) or in Debian's dataset-fashion-mnist; with
# --cpu-check it runs on the CPU alone, on 1,000 train and 200 test images.
set -euo pipefail

cpu_check=0 tier=cifar
arch="" requests=2 epochs="" batch_size="" devices="" precision="" out=""
data_dir="${UNLEARNBENCH_DATA:-data}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --cpu-check) cpu_check=1; shift ;;
        --tier) tier="$2"; shift 2 ;;
        --arch) arch="$2"; shift 2 ;;
        --requests) requests="$2"; shift 2 ;;
        --epochs) epochs="$2"; shift 2 ;;
        --batch-size) batch_size="$2"; shift 2 ;;
        --devices) devices="$2"; shift 2 ;;
        --precision) precision="$2"; shift 2 ;;
        --data-dir) data_dir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "gpu_smoke.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [[ "$tier" != cifar && "$tier" != memorizing ]]; then
    echo "gpu_smoke.sh: unknown --tier $tier; choose cifar (default) or memorizing" >&2
    exit 2
fi
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
dataset_args='{}'
if [[ "$tier" == memorizing ]]; then
    dataset=fashionmnist arch=mlp devices=1
    dataset_args='{"train_size": 10000, "test_size": 2000, "augment": false}'
    [[ $cpu_check -eq 1 ]] && dataset_args='{"train_size": 1000, "test_size": 200, "augment": false}'
    [[ $cpu_check -eq 0 ]] && precision=32-true  # the CPU's precision, so that the two tables compare
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

from unlearnbench.config import RunConfig
from unlearnbench.runner import Runner

(accelerator, devices, strategy, precision, dataset, data_dir, arch, requests, epochs, batch_size, out, tier, dataset_args,
 name) = sys.argv[1:]
epochs, batch_size, requests = int(epochs), int(batch_size), int(requests)
# the memorizing tier runs as published: its recipe file and FT's defaults; the CIFAR one with the script's sizes
sizes = tier == "cifar"


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


config = RunConfig.from_options(
    method="finetune",
    stream="classwise",
    dataset=dataset,
    data_dir=Path(data_dir),
    dataset_args=json.loads(dataset_args),
    arch=arch,
    requests=requests,
    size=1,
    method_args={"optim": {"epochs": epochs, "batch_size": batch_size, "lr": 0.01}} if sizes else {},
    recipe={"epochs": epochs, "batch_size": batch_size, "lr": 0.1} if sizes else {},
    out=Path(out) / f"runs-{accelerator}",
    accelerator=accelerator,
    devices=int(devices),
    strategy=strategy,
    precision=precision,
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
    unlearning = [runner.method.optim.epochs * sum(retained), sum(row.method["rte_s"] for row in rows), len(rows)]
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
    (Path(out) / name).write_text(json.dumps(summary, indent=2) + "\n")
    if len(rows) != requests or not finite:
        sys.exit(f"smoke test failed: {len(rows)}/{requests} requests scored")
PYTHON

smoke() {  # ACCELERATOR DEVICES STRATEGY PRECISION JSON-NAME
    PYTHONWARNINGS=ignore python "$script" "$1" "$2" "$3" "$4" "$dataset" "$data_dir" "$arch" \
        "$requests" "$epochs" "$batch_size" "$out" "$tier" "$dataset_args" "$5"
}
smoke "$accelerator" "$devices" "$strategy" "$precision" smoke.json
if [[ "$tier" == memorizing && "$accelerator" == gpu ]]; then
    smoke cpu 1 auto 32-true smoke_cpu.json
    python - "$out" <<'COMPARE'
import json, sys
from pathlib import Path
gpu, cpu = (json.loads((Path(sys.argv[1]) / name).read_text()) for name in ("smoke.json", "smoke_cpu.json"))
print(f"\n{'phase':<18}{'GPU images/s':>14}{'CPU images/s':>14}{'GPU / CPU':>11}")
for phase, row in gpu["throughput"].items():
    rate, cpu_rate = row["images_per_s"], cpu["throughput"][phase]["images_per_s"]
    print(f"{phase:<18}{rate:>14,.0f}{cpu_rate:>14,.0f}{rate / cpu_rate:>11.1f}")
COMPARE
fi
