"""Time per name over the steady state: every kernel, copy and memset name of a trace's device
(:func:`device_times`), and every top-level operator of its launching thread
(:func:`host_op_times`), each in one vectorised pass.

Over a span of the device timeline (the run's region, as the bound analysis has it), each name
gets:

* ``count``: its activities that overlap the span;
* ``total_ns``: their durations, clipped to the span (what a per-name tally of the trace sums);
* ``busy_ns``: its share of the device's **busy** time (the union of its activities): where
  activities overlap (several streams), the one that started first owns the overlap, so the
  names' ``busy_ns`` add up to the busy time exactly, and on one stream ``busy_ns`` equals
  ``total_ns``.

The device is the one the bound analysis labels (the one with most activities). Every name is
kept (a trace has tens to a few thousand; an entry is a few hundred bytes of JSON, C++ names
being long): a comparison
of two runs needs the names that changed, which need not be the largest.

Host time per operator: the host ranges of kind ``OP`` (``cpu_op``) of the thread with most
runtime calls (the one that launches the work), **top-level** only (an op inside another op on
the thread is its parent's time), clipped to the span; so the ops' ``total_ns`` add up to the
thread's time inside operators, never counted twice.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis.timeline import start_order, unique_inverse
from asynctrace.traces.model import I64, ActivityKind, RangeKind, Trace

__all__ = [
    "DeviceTime",
    "HostOpTime",
    "device_times",
    "host_op_times",
    "labelled_device",
    "start_order_on_ties",
]

#: float sums of hostile durations are held within int64
_INT64_CAP = 9.2e18


def labelled_device(trace: Trace) -> npt.NDArray[np.bool_]:
    """The activities of the device the analysis labels: the one with most activities."""
    act = trace.activities
    if not len(act):
        return np.zeros(0, bool)
    devs, inv = unique_inverse(act.device)
    on: npt.NDArray[np.bool_] = act.device == devs[int(np.argmax(np.bincount(inv.reshape(-1))))]
    return on


def _name_rank(trace: Trace, names: npt.NDArray[np.integer]) -> I64:
    """Each name index's place in the order of the names' text: a name's index follows the
    order the trace's rows were read in, its text does not (ties broken by it give the same
    result whatever the rows' order)."""
    used, inv = unique_inverse(names)
    texts = [trace.name_of(int(i)) for i in used.tolist()]
    rank = np.empty(len(used), np.int64)
    rank[sorted(range(len(used)), key=texts.__getitem__)] = np.arange(len(used))
    out: I64 = rank[inv.reshape(-1)]
    return out


def start_order_on_ties(
    trace: Trace, s: I64, e: I64, names: npt.NDArray[np.integer]
) -> npt.NDArray[np.intp]:
    """The order of intervals by start, and where several start together by end (the longer
    first), then by name: the same whatever the order of the trace's rows. Only the tied ones
    are sorted again (few in a real trace)."""
    order = start_order(s)
    if order is None:
        order = np.arange(len(s))
    ss = s[order]
    same = ss[1:] == ss[:-1]
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same]) if len(ss) else order[:0]
    if len(tied):
        sub = order[tied]
        order[tied] = sub[np.lexsort((_name_rank(trace, names[sub]), -e[sub], s[sub]))]
    return order


class DeviceTime(msgspec.Struct, frozen=True, kw_only=True):
    """One activity name's device time over the steady state."""

    name: str
    #: "kernel", "memcpy" or "memset" (the kind of its first activity)
    kind: str
    count: int
    #: durations clipped to the span, summed
    total_ns: int
    #: its share of the device's busy time (overlaps owned by the activity that started first)
    busy_ns: int


def device_times(trace: Trace, *, start_ns: int, end_ns: int) -> list[DeviceTime]:
    """Every activity name of the labelled device over ``[start_ns, end_ns)``, most busy time
    first (pure; one vectorised pass)."""
    act = trace.activities
    if not len(act) or end_ns <= start_ns:
        return []
    a_start, a_end = act.start_ns, act.start_ns + act.dur_ns
    rows = np.flatnonzero(labelled_device(trace) & (a_end > start_ns) & (a_start < end_ns))
    if not len(rows):
        return []
    s = np.maximum(a_start[rows], start_ns)
    e = np.minimum(a_end[rows], end_ns)
    # activities that start together: the longer first, then by name (not the rows' order)
    order = start_order_on_ties(trace, s, e, act.name[rows])
    rows, s, e = rows[order], s[order], e[order]
    # what each activity adds to the union of those started before it
    reach = np.maximum.accumulate(e)
    before = np.r_[np.int64(start_ns), reach[:-1]]
    own = np.maximum(e - np.maximum(s, before), 0)
    names = act.name[rows]
    uniq, first, inv = np.unique(names, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.minimum(np.bincount(inv, weights=e - s, minlength=len(uniq)), _INT64_CAP)
    busy = np.minimum(np.bincount(inv, weights=own, minlength=len(uniq)), _INT64_CAP)
    kinds = act.kind[rows][first]
    # two indices may hold one string: merged by the name itself
    merged: dict[str, list[int]] = {}
    kind_of: dict[str, str] = {}
    for i, idx in enumerate(uniq.tolist()):
        name = trace.name_of(int(idx))
        slot = merged.setdefault(name, [0, 0, 0])
        slot[0] += int(count[i])
        slot[1] += int(total[i])
        slot[2] += int(busy[i])
        kind_of.setdefault(name, _kind_name(int(kinds[i])))
    out = [
        DeviceTime(name=n, kind=kind_of[n], count=c, total_ns=t, busy_ns=b)
        for n, (c, t, b) in merged.items()
    ]
    out.sort(key=lambda k: (-k.busy_ns, -k.total_ns, k.name))
    return out


class HostOpTime(msgspec.Struct, frozen=True, kw_only=True):
    """One top-level operator name's host time over the steady state."""

    name: str
    count: int
    total_ns: int


def _launching_thread(trace: Trace) -> tuple[int, int] | None:
    """The thread with most runtime calls (the one launching the work), as (pid, tid)."""
    rt = trace.runtime
    if len(rt) == 0:
        return None
    tid_sorted = np.sort(rt.tid)
    edges = np.flatnonzero(np.diff(tid_sorted)) + 1
    starts = np.concatenate(([0], edges))
    counts = np.diff(np.concatenate((starts, [len(tid_sorted)])))
    tid = tid_sorted[starts[int(np.argmax(counts))]]
    pid = rt.pid[int(np.argmax(rt.tid == tid))]
    return int(pid), int(tid)


def host_op_times(trace: Trace, *, start_ns: int, end_ns: int) -> list[HostOpTime]:
    """Every top-level operator name of the launching thread over ``[start_ns, end_ns)``, most
    host time first (pure; one vectorised pass)."""
    thread = _launching_thread(trace)
    r = trace.ranges
    if thread is None or not len(r) or end_ns <= start_ns:
        return []
    pid, tid = thread
    rows = np.flatnonzero((r.kind == RangeKind.OP) & (r.pid == pid) & (r.tid == tid))
    if not len(rows):
        return []
    s0, e0 = r.start_ns[rows], r.start_ns[rows] + np.maximum(r.dur_ns[rows], 0)
    # parents before their children: by start, the longer first
    order = np.lexsort((-e0, s0))
    rows, s0, e0 = rows[order], s0[order], e0[order]
    reach = np.maximum.accumulate(e0)
    top = np.r_[True, s0[1:] >= reach[:-1]]
    s = np.maximum(s0[top], start_ns)
    e = np.minimum(e0[top], end_ns)
    keep = e > s
    names, dur = r.name[rows[top][keep]], (e - s)[keep]
    if not len(names):
        return []
    uniq, inv = np.unique(names, return_inverse=True)
    inv = inv.reshape(-1)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.minimum(np.bincount(inv, weights=dur, minlength=len(uniq)), _INT64_CAP)
    merged: dict[str, list[int]] = {}
    for i, idx in enumerate(uniq.tolist()):
        slot = merged.setdefault(trace.name_of(int(idx)), [0, 0])
        slot[0] += int(count[i])
        slot[1] += int(total[i])
    out = [HostOpTime(name=n, count=c, total_ns=t) for n, (c, t) in merged.items()]
    out.sort(key=lambda h: (-h.total_ns, h.name))
    return out


def _kind_name(kind: int) -> str:
    try:
        return ActivityKind(kind).name.lower()
    except ValueError:
        return "kernel"
