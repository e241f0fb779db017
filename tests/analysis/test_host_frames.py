"""Host frames (bound.evidence.host_frames): each frame's time inside the idle it explains,
measured on every thread that calls the runtime, and the share of that idle they cover."""

from __future__ import annotations

import gzip
import itertools
import json
from decimal import Decimal
from typing import Any

import pytest

from asynctrace._frames import is_user_frame, site_of
from asynctrace.analysis.bound import CAUSES
from asynctrace.analysis.report import analyze, analyze_detail
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RuntimeKind, Trace

US = 1_000
LAUNCH = RuntimeKind.LAUNCH


def _two_threads() -> Trace:
    """The device idles [0, 20) and [100, 520) µs waiting for the host.

    thread 1: ``train.py(5): step`` over [0, 300), inside it a launch [0, 10) and cudaMalloc
    [200, 300); thread 2: the op ``aten::copy_`` over [250, 500), then the launch of k1
    [500, 510). Nothing covers [510, 520).
    """
    b = TraceBuilder("threads.json")
    b.runtime("cudaLaunchKernel", 0, 10 * US, kind=LAUNCH, correlation=1, tid=1)
    b.activity("k0", 20 * US, 80 * US, correlation=1)
    b.python_frame("train.py(5): step", 0, 300 * US, tid=1)
    b.runtime("cudaMalloc", 200 * US, 100 * US, tid=1)
    b.range("aten::copy_", 250 * US, 250 * US, tid=2)
    b.runtime("cudaLaunchKernel", 500 * US, 10 * US, kind=LAUNCH, correlation=2, tid=2)
    b.activity("k1", 520 * US, 80 * US, correlation=2)
    return b.build(device_name="Fake GPU")


def test_frames_of_two_threads_by_hand() -> None:
    b = analyze(_two_threads()).bound
    assert b is not None
    assert b.label == "host-bound"
    got = [(f.frame, f.site, f.idle_ns // US) for f in b.evidence.host_frames]
    assert got == [
        ("aten::copy_", "", 250),  # [250, 500) on thread 2, beside thread 1's cudaMalloc
        ("step", "train.py:5", 110),  # [10, 20) and [100, 200)
        ("cudaMalloc", "train.py:5", 100),  # the runtime call, with the user's line around it
        ("(nothing recorded: after the last host event)", "", 10),  # [510, 520)
        ("cudaLaunchKernel", "", 10),  # thread 2's launch [500, 510); thread 1's (train.py:5,
        # 10 µs) is sixth, not listed
    ]
    idle = b.idle_ns_by_cause.host
    assert idle == (20 + 420) * US
    # the listed frames cover [10, 20), [100, 510): 420 of the 440 µs
    assert b.evidence.host_explained_pct == pytest.approx(100.0 * 420 / 440, abs=0.01)


def _events(path: Any) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        data = json.load(f, parse_float=Decimal)
    return [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


@pytest.mark.real_traces
def test_bert_frames_match_an_independent_measure() -> None:
    """Each moment of host idle, one at a time: on each thread that calls the runtime, the
    innermost event (latest start, then earliest end) of the first kind there is — runtime
    call (named with the user's line around it), the user's Python frame, any Python frame,
    operator — gets it."""
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    path = shared_trace("kineto", "tracelens_h100_bert_small_with_stack.json.gz")
    trace = load(path)
    a = analyze_detail(trace)
    b = a.report.bound
    assert b is not None
    assert b.evidence.leading_cause == "host"
    g = a.trace.gaps if a.trace is not None else None
    assert g is not None
    host = CAUSES.index("host")
    gaps = [
        (int(s), int(e))
        for s, e, c in zip(g.start_ns, g.end_ns, g.cause, strict=True)
        if int(c) == host
    ]
    ev = _events(path)
    # the model's times count from the trace's first host or device event
    first_ts = min(Decimal(e["ts"]) for e in ev if e.get("cat") == "cuda_runtime")
    origin = int((first_ts * 1000).to_integral_value()) - int(trace.runtime.start_ns.min())

    def ns(v: Any) -> int:
        return int((Decimal(v) * 1000).to_integral_value()) - origin

    launching = {
        (e["pid"], e["tid"]) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }
    kinds = {"cuda_runtime": 0, "cuda_driver": 0, "python_function": 2, "cpu_op": 3}
    rows = []
    for e in ev:
        kind = kinds.get(str(e.get("cat")))
        if kind is None or (e["pid"], e["tid"]) not in launching:
            continue
        s = ns(e["ts"])
        dur = int((Decimal(e.get("dur", 0)) * 1000).to_integral_value())
        rows.append((kind, e["pid"], e["tid"], s, s + dur, str(e["name"])))
    rows += [(1, p, t, s, x, n) for k, p, t, s, x, n in rows if k == 2 and is_user_frame(n)]
    credited: dict[tuple[str, str], int] = {}
    for g0, g1 in gaps:
        mine = [r for r in rows if r[3] < g1 and r[4] > g0]
        cuts = sorted({g0, g1, *(max(r[3], g0) for r in mine), *(min(r[4], g1) for r in mine)})
        for t0, t1 in itertools.pairwise(cuts):
            for thread in launching:
                here = [r for r in mine if (r[1], r[2]) == thread and r[3] <= t0 < r[4]]
                if not here:
                    continue
                inner = {
                    k: max(
                        (r for r in here if r[0] == k), key=lambda r: (r[3], -r[4]), default=None
                    )
                    for k in range(4)
                }
                kind = min(k for k, r in inner.items() if r is not None)
                name = inner[kind][5]  # type: ignore[index]
                if kind == 0:
                    u = inner[1]
                    key = (name, site_of(u[5]) if u is not None else "")
                elif kind in (1, 2):
                    key = (name.split("): ", 1)[1], site_of(name) if kind == 1 else "")
                else:
                    key = (name, "")
                credited[key] = credited.get(key, 0) + t1 - t0
    for f in b.evidence.host_frames:
        if not f.frame.startswith("("):
            assert credited[(f.frame, f.site)] == f.idle_ns, f
    top = max(credited.items(), key=lambda kv: kv[1])
    assert (b.evidence.host_frames[0].frame, b.evidence.host_frames[0].site) == top[0]
    assert b.evidence.host_frames[0].site.startswith("transformers/models/bert/")
    # the listed frames explain more than half of the host idle (schema 3 listed ~10%)
    assert b.evidence.host_explained_pct is not None
    assert b.evidence.host_explained_pct >= 50


@pytest.mark.real_traces
@pytest.mark.parametrize(
    "name",
    ["tracelens_h100_bert_small_with_stack.json.gz", "hta_a100_alexnet_syncs.json.gz"],
)
def test_traces_with_python_stacks_explain_half_their_idle(name: str) -> None:
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    b = analyze(load(shared_trace("kineto", name))).bound
    assert b is not None
    assert b.evidence.host_explained_pct is not None
    assert b.evidence.host_explained_pct >= 50
