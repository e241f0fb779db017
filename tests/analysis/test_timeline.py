"""Interval sets (analysis/timeline.py) against brute force over every nanosecond."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.analysis.timeline import ClassCover, Cover, start_order, union_runs

_intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(_intervals)
def test_union_runs_merges_overlapping_and_touching(intervals: list[tuple[int, int]]) -> None:
    s = np.array([a for a, _ in intervals], np.int64)
    e = s + np.array([d for _, d in intervals], np.int64)
    order = start_order(s)
    if order is not None:
        assert bool((s[1:] < s[:-1]).any())
        s, e = s[order], e[order]
    else:
        assert not bool((s[1:] < s[:-1]).any())
    heads, ends = union_runs(s, e)
    covered = {t for a, b in zip(s.tolist(), e.tolist(), strict=True) for t in range(a, b)}
    runs = list(zip(s[heads].tolist(), ends.tolist(), strict=True))
    assert {t for a, b in runs for t in range(a, b)} == covered
    # disjoint and not touching: each run's end lies before the next run's start
    assert all(b0 < a1 for (_, b0), (a1, _) in pairwise(runs))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30), st.integers(0, 3)), max_size=12),
    st.lists(st.tuples(st.integers(-10, 400), st.integers(-5, 120)), min_size=1, max_size=6),
)
def test_class_cover_is_one_cover_per_class(
    gaps: list[tuple[int, int, int]], queries: list[tuple[int, int]]
) -> None:
    # disjoint, sorted intervals: each starts after the previous one's end
    s, e, c, t = [], [], [], 0
    for skip, length, cls in gaps:
        t += skip
        s.append(t)
        e.append(t + length)
        c.append(cls)
        t += length
    s_, e_, c_ = np.array(s, np.int64), np.array(e, np.int64), np.array(c, np.intp)
    cc = ClassCover.of_disjoint(s_, e_, c_, 4)
    a = np.array([q for q, _ in queries], np.int64)
    b = a + np.array([d for _, d in queries], np.int64)
    got = cc.between(a, b)
    assert got.shape == (4, len(a))
    for k in range(4):
        one = Cover._from_disjoint(s_[c_ == k], e_[c_ == k])
        assert got[k].tolist() == one.between(a, b).tolist()
        want = [
            sum(
                1
                for x, y, z in zip(s, e, c, strict=True)
                if z == k
                for p in range(x, y)
                if q0 <= p < q1
            )
            for q0, q1 in zip(a.tolist(), b.tolist(), strict=True)
        ]
        assert got[k].tolist() == want


def test_class_cover_empty() -> None:
    empty = np.zeros(0, np.int64)
    cc = ClassCover.of_disjoint(empty, empty, np.zeros(0, np.intp), 6)
    assert cc.between(np.array([0, 5]), np.array([10, 20])).tolist() == [[0, 0]] * 6
