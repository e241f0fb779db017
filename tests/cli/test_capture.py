"""``asynctrace capture DIR|PID --steps N`` and ``kill -USR2``: a deep-mode window opened on a
running session, with no restart and no code change; the ranks of a job on the same steps."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from asynctrace.capture.trigger import CONTROL_DIR, write_json
from asynctrace.cli import main
from asynctrace.records import RECORDS_SUFFIX, read_records

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="POSIX signals")

REPO = Path(__file__).resolve().parents[2]

# steps until a file named "stop" appears beside the records (or 3000 steps), printing MARK
# once it is past step 3
LOOP = """
import os, sys, time, torch
import asynctrace
out = sys.argv[1]
model = torch.nn.Linear(8, 8)
with asynctrace.trace("job", dir=out, detect_syncs="off", print_summary=False) as s:
    for i in range(3000):
        model(torch.randn(4, 8)).sum().backward()
        time.sleep(0.005)
        s.step()
        if i == 3:
            print("MARK", flush=True)
        if os.path.exists(os.path.join(out, "stop")):
            break
print("END", s.step_index, flush=True)
"""


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }


def _profiled_steps(trace: Path) -> list[int]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = {
        int(m.group(1))
        for e in events
        if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", ""))))
    }
    return sorted(steps)


def _start(script: Path, out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "MARK", line + (proc.stderr.read() if proc.stderr else "")
    return proc


def _finish(proc: subprocess.Popen[str], out: Path) -> str:
    (out / "stop").touch()
    try:
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    return rest


def _window_note(out: Path) -> str:
    (records,) = out.glob(f"*{RECORDS_SUFFIX}")
    notes = read_records(records).summary.notes  # type: ignore[union-attr]
    return next(n.text for n in notes if n.code == "deep-window")


def test_sigusr2_opens_a_window_at_the_next_step(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOOP))
    out = tmp_path / "out"
    proc = _start(script, out)
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 120
    while not list((out / "job").glob("*.pt.trace.json.gz")) and time.monotonic() < deadline:
        time.sleep(0.1)
    _finish(proc, out)
    (trace,) = (out / "job").glob("*.pt.trace.json.gz")
    assert len(list((out / "job").glob("*.annotated.json.gz"))) == 1
    steps = _profiled_steps(trace)
    # the default 5 steps, after a warm-up step, from the step after the signal was seen
    assert len(steps) >= 5
    first = steps[-5]
    assert steps[-5:] == list(range(first, first + 5))
    assert f"steps {first}-{first + 4} were profiled on demand" in _window_note(out)


def test_capture_dir_wait_prints_the_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOOP))
    out = tmp_path / "out"
    proc = _start(script, out)
    try:
        rc = main(["capture", str(out), "--steps", "3", "--wait", "--timeout", "120"])
    finally:
        _finish(proc, out)
    said = capsys.readouterr().out.splitlines()
    assert rc == 0, said
    m = re.match(
        r"asynctrace capture: steps (\d+)-(\d+) of 1 session\(s\); traces will appear in (.+)$",
        said[0],
    )
    assert m is not None, said
    start, stop = int(m.group(1)), int(m.group(2))
    assert stop - start == 2
    assert m.group(3) == str(out / "job")
    (trace,) = map(Path, said[1:])
    assert trace.is_file()
    assert _profiled_steps(trace)[-3:] == [start, start + 1, start + 2]
    assert f"steps {start}-{stop} were profiled on demand" in _window_note(out)


def test_no_live_session_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["capture", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "no live asynctrace session" in err[0]
    assert main(["capture", "999999999"]) == 2


def test_a_second_request_while_a_window_is_open_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    control = tmp_path / CONTROL_DIR
    control.mkdir()
    # a live session (this process) whose window is open
    write_json(
        control / "session.h.1.json",
        {
            "pid": os.getpid(),
            "host": __import__("socket").gethostname(),
            "step": 10,
            "rate": 1.0,
            "updated_unix": time.time(),
            "window": {"id": "a", "start": 8, "stop": 13, "state": "open", "traces": []},
        },
    )
    assert main(["capture", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"asynctrace capture: a window is already open on steps 8-12 (process {os.getpid()}); "
        "one window at a time"
    ]


RANK_LOOP = """
import os, sys, time, torch
import torch.distributed as dist
import asynctrace
out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
with asynctrace.trace("ddp", dir=out, device="cpu", detect_syncs="off", print_summary=False) as s:
    for i in range(3000):
        model(torch.randn(4, 8)).sum().backward()
        time.sleep(0.005 if rank == 0 else 0.02)
        s.step()
        if i == 3:
            open(os.path.join(out, f"mark{rank}"), "w").close()
        if os.path.exists(os.path.join(out, "stop")):
            break
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_every_rank_opens_its_window_on_the_same_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which(
        "torchrun"
    )
    if torchrun is None:
        pytest.skip("torchrun not found next to this Python")
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(RANK_LOOP))
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [torchrun, "--standalone", "--nproc_per_node=2", str(worker), str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not all((out / f"mark{r}").exists() for r in (0, 1)):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.1)
        # both ranks' sessions have published their control files by their first poll
        while len(list((out / CONTROL_DIR).glob("session.*.json"))) < 2:
            time.sleep(0.05)
        rc = main(["capture", str(out), "--steps", "3", "--wait", "--timeout", "150"])
        (out / "stop").touch()
        stdout, _ = proc.communicate(timeout=120)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    said = capsys.readouterr().out.splitlines()
    assert rc == 0, said
    assert proc.returncode == 0, stdout
    start = int(re.match(r"asynctrace capture: steps (\d+)-", said[0]).group(1))  # type: ignore[union-attr]
    traces = [Path(p) for p in said[1:]]
    assert len(traces) == 2
    # one per rank, on the same step numbers
    assert {("rank0" in t.name, "rank1" in t.name) for t in traces} == {
        (True, False),
        (False, True),
    }
    for t in traces:
        assert _profiled_steps(t)[-3:] == [start, start + 1, start + 2]
