"""timeline.innermost_at, Cover.subtract and the sort-based uniques against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.analysis.timeline import Cover, innermost_at, sorted_unique, unique_inverse


@st.composite
def _nested(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Properly nested intervals (a call tree), none empty, in any order."""
    out: list[tuple[int, int]] = []

    def fill(a: int, b: int, depth: int) -> None:
        t = a
        while t < b and depth < 5 and draw(st.booleans()):
            s = draw(st.integers(t, b - 1))
            e = draw(st.integers(s + 1, b))
            out.append((s, e))
            fill(s, e, depth + 1)
            t = e + draw(st.integers(0, 3))

    fill(0, 100, 0)
    return draw(st.permutations(out)) if out else out


@settings(max_examples=200, deadline=None)
@given(_nested())
def test_innermost_matches_brute_force(iv: list[tuple[int, int]]) -> None:
    s = np.array([a for a, _ in iv], np.int64)
    e = np.array([b for _, b in iv], np.int64)
    ts = np.arange(-1, 102, dtype=np.int64)
    got = innermost_at(s, e, ts)
    for t, g in zip(ts.tolist(), got.tolist(), strict=True):
        holding = [i for i, (a, b) in enumerate(iv) if a <= t < b]
        if not holding:
            assert g == -1
        else:
            best = max(holding, key=lambda i: (iv[i][0], -iv[i][1]))
            assert iv[g] == iv[best]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(1, 30)), max_size=8),
    st.lists(st.tuples(st.integers(0, 100), st.integers(1, 30)), max_size=8),
)
def test_subtract_matches_brute_force(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    ca = Cover.of([x for x, _ in a], [x + d for x, d in a])
    cb = Cover.of([x for x, _ in b], [x + d for x, d in b])
    got = ca.subtract(cb)
    want = {
        t
        for t in range(0, 140)
        if any(x <= t < x + d for x, d in a) and not any(x <= t < x + d for x, d in b)
    }
    assert {t for t in range(0, 140) if got.contains(t)} == want
    assert got.total_ns == len(want)


@given(st.lists(st.integers(-(2**62), 2**62), max_size=50))
def test_sort_based_uniques_are_numpys(x: list[int]) -> None:
    v = np.array(x, np.int64)
    assert sorted_unique(v).tolist() == np.unique(v).tolist()
    uniq, inv = unique_inverse(v)
    want_u, want_inv = np.unique(v, return_inverse=True)
    assert uniq.tolist() == want_u.tolist()
    assert inv.tolist() == want_inv.reshape(-1).tolist()
