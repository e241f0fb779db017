"""Deep mode's syncs on a CPU: a real torch.profiler trace's ``aten::item`` (and the other ops
the lint flags on sight) are the trace's syncs, so the session's note "their syncs are in the
profiler trace" holds where there is no device."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from asynctrace.analysis.report import analyze
from asynctrace.records.known_syncs import LINT_OPS, TRACE_SYNC_OPS
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.model import RangeKind

torch = pytest.importorskip("torch")

ITEMS_PER_STEP = 3


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        data = json.load(f)
    events: list[dict[str, Any]] = data["traceEvents"]
    return events


def test_a_cpu_profiler_trace_counts_each_item_call_as_a_sync(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(8, 8)
    steps = 8
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(steps):
            loss = model(torch.randn(4, 8)).sum()
            for _ in range(ITEMS_PER_STEP):
                loss.item()
            prof.step()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    items = sum(1 for e in _events(path) if e.get("name") == "aten::item")
    assert items == steps * ITEMS_PER_STEP  # what the loop did, read from the raw events
    report = analyze(load_kineto(path))
    assert report.trace is not None
    assert report.trace.syncs.count == items
    assert all(c.op == "aten::item" and c.kind == "sync" for c in report.trace.syncs.calls)
    # (no schedule: the profile is one step) the step counts them and their wait
    assert sum(s.sync_count for s in report.steps) == items
    assert sum(s.sync_wait_ns for s in report.steps) > 0
    # the Python line that made them (with_stack=True)
    assert all(
        c.site.rsplit("/", 1)[-1].startswith("test_cpu_trace_syncs.py:")
        for c in report.trace.syncs.calls
    )


def test_deep_mode_profiled_steps_have_their_syncs_in_the_profiler_trace(tmp_path: Path) -> None:
    # what a lint session in deep mode does: the lint is held off in the profiled window
    # (lint-held-off); the trace it writes must then hold those steps' syncs
    from asynctrace.capture.profiler import DeepProfiler, Profile
    from asynctrace.capture.syncs import SyncDetector

    model = torch.nn.Linear(16, 16)
    seen: list[Any] = []
    det = SyncDetector(seen.append, mode="lint")
    prof = DeepProfiler(Profile(wait=1, warmup=1, active=2, annotate=False), dir=tmp_path, run="r")
    det.start()
    try:
        prof.start()
        det.suspend_while(prof.active)
        for _ in range(6):
            loss = model(torch.randn(8, 16)).sum()
            for _ in range(ITEMS_PER_STEP):
                loss.item()
            prof.step()
            det.suspend_while(prof.active)
        prof.stop()
    finally:
        det.stop()
    (trace,) = prof.traces
    report = analyze(load_kineto(trace))
    assert report.trace is not None
    recorded = [s for s in report.steps]
    assert len(recorded) == 2  # the active steps
    assert [s.sync_count for s in recorded] == [ITEMS_PER_STEP] * 2
    assert report.trace.syncs.count == 2 * ITEMS_PER_STEP
    # the lint saw the three steps outside the window (the wait step and the last two); the
    # warm-up step it was held off in is in neither count: the profiler does not write it
    assert len(seen) == 3 * ITEMS_PER_STEP


def test_the_trace_counts_the_ops_the_lint_flags_on_sight() -> None:
    # one list: the trace's ops are the lint's (plus aten::item, the op around the scalar read)
    assert set(TRACE_SYNC_OPS) - {"item"} <= set(LINT_OPS)
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 100, kind=RangeKind.STEP, step=0)
    b.range("aten::item", 10, 20)
    b.range("aten::_local_scalar_dense", 12, 15)  # inside the item: one sync
    b.range("aten::nonzero", 40, 10)
    b.range("aten::_local_scalar_dense", 60, 10)  # float(t): a scalar read of its own
    b.range("aten::add", 80, 10)
    b.range("aten::copy_", 85, 2)  # a trace cannot tell a host copy from a device one
    r = analyze(b.build())
    assert r.trace is not None
    assert [c.op for c in r.trace.syncs.calls] == [
        "aten::item",
        "aten::nonzero",
        "aten::_local_scalar_dense",
    ]
    assert r.steps[0].sync_count == 3
    assert r.steps[0].sync_wait_ns == 20 + 10 + 10


def test_a_device_trace_takes_its_syncs_from_the_runtime_calls_only() -> None:
    # with device activity, an aten::item of a host tensor does not wait for the device (the
    # 16-rank A100 trace holds 945 of them and 75 stream syncs): the runtime call is the sync
    from asynctrace.traces.model import ActivityKind, RuntimeKind

    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 100, kind=RangeKind.STEP, step=0)
    b.runtime("cudaLaunchKernel", 1, 2, kind=RuntimeKind.LAUNCH, correlation=1)
    b.activity("k", 5, 10, kind=ActivityKind.KERNEL, correlation=1)
    b.range("aten::item", 20, 5)  # a host tensor's
    b.range("aten::item", 30, 30)
    b.runtime("cudaStreamSynchronize", 35, 20, kind=RuntimeKind.SYNC)
    r = analyze(b.build())
    assert r.trace is not None
    assert [c.op for c in r.trace.syncs.calls] == ["cudaStreamSynchronize"]


def test_a_lint_session_s_note_holds_for_the_steps_its_trace_recorded(tmp_path: Path) -> None:
    # the session end to end: deep mode on the CPU with the lint, whose note says the held
    # steps' syncs are in the profiler trace
    from asynctrace.capture.profiler import Profile
    from asynctrace.records import read_records
    from asynctrace.tracing import Session

    s = Session(
        "t",
        dir=tmp_path,
        device="cpu",
        detect_syncs="lint",
        print_summary=False,
        profile=Profile(wait=0, warmup=1, active=2),
    )
    model = torch.nn.Linear(8, 8)
    with s:
        for _ in range(5):
            loss = model(torch.randn(4, 8)).sum()
            for _ in range(ITEMS_PER_STEP):
                loss.item()
            s.step()
    assert s.records_path is not None
    records = read_records(s.records_path)
    assert records.summary is not None
    assert "lint-held-off" in [n.code for n in records.summary.notes]
    (trace,) = tmp_path.rglob("*.pt.trace.json.gz")
    report = analyze(load_kineto(trace))
    assert report.trace is not None
    assert len(report.steps) == 2  # the active steps
    assert [st.sync_count for st in report.steps] == [ITEMS_PER_STEP] * 2
