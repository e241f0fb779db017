"""Invariants of the analyses over random traces (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.queue import queue_series
from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace

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
    for s in report.steps:
        assert s.gpu_busy_ns + s.gpu_idle_ns == s.device_ns
        assert 0 <= s.gpu_busy_ns <= s.device_ns
        assert 0 <= s.sync_wait_ns <= s.cpu_ns
        assert s.queue_max >= 0
        if s.device_start_ns is not None and s.device_end_ns is not None:
            assert s.device_start_ns <= s.device_end_ns
            assert s.run_ahead_ns == s.device_end_ns - s.end_ns
    # steps tile the host timeline: every matched launch inside it lands in exactly one step
    end = sum(steps)
    inside = sum((2 if g else 1) for (ls, *_rest, g) in launches if ls < end)
    assert sum(s.activities for s in report.steps) == inside
    assert report.launch.matched == sum(2 if g else 1 for *_r, g in launches)
    assert report.launch.unmatched == 1


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
    per_stream: dict[int, list[tuple[int, int]]] = {}
    for ls, _ld, off, _ad, stream, graph in launches:
        for k in range(2 if graph else 1):
            per_stream.setdefault(stream, []).append((ls, max(ls + off + 10 * k, ls)))
    for stream, iv in per_stream.items():
        times = {t for pair in iv for t in pair}
        # depth at t: launched at or before t, not started by t
        brute = max(sum(1 for a, b in iv if a <= t < b) for t in times)
        assert report.queue[str(stream)].max == brute
