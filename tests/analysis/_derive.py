"""Derive a changed copy of a real Kineto trace with known changes, and tally it independently
from its raw JSON: for the compare tests."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

__all__ = [
    "DEVICE_CATS",
    "derive",
    "read_events",
    "scaled",
    "tally",
    "tally_busy",
    "tally_host_ops",
    "write_trace",
]

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def read_events(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


def write_trace(data: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(data))
    return path


def _ns(us: float) -> int:
    # exactly, from the number as written: µs since the epoch (1.7e15) times 1000 is past
    # float's integers
    return int((Decimal(repr(us)) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _shifted(
    data: dict[str, Any], shifts: list[tuple[int, int]], *, stretch_device: bool = True
) -> dict[str, Any]:
    """Every timestamp t moved by the sum of the ``(at_ns, by_ns)`` shifts with at <= t: an
    event that spans a shift point grows by it (a device activity only with
    ``stretch_device``: else it keeps its length), later events move."""
    shifts = sorted(shifts)
    at = [a for a, _ in shifts]
    cum = [0]
    for _, by in shifts:
        cum.append(cum[-1] + by)

    def move(t: int) -> int:
        return t + cum[bisect.bisect_right(at, t)]

    out = []
    for e in data["traceEvents"]:
        e = dict(e)
        if "ts" in e and e.get("ph") != "M":
            t0 = _ns(e["ts"])
            if e.get("ph") == "X":
                t1 = t0 + _ns(e["dur"])
                if stretch_device or e.get("cat") not in DEVICE_CATS:
                    e["dur"] = (move(t1) - move(t0)) / 1000
            e["ts"] = move(t0) / 1000
        out.append(e)
    return {**data, "traceEvents": out}


def derive(
    data: dict[str, Any], *, double: str, sync_in: int, sync_ns: int, site: str
) -> tuple[dict[str, Any], int]:
    """A copy of ``data`` where every activity named ``double`` lasts twice as long (what
    follows each one moved later by its duration), and one ``cudaStreamSynchronize`` of
    ``sync_ns`` is added in the middle of the ``sync_in``-th activity (by start), on the
    step's thread, inside a Python frame ``site`` (``train.py(42): item``) and an op
    ``aten::item``: the host waits
    there while that activity runs; what follows moves later by ``sync_ns``, so the device
    idles once it ends. Returns the copy and the index of the activity the sync waited on."""
    events = data["traceEvents"]
    shifts = [
        (_ns(e["ts"]) + _ns(e["dur"]) - 1, _ns(e["dur"]))
        for e in events
        if e.get("cat") in DEVICE_CATS and e.get("name") == double
    ]
    # (each instance spans its own shift point, 1 ns before its end: it doubles)
    out = _shifted(data, shifts)
    device = sorted(
        (i for i, e in enumerate(out["traceEvents"]) if e.get("cat") in DEVICE_CATS),
        key=lambda i: float(out["traceEvents"][i]["ts"]),
    )
    waited = out["traceEvents"][device[sync_in]]
    assert waited["name"] != double
    t0 = _ns(waited["ts"])
    at = t0 + _ns(waited["dur"]) // 2
    assert t0 + _ns(waited["dur"]) < at + sync_ns  # it ends while the host waits
    out = _shifted(out, [(at, sync_ns)], stretch_device=False)
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    pid, tid = step["pid"], step["tid"]
    start, dur = at + 1, (sync_ns - 2) / 1000  # inside the room the shift opened
    out["traceEvents"] += [
        {"ph": "X", "cat": "python_function", "name": site, "pid": pid, "tid": tid,
         "ts": start / 1000, "dur": dur, "args": {"Python parent id": None, "Python id": 999_999}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": pid, "tid": tid,
         "ts": start / 1000, "dur": dur, "args": {"External id": 999_999}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid,
         "tid": tid, "ts": start / 1000, "dur": dur,
         "args": {"cbid": 131, "correlation": 999_999}},
    ]  # fmt: skip
    return out, device[sync_in]


def scaled(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """Every time and duration scaled by ``factor`` about the first event."""
    events = data["traceEvents"]
    t0 = min(e["ts"] for e in events if "ts" in e and e.get("ph") != "M")
    out = []
    for e in events:
        e = dict(e)
        if "ts" in e and e.get("ph") != "M":
            e["ts"] = t0 + (e["ts"] - t0) * factor
            if "dur" in e:
                e["dur"] = e["dur"] * factor
        out.append(e)
    return {**data, "traceEvents": out}


def tally(data: dict[str, Any]) -> dict[str, int]:
    """Device time per activity name: the durations of the trace's kernels, copies and
    memsets, summed per name, in ns (as the JSON gives them)."""
    out: dict[str, int] = defaultdict(int)
    for e in data["traceEvents"]:
        if e.get("cat") in DEVICE_CATS and e.get("ph") == "X":
            out[e["name"]] += _ns(e["dur"])
    return dict(out)


def tally_busy(data: dict[str, Any]) -> dict[str, int]:
    """Each activity name's share of the device's busy time, from the raw JSON: activities in
    start order, each owning what it adds to the union of those started before it."""
    acts = sorted(
        (
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"])
            for e in data["traceEvents"]
            if e.get("cat") in DEVICE_CATS and e.get("ph") == "X"
        ),
        key=lambda a: a[0],
    )
    out: dict[str, int] = defaultdict(int)
    reach: int | None = None
    for start, end, name in acts:
        lo = start if reach is None else max(start, reach)
        out[name] += max(0, end - lo)
        reach = end if reach is None else max(reach, end)
    return dict(out)


def tally_host_ops(data: dict[str, Any]) -> dict[str, int]:
    """Host time per top-level ``cpu_op`` name on the thread of the first profiler step, within
    that step's span, from the raw JSON (an op inside another op is its parent's time)."""
    events = data["traceEvents"]
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    lo, hi = _ns(step["ts"]), _ns(step["ts"]) + _ns(step["dur"])
    ops = sorted(
        (
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"])
            for e in events
            if e.get("cat") == "cpu_op" and e.get("ph") == "X"
            and (e["pid"], e["tid"]) == (step["pid"], step["tid"])
        ),
        key=lambda o: (o[0], -o[1]),
    )  # fmt: skip
    out: dict[str, int] = defaultdict(int)
    reach: int | None = None
    for start, end, name in ops:
        if (reach is None or start >= reach) and min(end, hi) > max(start, lo):
            out[name] += min(end, hi) - max(start, lo)
        reach = end if reach is None else max(reach, end)
    return dict(out)
