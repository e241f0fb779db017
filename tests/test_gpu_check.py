"""The GPU check script runs end to end here, so that the few minutes of a lent GPU are never
spent on a script that fails: on a CPU-only machine it runs everything small and skips the
CUDA assertions, saying so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def test_gpu_check_runs_and_says_what_it_checked(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "gpu_check.summary.json").read_text())
    assert summary["device_kind"] == "cpu"
    assert summary["cuda_assertions"].startswith("skipped")
    # every check is listed, none claimed: a CPU cannot pass or fail a CUDA assertion
    assert set(summary["checks"]) == {
        "matmul returned far below done",
        "unsynced loop runs ahead",
        "synced loop stays in step",
        "our Kineto trace is fully linked",
        "CUDA sync hooks name the lines",
        "GPU-only tests pass",
    }
    assert all(c["passed"] is None for c in summary["checks"].values())
    assert "SKIP  our Kineto trace is fully linked" in proc.stdout
    assert summary["gpu_tests"] is None  # pytest -m gpu runs only where there is a GPU

    # the trace it recorded is read back: one step per train_step range (no schedule, so
    # torch.profiler writes no ProfilerStep#N), no device activity on CPU
    tf = summary["loops"]["kineto_trace_figures"]
    assert tf["steps"] == [0, 1, 2]
    assert tf["step_source"] == "annotation"
    assert tf["activities"] == 0
    assert Path(summary["loops"]["kineto_trace"]).is_file()
    assert (out / "demo" / "demo.summary.json").is_file()
    assert summary["torch"] == torch.__version__
