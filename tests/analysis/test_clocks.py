"""Where the host and device clocks disagree: the device's figures on its own clock, the
cross-clock ones withheld, and advice that names the clock problem."""

from __future__ import annotations

import pytest

from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RuntimeKind, Trace
from tests.analysis._traces import steps_trace

US = 1_000
S = 1_000_000_000
LAUNCH = RuntimeKind.LAUNCH


def _skewed(gap_us: int) -> Trace:
    """The host launches two kernels within 2 ms; the device's clock puts them 10 s later:
    [10 s, +499 µs) and [+499 + gap, 1000 µs) — busy (1000 - gap) of its own 1000 µs."""
    b = TraceBuilder("skewed.json")
    b.runtime("cudaLaunchKernel", 0, 10 * US, kind=LAUNCH, correlation=1)
    b.runtime("cudaLaunchKernel", 20 * US, 10 * US, kind=LAUNCH, correlation=2)
    b.runtime("cudaDeviceSynchronize", 40 * US, 2000 * US, kind=RuntimeKind.SYNC)
    b.activity("k0", 10 * S, 499 * US, correlation=1)
    b.activity("k1", 10 * S + (499 + gap_us) * US, (501 - gap_us) * US, correlation=2)
    return b.build(device_name="Fake GPU")


def test_busy_is_measured_on_the_device_clock() -> None:
    r = analyze(_skewed(2))
    assert [w.code for w in r.warnings][:1] == ["clock-mismatch"]
    b = r.bound
    assert b is not None
    # 998 of the device's own 1000 µs: 99.8% busy (schema 3: over a host+device region,
    # 10 s long, 0.01%)
    assert (b.region_ns, b.busy_ns) == (1000 * US, 998 * US)
    assert b.evidence.busy_pct == pytest.approx(99.8)
    assert b.label == "device-bound"
    # the cross-clock figures are withheld, and the report says so
    assert all(s.run_ahead_ns is None for s in r.steps)
    assert b.idle_ns_by_cause.unattributed == b.idle_ns
    assert any("clocks disagree" in n for n in b.evidence.notes)


def test_an_idle_device_with_skewed_clocks_gets_advice_about_the_clocks() -> None:
    b = analyze(_skewed(300)).bound
    assert b is not None
    assert (b.region_ns, b.busy_ns) == (1000 * US, 700 * US)
    assert b.label == "undetermined"  # 30% idle, its cause withheld
    assert "clocks disagree" in b.advice[0]
    assert "device activity of every stream" not in b.advice[0]


@pytest.mark.real_traces
def test_vllm_graph_replay_is_device_bound_on_its_own_clock() -> None:
    # Read by hand: the trace's host events lie in 2.4 ms, its device activities in 10.7 ms
    # starting after them; by the device's own clock it is busy 99.8%
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    r = analyze(load(shared_trace("kineto", "tracelens_mi300_vllm_graph_replay.json.gz")))
    assert "clock-mismatch" in [w.code for w in r.warnings]
    b = r.bound
    assert b is not None
    assert b.label == "device-bound"
    assert b.evidence.busy_pct == pytest.approx(99.76)
    assert b.region_ns == 10_743_181


@pytest.mark.real_traces
def test_the_figures_that_compare_the_clocks_are_withheld() -> None:
    # queue depth and launch delays compare a launch's host time with its start on the device:
    # on this trace the median launch-to-start is 11.9 ms for a 10.7 ms device span
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    r = analyze(load(shared_trace("kineto", "tracelens_mi300_vllm_graph_replay.json.gz")))
    assert r.trace is not None
    assert r.trace.withheld == ["launch delays", "queue depth", "run-ahead", "idle causes"]
    assert r.trace.queue == {}
    assert r.trace.launch.matched == 434
    assert r.trace.launch.launch_to_start_ns.p50 == 0
    assert all(s.run_ahead_ns is None for s in r.steps)
    assert "queue depth" in r.warnings[0].message


def test_agreeing_clocks_withhold_nothing() -> None:
    r = analyze(steps_trace())
    assert r.trace is not None
    assert r.trace.withheld == []
    assert r.trace.queue
