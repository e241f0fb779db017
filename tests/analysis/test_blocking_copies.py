"""Blocking copies are syncs: a queued copy to or from pageable memory holds the host until
the copy ends (docs/how-it-works.md, "Blocking copy"); it counts in the steps' sync wait, the
sync calls and sites (``kind="blocking-copy"``) and the bound's sync idle, once."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from typing import Any

import numpy as np

from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind
from tests.conftest import shared_trace

MS = 1_000_000


def _copy_trace(copy_name: str) -> Any:
    """One 20 ms step: a kernel (0-8 ms), then a cudaMemcpyAsync (2-9 ms) whose copy runs at
    8-9 ms, then the next kernel launched at 15 ms."""
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 20 * MS, kind=RangeKind.STEP, step=0)
    b.runtime("cudaLaunchKernel", 0, 1000, kind=RuntimeKind.LAUNCH, correlation=1, tid=1)
    b.activity("k0", 100_000, 8 * MS - 100_000, correlation=1)
    b.range("aten::copy_", 2 * MS - 1000, 7 * MS + 2000, tid=1)
    b.runtime("cudaMemcpyAsync", 2 * MS, 7 * MS, kind=RuntimeKind.MEMCPY, correlation=2, tid=1)
    b.activity(copy_name, 8 * MS, MS, kind=ActivityKind.MEMCPY, correlation=2)
    b.runtime("cudaLaunchKernel", 15 * MS, 1000, kind=RuntimeKind.LAUNCH, correlation=3, tid=1)
    b.activity("k1", 15 * MS + 10_000, 5 * MS - 10_000, correlation=3)
    return b.build()


def test_a_copy_to_pageable_memory_is_a_blocking_copy_sync() -> None:
    r = analyze(_copy_trace("Memcpy DtoH (Device -> Pageable)"))
    assert r.trace is not None
    assert r.bound is not None
    (call,) = r.trace.syncs.calls
    assert (call.op, call.kind, call.dur_ns, call.step) == (
        "cudaMemcpyAsync",
        "blocking-copy",
        7 * MS,
        0,
    )
    assert (r.steps[0].sync_count, r.steps[0].sync_wait_ns) == (1, 7 * MS)
    # once: its aten::copy_ parent is no second sync
    assert r.trace.syncs.count == 1
    (site,) = r.bound.evidence.sync_sites
    assert (site.op, site.kind, site.wait_ns) == ("cudaMemcpyAsync", "blocking-copy", 7 * MS)
    # the device was busy (k0, then the copy) while the host sat in the call: it opened no
    # idle; the gap after it (9-15 ms, the call has returned) is host work
    assert r.bound.idle_ns_by_cause.sync == 0
    assert r.bound.idle_ns_by_cause.host > 0


def test_a_pinned_copy_is_not_a_sync() -> None:
    r = analyze(_copy_trace("Memcpy DtoH (Device -> Pinned)"))
    assert r.trace is not None
    assert r.trace.syncs.count == 0
    assert r.steps[0].sync_wait_ns == 0


def test_the_idle_a_blocking_copy_opens_is_sync_idle() -> None:
    # the device idles from 1 ms while the host sits in a pageable HtoD copy (1-6 ms) whose
    # device copy runs at 5-6 ms: the idle 1-5 ms is sync idle
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 10 * MS, kind=RangeKind.STEP, step=0)
    b.runtime("cudaLaunchKernel", 0, 1000, kind=RuntimeKind.LAUNCH, correlation=1)
    b.activity("k0", 10_000, MS - 10_000, correlation=1)
    b.runtime("cudaMemcpyAsync", MS, 5 * MS, kind=RuntimeKind.MEMCPY, correlation=2)
    b.activity(
        "Memcpy HtoD (Pageable -> Device)", 5 * MS, MS, kind=ActivityKind.MEMCPY, correlation=2
    )
    b.runtime("cudaLaunchKernel", 6 * MS, 1000, kind=RuntimeKind.LAUNCH, correlation=3)
    b.activity("k1", 6 * MS + 1000, 4 * MS - 1000, correlation=3)
    r = analyze(b.build())
    assert r.bound is not None
    assert r.bound.idle_ns_by_cause.sync == 4 * MS
    assert r.bound.evidence.sync_sites[0].kind == "blocking-copy"
    assert r.bound.evidence.sync_sites[0].idle_ns == 4 * MS


def _raw(name: str) -> list[dict[str, Any]]:
    path = shared_trace("kineto", name)
    with gzip.open(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def _union_us(iv: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -np.inf
    for a, b in sorted(iv):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _pageable_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    paged = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]
    }
    return [
        e
        for e in events
        if e.get("cat") == "cuda_runtime"
        and e["name"] == "cudaMemcpyAsync"
        and e["args"].get("correlation") in paged
    ]


def _blocking_copies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pageable copies, and the synchronize calls inside a copy operator of their thread."""
    copy_ops = [
        e
        for e in events
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::to", "aten::_to_copy", "aten::copy_")
    ]
    waits = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime"
        and e["name"].endswith("Synchronize")
        and any(
            o["pid"] == e["pid"]
            and o["tid"] == e["tid"]
            and o["ts"] <= e["ts"]
            and o["ts"] + o["dur"] >= e["ts"] + e["dur"]
            for o in copy_ops
        )
    ]
    return _pageable_calls(events) + waits


def test_the_16_rank_a100_trace_holds_the_host_146_ms_a_step_in_blocking_copies() -> None:
    name = "hta_a100_16ranks_rank0_graphlaunch.json.gz"
    events = _raw(name)
    copies = _pageable_calls(events)
    syncs = [
        e for e in events if e.get("cat") == "cuda_runtime" and e["name"].endswith("Synchronize")
    ]
    steps = sorted(
        (e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    # the independent reading: per step, the host time inside a blocking copy or a sync
    want_wait, want_copy = [], []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in copies + syncs if e["ts"] < hi and e["ts"] + e["dur"] > lo]
        want_wait.append(
            _union_us([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in inside])
        )
        want_copy.append(sum(e["dur"] for e in _blocking_copies(events) if lo <= e["ts"] < hi))
    assert len(copies) == 75
    assert min(want_copy) > 140_000  # µs: ~146 ms a step, under ## sparse_data_dist ##
    r = analyze(load_kineto(shared_trace("kineto", name)))
    assert r.trace is not None
    assert r.bound is not None
    got = [s.sync_wait_ns for s in r.steps]
    assert got == [round(w * 1000) for w in want_wait]
    by_step: dict[int | None, int] = defaultdict(int)
    for c in r.trace.syncs.calls:
        if c.kind == "blocking-copy":
            by_step[c.step] += c.dur_ns
    assert [by_step[s.step] for s in r.steps] == [round(w * 1000) for w in want_copy]
    site = next(s for s in r.bound.evidence.sync_sites if s.kind == "blocking-copy")
    assert (site.op, site.count) == ("cudaMemcpyAsync", 75)
    # no longer "cheap syncs": while the host is held in them the device idles with work
    # queued (~371 ms of the 761 ms held: the driver stages a pageable copy through the host),
    # 39% of the region with the idle they open; the headline stays the dependency idle (55%),
    # the copies come next as blocking-copy
    assert 35 < r.bound.evidence.sync_cost_pct < 45
    assert [f.code for f in r.diagnosis[:2]] == ["dependency-bound", "blocking-copy"]
    assert r.verdict.code == "over-synchronized"


def test_the_alexnet_trace_counts_its_pageable_copies() -> None:
    name = "hta_a100_alexnet_syncs.json.gz"
    events = _raw(name)
    copies = _blocking_copies(events)
    assert len(_pageable_calls(events)) == 16
    r = analyze(load_kineto(shared_trace("kineto", name)))
    assert r.trace is not None
    got = [c for c in r.trace.syncs.calls if c.kind == "blocking-copy"]
    assert len(got) == len(copies) > 16
    assert sum(c.dur_ns for c in got) == sum(round(e["dur"] * 1000) for e in copies)


def test_a_sync_inside_a_copy_to_the_host_is_the_copy_s_wait() -> None:
    # .cpu() of a device tensor into pinned memory, without non_blocking: aten::to → copy_ →
    # cudaMemcpyAsync (returns at once) + cudaStreamSynchronize (waits): a blocking copy
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 20 * MS, kind=RangeKind.STEP, step=0)
    b.runtime("cudaLaunchKernel", 0, 1000, kind=RuntimeKind.LAUNCH, correlation=1)
    b.activity("k0", 10_000, 8 * MS, correlation=1)
    b.range("aten::to", MS, 8 * MS)
    b.range("aten::copy_", MS + 100, 8 * MS - 200)
    b.runtime("cudaMemcpyAsync", MS + 200, 1000, kind=RuntimeKind.MEMCPY, correlation=2)
    b.activity(
        "Memcpy DtoH (Device -> Pinned)",
        8 * MS + 10_000,
        100_000,
        kind=ActivityKind.MEMCPY,
        correlation=2,
    )
    b.runtime("cudaStreamSynchronize", MS + 2000, 7 * MS, kind=RuntimeKind.SYNC)
    # a synchronize of its own, outside any copy
    b.runtime("cudaDeviceSynchronize", 10 * MS, MS, kind=RuntimeKind.SYNC)
    r = analyze(b.build())
    assert r.trace is not None
    assert [(c.op, c.kind) for c in r.trace.syncs.calls] == [
        ("cudaStreamSynchronize", "blocking-copy"),
        ("cudaDeviceSynchronize", "sync"),
    ]
