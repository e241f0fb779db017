"""Warnings where the input itself cannot be trusted, and the figures they withhold
(docs/reliability.md): negative kernel durations, a kernel of 9×10¹⁸ ns, and five launches
sharing one correlation id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asynctrace.analysis.report import Report, analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.model import RangeKind, RuntimeKind

US = 1000


def _kineto(tmp_path: Path, kernel_dur_us: float) -> Path:
    """Five 1 ms profiler steps, each launching one kernel of ``kernel_dur_us``."""
    events: list[dict[str, Any]] = []
    for k in range(5):
        t0 = 1000 * k
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 1000,
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 10,
                "dur": 5,
                "args": {"correlation": k + 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": t0 + 20,
                "dur": kernel_dur_us,
                "args": {"correlation": k + 1, "device": 0, "stream": 7},
            },
        ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _codes(r: Report) -> list[str]:
    return [w.code for w in r.warnings]


def test_every_kernel_duration_negative_withholds_the_label(tmp_path: Path) -> None:
    r = analyze(load_kineto(_kineto(tmp_path, -50)))
    assert "negative-duration" in _codes(r)
    w = next(w for w in r.warnings if w.code == "negative-duration")
    assert w.message.startswith("5 of 5 device activities have a negative duration")
    assert r.bound is not None
    # before: a label (the device looked idle throughout) from durations that are not there
    assert r.bound.label == "undetermined"
    assert "negative duration" in r.bound.advice[0]
    assert all(s.label == "undetermined" for s in r.step_bounds)


def test_a_few_sound_kernels_keep_their_label(tmp_path: Path) -> None:
    r = analyze(load_kineto(_kineto(tmp_path, 50)))
    assert _codes(r) == []
    assert r.bound is not None
    assert r.bound.label != "undetermined"


def test_a_kernel_of_9e18_ns_withholds_the_label_and_run_ahead() -> None:
    b = TraceBuilder()
    for k in range(3):
        b.range(f"ProfilerStep#{k}", k * 1000 * US, 1000 * US, kind=RangeKind.STEP, step=k)
        b.runtime(
            "cudaLaunchKernel", k * 1000 * US + 10, 5, kind=RuntimeKind.LAUNCH, correlation=k + 1
        )
        dur = 9 * 10**18 if k == 1 else 100 * US
        b.activity("k", k * 1000 * US + 20 * US, dur, correlation=k + 1)
    r = analyze(b.build())
    assert "implausible-duration" in _codes(r)
    assert r.bound is not None
    # before: device-bound, and a run-ahead of 9e18 ns
    assert r.bound.label == "undetermined"
    assert "longer than 10× the host's whole span" in r.bound.advice[0]
    assert all(s.run_ahead_ns is None for s in r.steps)
    assert all(s.in_flight == 0 for s in r.steps)


def test_five_launches_sharing_one_correlation_id_are_left_unmatched() -> None:
    b = TraceBuilder()
    for k in range(5):
        b.range(f"ProfilerStep#{k}", k * 1000 * US, 1000 * US, kind=RangeKind.STEP, step=k)
        b.runtime("cudaLaunchKernel", k * 1000 * US + 10, 5, kind=RuntimeKind.LAUNCH, correlation=7)
        b.activity("k", k * 1000 * US + 20 * US, 100 * US, correlation=7)
    # a sound launch beside them keeps its link
    b.runtime("cudaLaunchKernel", 4500 * US, 5, kind=RuntimeKind.LAUNCH, correlation=8)
    b.activity("sound", 4600 * US, 10 * US, correlation=8)
    r = analyze(b.build())
    assert "shared-correlation" in _codes(r)
    w = next(w for w in r.warnings if w.code == "shared-correlation")
    assert "5 distinct launch calls share 1 correlation id(s)" in w.message
    assert "5 activities" in w.message
    assert r.trace is not None
    # before: all five kernels went to step 0, through the first launch
    assert (r.trace.launch.matched, r.trace.launch.unmatched) == (1, 5)
    assert [x.activities for x in r.trace.steps] == [0, 0, 0, 0, 1]


def test_one_call_written_twice_is_not_shared() -> None:
    # some exports write a call twice, one row nested in the other: one call
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 1000 * US, kind=RangeKind.STEP, step=0)
    b.runtime("cudaLaunchKernel", 10, 50, kind=RuntimeKind.LAUNCH, correlation=3)
    b.runtime("cudaLaunchKernel", 20, 10, kind=RuntimeKind.LAUNCH, correlation=3)
    b.activity("k", 100 * US, 10 * US, correlation=3)
    r = analyze(b.build())
    assert _codes(r) == []
    assert r.trace is not None
    assert r.trace.launch.matched == 1
