"""``asynctrace run`` when something raises while the session ends, or the script forks: the
command's status is the script's, the records are complete, the summary is said once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asynctrace.capture._clock import StepClock
from asynctrace.capture.session import CaptureSession
from asynctrace.cli import main
from asynctrace.records import RECORDS_SUFFIX, read_records
from asynctrace.records.writer import RecordsWriter
from asynctrace.sinks import SummarySink
from asynctrace.tracing import current_session

REPO = Path(__file__).resolve().parents[2]

# A script that, like torch's DataLoader, installs a Python SIGCHLD handler that raises (torch's
# raises "DataLoader worker (pid N) exited unexpectedly"), takes three optimizer steps, and
# ends as told.
SCRIPT = """
import signal, sys
import torch

def worker_died(signum, frame):
    raise RuntimeError("DataLoader worker (pid 1234) exited unexpectedly with exit code 3")

signal.signal(signal.SIGCHLD, worker_died)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
end = sys.argv[1]
if end == "raise":
    raise ValueError("script failed")
if end == "exit3":
    sys.exit(3)
"""

ENDS = [("ok", 0, None), ("raise", 1, "ValueError: script failed"), ("exit3", 3, None)]


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Path]:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT))
    saved = signal.getsignal(signal.SIGCHLD)
    yield p
    signal.signal(signal.SIGCHLD, saved)


def _only_records(d: Path) -> Path:
    files = sorted(p.name for p in d.iterdir())
    assert not [f for f in files if f.endswith(".tmp")], files
    (path,) = d.glob("*" + RECORDS_SUFFIX)
    return path


#: the parts of a session's end: collecting the device's figures, undoing the globals,
#: finishing the records file, building the summary
PARTS: dict[str, tuple[type, str]] = {
    "drain": (StepClock, "drain"),
    "deactivate": (CaptureSession, "_deactivate"),
    "records": (RecordsWriter, "finish"),
    "summary": (SummarySink, "final"),
}


def _signal_inside(monkeypatch: pytest.MonkeyPatch, part: str) -> list[str]:
    """SIGCHLD arrives while the session's exit runs ``part``: its handler runs right there,
    between two bytecodes, as when a DataLoader worker dies at that moment."""
    owner, name = PARTS[part]
    real = getattr(owner, name)
    seen: list[str] = []

    def with_signal(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not seen:
            seen.append(part)
            os.kill(os.getpid(), signal.SIGCHLD)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, with_signal)
    return seen


@pytest.mark.parametrize("part", list(PARTS))
@pytest.mark.parametrize(("end", "status", "error"), ENDS, ids=[e[0] for e in ENDS])
def test_a_signal_handler_raising_while_the_session_ends_keeps_status_and_records(
    tmp_path: Path,
    script: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    part: str,
    end: str,
    status: int,
    error: str | None,
) -> None:
    seen = _signal_inside(monkeypatch, part)
    out = tmp_path / "out"
    code = main(["run", "--dir", str(out), "--device", "cpu", str(script), end])
    assert seen == [part]
    assert code == status
    assert current_session() is None
    rec = read_records(_only_records(out))
    assert rec.complete
    assert [s.step for s in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error == error
    captured = capsys.readouterr()
    assert "summary() before" not in captured.err
    # the summary is printed, and the handler's error said in one line, after the records
    assert ": 3 step(s), " in captured.out
    assert "DataLoader worker (pid 1234) exited unexpectedly" in captured.err
    if error is not None:
        assert "ValueError: script failed" in captured.err


@pytest.mark.parametrize("part", ["records", "summary"])
@pytest.mark.parametrize(("end", "status", "error"), ENDS, ids=[e[0] for e in ENDS])
def test_an_error_of_the_sessions_end_never_replaces_the_scripts_status(
    tmp_path: Path,
    script: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    part: str,
    end: str,
    status: int,
    error: str | None,
) -> None:
    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the session's end broke")

    monkeypatch.setattr(*PARTS[part], broken)
    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["run", "--dir", str(out), "--device", "cpu", str(script), end])
    assert code == status
    assert current_session() is None
    err = capsys.readouterr().err
    assert "summary() before" not in err
    # said once: by the session's warning after the script's error, else by run
    said = err + "".join(str(w.message) for w in caught)
    assert said.count("the session's end broke") == 1, said
    if error is not None:
        assert "ValueError: script failed" in err


# ---------------------------------------------------------------- a real dying worker
DYING_WORKER = """
import os, torch
from torch.utils.data import DataLoader, Dataset

class Items(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if i == 5:
            os._exit(3)
        return torch.ones(4) * i

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in DataLoader(Items(), batch_size=1, num_workers=2):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
def test_a_dataloader_worker_dying_keeps_the_scripts_status_and_the_records(
    tmp_path: Path,
) -> None:
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent(DYING_WORKER))
    # the SIGCHLD of the second worker lands anywhere in the session's end: a few runs
    for i in range(3):
        out = tmp_path / f"out{i}"
        r = subprocess.run(
            [sys.executable, "-m", "asynctrace", "run", "--dir", str(out), str(script)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        # plain python exits 1: the script's uncaught error
        assert r.returncode == 1, r.stderr[-3000:]
        assert "summary() before" not in r.stderr
        assert "exited unexpectedly" in r.stderr or "Error" in r.stderr
        rec = read_records(_only_records(out))
        assert rec.complete
        assert rec.summary is not None
        assert rec.summary.error is not None


# ---------------------------------------------------------------- a forked child
FORKS = """
import os, sys
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
pid = os.fork()
if pid == 0:
    # the child returns from the script normally (no os._exit), as many scripts' children do
    print("child done", flush=True)
else:
    _, status = os.waitpid(pid, 0)
    print("child status", os.waitstatus_to_exitcode(status), flush=True)
    for i in range(2):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_forked_child_that_finishes_the_script_prints_no_second_summary(
    tmp_path: Path, json_out: bool
) -> None:
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(FORKS))
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "asynctrace",
            "run",
            *(["--json"] if json_out else []),
            "--dir",
            str(out),
            "--device",
            "cpu",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert "child done" in said
    assert "child status 0" in said
    if json_out:
        # stdout is the parent's one JSON summary, nothing else
        assert r.stdout.count('"name":"forks"') == 1, r.stdout
        assert '"events":5' in r.stdout.replace(" ", "")
    else:
        assert r.stdout.count(" step(s), ") == 1, r.stdout
        assert ": 5 step(s), " in r.stdout
    rec = read_records(_only_records(out))
    assert rec.complete
    assert [s.step for s in rec.steps] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("end", "status", "error"), ENDS, ids=[e[0] for e in ENDS])
def test_a_handler_raising_before_the_end_is_deferred_still_ends_the_session(
    tmp_path: Path,
    script: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    end: str,
    status: int,
    error: str | None,
) -> None:
    # the second worker's SIGCHLD as the script ends, before run's deferral is in place
    from asynctrace.capture import signals as _signals

    real_enter = _signals.deferred_signals.__enter__
    raised: list[bool] = []

    def enter(self: Any) -> Any:
        if not raised:
            raised.append(True)
            raise RuntimeError("DataLoader worker (pid 1234) exited unexpectedly")
        return real_enter(self)

    monkeypatch.setattr(_signals.deferred_signals, "__enter__", enter)
    out = tmp_path / "out"
    code = main(["run", "--dir", str(out), "--device", "cpu", str(script), end])
    assert raised
    assert code == status
    assert current_session() is None
    rec = read_records(_only_records(out))
    assert rec.complete
    assert [s.step for s in rec.steps] == [0, 1, 2]
    captured = capsys.readouterr()
    assert ": 3 step(s), " in captured.out
    assert "exited unexpectedly" in captured.err
