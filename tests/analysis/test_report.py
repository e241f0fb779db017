from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import msgspec
import numpy as np
import pytest

from asynctrace.analysis.report import Report, analyze, rank_from_name
from asynctrace.errors import TraceFormatError
from tests.analysis._traces import launches_trace, steps_trace


def test_json_has_the_documented_fields() -> None:
    obj = json.loads(analyze(launches_trace()).to_json())
    assert obj["schema_version"] == 4
    assert obj["source"] == {
        "path": "launches.json",
        "format": "synthetic",
        "device": "Fake GPU",
        "asynchronous": True,
        "rank": None,
        "world_size": None,
        "events": 9,
        "skipped": {},
        "complete": True,
        "session": None,
        # a session's (its records' summary line); a trace has none
        "wall_ns": None,
        "collected_at_exit": 0,
        "error": None,
    }
    t = obj["trace"]  # schema 3: what only a trace has
    assert t["activities"] == {
        "total": 4,
        "per_stream": {"7": 3, "8": 1},
        "per_kind": {"kernel": 3, "memcpy": 1, "memset": 0},
    }
    assert t["launch"] == {
        "matched": 3,
        "unmatched": 1,
        "queue_delay_ns": {"p50": 90, "p90": 120, "p99": 120, "max": 120},
        "launch_to_start_ns": {"p50": 100, "p90": 130, "p99": 130, "max": 130},
    }
    assert set(t["queue"]) == {"7", "8"}
    assert {"max", "mean", "time_at_cap_ns"} <= set(t["queue"]["7"])
    assert t["syncs"]["count"] == 1
    assert t["syncs"]["total_ns"] == 100
    assert t["syncs"]["sites"][0]["op"] == "cudaStreamSynchronize"
    # one step record type for traces and sessions; the trace's extras beside it
    (step,) = obj["steps"]
    assert step["type"] == "step"
    for key in ("frontend_ns", "device_ns", "sync_wait_ns", "run_ahead_ns", "in_flight"):
        assert key in step
    (extra,) = t["steps"]
    assert set(extra) == {
        "name",
        "end_ns",
        "activities",
        "device_start_ns",
        "device_end_ns",
        "queue_max",
    }
    assert t["step_source"] == "trace"
    assert {"frontend_ns", "sync_count"} <= set(obj["figures"])
    assert set(obj["figures"]["frontend_ns"]) == {
        "count",
        "mean",
        "total",
        "median",
        "p90",
        "window_steps",
    }
    assert set(obj["verdict"]) == {"code", "message", "findings", "codes"}
    # schema 2: what bounds the run, per step too, and consistency warnings
    bound = obj["bound"]
    assert set(bound) == {
        "label",
        "region_ns",
        "busy_ns",
        "idle_ns",
        "idle_ns_by_cause",
        "evidence",
        "advice",
    }
    assert set(bound["idle_ns_by_cause"]) == {"host", "sync", "input", "dependency", "unattributed"}
    assert bound["busy_ns"] + bound["idle_ns"] == bound["region_ns"]
    assert len(bound["advice"]) >= 1
    (step_bound,) = obj["step_bounds"]
    assert set(step_bound) >= {"label", "region_ns", "busy_ns", "idle_ns", "idle_ns_by_cause"}
    assert "advice" not in step_bound
    assert isinstance(obj["warnings"], list)


def test_round_trip_and_newer_schema_refused() -> None:
    r = analyze(steps_trace())
    assert Report.from_json(r.to_json(indent=2)) == r
    obj = json.loads(r.to_json())
    obj["schema_version"] = 99
    with pytest.raises(TraceFormatError, match="newer"):
        Report.from_json(json.dumps(obj))
    with pytest.raises(TraceFormatError):
        Report.from_json(b"[1, 2]")


def test_rank_from_trace_else_file_name() -> None:
    assert analyze(steps_trace()).source.rank == 3  # "rank-3.steps..."
    assert rank_from_name("/x/hta_sampled_rank1.json.gz") == 1
    assert rank_from_name("/x/hta_a100_16ranks_rank0_graphlaunch.json.gz") == 0
    assert rank_from_name("rank_12.json") == 12
    assert rank_from_name("/rank7/trace.json") is None  # the file name only


def test_a_trace_has_the_step_records_a_session_writes() -> None:
    r = analyze(steps_trace())
    assert [
        (s.step, s.frontend_ns, s.device_ns, s.run_ahead_ns, s.sync_count) for s in r.steps
    ] == [
        (1, 1000, 200, -500, 1),
        (2, 500, 100, 200, 0),
    ]


def test_analysis_runs_with_torch_blocked() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now raises ImportError
        from tests.analysis._traces import steps_trace
        from asynctrace.analysis.report import analyze
        from asynctrace.analysis.ranks import compare_ranks
        from asynctrace.render.text import render_report
        from rich.console import Console
        r = analyze(steps_trace())
        compare_ranks([r, r])
        render_report(r, Console(file=open("/dev/null", "w")))
        assert "torch" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
        print(r.steps[-1].run_ahead_ns)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "200"


def test_the_verdict_names_the_syncs_the_steps_counted() -> None:
    """ "N syncs per step at A (op ×k)": k counts A's syncs inside steps, as N does; a sync
    before the first step (model set-up) or after the last is in the sync table, not here."""
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import RangeKind, RuntimeKind

    b = TraceBuilder("syncs.json")
    b.activity("k", 0, 10)  # a device, so that the loop is judged as asynchronous
    b.runtime("cudaDeviceSynchronize", 50, 5, kind=RuntimeKind.SYNC)  # before the steps
    b.python_frame("setup.py(3): warm_up", 40, 30)
    for step in range(3):
        t0 = 1_000 + step * 1_000
        b.range(f"ProfilerStep#{step}", t0, 1_000, kind=RangeKind.STEP, step=step)
        for k in range(2):
            b.runtime("cudaStreamSynchronize", t0 + 100 + k * 300, 50, kind=RuntimeKind.SYNC)
            b.python_frame("train.py(12): step", t0 + 90 + k * 300, 100)
    b.runtime("cudaDeviceSynchronize", 9_000, 5, kind=RuntimeKind.SYNC)  # after the steps
    b.python_frame("setup.py(3): warm_up", 8_990, 30)
    report = analyze(b.build())

    assert report.trace.syncs.count == 8
    assert {(s.site, s.count) for s in report.trace.syncs.sites} == {
        ("train.py:12", 6),
        ("setup.py:3", 2),
    }
    assert report.verdict.code == "over-synchronized"
    # the syncs wait 100 of each 1,000 ns step (10%): costly enough for the headline
    assert report.verdict.message == (
        "over-synchronized: 2 syncs per step at train.py:12 (cudaStreamSynchronize ×6), "
        "costing 10% of the step"
    )
    # the same when the calls themselves are not kept in the report
    lean = analyze(b.build(), keep_sync_calls=False)
    assert lean.trace.syncs.calls == []
    assert lean.verdict.message == report.verdict.message


@pytest.mark.real_traces
def test_a_schema_2_report_reads_back_as_the_same_report() -> None:
    # written by asynctrace before the one step model (schema 2) from the same trace
    from pathlib import Path

    from asynctrace.files.sources import load_source
    from asynctrace.traces._apis import classify_runtime
    from asynctrace.traces.model import RuntimeKind, Trace
    from tests.conftest import shared_trace

    saved = Path(__file__).parent / "data" / "hta_sampled_rank0.schema2.report.json"
    old = Report.from_json(saved.read_bytes())
    trace = load_source(shared_trace("kineto", "hta_sampled_rank0.json.gz"))
    assert isinstance(trace, Trace)
    # the definitions of the day it was saved: its 24 cudaMemcpyAsync to or from pageable
    # memory were no blocking copies (syncs) yet
    rt = trace.runtime
    queued = np.array(
        [classify_runtime(trace.name_of(int(n))) == RuntimeKind.MEMCPY for n in rt.name.tolist()],
        dtype=bool,
    )
    assert int(np.count_nonzero(queued & (rt.kind == RuntimeKind.BLOCKING_MEMCPY))) == 24
    kind = np.where(queued, np.uint8(RuntimeKind.MEMCPY), rt.kind).astype(np.uint8)
    then = msgspec.structs.replace(trace, runtime=msgspec.structs.replace(rt, kind=kind))
    new = analyze(then)
    # the same figures; the path is where the trace was when the report was saved
    assert old.source.path.endswith("/hta_sampled_rank0.json.gz")
    # (and without the per-name device and host op times, which schema 2 did not carry)
    assert new.trace is not None
    assert old.trace is not None
    assert old.trace.kernels == old.trace.host_ops == []
    new = msgspec.structs.replace(
        new, trace=msgspec.structs.replace(new.trace, kernels=[], host_ops=[])
    )
    # schema 4 redefined two things this trace shows: the host frames are measured (not
    # sampled at the longest gaps, with their share of the idle), and an idle gap before a
    # step's first activity is split at the step's host start (the steps' shares move)
    ev = msgspec.structs.replace(
        old.bound.evidence,
        host_frames=new.bound.evidence.host_frames,
        host_explained_pct=new.bound.evidence.host_explained_pct,
    )
    bound = msgspec.structs.replace(old.bound, evidence=ev, advice=new.bound.advice)
    # the steps' busy time is unchanged: only idle moves between neighbouring steps
    assert [s.busy_ns for s in old.step_bounds] == [s.busy_ns for s in new.step_bounds]
    old = msgspec.structs.replace(old, source=new.source, bound=bound, step_bounds=new.step_bounds)
    # and the diagnosis read back is the one of those figures (the host frames it names)
    from asynctrace.analysis.report import report_diagnosis

    old = msgspec.structs.replace(old, diagnosis=report_diagnosis(old))
    assert old == new


def test_a_figures_total_is_the_exact_sum_of_its_steps() -> None:
    from asynctrace.analysis.accumulate import StepAccumulator
    from asynctrace.records import StepRecord

    steps = [
        StepRecord(step=i, start_ns=10 * i, frontend_ns=f, device_ns=d)
        for i, (f, d) in enumerate([(3, None), (5, 7), (2**62, 1)])
    ]
    figures = StepAccumulator(window=2).extend(steps).figures()
    front, dev = figures["frontend_ns"], figures["device_ns"]
    assert front is not None
    assert dev is not None
    # over every step, not the window; exact where a float mean is not
    assert (front.total, front.count) == (3 + 5 + 2**62, 3)
    assert (dev.total, dev.count) == (8, 2)
