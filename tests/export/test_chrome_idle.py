"""The annotated trace's "device idle" and "steps: device share" tracks: one slice per idle
gap of the bound analysis, named and coloured by cause; one per step's share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asynctrace.analysis.bound import CAUSES
from asynctrace.analysis.report import Analysis, analyze_detail
from asynctrace.cli import main
from asynctrace.export.chrome import LANE_IDLE, LANE_SHARE, overlay_events
from asynctrace.render.legend import IDLE_CAUSE_CNAMES
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.load import load
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace
from tests.conftest import shared_trace
from tests.export._trace_event_validator import load_events, tb_profiler_problems, validate

PID = 999


def causes_trace() -> Trace:
    """One step [0, 1000) with a gap of each kind the host can open:

    k0 [30, 100) launched [10, 20); sync [100, 400); k1 [420, 500) launched [400, 410): the
    gap [100, 420) began inside the sync → sync. k2 on stream 8 [600, 650) launched [450, 460),
    before the gap [500, 600) began → dependency. [0, 30): host (launch); [650, 1000): the
    final gap, host.
    """
    b = TraceBuilder("causes.json")
    b.range("ProfilerStep#0", 0, 1000, kind=RangeKind.STEP, step=0, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 10, 10, kind=RuntimeKind.LAUNCH, correlation=1, pid=1, tid=1)
    b.runtime("cudaStreamSynchronize", 100, 300, kind=RuntimeKind.SYNC, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 400, 10, kind=RuntimeKind.LAUNCH, correlation=2, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 450, 10, kind=RuntimeKind.LAUNCH, correlation=3, pid=1, tid=1)
    b.activity("k0", 30, 70, stream=7, correlation=1, pid=0)
    b.activity("k1", 420, 80, stream=7, correlation=2, pid=0)
    b.activity("k2", 600, 50, stream=8, correlation=3, pid=0)
    return b.build(device_name="test")


def _idle(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "asynctrace.idle"]


def _check_idle_track(idle: list[dict[str, Any]], a: Analysis) -> None:
    report = a.report
    assert report.bound is not None
    assert a.trace is not None
    gaps = a.trace.gaps
    # one slice per gap, their durations adding up to the run's idle
    assert len(idle) == len(gaps.start_ns)
    assert sum(e["args"]["duration_ns"] for e in idle) == report.bound.idle_ns
    assert {e["tid"] for e in idle} <= {LANE_IDLE}
    by_cause = {c: 0 for c in CAUSES}
    for e in idle:
        c = e["args"]["cause"]
        assert e["name"] == f"idle: {c}"
        assert e["cname"] == IDLE_CAUSE_CNAMES[c]
        assert isinstance(e["args"]["launch_gap"], bool)
        by_cause[c] += e["args"]["duration_ns"]
    assert by_cause == report.bound.idle_ns_by_cause.as_dict()
    # each inside the region, in order, none overlapping the next
    if report.step_bounds:
        lo, hi = report.step_bounds[0].share_start_ns, report.step_bounds[-1].share_end_ns
        assert hi - lo == report.bound.region_ns
        starts = gaps.start_ns.tolist()
        ends = gaps.end_ns.tolist()
        assert all(lo <= s < e <= hi for s, e in zip(starts, ends, strict=True))
        assert all(e0 <= s1 for e0, s1 in zip(ends, starts[1:], strict=False))
        # placed on the trace's own clock (epoch-µs traces: to the nearest ~0.25 µs a JSON
        # double holds there, as every viewer reading the original does)
        assert [e["ts"] - idle[0]["ts"] for e in idle] == pytest.approx(
            [(s - starts[0]) / 1000 for s in starts], abs=0.5
        )


def test_idle_slices_one_per_gap_named_and_coloured_by_cause() -> None:
    trace = causes_trace()
    a = analyze_detail(trace)
    ev = overlay_events(a, pid=PID)
    assert validate(ev) == []
    assert tb_profiler_problems(ev) == []
    idle = _idle(ev)
    _check_idle_track(idle, a)
    assert [(e["ts"], e["dur"], e["args"]["cause"], e["args"]["step"]) for e in idle] == [
        (0.0, 0.03, "host", 0),
        (0.1, 0.32, "sync", 0),
        (0.5, 0.1, "dependency", 0),
        (0.65, 0.35, "host", 0),
    ]
    # host gaps shorter than LAUNCH_GAP_NS (50 µs) are launch gaps
    assert [e["args"]["launch_gap"] for e in idle] == [True, False, False, True]
    names = [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"]
    assert "device idle" in names
    assert "steps: device share" in names


def test_step_share_slices_cover_the_region_with_each_label() -> None:
    a = analyze_detail(causes_trace())
    ev = overlay_events(a, pid=PID)
    share = [e for e in ev if e.get("ph") == "X" and e.get("tid") == LANE_SHARE]
    (b,) = a.report.step_bounds
    assert [(e["name"], e["ts"], e["dur"]) for e in share] == [(f"step 0: {b.label}", 0.0, 1.0)]
    args = share[0]["args"]
    assert args["busy_ns"] + sum(args[f"idle_{c}_ns"] for c in CAUSES) == args["share_ns"]


def test_the_overlay_is_drawn_from_the_given_analysis_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asynctrace.analysis.report as rep
    from asynctrace.export.chrome import annotate_file, overlay_source

    trace = causes_trace()
    a = analyze_detail(trace)

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("analysed again")

    for name in ("analyze", "analyze_detail", "link_launches", "queue_series", "bound_of_trace"):
        monkeypatch.setattr(rep, name, boom)
    source = overlay_source(a)
    assert a.trace is not None
    assert source.gaps is a.trace.gaps
    assert source.report is a.report
    assert overlay_events(source, pid=PID) == overlay_events(a, pid=PID)
    src = tmp_path / "t.json"
    src.write_text('{"traceEvents": []}')
    events, _ = load_events(annotate_file(src, tmp_path / "o.json", a))
    assert events == overlay_events(a, pid=events[0]["pid"])


def test_the_analysis_of_records_has_no_trace_to_annotate(tmp_path: Path) -> None:
    from asynctrace.export.chrome import overlay_source
    from asynctrace.records import read_records
    from tests.export._records import make_steps, write_records_file

    records = read_records(write_records_file(tmp_path / "a.records.jsonl", make_steps(3)))
    with pytest.raises(ValueError, match="session records have no trace to annotate"):
        overlay_source(analyze_detail(records))


@pytest.mark.real_traces
@pytest.mark.parametrize(
    "name",
    ["hta_v100_ns_resolution_rank0.json.gz", "tracelens_b200_compile_culaunchkernelex.json.gz"],
)
def test_annotate_real_trace_idle_track(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = shared_trace("kineto", name)
    out = tmp_path / "out.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    assert "idle gaps" in capsys.readouterr().out
    events, _ = load_events(out)
    original, _ = load_events(src)
    overlay = events[len(original) :]
    assert validate(overlay) == []
    assert tb_profiler_problems(overlay) == []
    a = analyze_detail(load(src))
    _check_idle_track(_idle(overlay), a)
    share = [e for e in overlay if e.get("ph") == "X" and e.get("tid") == LANE_SHARE]
    assert [e["args"]["label"] for e in share] == [
        b.label for b in a.report.step_bounds if b.region_ns > 0
    ]
