"""benchmarks/gpu_smoke.sh runs end to end: its CPU check drives the same Python a GPU run does.

The script patches two Runner methods to time them; a change of their signatures once broke it
silently, because nothing ran it without a GPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_smoke_script_runs_end_to_end_in_its_cpu_check(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = ROOT / "benchmarks" / "gpu_smoke.sh"
    done = subprocess.run(
        ["bash", str(script), "--cpu-check", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "smoke.json").read_text())
    assert summary["requests_done"] == 2
    assert set(summary["throughput"]) == {"unlearning (FT)", "oracle training", "evaluation"}
    assert all(phase["calls"] > 0 and phase["images_per_s"] > 0 for phase in summary["throughput"].values())
    assert "images/s" in done.stdout


@pytest.mark.slow
def test_gpu_smoke_script_runs_the_memorizing_tier_in_its_cpu_check(tmp_path):
    """`--tier memorizing` runs the published setting (Fashion-MNIST, `mlp`, its recipe, FT's defaults) from idx
    files the script is pointed at; its CPU check on 1,000 of them drives the same Python a GPU run does."""
    from tests.test_datasets_mnist import write_idx_dataset

    write_idx_dataset(tmp_path / "data" / "FashionMNIST" / "raw", train=1200, test=300)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = ["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), "--tier", "memorizing", "--cpu-check"]
    command += ["--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert (summary["dataset"], summary["arch"], summary["requests_done"]) == ("fashionmnist", "mlp", 2)
    assert all(phase["calls"] > 0 and phase["images_per_s"] > 0 for phase in summary["throughput"].values())
    unknown = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), "--tier", "cifar100"], text=True,
                             capture_output=True, env=env)  # fmt: skip
    assert unknown.returncode == 2 and "choose cifar (default) or memorizing" in unknown.stderr
