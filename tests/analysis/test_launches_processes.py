"""Two launching processes in one Kineto trace: their correlation ids collide, and Kineto writes
an activity's pid as its device, so launches are matched per process (docs/analysis.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.model import RuntimeKind
from tests.conftest import shared_trace


def _two_processes() -> Any:
    """Process 100 launches correlation ids 1-5 at 0-4 ns, whose kernels run late on device 0
    (100-104); process 200 launches the same ids at 10-14 on device 1, run at 20-24. Each
    also has an id of its own (7 in 100, 6 in 200)."""
    b = TraceBuilder()
    for k in range(5):
        b.runtime("cudaLaunchKernel", k, 1, kind=RuntimeKind.LAUNCH, correlation=k + 1, pid=100)
        b.runtime(
            "cudaLaunchKernel", 10 + k, 1, kind=RuntimeKind.LAUNCH, correlation=k + 1, pid=200
        )
        b.activity("a", 100 + k, 1, correlation=k + 1, pid=0, device=0)
        b.activity("b", 20 + k, 1, correlation=k + 1, pid=1, device=1)
    b.runtime("cudaLaunchKernel", 5, 1, kind=RuntimeKind.LAUNCH, correlation=7, pid=100)
    b.activity("a", 105, 1, correlation=7, pid=0, device=0)
    b.runtime("cudaLaunchKernel", 15, 1, kind=RuntimeKind.LAUNCH, correlation=6, pid=200)
    b.activity("b", 25, 1, correlation=6, pid=1, device=1)
    return b.build()


def test_two_processes_reusing_correlation_ids_are_matched_per_process() -> None:
    t = _two_processes()
    links = link_launches(t)
    assert links.n_unmatched == 0
    names = [t.name_of(int(n)) for n in t.activities.name]
    for i, name in enumerate(names):
        launch = int(links.launch_index[i])
        # device 0's work is process 100's, device 1's process 200's (the nearest launch in
        # time would give device 0's kernels to process 200)
        assert int(t.runtime.pid[launch]) == (100 if name == "a" else 200)
        assert t.runtime.correlation[launch] == t.activities.correlation[i]


def test_without_a_device_to_tell_them_apart_the_latest_earlier_launch_wins() -> None:
    # both processes on device 0, every id launched by both: the launch of that id that
    # started last at or before the kernel
    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", 0, 1, kind=RuntimeKind.LAUNCH, correlation=1, pid=100)
    b.runtime("cudaLaunchKernel", 50, 1, kind=RuntimeKind.LAUNCH, correlation=1, pid=200)
    b.activity("early", 10, 1, correlation=1, pid=0, device=0)
    b.activity("late", 60, 1, correlation=1, pid=0, device=0)
    t = b.build()
    links = link_launches(t)
    assert [int(t.runtime.pid[i]) for i in links.launch_index.tolist()] == [100, 200]


def test_a_real_trace_merged_with_a_copy_of_itself_under_another_pid(tmp_path: Path) -> None:
    src = shared_trace("kineto", "hta_a100_event_sync_multistream.json.gz")
    with gzip.open(src, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs)
    cpu_pids = {e["pid"] for e in xs if e.get("cat") == "cuda_runtime"}
    copy = []
    for e in events:
        if "ts" not in e:
            continue
        c = json.loads(json.dumps(e))
        # a second process, later in time (after a second), on the next device
        c["ts"] = e["ts"] + span + 1_000_000
        if e["pid"] in cpu_pids:
            c["pid"] = e["pid"] + 1
            if c.get("tid") == e["pid"]:
                c["tid"] = c["pid"]
        elif isinstance(e["pid"], int):
            c["pid"] = e["pid"] + 1
            if isinstance(c.get("args"), dict) and "device" in c["args"]:
                c["args"]["device"] = c["args"]["device"] + 1
        copy.append(c)
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps({**data, "traceEvents": events + copy}))
    one = analyze(load_kineto(src))
    two = analyze(load_kineto(merged))
    assert one.trace is not None
    assert two.trace is not None
    assert one.trace.launch.matched > 0
    # every activity of each copy is matched, as in the trace alone (before: all unmatched)
    assert two.trace.launch.matched == 2 * one.trace.launch.matched
    assert two.trace.launch.unmatched == 2 * one.trace.launch.unmatched
    assert two.trace.launch.queue_delay_ns == one.trace.launch.queue_delay_ns
    assert two.bound is not None
    assert two.bound.label != "undetermined"
