"""Invariants of the analyses over random traces (hypothesis)."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.analysis._bound_model import CAUSES
from asynctrace.analysis._bound_rule import pct
from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.queue import queue_series
from asynctrace.analysis.report import analyze, analyze_detail
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace
from tests.analysis._flat import flat_steps

_launch = st.tuples(
    st.integers(0, 2_000),  # launch call start
    st.integers(0, 50),  # launch call duration
    st.integers(-20, 500),  # device start − launch call start (negative: clock skew)
    st.integers(0, 200),  # activity duration
    st.integers(1, 3),  # stream
    st.booleans(),  # graph launch of two kernels
)
_sync = st.tuples(st.integers(0, 2_000), st.integers(0, 300), st.integers(0, 2))
_steps = st.lists(st.integers(1, 700), min_size=1, max_size=5)

Rows = list[tuple[str, tuple[object, ...]]]


def _rows(launches: list[tuple[int, ...]], syncs: list[tuple[int, ...]], steps: list[int]) -> Rows:
    rows: Rows = []
    t = 0
    for i, d in enumerate(steps):
        rows.append(("range", (f"ProfilerStep#{i}", t, d, RangeKind.STEP, i)))
        t += d
    for corr, (ls, ld, off, ad, stream, graph) in enumerate(launches, 1):
        kind = RuntimeKind.GRAPH_LAUNCH if graph else RuntimeKind.LAUNCH
        rows.append(("runtime", ("launch", ls, ld, kind, corr, 0)))
        for k in range(2 if graph else 1):
            rows.append(("activity", ("k", ls + off + 10 * k, ad, stream, corr)))
    for ss, sd, tid in syncs:
        rows.append(("runtime", ("cudaStreamSynchronize", ss, sd, RuntimeKind.SYNC, -1, tid)))
    rows.append(("activity", ("orphan", 5, 5, 1, -1)))
    return rows


def _build(rows: Rows) -> Trace:
    b = TraceBuilder("prop.json")
    for what, r in rows:
        if what == "range":
            name, s, d, kind, step = r
            b.range(str(name), int(s), int(d), kind=RangeKind(kind), step=int(step))  # type: ignore[call-overload]
        elif what == "runtime":
            name, s, d, kind, corr, tid = r
            b.runtime(
                str(name),
                int(s),
                int(d),
                kind=RuntimeKind(kind),
                correlation=int(corr),
                tid=int(tid),
            )  # type: ignore[call-overload]
        else:
            name, s, d, stream, corr = r
            b.activity(
                str(name),
                int(s),
                int(d),
                stream=int(stream),
                correlation=int(corr),
                kind=ActivityKind.KERNEL,
            )  # type: ignore[call-overload]
    return b.build()


@settings(max_examples=60, deadline=None)
@given(st.lists(_launch, max_size=25), st.lists(_sync, max_size=6), _steps)
def test_invariants(launches, syncs, steps) -> None:  # type: ignore[no-untyped-def]
    trace = _build(_rows(launches, syncs, steps))
    links = link_launches(trace)
    series = queue_series(trace, links)
    for depth, flight in series.values():
        assert (depth.value >= 0).all()
        assert (flight.value >= 0).all()
    report = analyze(trace)
    run = report.bound
    assert run is not None
    assert run.busy_ns + run.idle_ns == run.region_ns
    assert run.idle_ns_by_cause.total() == run.idle_ns
    # the steps' shares partition the device timeline: their figures add up to the run's
    assert sum(s.gpu_busy_ns for s in flat_steps(report)) == run.busy_ns
    assert sum(s.gpu_idle_ns for s in flat_steps(report)) == run.idle_ns
    # the time per name covers the same region: the names' busy times add up to the run's
    assert sum(k.busy_ns for k in report.trace.kernels) == run.busy_ns
    for cause in ("host", "sync", "input", "dependency", "unattributed"):
        assert sum(
            getattr(s.bound.idle_ns_by_cause, cause) for s in flat_steps(report) if s.bound
        ) == (getattr(run.idle_ns_by_cause, cause))
    clocks = not any(w.code == "clock-mismatch" for w in report.warnings)
    for s in flat_steps(report):
        assert s.bound is not None
        assert s.bound.busy_ns + s.bound.idle_ns == s.bound.region_ns
        assert s.bound.idle_ns_by_cause.total() == s.bound.idle_ns
        assert (s.gpu_busy_ns, s.gpu_idle_ns) == (s.bound.busy_ns, s.bound.idle_ns)
        assert 0 <= s.sync_wait_ns <= s.cpu_ns
        assert s.queue_max >= 0
        if s.device_start_ns is not None and s.device_end_ns is not None:
            assert s.device_start_ns <= s.device_end_ns
            # withheld where the clocks disagree: it compares the two
            assert s.run_ahead_ns == (s.device_end_ns - s.end_ns if clocks else None)
    # steps tile the host timeline: every matched launch inside it lands in exactly one step
    end = sum(steps)
    inside = sum((2 if g else 1) for (ls, *_rest, g) in launches if ls < end)
    assert sum(s.activities for s in flat_steps(report)) == inside
    assert report.trace.launch.matched == sum(2 if g else 1 for *_r, g in launches)
    assert report.trace.launch.unmatched == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(_launch, max_size=25), st.lists(_sync, max_size=6), _steps)
def test_sync_cost_matches_brute_force(launches, syncs, steps) -> None:  # type: ignore[no-untyped-def]
    """What syncs cost, nanosecond by nanosecond from the gaps: the sync idle, and the waits
    inside host, input and dependency idle; per step share, for the run and for the site."""
    a = analyze_detail(_build(_rows(launches, syncs, steps)))
    report = a.report
    assert a.trace is not None
    gaps = a.trace.gaps
    waits = {t for ss, sd, _ in syncs for t in range(ss, ss + sd)}
    opened: set[int] = set()
    known: set[int] = set()
    spans = zip(gaps.start_ns.tolist(), gaps.end_ns.tolist(), gaps.cause.tolist(), strict=True)
    for g0, g1, c in spans:
        if c == CAUSES.index("sync"):
            opened.update(range(g0, g1))
        elif c != CAUSES.index("unattributed"):
            known.update(range(g0, g1))
    cost = sorted(opened | (known & waits))

    def within(lo: int, hi: int) -> int:
        return sum(1 for t in cost if lo <= t < hi)

    run = report.bound
    assert run is not None
    shares = [s.bound for s in flat_steps(report) if s.bound]
    for b in shares:
        got = within(b.share_start_ns, b.share_end_ns)
        assert b.evidence.sync_cost_pct == pct(got, b.region_ns)
        assert got <= b.idle_ns
    r0 = shares[0].share_start_ns  # no warm-up: the run's region is every step's share
    r1 = r0 + run.region_ns
    assert run.evidence.sync_cost_pct == pct(within(r0, r1), run.region_ns)
    # one site (every call is cudaStreamSynchronize, without a frame): the run's cost, over
    # the calls that overlap the region, their wait clipped to it
    inside = [(ss, ss + sd) for ss, sd, _ in syncs if ss < r1 and max(ss + sd, ss + 1) > r0]
    sites = run.evidence.sync_sites
    assert [(c.count, c.wait_ns, c.cost_ns) for c in sites] == (
        [(len(inside), sum(max(min(e, r1) - max(s, r0), 0) for s, e in inside), within(r0, r1))]
        if inside
        else []
    )
    if sites:
        assert sites[0].idle_ns == len([t for t in opened if r0 <= t < r1])


@settings(max_examples=40, deadline=None)
@given(st.lists(_launch, max_size=25), st.lists(_sync, max_size=6), _steps, st.randoms())
def test_shuffling_rows_changes_nothing(launches, syncs, steps, rnd: random.Random) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(launches, syncs, steps)
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    a = analyze(_build(rows)).to_json()
    b = analyze(_build(shuffled)).to_json()
    assert a == b


@settings(max_examples=60, deadline=None)
@given(st.lists(_launch, min_size=1, max_size=25))
def test_queue_max_matches_brute_force(launches) -> None:  # type: ignore[no-untyped-def]
    trace = _build(_rows(launches, [], [10]))
    report = analyze(trace)
    if "queue depth" in report.trace.withheld:
        # the clocks disagree (a trace whose device work lies wholly outside the host's
        # events): queue depth compares them, and is withheld
        assert report.trace.queue == {}
        return
    per_stream: dict[int, list[tuple[int, int]]] = {}
    for ls, _ld, off, _ad, stream, _graph in launches:
        # a graph launch is one queue entry: it leaves the queue when its first kernel starts
        per_stream.setdefault(stream, []).append((ls, max(ls + off, ls)))
    for stream, iv in per_stream.items():
        times = {t for pair in iv for t in pair}
        # depth at t: launched at or before t, not started by t
        brute = max(sum(1 for a, b in iv if a <= t < b) for t in times)
        assert report.trace.queue[str(stream)].max == brute


def _covered(intervals: list[tuple[int, int]]) -> int:
    """Length covered by [a, b) intervals, one elementary segment at a time."""
    points = sorted({t for iv in intervals for t in iv})
    return sum(x1 - x0 for x0, x1 in pairwise(points) if any(a <= x0 < b for a, b in intervals))


def _nearest_rank(values: list[int], p: int) -> int:
    s = sorted(values)
    return s[max(math.ceil(p * len(s) / 100), 1) - 1] if s else 0


@settings(max_examples=60, deadline=None)
@given(st.lists(_launch, max_size=25), st.lists(_sync, max_size=6), _steps)
def test_figures_match_brute_force(launches, syncs, steps) -> None:  # type: ignore[no-untyped-def]
    """Every per-step, queue and delay figure, straight from the definitions in
    docs/analysis.md, evaluated point by point on the rows the trace is built from."""
    cap = 2
    report = analyze(_build(_rows(launches, syncs, steps)), queue_cap=cap)
    # (stream, launch start, launch end, device start, device end) per activity
    acts = [
        (stream, ls, ls + ld, ls + off + 10 * k, ls + off + 10 * k + ad)
        for ls, ld, off, ad, stream, graph in launches
        for k in range(2 if graph else 1)
    ]
    # the queue's entries: a graph launch is one, from its first kernel's start to its last end
    entries = [
        (stream, ls, ls + ld, ls + off, ls + off + (10 if graph else 0) + ad)
        for ls, ld, off, ad, stream, graph in launches
    ]
    in_launch = [(ls, ls + ld) for ls, ld, *_ in launches]

    def depth(stream: int, t: int) -> int:  # launched at or before t, not started by t
        return sum(1 for s, ls, _, a, _ in entries if s == stream and ls <= t < max(a, ls))

    def flight(stream: int, t: int) -> int:  # launched at or before t, not finished by t
        return sum(1 for s, ls, _, a, b in entries if s == stream and ls <= t < max(a, b, ls))

    times = {
        s: sorted({t for x in entries if x[0] == s for t in x[1:]}) for s in {x[0] for x in acts}
    }
    # where the clocks disagree, queue depth and launch delays compare them: withheld
    withheld = "queue depth" in report.trace.withheld
    if withheld:
        assert report.trace.queue == {}
        assert report.trace.launch.launch_to_start_ns.max == 0
    else:
        assert {k for k, q in report.trace.queue.items() if q.activities} == {str(s) for s in times}
    for s, ts in ({} if withheld else times).items():
        q = report.trace.queue[str(s)]
        change = sorted(
            {x[1] for x in entries if x[0] == s} | {max(x[3], x[1]) for x in entries if x[0] == s}
        )
        segments = list(pairwise(change))
        span = change[-1] - change[0]
        area = sum(depth(s, t0) * (t1 - t0) for t0, t1 in segments)
        assert q.mean == pytest.approx(area / span if span else 0.0, rel=1e-12)
        # at the cap, and the host inside a launch call
        assert q.time_at_cap_ns == sum(
            _covered([(max(a, t0), min(b, t1)) for a, b in in_launch if a < t1 and b > t0])
            for t0, t1 in segments
            if depth(s, t0) >= cap
        )
        assert q.max == max(depth(s, t) for t in ts)
        assert q.in_flight_max == max(flight(s, t) for t in ts)
    to_start = [a - ls for _, ls, _, a, _ in acts]
    delay = [max(a - le, 0) for _, _, le, a, _ in acts]
    for got, values in (
        ()
        if withheld
        else (
            (report.trace.launch.launch_to_start_ns, to_start),
            (report.trace.launch.queue_delay_ns, delay),
        )
    ):
        assert (got.p50, got.p90, got.p99, got.max) == (
            _nearest_rank(values, 50),
            _nearest_rank(values, 90),
            _nearest_rank(values, 99),
            max(values, default=0),
        )

    bounds = [sum(steps[:i]) for i in range(len(steps) + 1)]
    sync_iv = [(ss, ss + sd) for ss, sd, _ in syncs]
    device_ends: list[int | None] = []
    # where host and device clocks disagree (work starting before its launch), the figures
    # that compare them are withheld
    clocks = not any(w.code == "clock-mismatch" for w in report.warnings)
    for i, f in enumerate(flat_steps(report)):
        w0, w1 = bounds[i], bounds[i + 1]
        assert (f.step, f.start_ns, f.end_ns, f.cpu_ns) == (i, w0, w1, w1 - w0)
        mine = [x for x in acts if w0 <= x[1] < w1]
        assert f.activities == len(mine)
        d0 = min((x[3] for x in mine), default=None)
        d1 = max((x[4] for x in mine), default=None)
        assert (f.device_start_ns, f.device_end_ns) == (d0, d1)
        device = d1 - d0 if d0 is not None and d1 is not None else 0
        assert f.device_ns == device
        # gpu_busy_ns / gpu_idle_ns: the step's share of the device timeline (test_bound.py)
        assert f.bound is not None
        assert (f.gpu_busy_ns, f.gpu_idle_ns) == (f.bound.busy_ns, f.bound.idle_ns)
        assert f.run_ahead_ns == (None if d1 is None or not clocks else d1 - w1)
        assert f.sync_count == sum(1 for a, _ in sync_iv if w0 <= a < w1)
        clipped = [(max(a, w0), min(b, w1)) for a, b in sync_iv if a < w1 and b > w0]
        assert f.sync_wait_ns == _covered(clipped)
        # the depth of any one stream at the step's start and at each change inside it
        assert f.queue_max == max(
            (depth(s, t) for s, ts in times.items() for t in [w0, *ts] if w0 <= t < w1),
            default=0,
        )
        # earlier steps whose device work ends after this one starts on the host
        in_flight = sum(1 for e in device_ends if e is not None and e > w0)
        assert f.in_flight_steps == (in_flight if clocks else 0)
        device_ends.append(d1)
