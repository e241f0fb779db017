"""``report DIR --workers 2`` leaves no process behind (#27.6): after SIGTERM, SIGHUP or SIGINT
to the command, or a worker raising, every worker, the forkserver and the resource tracker are
gone within a bounded wait, and the command's stdout closes (``| tail -1`` returns). Today they
stayed with parent 1 for over 10 minutes, holding the pipe.

Real subprocesses, each in a session of its own, so that its process group is exactly what it
started; generous bounds and polling, no timing assertion."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, shared_trace

pytestmark = pytest.mark.real_traces

#: the longest wait for anything here: far beyond what a loaded 2-core machine needs
BOUND_S = 120.0


def _group(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of the live processes of process group ``pgid`` (zombies are dead: they
    hold no file and wait only to be reaped)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(d), fields[0]))
    return out


def _wait_for(cond: object, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"not within {BOUND_S:.0f} s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight copies of a 1 MB shared trace: seconds of work for two workers."""
    d = tmp_path_factory.mktemp("copies")
    src = shared_trace("kineto", "kineto_2021_resnet50_barelist.json.gz")
    for i in range(8):
        shutil.copy(src, d / f"r{i}.json.gz")
    return d


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The commands a test starts; any process group still there at the end is killed."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if _group(p.pid):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=BOUND_S)


def _start(args: list[str], started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,  # as `| tail -1` holds it: EOF once no process has it open
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    started.append(p)
    return p


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("sig", "status"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_signal_to_the_command_leaves_no_process(
    copies: Path, sig: signal.Signals, status: int, started: list[subprocess.Popen[bytes]]
) -> None:
    p = _start(
        [sys.executable, "-m", "asynctrace", "report", str(copies), "--workers", "2"], started
    )
    # the command, the resource tracker, the forkserver and at least one worker
    _wait_for(lambda: len(_group(p.pid)) >= 4, "the workers start")
    p.send_signal(sig)
    _out, err = p.communicate(timeout=BOUND_S)  # stdout closed: nothing holds the pipe
    assert p.returncode == status, err.decode()
    _wait_for(lambda: not _group(p.pid), f"no process left in the group: {_group(p.pid)}")
    assert b"Traceback" not in err


_RAISING = """
import sys, time
from asynctrace.files._pool import MapJob
from asynctrace.files.many import _map

def task(path, shown):
    if path == "boom":
        time.sleep(1)
        raise RuntimeError("a worker raised")
    time.sleep(600)  # would outlive the command but for the map's cleanup

if __name__ == "__main__":
    names = ["slow", "boom", "slow2"]
    job = MapJob(paths=names, shown=names, task=task, task_args=(), on_result=lambda *a: None)
    _map(job, workers=2, scheduler=None)
"""


@pytest.mark.timeout(600)
def test_a_worker_raising_leaves_no_process(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    script = tmp_path / "raising.py"
    script.write_text(_RAISING)
    p = _start([sys.executable, str(script)], started)
    _out, err = p.communicate(timeout=BOUND_S)
    assert p.returncode == 1
    assert b"RuntimeError: a worker raised" in err
    _wait_for(lambda: not _group(p.pid), f"no process left in the group: {_group(p.pid)}")
