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
