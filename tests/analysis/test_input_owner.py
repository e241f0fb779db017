"""Input idle: split from host idle by overlap time, and owned by the step whose DataLoader
fetch the device waited on (docs/how-it-works.md, "Which step owns input idle")."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace

US = 1_000
MS = 1_000_000
LAUNCH = RuntimeKind.LAUNCH
FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _fetch_gap(fetch_us: int) -> Trace:
    """One 45 ms gap [5, 50) ms: the host fetches data from 5 ms for ``fetch_us`` µs, then
    computes until it launches k1 at 50 ms."""
    b = TraceBuilder("fetch.json")
    b.runtime("cudaLaunchKernel", 0, 10 * US, kind=LAUNCH, correlation=1)
    b.activity("k0", 1 * MS, 4 * MS, correlation=1)
    b.range(FETCH, 5 * MS, fetch_us * US)
    b.runtime("cudaLaunchKernel", 50 * MS, 10 * US, kind=LAUNCH, correlation=2)
    b.activity("k1", 50 * MS + 20 * US, 1 * MS, correlation=2)
    b.runtime("cudaDeviceSynchronize", 50 * MS + 20 * US, 1 * MS, kind=RuntimeKind.SYNC)
    return b.build()


@pytest.mark.parametrize("fetch_us", [21_800, 23_200])  # 48.4% and 51.6% of the gap
def test_a_gap_is_split_by_overlap_not_by_majority(fetch_us: int) -> None:
    b = analyze(_fetch_gap(fetch_us)).bound
    assert b is not None
    # the fetch's time is input, the rest of the 45.02 ms gap host: a 3% change in the fetch
    # moves 3% of the gap, never the whole gap
    assert b.idle_ns_by_cause.input == fetch_us * US
    assert b.idle_ns_by_cause.host == 1 * MS + 45 * MS + 20 * US - fetch_us * US


def test_step_owns_the_stall_of_its_own_fetch() -> None:
    """Two 10 ms steps. Step 0's kernel ends at 6 ms; step 1 starts at 8 ms with a 3 ms
    fetch, then launches at 11 ms. The gap [6, 11) ms: [6, 8) is step 0's (its host was still
    at work), [8, 11) step 1's: its fetch, 3 ms input."""
    b = TraceBuilder("two.json")
    b.range("ProfilerStep#0", 0, 8 * MS, kind=RangeKind.STEP, step=0)
    b.range("ProfilerStep#1", 8 * MS, 10 * MS, kind=RangeKind.STEP, step=1)
    b.runtime("cudaLaunchKernel", 0, 10 * US, kind=LAUNCH, correlation=1)
    b.activity("k0", 1 * MS, 5 * MS, correlation=1)
    b.range(FETCH, 8 * MS, 3 * MS)
    b.runtime("cudaLaunchKernel", 11 * MS, 10 * US, kind=LAUNCH, correlation=2)
    b.activity("k1", 11 * MS, 5 * MS, correlation=2)
    b.runtime("cudaDeviceSynchronize", 11 * MS, 7 * MS, kind=RuntimeKind.SYNC)
    r = analyze(b.build())
    s0, s1 = r.step_bounds
    assert (s0.share_start_ns, s0.share_end_ns, s1.share_end_ns) == (0, 8 * MS, 18 * MS)
    assert s0.idle_ns_by_cause.input == 0
    assert s0.idle_ns_by_cause.host == (1 + 2) * MS
    assert s1.idle_ns_by_cause.input == 3 * MS


def _ns(v: Any) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


@pytest.mark.real_traces
def test_resnet50_input_idle_lands_in_the_step_that_fetched() -> None:
    """Read from the raw file: each step's DataLoader fetch, the part of it during which the
    device had nothing running, less what fell in gaps ended by an activity no launch call
    explains (those are unattributed). Schema 3 had step 10 at 0 (its stall landed in step 9)
    and step 5 at 73 ms (its own 22 ms and step 6's 50 ms)."""
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    path = shared_trace("kineto", "kineto_2021_resnet50_barelist.json.gz")
    with gzip.open(path, "rt") as f:
        data = json.load(f, parse_float=Decimal)
    raw = data if isinstance(data, list) else data["traceEvents"]
    ev = [e for e in raw if isinstance(e, dict) and e.get("ph") == "X"]
    launch_names = ("cudaLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")
    launched = {
        (e.get("args") or {}).get("correlation")
        for e in ev
        if str(e.get("cat", "")).lower() == "runtime"
        and str(e.get("name", "")).startswith(launch_names)
    }
    acts = [
        e
        for e in ev
        if str(e.get("cat", "")).lower() in ("kernel", "memcpy", "memset", "gpu_memcpy")
    ]
    device = Counter((e.get("args") or {}).get("device") for e in acts).most_common(1)[0][0]
    mine = sorted(
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), (e.get("args") or {}).get("correlation"))
        for e in acts
        if (e.get("args") or {}).get("device") == device
    )
    # the gaps between runs of activity, each with whether a launch explains its end
    gaps: list[tuple[int, int, bool]] = []
    reach = mine[0][1]
    for a, b, corr in mine[1:]:
        if a > reach:
            gaps.append((reach, a, corr in launched))
        reach = max(reach, b)
    steps = sorted(
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        for e in ev
        if str(e["name"]).startswith("ProfilerStep#")
    )
    fetches = [
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        for e in ev
        if re.search(r"enumerate\(DataLoader\).*__next__", str(e["name"]))
    ]
    want = []
    for w0, w1 in steps:
        total = 0
        for f0, f1 in fetches:
            if w0 <= f0 < w1:
                total += sum(
                    max(0, min(g1, f1) - max(g0, f0)) for g0, g1, explained in gaps if explained
                )
        want.append(total)
    r = analyze(load(path))
    got = [b.idle_ns_by_cause.input for b in r.step_bounds]
    assert got == want
    assert round(got[-1] / MS, 1) == 49.5  # step 10: its own fetch, 49.5 ms
    assert round(got[0] / MS, 1) == 21.4  # step 5: its stall (22.4 ms, 1.0 ms unattributed)
