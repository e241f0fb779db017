"""SIGTERM and SIGHUP (how SLURM, Kubernetes and torchrun stop a job) end a session as Ctrl-C
does: the records file complete with every step so far, the summary printed; then the signal
does what it would have done: the process dies of it, or the program's own handler runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import asynctrace
from asynctrace.records import RECORDS_SUFFIX, read_records

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

REPO = Path(__file__).resolve().parents[2]

# 300 optimizer steps fit in one batch of records (256) only partly: the last batch is what a
# stop signal lost. The marker is printed after step 299; the loop then steps until stopped.
LOOP = """
import sys, time, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def one():
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""

RUN_SCRIPT = (
    LOOP
    + """
i = 0
while True:
    one()
    i += 1
    if i == 300:
        print("MARK", flush=True)
    if i > 300:
        time.sleep(0.002)
"""
)

API_SCRIPT = (
    LOOP
    + """
import asynctrace
with asynctrace.trace("api", dir=sys.argv[1], detect_syncs="off") as session:
    i = 0
    while True:
        one()
        session.step()
        i += 1
        if i == 300:
            print("MARK", flush=True)
        if i > 300:
            time.sleep(0.002)
"""
)

OWN_HANDLER_SCRIPT = (
    LOOP
    + """
import signal, asynctrace
stop = []
signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
with asynctrace.trace("own", dir=sys.argv[1], detect_syncs="off") as session:
    i = 0
    while not stop:
        one()
        session.step()
        i += 1
        if i == 300:
            print("MARK", flush=True)
        if i > 300:
            time.sleep(0.002)
print("STOPPED", signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, flush=True)
"""
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"
    return env


def _stop_after_marker(cmd: list[str], sig: int, cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.strip() == "MARK", first + proc.stderr.read()  # type: ignore[union-attr]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, first + out, err


def _records(folder: Path) -> list[int]:
    files = sorted(folder.glob(f"*{RECORDS_SUFFIX}"))
    assert len(files) == 1, sorted(folder.iterdir())
    assert not list(folder.glob("*.tmp"))
    return [s.step for s in read_records(files[0]).steps]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_run_ends_the_session_prints_the_summary_and_dies_of_the_signal(
    tmp_path: Path, sig: int
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RUN_SCRIPT))
    out_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "asynctrace", "run", "--dir", str(out_dir), str(script)]
    rc, out, err = _stop_after_marker(cmd, sig, tmp_path)
    assert rc == -sig, err
    steps = _records(out_dir)
    # every step so far, in order, none lost: at least the 300 before the marker
    assert len(steps) >= 300
    assert steps == list(range(len(steps)))
    assert f": {len(steps)} step(s), " in out
    assert f"stopped by {signal.Signals(sig).name}" in err
    assert "Traceback" not in err


def test_a_session_of_the_api_ends_prints_and_dies_of_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(API_SCRIPT))
    out_dir = tmp_path / "out"
    rc, out, err = _stop_after_marker(
        [sys.executable, str(script), str(out_dir)], signal.SIGTERM, tmp_path
    )
    assert rc == -signal.SIGTERM, err
    steps = _records(out_dir)
    assert len(steps) >= 300
    assert steps == list(range(len(steps)))
    assert f": {len(steps)} step(s), " in out


def test_the_programs_own_handler_decides_and_is_put_back(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(OWN_HANDLER_SCRIPT))
    out_dir = tmp_path / "out"
    rc, out, err = _stop_after_marker(
        [sys.executable, str(script), str(out_dir)], signal.SIGTERM, tmp_path
    )
    # its handler set a flag, the loop ended, the session with it, normally
    assert rc == 0, err
    assert "STOPPED True" in out
    assert len(_records(out_dir)) >= 300


def test_handlers_are_put_back_when_the_session_ends(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as s:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        s.step()
    assert {s: signal.getsignal(s) for s in before} == before


def test_an_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    saved = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off"):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGHUP, saved)


def test_a_session_in_another_thread_installs_nothing(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def run() -> None:
        with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as s:
            seen.append(signal.getsignal(signal.SIGTERM))
            s.step()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before]
