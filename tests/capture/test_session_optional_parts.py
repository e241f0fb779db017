"""The session's optional parts: deep mode, TensorBoard scalars, live status, nsys capture
ranges, the rank gather. Each is started and stopped by the session, exceptions included."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.capture.profiler import Profile
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import StepRecord, read_records
from asynctrace.sinks.live import LiveStatus
from asynctrace.tracing import Session

_TRACE = re.compile(r"^(?P<worker>.+?)\.(?P<ns>\d+)\.pt\.trace\.json\.gz$")


def _loop(s: Session, n: int) -> None:
    x = torch.randn(32, 32)
    for _ in range(n):
        (x @ x).relu_()
        s.step()


def test_profile_records_the_scheduled_steps_in_tensorboard_layout(tmp_path: Path) -> None:
    opts = Profile(wait=1, warmup=1, active=2, repeat=1)
    with Session("deep", dir=tmp_path, device="cpu", profile=opts, print_summary=False) as s:
        _loop(s, 6)
    run_dir = tmp_path / "deep"
    traces = sorted(p.name for p in run_dir.iterdir() if _TRACE.match(p.name))
    assert len(traces) == 1, sorted(p.name for p in run_dir.iterdir())
    annotated = [p for p in run_dir.iterdir() if p.name.endswith(".annotated.json.gz")]
    assert len(annotated) == 1
    assert not torch.autograd.profiler._is_profiler_enabled
    # the records of every step are still written, profiled or not
    assert len(read_records(s.records_path).steps) == 6  # type: ignore[arg-type]


def test_profile_is_stopped_when_a_step_raises(tmp_path: Path) -> None:
    opts = Profile(wait=0, warmup=1, active=5, repeat=1)

    def job() -> None:
        with Session("deep", dir=tmp_path, device="cpu", profile=opts, print_summary=False) as s:
            _loop(s, 2)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        job()
    assert not torch.autograd.profiler._is_profiler_enabled


def test_profile_rejects_a_wrong_value(tmp_path: Path) -> None:
    with (
        pytest.raises(CaptureError, match="profile="),
        Session(dir=tmp_path, device="cpu", profile="yes", print_summary=False),  # type: ignore[arg-type]
    ):
        pass


def test_tensorboard_scalars_are_written_per_step(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    clock = FakeClock(1_000)
    dev = FakeDevice(clock)
    with Session("tb", dir=tmp_path, device=dev, tensorboard=True, print_summary=False) as s:
        for _ in range(4):
            clock.advance(2_000_000)  # 2 ms a step
            s.step()
    # a run of its own per session: <dir>/<name>/<time>-<pid>
    assert s.tensorboard_dir is not None
    assert s.tensorboard_dir.parent == tmp_path / "tb"
    acc = ea.EventAccumulator(str(s.tensorboard_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    assert "asynctrace/frontend_ms" in acc.Tags()["tensors"]
    events = acc.Tensors("asynctrace/frontend_ms")
    assert [e.step for e in events] == [0, 1, 2, 3]
    values = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in events]
    assert values == pytest.approx([2.0, 2.0, 2.0, 2.0])
    # the text dashboard's summary, as the docs and the demo promise (it was never written)
    from asynctrace.export.tensorboard import TEXT_TAG, summary_markdown
    from asynctrace.records import read_records

    (text,) = acc.Tensors(TEXT_TAG)
    markdown = tensor_util.make_ndarray(text.tensor_proto).item().decode()
    assert markdown.startswith("**tb** on ")
    assert "steps recorded: 4" in markdown
    assert s.records_path is not None
    # the verdict with its message, the figures and the sync sites, as the exit summary shows
    report = s.summary()
    headline = report.diagnosis[0]
    assert f"**{headline.code}**{headline.message[len(headline.code) :]}" in markdown
    assert "| per step | mean | median | p90 |" in markdown
    assert "| frontend | 2.000 ms | 2.000 ms | 2.000 ms |" in markdown
    # a records file read back later, through its report, gives the same summary
    from asynctrace.analysis.report import analyze

    later = summary_markdown(analyze(read_records(s.records_path)))
    assert later.startswith("**tb** on ")
    assert "| frontend | 2.000 ms | 2.000 ms | 2.000 ms |" in later


def test_live_status_is_silent_off_a_terminal_and_refreshes_at_most_once_a_second() -> None:
    rec = StepRecord(step=3, start_ns=0, frontend_ns=1_500_000, device_ns=1_400_000)
    quiet = LiveStatus("x", console=Console(file=io.StringIO(), force_terminal=False))
    quiet.start()
    quiet.update(rec)
    quiet.stop()
    assert quiet.refreshes == 0

    out = io.StringIO()
    live = LiveStatus("x", console=Console(file=out, force_terminal=True, width=200))
    live.start()
    try:
        for t in (0, 10, 999_999_999, 1_000_000_000, 1_500_000_000, 2_000_000_001):
            live.update(rec, now_ns=t)
    finally:
        live.stop()
    assert live.refreshes == 3  # at 0, 1.0 s and 2.0 s
    assert "step 3" in live.line(rec)
    assert "frontend 1.50 ms" in live.line(rec)


def test_live_session_writes_nothing_when_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Session(dir=tmp_path, device="cpu", live=True, print_summary=False) as s:
        _loop(s, 3)
    assert capsys.readouterr().err == ""


def test_nsys_capture_on_cpu_warns_once_and_traces_normally(tmp_path: Path) -> None:
    with (
        pytest.warns(AsyncTraceWarning, match="nsys_capture"),
        Session(dir=tmp_path, device="cpu", nsys_capture=range(1, 3), print_summary=False) as s,
    ):
        _loop(s, 4)
    assert len(read_records(s.records_path).steps) == 4  # type: ignore[arg-type]


def test_nsys_capture_rejects_bad_steps(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="step numbers"):
        Session(dir=tmp_path, device="cpu", nsys_capture=[-1])


def test_a_huge_nsys_capture_range_is_kept_as_a_range(tmp_path: Path) -> None:
    steps = range(10, 10**12)
    Session(dir=tmp_path, device="cpu", nsys_capture=range(1), print_summary=False)  # warm
    # CPU time, not wall time: a loaded machine stretches the wall clock, not the work
    t0 = time.process_time()
    s = Session(dir=tmp_path, device="cpu", nsys_capture=steps, print_summary=False)
    # a tuple of it would never be built (it raised MemoryError, or ran for minutes)
    assert time.process_time() - t0 < 1.0
    assert s.nsys_capture is steps
    with s:
        _loop(s, 3)  # steps 0-2 are outside the window: no warning
    assert len(read_records(s.records_path).steps) == 3  # type: ignore[arg-type]


def test_nsys_capture_steps_from_an_iterator_serve_every_run(tmp_path: Path) -> None:
    s = Session(dir=tmp_path, device="cpu", nsys_capture=iter([5, 7]), print_summary=False)
    assert s.nsys_capture == frozenset({5, 7})


def test_nsys_capture_opens_and_closes_the_window_around_the_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asynctrace.capture import _nsys

    calls: list[str] = []
    monkeypatch.setattr(_nsys, "_torch_start", lambda: calls.append("start"))
    monkeypatch.setattr(_nsys, "_torch_stop", lambda: calls.append("stop"))
    monkeypatch.setattr(_nsys, "_PROFILER_KINDS", frozenset({"fake"}))
    clock = FakeClock()
    seen: list[tuple[int, list[str]]] = []
    with Session(
        dir=tmp_path, device=FakeDevice(clock), nsys_capture=range(2, 4), print_summary=False
    ) as s:
        for i in range(6):
            seen.append((i, list(calls)))
            clock.advance(1_000)
            s.step()
    # steps 2 and 3 run inside the window; it closes when step 4 starts
    assert seen[2][1] == ["start"]
    assert seen[4][1] == ["start", "stop"]
    assert calls == ["start", "stop"]


def test_gather_ranks_outside_torch_distributed_is_a_no_op(tmp_path: Path) -> None:
    with Session(dir=tmp_path, device="cpu", gather_ranks=True, print_summary=False) as s:
        _loop(s, 2)
    assert s.rank_table is None
