"""``gather_ranks``: a script that calls ``destroy_process_group()`` before the session ends
still gets the per-rank table: the gather runs inside that call, before the group is gone.
A real 2-rank ``torchrun`` on CPU (gloo) under ``asynctrace run --gather-ranks``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asynctrace.records import read_records

REPO = Path(__file__).resolve().parents[2]

WORKER = """
import time, torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    time.sleep(0.002 + (0.2 if rank == 1 else 0.0))
    opt.step()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} destroyed", flush=True)
"""


@pytest.mark.slow
def test_the_rank_table_survives_destroy_process_group(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which(
        "torchrun"
    )
    if torchrun is None:
        pytest.skip("torchrun not found next to this Python")
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(WORKER))
    out = tmp_path / "traces"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", "-m", "asynctrace", "run"]
    cmd += ["--gather-ranks", "--detect", "off", "--dir", str(out), str(worker)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"torchrun hung:\n{stdout}")
    assert proc.returncode == 0, stdout
    assert "rank 0 destroyed" in stdout
    assert "rank 1 destroyed" in stdout
    assert "destroy_process_group" not in stdout  # no note that the group was gone
    assert "slowest" in stdout, stdout
    files = sorted(out.glob("*.records.jsonl"))
    assert len(files) == 2
    assert all(read_records(f).complete for f in files)
