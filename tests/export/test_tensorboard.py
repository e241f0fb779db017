"""TensorBoard scalars: the values written, read back by tensorboard, and served over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from asynctrace.analysis.report import Report, analyze
from asynctrace.export.tensorboard import (
    SCALAR_TAGS,
    TEXT_TAG,
    TensorBoardWriter,
    step_scalars,
    summary_markdown,
    write_records,
)
from asynctrace.files.sources import load_source
from asynctrace.records import Note, Records, StepRecord, SyncSite
from tests.export._records import make_steps, write_records_file


def _report(path: Path) -> Report:
    return analyze(load_source(path))


def test_step_scalars_convert_units_only() -> None:
    s = StepRecord(
        step=3,
        start_ns=0,
        frontend_ns=2_500_000,
        data_wait_ns=500_000,
        device_ns=4_000_000,
        run_ahead_ns=-250_000,
        in_flight=2,
        sync_count=1,
        sync_wait_ns=1_000_000,
        mem_allocated_bytes=3 << 20,
        mem_reserved_bytes=5 << 20,
    )
    assert step_scalars(s) == {
        "asynctrace/frontend_ms": 2.5,
        "asynctrace/data_wait_ms": 0.5,
        "asynctrace/device_ms": 4.0,
        "asynctrace/run_ahead_ms": -0.25,
        "asynctrace/in_flight": 2.0,
        "asynctrace/syncs": 1.0,
        "asynctrace/sync_wait_ms": 1.0,
        "asynctrace/mem_allocated_mb": 3.0,
        "asynctrace/mem_reserved_mb": 5.0,
    }
    assert set(step_scalars(s)) == set(SCALAR_TAGS)


def test_unmeasured_figures_are_left_out() -> None:
    s = StepRecord(step=0, start_ns=0, frontend_ns=1)
    got = step_scalars(s)
    for tag in ("device_ms", "run_ahead_ms", "mem_allocated_mb", "mem_reserved_mb"):
        assert f"asynctrace/{tag}" not in got


def _accumulate(run_dir: Path) -> Any:
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return acc


def test_records_file_round_trips_through_tensorboard(tmp_path: Path) -> None:
    steps = make_steps(5, frontend_ns=2_000_000, jitter_ns=100_000, device_ns=3_000_000)
    syncs = [SyncSite(site="train.py:12", op="aten::item", count=5, wait_ns=1_000_000)]
    path = write_records_file(tmp_path / "a.records.jsonl", steps, syncs=syncs)
    report = _report(path)
    run_dir = write_records(report, tmp_path / "tb")
    assert run_dir == tmp_path / "tb" / "train"
    acc = _accumulate(run_dir)
    tags = set(acc.Tags()["tensors"])
    assert set(SCALAR_TAGS) | {TEXT_TAG} == tags
    import numpy as np
    from tensorboard.util import tensor_util

    fe = acc.Tensors("asynctrace/frontend_ms")
    assert [e.step for e in fe] == [0, 1, 2, 3, 4]
    got = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in fe]
    want = [s.frontend_ns / 1e6 for s in steps]
    assert np.allclose(got, want, rtol=0, atol=1e-6)
    text = tensor_util.make_ndarray(acc.Tensors(TEXT_TAG)[0].tensor_proto).item().decode()
    assert "train.py:12" in text
    # the report's summary, as the session's own at its end: the diagnosis first, figures
    assert text == summary_markdown(report)
    headline = report.diagnosis[0]
    assert text.splitlines()[2].startswith(f"**{headline.code}**")
    assert "verdict:" not in text
    assert "| frontend | 1.980 ms | 2.000 ms | 2.100 ms |" in text
    assert "bound: **device-bound** (estimated from step records)" in text


def test_a_traces_report_has_no_session_summary() -> None:
    from asynctrace.traces.builder import TraceBuilder

    report = analyze(TraceBuilder("t.json").build())
    with pytest.raises(ValueError, match="written from a session's records"):
        summary_markdown(report)


def test_live_writer(tmp_path: Path) -> None:
    with TensorBoardWriter(tmp_path, run="live") as w:
        for s in make_steps(3):
            w.add_step(s)
    acc = _accumulate(tmp_path / "live")
    assert len(acc.Tensors("asynctrace/device_ms")) == 3


# --- a real tensorboard server -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _tensorboard(logdir: Path) -> Iterator[str]:
    exe = shutil.which("tensorboard", path=str(Path(sys.executable).parent)) or shutil.which(
        "tensorboard"
    )
    if exe is None:
        pytest.skip("the tensorboard command is not installed")
    port = _free_port()
    log = (logdir.parent / "tensorboard.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
            "--reload_interval",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _poll(url: str, ok: Any, *, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = _get_json(url)
            if ok(last):
                return last
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{url}: not ready after {timeout_s} s (last answer: {last!r})")


def _deep_mode_trace(logdir: Path, run: str) -> Path:
    """A real torch.profiler window written by the deep-mode profiler (CPU activity)."""
    torch = pytest.importorskip("torch")
    from asynctrace.capture.profiler import DeepProfiler, Profile

    p = DeepProfiler(
        Profile(wait=0, warmup=1, active=2, annotate=False),
        dir=logdir,
        run=run,
        worker="testhost_1",
    )
    x = torch.randn(32, 32)
    p.start()
    try:
        for _ in range(4):
            (x @ x).sum()
            p.step()
    finally:
        p.stop()
    assert len(p.traces) == 1
    return p.traces[0]


@pytest.mark.slow
def test_tensorboard_server_serves_our_scalars_and_trace(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    steps = make_steps(4, frontend_ns=2_000_000, jitter_ns=250_000)
    path = write_records_file(tmp_path / "a.records.jsonl", steps)
    write_records(_report(path), logdir, run="session")
    _deep_mode_trace(logdir, "session")

    with _tensorboard(logdir) as base:
        tags = _poll(
            f"{base}/data/plugin/scalars/tags",
            lambda t: "asynctrace/frontend_ms" in t.get("session", {}),
        )
        assert set(SCALAR_TAGS) <= set(tags["session"])
        q = urllib.parse.urlencode({"run": "session", "tag": "asynctrace/frontend_ms"})
        points = _get_json(f"{base}/data/plugin/scalars/scalars?{q}")
        assert [p[1] for p in points] == [0, 1, 2, 3]
        assert [round(p[2], 6) for p in points] == [s.frontend_ns / 1e6 for s in steps]

        pytest.importorskip(
            "torch_tb_profiler", reason="the tb-profiler extra (torch-tb-profiler) is not installed"
        )
        runs = _poll(
            f"{base}/data/plugin/pytorch_profiler/runs",
            lambda r: "session" in r.get("runs", []) and not r.get("loading", True),
            timeout_s=90,
        )
        assert "session" in runs["runs"]
        workers = _get_json(
            f"{base}/data/plugin/pytorch_profiler/workers?"
            + urllib.parse.urlencode({"run": "session", "view": "Overview"})
        )
        assert workers == ["testhost_1"]
        # the plugin numbers a worker's files ("spans") itself, in timestamp order
        spans = _get_json(
            f"{base}/data/plugin/pytorch_profiler/spans?"
            + urllib.parse.urlencode({"run": "session", "worker": "testhost_1"})
        )
        assert len(spans) == 1
        span = spans[0]
        q = urllib.parse.urlencode({"run": "session", "worker": "testhost_1", "span": span})
        with urllib.request.urlopen(
            f"{base}/data/plugin/pytorch_profiler/trace?{q}", timeout=30
        ) as r:
            body = r.read()
        import gzip

        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        served = json.loads(body)
        names = {e.get("name") for e in served["traceEvents"]}
        assert {"ProfilerStep#1", "ProfilerStep#2"} <= names


def test_background_writer_never_blocks_and_counts_what_it_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from asynctrace.export import tensorboard as tbmod

    release = threading.Event()
    written: list[int] = []
    real = tbmod.TensorBoardWriter._write_step

    def slow(self: Any, step: StepRecord, wall_time: float) -> None:
        release.wait(5)
        written.append(step.step)
        real(self, step, wall_time)

    monkeypatch.setattr(tbmod.TensorBoardWriter, "_write_step", slow)
    w = tbmod.TensorBoardWriter(tmp_path, run="bg", background=True, max_queued=1)
    steps = make_steps(6, frontend_ns=1_000_000)
    for s in steps:
        w.add_step(s)  # returns at once although the writer is stuck
    # one step is held by the stuck writer, at most one waits in the queue: the rest are dropped
    assert w.dropped >= 4
    release.set()
    w.close()
    assert len(written) == len(steps) - w.dropped
    assert written == sorted(written)


def test_background_writer_errors_reach_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asynctrace.export import tensorboard as tbmod

    def broken(self: Any, step: StepRecord, wall_time: float) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tbmod.TensorBoardWriter, "_write_step", broken)
    w = tbmod.TensorBoardWriter(tmp_path, run="bg", background=True)
    w.add_step(make_steps(1, frontend_ns=1)[0])
    with pytest.raises(OSError, match="No space left"):
        w.close()


def test_summary_strings_render_as_written_in_tensorboards_text_dashboard(tmp_path: Path) -> None:
    # Python sites read "train.py:12 <module>"; the text plugin's Markdown has no "\<" escape,
    # so a backslash there would show, and an entity in a name would be decoded.
    from tensorboard import plugin_util

    site = 'train.py:12 <module> a|b_c & &lt; "q"\nnext'
    syncs = [SyncSite(site=site, op="aten::item", count=1, wait_ns=1)]
    path = write_records_file(tmp_path / "a.records.jsonl", make_steps(1), syncs=syncs)
    page = plugin_util.markdown_to_safe_html(summary_markdown(_report(path)))
    assert '<td>train.py:12 &lt;module&gt; a|b_c &amp; &amp;lt; "q" next</td>' in page


def test_the_summary_text_shows_each_notes_text(tmp_path: Path) -> None:
    rec = load_source(write_records_file(tmp_path / "a.records.jsonl", make_steps(1)))
    assert isinstance(rec, Records)
    assert rec.summary is not None
    note = Note(code="collected-at-exit", text="1 step(s) were still pending at exit")
    rec = msgspec.structs.replace(rec, summary=msgspec.structs.replace(rec.summary, notes=[note]))
    text = summary_markdown(analyze(rec))
    assert "\n- 1 step(s) were still pending at exit" in text
    assert "collected-at-exit" not in text  # the code is for programs


# --- a full disk: one warning, never a traceback of a writer thread ------------------------


def _events_fd(run_dir: Path) -> int:
    """The descriptor this process holds open on the run's event file."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith(str(run_dir)) and "events.out.tfevents." in target:
                return int(name)
    raise AssertionError(f"no open event file under {run_dir}")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_reaches_the_caller_without_a_thread_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import threading

    hooked: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    w = TensorBoardWriter(tmp_path, run="full", background=True)
    steps = make_steps(200, frontend_ns=1_000_000)
    w.add_step(steps[0])
    w.flush()
    # every later write(2) of the event file fails as on a full disk: ENOSPC from the kernel
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, _events_fd(tmp_path / "full"))
    finally:
        os.close(full)
    raised: list[BaseException] = []
    for s in steps[1:]:
        try:
            w.add_step(s)
        except OSError as e:
            raised.append(e)
            break
    with pytest.raises(OSError, match="No space left on device"):
        w.close()
    assert all("No space left" in str(e) for e in raised)
    assert hooked == []  # no thread of ours (or tensorboard's) died with a traceback
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Exception in thread" not in err


_FILL_THE_DISK = """
import os, sys, torch
from asynctrace.tracing import Session

out = sys.argv[1]
with Session("t", dir=out, device="cpu", detect_syncs="off", print_summary=False,
             write=False, tensorboard=True) as s:
    x = torch.randn(8, 8)
    for i in range(400):
        x = x @ x / 8
        s.step()
        if i == 5:
            # the disk fills up: another process's file takes what is left
            fd = os.open(os.path.join(out, "filler"), os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, bytes(4096)):
                    pass
            except OSError:
                pass
            os.close(fd)
print("steps", s.summary().source.events)
"""


@pytest.mark.slow
def test_a_session_on_a_disk_that_fills_says_it_in_one_warning(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs unshare(1) to mount a small tmpfs (Linux)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(_FILL_THE_DISK)
    repo = Path(__file__).resolve().parents[2]
    cmd = (
        f"mount -t tmpfs -o size=256k tmpfs {mnt} && "
        f"{sys.executable} -W default {script} {mnt / 'out'}"
    )
    probe = subprocess.run(
        [unshare, "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mnt}"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode().strip()}")
    r = subprocess.run(
        [unshare, "-m", "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "steps 400" in r.stdout
    assert r.stderr.count("could not write TensorBoard events") == 1, r.stderr
    assert "No space left on device" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "Exception in thread" not in r.stderr, r.stderr
