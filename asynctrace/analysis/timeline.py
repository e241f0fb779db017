"""Sets of time intervals as sorted, disjoint numpy arrays, with vectorised measures.

A :class:`Cover` is the union of some intervals ``[start, end)``: merged once (one sort and a
running maximum), then every question about it is a binary search over its arrays, for any number
of query points at once: how much of it lies before ``t``, between ``a`` and ``b``, whether ``t``
is inside it. The device timeline, the host's sync waits, data waits and launch calls are all
Covers; the bound analysis is arithmetic on them.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = [
    "ClassCover",
    "Cover",
    "innermost_at",
    "sorted_unique",
    "start_order",
    "union_runs",
    "unique_inverse",
]

I64 = npt.NDArray[np.int64]


def sorted_unique(x: npt.ArrayLike) -> I64:
    """``np.unique(x)`` for integers, by one sort: numpy's hash-based unique is many times
    slower on large int64 arrays."""
    v = np.sort(np.asarray(x, dtype=np.int64).reshape(-1))
    if len(v) < 2:
        return v
    out: I64 = v[np.r_[True, v[1:] != v[:-1]]]
    return out


def unique_inverse(x: npt.ArrayLike) -> tuple[I64, npt.NDArray[np.intp]]:
    """``np.unique(x, return_inverse=True)`` for integers, by one stable sort."""
    v = np.asarray(x, dtype=np.int64).reshape(-1)
    order = np.argsort(v, kind="stable")
    vs = v[order]
    head = np.r_[True, vs[1:] != vs[:-1]] if len(vs) else np.zeros(0, bool)
    inv = np.empty(len(v), np.intp)
    inv[order] = np.cumsum(head) - 1
    return vs[head], inv


def start_order(start: I64) -> npt.NDArray[np.intp] | None:
    """The stable order of intervals by start; None where they are in order already (trace
    tables come sorted by start, so most callers skip the sort)."""
    if len(start) > 1 and bool((start[1:] < start[:-1]).any()):
        return np.argsort(start, kind="stable")
    return None


def union_runs(start: I64, end: I64) -> tuple[npt.NDArray[np.intp], I64]:
    """Of intervals sorted by start, none empty (at least one): where each run of overlapping or
    touching ones begins (its first interval's index) and where the run ends."""
    reach = np.maximum.accumulate(end)
    heads = np.flatnonzero(np.r_[True, start[1:] > reach[:-1]])
    return heads, reach[np.r_[heads[1:] - 1, len(start) - 1]]


class Cover(msgspec.Struct, frozen=True, eq=False):
    """Disjoint intervals ``[start_ns[i], end_ns[i])``, sorted, none empty, none touching."""

    start_ns: I64
    end_ns: I64
    #: covered length of intervals ``[0, i)``: ``cum_ns[i]`` (length n + 1)
    cum_ns: I64

    @classmethod
    def of(cls, start: npt.ArrayLike, end: npt.ArrayLike) -> Cover:
        """The union of ``[start[i], end[i])``; empty intervals are dropped, touching ones join."""
        s = np.asarray(start, dtype=np.int64)
        e = np.asarray(end, dtype=np.int64)
        keep = e > s
        s, e = s[keep], e[keep]
        if len(s) == 0:
            z = np.zeros(0, np.int64)
            return cls(z, z.copy(), np.zeros(1, np.int64))
        order = start_order(s)
        if order is not None:
            s, e = s[order], e[order]
        heads, me = union_runs(s, e)
        return cls._from_disjoint(s[heads], me)

    @classmethod
    def _from_disjoint(cls, s: I64, e: I64) -> Cover:
        cum = np.zeros(len(s) + 1, np.int64)
        np.cumsum(e - s, out=cum[1:])
        return cls(s, e, cum)

    def __len__(self) -> int:
        return len(self.start_ns)

    @property
    def total_ns(self) -> int:
        return int(self.cum_ns[-1])

    def before(self, t: npt.ArrayLike) -> I64:
        """Covered length in ``(-inf, t)`` at each ``t``."""
        t = np.asarray(t, dtype=np.int64)
        k = np.searchsorted(self.start_ns, t, side="right")  # intervals starting at or before t
        if len(self.start_ns) == 0:
            return np.zeros(np.shape(t), np.int64)
        last = np.maximum(k - 1, 0)
        partial = np.where(k > 0, np.minimum(t, self.end_ns[last]) - self.start_ns[last], 0).astype(
            np.int64
        )
        return self.cum_ns[last] * (k > 0) + partial

    def between(self, a: npt.ArrayLike, b: npt.ArrayLike) -> I64:
        """Covered length of ``[a, b)`` (0 where ``b <= a``)."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        return np.where(b > a, self.before(b) - self.before(a), 0).astype(np.int64)

    def index_at(self, t: npt.ArrayLike) -> npt.NDArray[np.intp]:
        """The interval containing each ``t``, -1 where none does."""
        t = np.asarray(t, dtype=np.int64)
        k = np.searchsorted(self.start_ns, t, side="right") - 1
        if len(self.start_ns) == 0:
            return np.full(np.shape(t), -1, np.intp)
        inside = (k >= 0) & (t < self.end_ns[np.maximum(k, 0)])
        return np.where(inside, k, -1).astype(np.intp)

    def contains(self, t: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each ``t`` lies inside the cover."""
        return self.index_at(t) >= 0

    def intersect(self, other: Cover) -> Cover:
        """The intervals covered by both."""
        if len(self) == 0 or len(other) == 0:
            return Cover.of([], [])
        cuts = sorted_unique(
            np.concatenate([self.start_ns, self.end_ns, other.start_ns, other.end_ns])
        )
        lo, hi = cuts[:-1], cuts[1:]
        both = self.contains(lo) & other.contains(lo)
        return Cover.of(lo[both], hi[both])

    def subtract(self, other: Cover) -> Cover:
        """The intervals covered by this and not by ``other``."""
        if len(self) == 0 or len(other) == 0:
            return self
        lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        holes = Cover.of(np.r_[lo, other.end_ns], np.r_[other.start_ns, hi])
        return self.intersect(holes)

    def clip(self, lo: int, hi: int) -> Cover:
        """The part inside ``[lo, hi)``."""
        return Cover.of(np.maximum(self.start_ns, lo), np.minimum(self.end_ns, hi))


class ClassCover(msgspec.Struct, frozen=True, eq=False):
    """Disjoint intervals as in a :class:`Cover`, each of one of ``n`` classes: the covered
    length of every class at once, from one binary search (rather than one per class)."""

    start_ns: I64
    end_ns: I64
    cls: npt.NDArray[np.intp]
    #: covered length of class ``c`` by intervals ``[0, i)``: ``cum_ns[c, i]``, shape (n, len + 1)
    cum_ns: I64

    @classmethod
    def of_disjoint(cls, s: I64, e: I64, classes: npt.ArrayLike, n: int) -> ClassCover:
        """Sorted, disjoint, non-empty ``[s[i], e[i])`` of class ``classes[i]`` (0 to n - 1)."""
        c = np.asarray(classes, dtype=np.intp)
        cum = np.zeros((n, len(s) + 1), np.int64)
        cum[c, np.arange(1, len(s) + 1)] = e - s
        np.cumsum(cum, axis=1, out=cum)
        return cls(s, e, c, cum)

    def before(self, t: npt.ArrayLike) -> I64:
        """Covered length of each class in ``(-inf, t)`` at each of the times ``t`` (1-d):
        shape (n, len(t))."""
        t = np.asarray(t, dtype=np.int64)
        k = np.searchsorted(self.start_ns, t, side="right")  # intervals starting at or before t
        if len(self.start_ns) == 0:
            return np.zeros((len(self.cum_ns), *np.shape(t)), np.int64)
        last = np.maximum(k - 1, 0)
        out: I64 = self.cum_ns[:, last]  # every class's length before the last interval
        partial = np.where(k > 0, np.minimum(t, self.end_ns[last]) - self.start_ns[last], 0)
        out[self.cls[last], np.arange(len(t))] += partial.astype(np.int64)
        return out

    def between(self, a: npt.ArrayLike, b: npt.ArrayLike) -> I64:
        """Covered length of each class in ``[a, b)`` (0 where ``b <= a``; 1-d ``a`` and ``b``):
        shape (n, len(a))."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        return np.where(b > a, self.before(b) - self.before(a), 0).astype(np.int64)


def innermost_at(start: I64, end: I64, t: I64) -> npt.NDArray[np.intp]:
    """For nested intervals ``[start[i], end[i])`` (one thread's frames: each inside the one it
    was called from; none empty), the innermost containing each time ``t``; -1 where none.

    Vectorised by depth: at ``t`` the open intervals number ``D`` (starts at or before ``t`` less
    ends at or before it), and the innermost is the one at depth ``D`` that started last — one
    binary search per depth level, never a loop over intervals. An interval that overlaps its
    neighbour without nesting can hide the one it overlaps; the result is checked to contain
    ``t`` (else -1).
    """
    n = len(start)
    t = np.asarray(t, dtype=np.int64)
    out = np.full(len(t), -1, np.intp)
    if n == 0 or len(t) == 0:
        return out
    # outer before inner where two start together
    by = np.lexsort((-end, start))
    start, end = start[by], end[by]
    # depth after each start: starts so far less ends at or before it (an end at t closes
    # before a start at t: touching intervals do not nest)
    ends_sorted = np.sort(end)
    depth_at_start = np.arange(1, n + 1) - np.searchsorted(ends_sorted, start, side="right")
    d_t = np.searchsorted(start, t, side="right") - np.searchsorted(ends_sorted, t, side="right")
    order = np.lexsort((start, depth_at_start))  # by depth, then start
    lv = depth_at_start[order]
    ls = start[order]
    lo_of = np.searchsorted(lv, np.arange(int(lv.max()) + 2), side="left")
    for d in sorted_unique(d_t[d_t > 0]).tolist():
        q = np.flatnonzero(d_t == d)
        a, b = lo_of[d], lo_of[d + 1]
        if a == b:
            continue
        k = np.searchsorted(ls[a:b], t[q], side="right") - 1
        ok = k >= 0
        out[q[ok]] = order[a + k[ok]]
    hit = out >= 0
    safe = np.maximum(out, 0)
    out[hit & ~((start[safe] <= t) & (t < end[safe]))] = -1
    found: npt.NDArray[np.intp] = np.where(out >= 0, by[np.maximum(out, 0)], -1)
    return found
