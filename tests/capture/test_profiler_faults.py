"""Deep mode under faults: what fails in the profiler's ``on_trace_ready`` path (exporting,
checking, annotating a window) is a warning, never an exception in the user's ``step()``
(but ``strict=True``, and interrupts); a published trace is always complete; every file stays
inside ``dir`` whatever the host is called."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from asynctrace.capture.profiler import DeepProfiler, Profile, check_trace, worker_name
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.export import chrome
from asynctrace.records import read_records
from asynctrace.tracing import Session
from tests.export._trace_event_validator import load_events

REPO = Path(__file__).resolve().parents[2]
DEEP = Profile(wait=0, warmup=1, active=3)


def _loop(s: Session, n: int = 8) -> int:
    """The user's training loop: returns how many steps it completed."""
    x = torch.randn(16, 16)
    done = 0
    for _ in range(n):
        x = (x @ x).tanh()
        s.step()
        done += 1
    return done


def _session(tmp_path: Path, **kw: Any) -> Session:
    kw.setdefault("profile", DEEP)
    return Session("t", dir=tmp_path, device="cpu", detect_syncs="off", print_summary=False, **kw)


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*") if p.is_file())


# ---------------------------------------------------------------- 1. a failing annotator
@pytest.mark.parametrize(
    "error",
    [MemoryError, lambda: RuntimeError("annotator broke"), lambda: ValueError("odd trace")],
    ids=["MemoryError", "RuntimeError", "ValueError"],
)
def test_a_failing_annotator_is_a_warning_and_the_loop_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Callable[[], BaseException]
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Path:
        raise error()

    monkeypatch.setattr(chrome, "annotate_file", broken)
    s = _session(tmp_path)
    with pytest.warns(AsyncTraceWarning, match="could not annotate") as caught, s:
        done = _loop(s)
    assert done == 8
    assert len([w for w in caught if issubclass(w.category, AsyncTraceWarning)]) == 1
    # the raw trace is kept, complete, and no annotated copy claims to be one
    (trace,) = (tmp_path / "t").glob("*.pt.trace.json.gz")
    assert load_events(trace)[0]
    assert not list((tmp_path / "t").glob("*.annotated.json.gz"))
    assert not [n for n in _files(tmp_path) if ".tmp" in n]
    assert len(read_records(s.records_path).steps) == 8  # type: ignore[arg-type]


def test_a_failing_trace_export_is_a_warning_and_the_loop_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, path: str, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"half a trace")
        raise RuntimeError("Kineto: failed to export")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken)
    s = _session(tmp_path)
    with pytest.warns(AsyncTraceWarning, match="could not write a profiler trace"), s:
        assert _loop(s) == 8
    assert not list((tmp_path / "t").iterdir())  # nothing half-written left behind


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_the_annotator_propagates_with_the_trace_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupt: type[BaseException]
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Path:
        raise interrupt()

    monkeypatch.setattr(chrome, "annotate_file", interrupted)
    s = _session(tmp_path)
    done = 0
    with pytest.raises(interrupt), s:  # noqa: PT012 - the training loop
        x = torch.randn(8, 8)
        for _ in range(8):
            x = x @ x
            s.step()
            done += 1
    # the window (steps 1-3) ends in the 4th step(): that call raises
    assert done == 3
    (trace,) = (tmp_path / "t").glob("*.pt.trace.json.gz")
    assert load_events(trace)[0]
    assert not torch.autograd.profiler._is_profiler_enabled
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert rec.complete
    assert rec.summary is not None
    # SystemExit() is an ordinary end of a program: no error
    assert rec.summary.error == ("KeyboardInterrupt" if interrupt is KeyboardInterrupt else None)


def test_strict_makes_an_annotation_failure_an_error_of_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Path:
        raise MemoryError

    from asynctrace.sinks import AnnotateSink

    monkeypatch.setattr(chrome, "annotate_file", broken)
    # the annotator is a callback of the profiler's (the session's sink)
    p = DeepProfiler(
        DEEP, dir=tmp_path, run="r", strict=True, on_trace=AnnotateSink().trace_written
    )
    p.start()
    x = torch.randn(8, 8)
    steps = 0
    try:
        with pytest.raises(CaptureError, match=r"on_trace callback failed.*MemoryError"):  # noqa: PT012
            for _ in range(8):
                x = x @ x
                p.step()
                steps += 1
    finally:
        p.stop()
    assert steps == 3
    assert len(p.traces) == 1
    assert not torch.autograd.profiler._is_profiler_enabled


def test_strict_session_makes_an_annotation_failure_an_error_of_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Path:
        raise MemoryError

    monkeypatch.setattr(chrome, "annotate_file", broken)
    s = _session(tmp_path, strict=True)
    with pytest.raises(CaptureError, match="could not annotate"), s:
        _loop(s)


_UNDER_MEMORY_LIMIT = """
import resource, sys, warnings
import torch
from asynctrace.capture.profiler import Profile
from asynctrace.tracing import Session

out = sys.argv[1]
# 6,000,000 KiB, as `ulimit -v 6000000`: torch is loaded, an 8 GiB reservation is not possible
limit = 6_000_000 * 1024
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
done = 0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Session("t", dir=out, device="cpu", detect_syncs="off", print_summary=False,
                 profile=Profile(wait=0, warmup=1, active=3)) as s:
        x = torch.randn(16, 16)
        for _ in range(8):
            x = (x @ x).tanh()
            s.step()
            done += 1
print("steps", done)
for w in caught:
    print("warning", w.category.__name__, str(w.message).splitlines()[0])
"""


def _run_child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


@pytest.mark.slow
def test_deep_mode_under_an_address_space_limit_never_ends_the_loop(tmp_path: Path) -> None:
    # RLIMIT_AS as `ulimit -v 6000000` sets it: the annotator's reading of the trace may fail
    # with MemoryError; the loop completes and the raw trace is kept
    r = _run_child(_UNDER_MEMORY_LIMIT, str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "steps 8" in r.stdout
    (trace,) = (tmp_path / "t").glob("*.pt.trace.json.gz")
    assert load_events(trace)[0]
    if not list((tmp_path / "t").glob("*.annotated.json.gz")):
        # the annotation failed (the gzip reader reserves its whole cap): said as a warning
        assert "warning AsyncTraceWarning asynctrace: could not annotate" in r.stdout, r.stdout


@pytest.mark.slow
def test_deep_mode_under_an_address_space_limit_still_annotates(tmp_path: Path) -> None:
    r = _run_child(_UNDER_MEMORY_LIMIT, str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list((tmp_path / "t").glob("*.annotated.json.gz"))) == 1
    assert "warning" not in r.stdout


# ---------------------------------------------------------------- 3. empty or broken output
def _export_writing(data: bytes) -> Callable[..., None]:
    def export(self: Any, path: str, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(data)

    return export


@pytest.mark.parametrize(
    "data",
    [
        # what torch writes when Kineto could not write its JSON: an empty file, gzipped
        gzip.compress(b""),
        gzip.compress(b"  \n"),
        gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a"'),  # truncated JSON
        gzip.compress(b'{"traceEvents": [1, 2,]}'),  # not JSON
        gzip.compress(b'{"traceEvents": []}')[:-6],  # truncated gzip
        b"",
        b"not gzip at all",
    ],
    ids=["empty", "blank", "truncated-json", "bad-json", "truncated-gzip", "no-bytes", "no-gzip"],
)
def test_an_empty_or_unreadable_window_is_not_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes
) -> None:
    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", _export_writing(data))
    s = _session(tmp_path)
    with pytest.warns(AsyncTraceWarning, match="not published") as caught, s:
        assert _loop(s) == 8
    messages = [str(w.message) for w in caught if issubclass(w.category, AsyncTraceWarning)]
    assert len(messages) == 1, messages
    assert "deleted" in messages[0]
    # no file that looks complete, no temporary left taking space
    assert list((tmp_path / "t").iterdir()) == []
    assert len(read_records(s.records_path).steps) == 8  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "doc",
    [b'{"traceEvents": []}', b'\n[{"ph": "X"}]\n', b'{"traceEvents": [], "x": "}"}  \n'],
    ids=["object", "bare-list", "trailing-space"],
)
def test_check_trace_accepts_complete_traces(tmp_path: Path, doc: bytes) -> None:
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(doc))
    assert check_trace(path) is None


def test_check_trace_reads_a_large_trace_in_bounded_chunks(tmp_path: Path) -> None:
    # beyond the whole-parse size only the ends are checked: a complete large trace passes,
    # a cut one does not
    events = b",".join([b'{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}'] * 700_000)
    doc = b'{"traceEvents": [' + events + b"]}"
    assert len(doc) > 32 << 20
    path = tmp_path / "big.pt.trace.json.gz"
    path.write_bytes(gzip.compress(doc, compresslevel=1))
    assert check_trace(path) is None
    path.write_bytes(gzip.compress(doc[:-100], compresslevel=1))
    assert check_trace(path) == "not one complete JSON document (truncated?)"


_UNDER_FILE_SIZE_LIMIT = """
import resource, sys, warnings
import torch
from asynctrace.capture.profiler import Profile
from asynctrace.tracing import Session

out = sys.argv[1]
# `ulimit -f 100`: Kineto's JSON cannot be written; Python ignores SIGXFSZ, so writes fail
resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, 100 * 1024))
done = 0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Session("t", dir=out, device="cpu", detect_syncs="off", print_summary=False,
                 profile=Profile(wait=0, warmup=1, active=3)) as s:
        x = torch.randn(64, 64)
        for _ in range(8):
            for _ in range(300):
                x = (x @ x).tanh()
            s.step()
            done += 1
print("steps", done)
for w in caught:
    print("warning", w.category.__name__, str(w.message).splitlines()[0])
"""


@pytest.mark.slow
def test_a_window_kineto_could_not_write_is_not_published(tmp_path: Path) -> None:
    r = _run_child(_UNDER_FILE_SIZE_LIMIT, str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "steps 8" in r.stdout
    run_dir = tmp_path / "t"
    published = list(run_dir.glob("*.pt.trace.json.gz")) if run_dir.exists() else []
    for p in published:
        # whatever was published is complete
        assert load_events(p)[0], p
    if not published:
        assert "not published" in r.stdout, r.stdout
        assert not [n for n in _files(tmp_path) if ".tmp" in n]


# ---------------------------------------------------------------- 4. host names with "/"
HOSTILE_HOSTS = ["../../../esc", "/abs/host", "..", "a/../../b", ".hidden"]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_worker_names_from_a_hostile_host_name_are_one_safe_file_name(host: str) -> None:
    name = worker_name(host=host, pid=7)
    assert "/" not in name
    assert ".." not in name
    assert not name.startswith(".")
    assert name.endswith("_7")


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_a_host_name_with_separators_never_sends_files_outside_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    out = tmp_path / "a" / "b" / "c" / "out"
    s = Session(
        "t",
        dir=out,
        device="cpu",
        detect_syncs="off",
        print_summary=False,
        tensorboard=True,
        profile=Profile(wait=0, warmup=1, active=2),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not write" warning either
        with s:
            _loop(s, 5)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    for p in written:
        assert out in p.parents, p
        assert not any(part.startswith(".") for part in p.relative_to(out).parts), p
    assert len(list(out.rglob("*.pt.trace.json.gz"))) == 1
    assert len(list(out.rglob("*.annotated.json.gz"))) == 1
    assert len(list(out.rglob("events.out.tfevents.*"))) == 1
    assert s.records_path is not None
    assert s.records_path.parent == out


_SET_HOST = """
import socket, sys, warnings
import torch
from asynctrace.capture.profiler import Profile
from asynctrace.tracing import Session

socket.sethostname("../../../esc")
with Session("t", dir=sys.argv[1], device="cpu", detect_syncs="off", print_summary=False,
             tensorboard=True, profile=Profile(wait=0, warmup=1, active=2)) as s:
    x = torch.randn(8, 8)
    for _ in range(5):
        x = x @ x / 8
        s.step()
print("host", socket.gethostname())
"""


@pytest.mark.slow
def test_a_real_host_name_with_separators_keeps_every_file_inside_dir(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here to give a child its own host name")
    probe = subprocess.run([unshare, "-u", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare -u is not permitted here: {probe.stderr.decode().strip()}")
    out = tmp_path / "a" / "b" / "c" / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [unshare, "-u", sys.executable, "-c", textwrap.dedent(_SET_HOST), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "host ../../../esc" in r.stdout
    assert "AsyncTraceWarning" not in r.stderr, r.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    for p in written:
        assert out in p.parents, p
    assert len(list(out.rglob("*.pt.trace.json.gz"))) == 1
    assert len(list(out.rglob("*.annotated.json.gz"))) == 1
    assert len(list(out.rglob("events.out.tfevents.*"))) == 1
