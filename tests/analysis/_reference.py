"""An independent reading of a Kineto trace: stdlib json and plain loops, no asynctrace code.

Used to pin the figures our loader + analyses produce on real traces. It follows the
definitions in docs/analysis.md literally, one event at a time, with exact decimal timestamps.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

__all__ = [
    "reference_figures",
    "reference_nsys_figures",
    "reference_nsys_step_figures",
    "reference_step_figures",
]

_DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_BLOCKING_COPIES = {"cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream"}


def _ns(value: Any) -> int:
    return int((Decimal(str(value)) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        data = json.load(f, parse_float=Decimal)
    events = data if isinstance(data, list) else data["traceEvents"]
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _is_sync(name: str) -> bool:
    return name.endswith("Synchronize") or name in _BLOCKING_COPIES


def _kineto_syncs(runtime: list[dict[str, Any]], acts: list[dict[str, Any]]) -> list[Any]:
    """The synchronizing calls: by name, and the queued copies (``cudaMemcpyAsync``) whose
    device copy Kineto names ``... Pageable ...``, joined by correlation id (a copy to or from
    pageable memory holds the host until it ends)."""
    paged = {
        int(a["args"]["correlation"])
        for a in acts
        if "Pageable" in str(a.get("name", "")) and a.get("args", {}).get("correlation") is not None
    }
    return [
        e
        for e in runtime
        if _is_sync(e["name"])
        or (
            _is_launch(e["name"])
            and "Memcpy" in e["name"]
            and e.get("args", {}).get("correlation") in paged
        )
    ]


def _nsys_pageable(con: Any, tables: set[str]) -> set[tuple[int, int]]:
    """(process, correlation id) of the copies to or from pageable memory (CUPTI's memory
    kind 1) in an Nsight Systems export."""
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        return set()
    return {
        (gpid >> 24, corr)
        for gpid, corr in con.execute(
            "SELECT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY"
            " WHERE srcKind = 1 OR dstKind = 1"
        )
    }


def _is_launch(name: str) -> bool:
    return not name.endswith("Synchronize") and any(
        w in name for w in ("Launch", "Memcpy", "Memset")
    )


def _nearest_rank(values: list[int], p: int) -> int:
    s = sorted(values)
    k = -(-p * len(s) // 100)
    return s[max(k, 1) - 1]


def reference_figures(path: Path) -> dict[str, Any]:
    events = _events(path)
    acts = [e for e in events if str(e.get("cat", "")).lower() in _DEVICE_CATS]
    runtime = [e for e in events if str(e.get("cat", "")).lower() in _RUNTIME_CATS]
    per_stream = Counter(str(e["args"]["stream"]) for e in acts)
    per_kind = Counter(_DEVICE_CATS[str(e["cat"]).lower()] for e in acts)

    launches: dict[int, tuple[int, int]] = {}
    graph_calls: set[int] = set()
    for e in runtime:
        corr = e.get("args", {}).get("correlation")
        if _is_launch(e["name"]) and corr is not None and int(corr) not in launches:
            launches[int(corr)] = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)))
            if "GraphLaunch" in e["name"]:
                graph_calls.add(int(corr))
    # a graph launch is one queue entry: it leaves the queue when its first kernel starts
    graph_first: dict[int, tuple[int, str]] = {}
    for e in acts:
        corr = e["args"].get("correlation")
        if corr is not None and int(corr) in graph_calls:
            here = (_ns(e["ts"]), str(e["args"]["stream"]))
            if int(corr) not in graph_first or here[0] < graph_first[int(corr)][0]:
                graph_first[int(corr)] = here

    delays: list[int] = []
    queue_events: dict[str, list[tuple[int, int]]] = {}
    matched = 0
    for e in acts:
        corr = e["args"].get("correlation")
        if corr is None or int(corr) not in launches:
            continue
        matched += 1
        l_start, l_end = launches[int(corr)]
        start = _ns(e["ts"])
        delays.append(max(start - l_end, 0))
        if int(corr) in graph_calls:
            if graph_first[int(corr)] != (start, str(e["args"]["stream"])):
                continue  # not the graph's first kernel: counted with it
            graph_first[int(corr)] = (-1, "")  # once, even if two kernels tie
        ev = queue_events.setdefault(str(e["args"]["stream"]), [])
        ev.append((l_start, +1))
        ev.append((max(start, l_start), -1))
    queue_max: dict[str, int] = {}
    for stream, ev in queue_events.items():
        depth = best = 0
        for _t, d in sorted(ev):  # (t, -1) sorts before (t, +1): starts before launches
            depth += d
            best = max(best, depth)
        queue_max[stream] = best

    syncs = _kineto_syncs(runtime, acts)
    steps = [
        e
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") != "gpu_user_annotation"
    ]
    frames = [e for e in events if e.get("cat") == "python_function"]
    sites: Counter[str] = Counter()
    for s in syncs:
        s_start, s_end = _ns(s["ts"]), _ns(s["ts"]) + _ns(s.get("dur", 0))
        best_frame = None
        for f in frames:
            name = str(f["name"])
            if f["pid"] != s["pid"] or f["tid"] != s["tid"]:
                continue
            if "(" not in name or any(
                m in name for m in ("torch/", "site-packages", "<built-in", "asynctrace")
            ):
                continue
            f_start, f_end = _ns(f["ts"]), _ns(f["ts"]) + _ns(f.get("dur", 0))
            if f_start <= s_start and f_end >= s_end:
                key = (f_start, -f_end)
                if best_frame is None or key > best_frame[0]:
                    best_frame = (key, name)
        if best_frame is not None:
            file_, rest = best_frame[1].split("(", 1)
            sites[f"{file_}:{rest.split(')', 1)[0]}"] += 1
    return {
        "per_stream": dict(per_stream),
        "per_kind": {k: per_kind.get(k, 0) for k in ("kernel", "memcpy", "memset")},
        "total": len(acts),
        "matched": matched,
        "unmatched": len(acts) - matched,
        "syncs": len(syncs),
        "steps": len(steps),
        "queue_max": queue_max,
        "queue_delay_p50": _nearest_rank(delays, 50) if delays else 0,
        "sites": dict(sites),
    }


def reference_nsys_figures(path: Path) -> dict[str, Any]:
    """The same figures from an Nsight Systems SQLite export, with plain SQL and loops."""
    import re
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        launches: dict[tuple[int, int], tuple[int, int]] = {}
        sync_keys: set[tuple[int, int]] = set()
        paged = _nsys_pageable(con, tables)
        for corr, start, end, name_id, gtid in con.execute(
            "SELECT correlationId, start, end, nameId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            " ORDER BY start"
        ):
            name = re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", strings[name_id])
            key = (gtid >> 24, corr)
            if _is_launch(name) and key not in launches:
                launches[key] = (start, end)
            if _is_sync(name) or ("Memcpy" in name and _is_launch(name) and key in paged):
                # 2022 exports write some calls twice (bare and _vNNNN names): one call per id
                sync_keys.add(key)
        per_stream: Counter[str] = Counter()
        delays: list[int] = []
        queue_events: dict[str, list[tuple[int, int]]] = {}
        matched = total = 0
        for kind in ("KERNEL", "MEMCPY", "MEMSET"):
            table = f"CUPTI_ACTIVITY_KIND_{kind}"
            if table not in tables:
                continue
            for corr, start, stream, gpid in con.execute(
                f"SELECT correlationId, start, streamId, globalPid FROM {table}"
            ):
                total += 1
                per_stream[str(stream)] += 1
                launch = launches.get((gpid >> 24, corr))
                if launch is None:
                    continue
                matched += 1
                delays.append(max(start - launch[1], 0))
                ev = queue_events.setdefault(str(stream), [])
                ev.append((launch[0], +1))
                ev.append((max(start, launch[0]), -1))
    finally:
        con.close()
    queue_max = {}
    for stream, ev in queue_events.items():
        depth = best = 0
        for _t, d in sorted(ev):
            depth += d
            best = max(best, depth)
        queue_max[stream] = best
    return {
        "per_stream": dict(per_stream),
        "total": total,
        "matched": matched,
        "unmatched": total - matched,
        "syncs": len(sync_keys),
        "queue_max": queue_max,
        "queue_delay_p50": _nearest_rank(delays, 50) if delays else 0,
    }


# --------------------------------------------------------------------------------------------
# Per-step, queue and launch-delay figures, and every sync call: the same literal reading,
# extended. Times are made relative to the earliest event a loader keeps, as the model's are.

_KEPT_CATS = {
    *_DEVICE_CATS,
    *_RUNTIME_CATS,
    "cpu_op",
    "operator",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_sync",
}
_HOST_CATS = {"cpu_op", "operator", "user_annotation", "python_function", *_RUNTIME_CATS}
_FLOW_CATS = {"ac2g", "async", "async_cpu_to_gpu"}
_STEP_WORD = re.compile(r"(?i)(^|[^a-z])step([^a-z]|$)|profilerstep")
_NOT_USER_DIRS = {"torch", "site-packages", "dist-packages", "asynctrace"}


def _union(intervals: list[tuple[int, int]]) -> int:
    """Length covered by [start, end) intervals: merge them in start order."""
    total = 0
    cur: list[int] | None = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def _queue_entries(
    matched: list[tuple[Any, ...]],
) -> list[tuple[str, int, int, int, int]]:
    """(stream, launch start, launch end, device start, device end) per queue entry, from
    (stream, launch start, launch end, start, end, launch key, is graph) per matched activity:
    every activity is an entry, except a graph launch's kernels, which make one (the stream and
    start of the first kernel to start, the end of the last to end)."""
    out: list[tuple[str, int, int, int, int]] = []
    graphs: dict[Any, list[tuple[str, int, int, int, int]]] = {}
    for st, ls, le, a, b, key, graph in matched:
        if graph:
            graphs.setdefault(key, []).append((st, ls, le, a, b))
        else:
            out.append((st, ls, le, a, b))
    for kernels in graphs.values():
        first = min(kernels, key=lambda k: k[3])
        out.append((first[0], first[1], first[2], first[3], max(k[4] for k in kernels)))
    return out


def _at_cap(depth: list[tuple[int, int]], cap: int, launch_calls: list[tuple[int, int]]) -> int:
    """Time with depth >= cap while the host was inside a launch call."""
    total = 0
    for (t0, v), (t1, _) in pairwise(depth):
        if v >= cap:
            total += _union(
                [(max(a, t0), min(b, t1)) for a, b in launch_calls if a < t1 and b > t0]
            )
    return total


def _shares(
    windows: list[tuple[int, int]],
    region: tuple[int, int],
    timeline: list[tuple[int, int]],
    launched: list[tuple[int, int, int]],
    *,
    one_clock: bool = True,
) -> list[tuple[int, int, int, int]]:
    """Each step's share of the device timeline, one step at a time: (share start, share end,
    busy, idle). ``timeline``: every activity of the device (start, end); ``launched``: (launch
    start, start, end) of the matched ones. Step k's share runs from its first activity's start
    (the first step: the region's start) to the next step's (the last: the region's end); a
    step without activity owns nothing."""
    r0, r1 = region
    clipped = [(max(a, r0), min(b, r1)) for a, b in timeline if min(b, r1) > max(a, r0)]
    firsts: list[int | None] = []
    for w0, w1 in windows:
        mine = [max(a, r0) for ls, a, b in launched if w0 <= ls < w1 and min(b, r1) > max(a, r0)]
        firsts.append(min(mine) if mine else None)
    if one_clock:
        # an idle gap ending at a step's first activity is split at the step's host start
        # (schema 4): before it the previous step's, after it this step's
        for k in range(1, len(windows)):
            f = firsts[k]
            if f is None or f <= r0 or any(a < f <= b for a, b in clipped):
                continue
            prev_end = max([b for _, b in clipped if b < f] + [r0])
            firsts[k] = min(max(windows[k][0], prev_end), f)
    bounds = [r1] * (len(windows) + 1)
    for k in range(len(windows) - 1, 0, -1):
        f = firsts[k]
        bounds[k] = min(f, bounds[k + 1]) if f is not None else bounds[k + 1]
    bounds[0] = r0
    bounds = [min(max(b, r0), r1) for b in bounds]
    out = []
    for k in range(len(windows)):
        lo, hi = bounds[k], bounds[k + 1]
        busy = _union([(max(a, lo), min(b, hi)) for a, b in clipped if a < hi and b > lo])
        out.append((lo, hi, busy, hi - lo - busy))
    return out


_DATA_WAIT = re.compile(r"enumerate\(DataLoader\).*__next__")


def _causes(
    region: tuple[int, int],
    device_acts: list[tuple[int, int, tuple[int, int] | None]],
    syncs: list[tuple[int, int]],
    data: list[tuple[int, int]],
    *,
    clocks_bad: bool,
) -> dict[str, int]:
    """Busy time and idle by cause over the region, one gap at a time, as docs/analysis.md
    defines them. ``device_acts``: (start, end, (launch start, launch end) or None) of every
    activity of the device, in trace order."""
    r0, r1 = region
    clipped = sorted(
        (
            (max(a, r0), min(b, r1), launch)
            for a, b, launch in device_acts
            if min(b, r1) > max(a, r0)
        ),
        key=lambda x: x[0],
    )
    groups: list[list[Any]] = []  # [start, end, the activity that starts it]
    for a, b, launch in clipped:
        if groups and a <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], b)
        else:
            groups.append([a, b, launch])
    gaps: list[tuple[int, int, Any, bool]] = []  # (g0, g1, launch of the ender, final)
    t = r0
    for a, b, launch in groups:
        if a > t:
            gaps.append((t, a, launch, False))
        t = b
    if r1 > t:
        gaps.append((t, r1, None, True))
    missing = [
        (a, b)
        for a, b in syncs
        if b - a >= 1_000_000
        and _union([(max(x, a), min(y, b)) for x, y, _ in groups if x < b and y > a])
        < 0.01 * (b - a)
    ]
    out = {"busy": sum(b - a for a, b, _ in groups), "host_short": 0, "host_long": 0}
    for c in ("host", "sync", "input", "dependency", "unattributed"):
        out[c] = 0
    for g0, g1, launch, final in gaps:
        n = g1 - g0
        inside_missing = _union([(max(a, g0), min(b, g1)) for a, b in missing if a < g1 and b > g0])
        if clocks_bad or 2 * inside_missing > n or (launch is None and not final):
            cause = "unattributed"
        elif launch is not None and launch[1] < g0:
            cause = "dependency"
        elif any(a <= g0 < b for a, b in syncs):
            cause = "sync"
        else:
            # split by overlap (schema 4): the host's data waits before the launch are input,
            # the rest of the gap host
            upto = g1 if final else max(launch[0], g0)
            waited = _union([(max(a, g0), min(b, upto)) for a, b in data if a < upto and b > g0])
            out["input"] += waited
            out["host"] += n - waited
            out["host_short" if n < 50_000 else "host_long"] += n - waited
            continue
        out[cause] += n
    return out


def _sweep(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[(t, open intervals once every change at t is applied)]; an end before a start at t."""
    changes = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    out: list[tuple[int, int]] = []
    depth = 0
    for t, d in changes:
        depth += d
        if out and out[-1][0] == t:
            out[-1] = (t, depth)
        else:
            out.append((t, depth))
    return out


def _user_site(name: str) -> str | None:
    m = re.match(r"^(.*?)\((\d+)\)", name)
    if m is None:
        return None
    path = m.group(1).replace("\\", "/")
    if path.startswith(("<built-in", "<frozen")):
        return None
    if any(part in _NOT_USER_DIRS for part in path.split("/")[:-1]):
        return None
    return f"{m.group(1)}:{m.group(2)}"


def _all_percentiles(values: list[int]) -> dict[str, int]:
    if not values:
        return {"p50": 0, "p90": 0, "p99": 0, "max": 0}
    return {
        "p50": _nearest_rank(values, 50),
        "p90": _nearest_rank(values, 90),
        "p99": _nearest_rank(values, 99),
        "max": max(values),
    }


#: context-creation calls, and a program's own warm-up ranges (docs/how-it-works.md, Warm-up)
_CONTEXT = {
    "cudaDeviceGetStreamPriorityRange",
    "cudaFree",
    "cudaMalloc",
    "cudaHostAlloc",
    "cudaMallocHost",
    "cudaStreamCreate",
    "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority",
    "cudaGetDeviceCount",
    "cudaSetDevice",
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cuInit",
    "hipMalloc",
    "hipFree",
    "hipStreamCreate",
}
_WARMUP_WORD = re.compile(r"(?<![a-z])warm[-_ ]?up(?![a-z])", re.IGNORECASE)


def _kineto_warmup_end(events: list[dict[str, Any]], start: Any, end: Any) -> int | None:
    """Where the warm-up ends, read one event at a time: the end of the latest of the first call
    of each context-creation name lasting 10 ms or more, and of ranges named warm-up (the shared
    traces hold no compilation or autotuning ranges)."""
    seen: set[str] = set()
    ends: list[int] = []
    for e in sorted(events, key=start):
        name = str(e.get("name", ""))
        cat = str(e.get("cat", "")).lower()
        if cat in _RUNTIME_CATS and name in _CONTEXT:
            if name not in seen and end(e) - start(e) >= 10_000_000:
                ends.append(end(e))
            seen.add(name)
        warm = cat in ("user_annotation", "cpu_op") and _WARMUP_WORD.search(name)
        if warm and not name.startswith("ProfilerStep#"):
            ends.append(end(e))
    return max(ends) if ends else None


def reference_step_figures(path: Path, *, cap: int = 1022) -> dict[str, Any]:
    """Per-step figures, per-stream queue figures, both launch-delay percentiles and every
    host sync call (duration, op, site, step), as docs/analysis.md defines them."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        data = json.load(f, parse_float=Decimal)
    raw = data if isinstance(data, list) else data["traceEvents"]
    raw = [e for e in raw if isinstance(e, dict) and "ts" in e]
    origin = min(
        _ns(e["ts"])
        for e in raw
        if (e.get("ph") == "X" and str(e.get("cat", "")).lower() in _KEPT_CATS)
        or (e.get("ph") in ("s", "f") and e.get("cat") in _FLOW_CATS)
    )
    events = [e for e in raw if e.get("ph") == "X"]

    def start(e: dict[str, Any]) -> int:
        return _ns(e["ts"]) - origin

    def end(e: dict[str, Any]) -> int:
        return start(e) + _ns(e.get("dur", 0))

    def args(e: dict[str, Any]) -> dict[str, Any]:
        a = e.get("args")
        return a if isinstance(a, dict) else {}

    acts = [e for e in events if str(e.get("cat", "")).lower() in _DEVICE_CATS]
    runtime = [e for e in events if str(e.get("cat", "")).lower() in _RUNTIME_CATS]
    launching = [
        e for e in runtime if _is_launch(e["name"]) and args(e).get("correlation") is not None
    ]
    one_process = len({e["pid"] for e in launching}) == 1

    def key(e: dict[str, Any]) -> Any:
        corr = int(args(e)["correlation"])
        return corr if one_process else (e["pid"], corr)

    launch: dict[Any, tuple[int, int]] = {}
    graph_keys: set[Any] = set()
    for e in sorted(launching, key=start):
        if key(e) not in launch and "GraphLaunch" in e["name"]:
            graph_keys.add(key(e))
        launch.setdefault(key(e), (start(e), end(e)))
    launch_calls = [(start(e), end(e)) for e in runtime if _is_launch(e["name"])]
    devices = {args(e).get("device") for e in acts}

    def stream(e: dict[str, Any]) -> str:
        a = args(e)
        return f"{a.get('device')}:{a.get('stream')}" if len(devices) > 1 else str(a.get("stream"))

    # (stream, launch start, launch end, device start, device end) per matched activity
    matched = [
        (stream(e), *launch[key(e)], start(e), end(e))
        for e in acts
        if args(e).get("correlation") is not None and key(e) in launch
    ]
    matched_dev = [
        (args(e).get("device"), launch[key(e)][0], start(e), end(e))
        for e in acts
        if args(e).get("correlation") is not None and key(e) in launch
    ]
    entries = _queue_entries(
        [
            (stream(e), *launch[key(e)], start(e), end(e), key(e), key(e) in graph_keys)
            for e in acts
            if args(e).get("correlation") is not None and key(e) in launch
        ]
    )
    queue: dict[str, dict[str, Any]] = {}
    depth_of: dict[str, list[tuple[int, int]]] = {}
    for s in sorted({m[0] for m in matched}):
        mine = [m for m in entries if m[0] == s]
        depth = _sweep([(ls, max(a, ls)) for _, ls, _, a, _ in mine])
        flight = _sweep([(ls, max(b, a, ls)) for _, ls, _, a, b in mine])
        depth_of[s] = depth
        area = 0
        for (t0, v), (t1, _) in pairwise(depth):
            area += v * (t1 - t0)
        span = depth[-1][0] - depth[0][0]
        queue[s] = {
            "max": max(v for _, v in depth),
            "mean": area / span if span else 0.0,
            "time_at_cap_ns": _at_cap(depth, cap, launch_calls),
            "in_flight_max": max(v for _, v in flight),
            "activities": sum(1 for m in matched if m[0] == s),
        }

    prof = sorted(
        (
            e
            for e in events
            if str(e.get("name", "")).startswith("ProfilerStep#")
            and e.get("cat") != "gpu_user_annotation"
        ),
        key=start,
    )
    annotations = sorted(
        (
            e
            for e in events
            if e.get("cat") == "user_annotation"
            and _STEP_WORD.search(str(e.get("name", "")))
            and not str(e.get("name", "")).startswith("Optimizer.step#")
        ),
        key=start,
    )
    optimizer_steps = sorted(
        (
            e
            for e in events
            if e.get("cat") in ("user_annotation", "cpu_op", "operator")
            and str(e.get("name", "")).startswith("Optimizer.step#")
        ),
        key=start,
    )
    windows: list[tuple[int, int, int]] = []
    host = [e for e in events if str(e.get("cat", "")).lower() in _HOST_CATS]
    whole_trace = False
    if prof:
        windows = [(int(e["name"].split("#")[1]), start(e), end(e)) for e in prof]
    elif annotations:
        reach: int | None = None
        for e in annotations:  # outermost only
            if reach is None or start(e) >= reach:
                numbers = re.findall(r"\d+", e["name"])
                windows.append((int(numbers[-1]) if numbers else len(windows), start(e), end(e)))
                reach = end(e)
    elif optimizer_steps:
        # each outermost optimizer step ends a step that began where the previous one ended;
        # optimizers stepped in a repeating order end it with the last of each repetition
        outer: list[dict[str, Any]] = []
        for e in optimizer_steps:
            if not outer or start(e) >= end(outer[-1]):
                outer.append(e)
        names = [e["name"] for e in outer]
        period = next(
            p
            for p in range(1, len(names) + 1)
            if all(names[i] == names[i + p] for i in range(len(names) - p))
        )
        begin = min(map(start, host))
        for e in outer[period - 1 :: period]:
            if _ns(e.get("dur", 0)) == 0 and e is outer[-1]:
                break  # cut short by the end of the profile: not a finished step
            windows.append((len(windows), begin, end(e)))
            begin = end(e)
    else:
        windows = [(0, min(map(start, host)), max(map(end, host)))]
        whole_trace = True

    # the device timeline (the device with most activities) and each step's share of it
    counts = Counter(args(e).get("device") for e in acts)
    device = max(counts, key=lambda d: (counts[d], str(d))) if counts else None
    timeline = [(start(e), end(e)) for e in acts if args(e).get("device") == device]
    launched = [(ls, a, b) for d, ls, a, b in matched_dev if d == device]
    if whole_trace:
        region = (
            min([start(e) for e in host] + [a for a, _ in timeline]),
            max([end(e) for e in host] + [b for _, b in timeline]),
        )
    else:
        r0, h1 = windows[0][1], max(w1 for _, _, w1 in windows)
        region = (r0, max([h1] + [b for ls, _, b in launched if r0 <= ls < h1]))
    clocks_bad = False
    if matched and host:
        h0, h1 = min(map(start, host)), max(map(end, host))
        l2s = sorted(a - ls for _, ls, _, a, _ in matched)
        p50 = l2s[(len(l2s) - 1) // 2]
        first = min(a for _, _, _, a, _ in matched)
        last = max(b for _, _, _, _, b in matched)
        clocks_bad = first > h1 or last < h0 or (h1 > h0 and p50 > h1 - h0)
    warmup_end = _kineto_warmup_end(events, start, end)
    if clocks_bad and timeline:
        # the device's figures on its own clock (schema 4): its span, first to last activity
        region = (min(a for a, _ in timeline), max(b for _, b in timeline))
    elif whole_trace and warmup_end is not None and region[0] < warmup_end < region[1]:
        # the steady state follows the warm-up (schema 4)
        region = (warmup_end, region[1])
    shares = _shares(
        [(w0, w1) for _, w0, w1 in windows], region, timeline, launched, one_clock=not clocks_bad
    )
    device_acts = [
        (
            start(e),
            end(e),
            launch[key(e)] if args(e).get("correlation") is not None and key(e) in launch else None,
        )
        for e in acts
        if args(e).get("device") == device
    ]
    sync_iv = [(start(e), end(e)) for e in _kineto_syncs(runtime, acts)]
    data_iv = [
        (start(e), end(e))
        for e in events
        if str(e.get("cat", "")).lower() in ("cpu_op", "operator", "user_annotation")
        and _DATA_WAIT.search(str(e.get("name", "")))
    ]
    bound = _causes(region, device_acts, sync_iv, data_iv, clocks_bad=clocks_bad)
    bound["region"] = region[1] - region[0]
    bound["clocks_bad"] = clocks_bad

    syncs = _kineto_syncs(runtime, acts)
    steps: list[dict[str, Any]] = []
    for (n, w0, w1), (_lo, _hi, busy, idle) in zip(windows, shares, strict=True):
        mine = [m for m in matched if w0 <= m[1] < w1]
        d0 = min((m[3] for m in mine), default=None)
        d1 = max((m[4] for m in mine), default=None)
        window = d1 - d0 if d0 is not None and d1 is not None else 0
        inside = [(start(e), end(e)) for e in syncs if start(e) < w1 and end(e) > w0]
        qmax = 0
        for depth in depth_of.values():
            at_start = [v for t, v in depth if t <= w0]
            qmax = max(
                qmax,
                at_start[-1] if at_start else 0,
                *(v for t, v in depth if w0 < t < w1),
            )
        steps.append(
            {
                "step": n,
                "start_ns": w0,
                "end_ns": w1,
                "cpu_ns": w1 - w0,
                "activities": len(mine),
                "device_start_ns": d0,
                "device_end_ns": d1,
                "device_ns": window,
                "gpu_busy_ns": busy,
                "gpu_idle_ns": idle,
                "sync_count": sum(1 for e in syncs if w0 <= start(e) < w1),
                "sync_wait_ns": _union([(max(a, w0), min(b, w1)) for a, b in inside]),
                "run_ahead_ns": None if d1 is None or whole_trace else d1 - w1,
                "queue_max": qmax,
            }
        )
    for i, s in enumerate(steps):
        s["in_flight_steps"] = sum(
            1
            for o in steps[:i]
            if o["device_end_ns"] is not None and o["device_end_ns"] > s["start_ns"]
        )

    frames = [
        (start(e), end(e), e["pid"], e["tid"], site)
        for e in events
        if e.get("cat") == "python_function" and (site := _user_site(str(e["name"])))
    ]
    calls: list[tuple[int, int, str, str, int | None]] = []
    for e in syncs:
        a, b = start(e), end(e)
        best: tuple[tuple[int, int], str] | None = None
        for f0, f1, pid, tid, site in frames:
            # innermost: latest start, then earliest end
            enclosing = pid == e["pid"] and tid == e["tid"] and f0 <= a and f1 >= b
            if enclosing and (best is None or (f0, -f1) > best[0]):
                best = ((f0, -f1), site)
        in_step = [n for n, w0, w1 in windows if w0 <= a < w1]
        calls.append(
            (a, b - a, e["name"], best[1] if best else "", in_step[-1] if in_step else None)
        )
    calls.sort()
    return {
        "launch_to_start_ns": _all_percentiles([a - ls for _, ls, _, a, _ in matched]),
        "queue_delay_ns": _all_percentiles([max(a - le, 0) for _, _, le, a, _ in matched]),
        "queue": queue,
        "steps": steps,
        "sync_calls": [(d, op, site, step) for _, d, op, site, step in calls],
        # device-side records of the same waits: listed apart, never added to the calls
        "device_sync_records": sum(1 for e in events if e.get("cat") == "cuda_sync"),
        "bound": bound,
    }


def reference_nsys_step_figures(path: Path, *, cap: int = 1022) -> dict[str, Any]:
    """The whole-trace step, per-stream queue figures, both launch-delay percentiles and the
    total sync wait of an Nsight Systems export without step ranges, with plain SQL and loops.

    Runtime rows are read one per (process, correlation id, name without ``_vNNNN``), the
    widest: 2022 exports write each call twice, one row nested in the other."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        paged = _nsys_pageable(con, tables)
        calls: dict[Any, tuple[int, int, str]] = {}
        for i, (s, e, name_id, gtid, corr) in enumerate(
            con.execute(
                "SELECT start, end, nameId, globalTid, correlationId"
                " FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            )
        ):
            name = re.sub(r"_v\d+$", "", strings[name_id])
            k: Any = (gtid >> 24, corr, name) if corr and corr > 0 else i
            if k not in calls or e - s > calls[k][1] - calls[k][0]:
                calls[k] = (s, e, re.sub(r"(_ptsz|_ptds|_spt)$", "", name))
        acts: list[tuple[int, int, int, int, int, int]] = []
        for kind in ("KERNEL", "MEMCPY", "MEMSET"):
            if f"CUPTI_ACTIVITY_KIND_{kind}" in tables:
                acts += con.execute(
                    "SELECT start, end, streamId, globalPid, correlationId, deviceId"
                    f" FROM CUPTI_ACTIVITY_KIND_{kind}"
                ).fetchall()
        device_syncs = (
            [r[0] for r in con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")]
            if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables
            else []
        )
        nvtx = (
            con.execute(
                "SELECT start, end FROM NVTX_EVENTS"
                " WHERE eventType IN (59, 60, 70, 71) AND end IS NOT NULL"
            ).fetchall()
            if "NVTX_EVENTS" in tables
            else []
        )
    finally:
        con.close()
    host = [(s, e) for s, e, _ in calls.values()] + nvtx
    origin = min([s for s, _ in host] + [a[0] for a in acts] + device_syncs)
    launch: dict[tuple[int, int], tuple[int, int]] = {}
    for k, (s, e, name) in sorted(calls.items(), key=lambda kv: kv[1][0]):
        if isinstance(k, tuple) and _is_launch(name):
            launch.setdefault((k[0], k[1]), (s - origin, e - origin))
    devices = {a[5] for a in acts}
    matched = []
    for s, e, stream, gpid, corr, dev in acts:
        hit = launch.get((gpid >> 24, corr))
        if hit is not None:
            key = f"{dev}:{stream}" if len(devices) > 1 else str(stream)
            matched.append((key, *hit, s - origin, e - origin))
    launch_calls = [(s - origin, e - origin) for s, e, name in calls.values() if _is_launch(name)]
    queue: dict[str, dict[str, Any]] = {}
    depth_max: list[int] = []
    for st in sorted({m[0] for m in matched}):
        mine = [m for m in matched if m[0] == st]
        depth = _sweep([(ls, max(a, ls)) for _, ls, _, a, _ in mine])
        flight = _sweep([(ls, max(b, a, ls)) for _, ls, _, a, b in mine])
        area = 0
        for (t0, v), (t1, _) in pairwise(depth):
            area += v * (t1 - t0)
        span = depth[-1][0] - depth[0][0]
        queue[st] = {
            "max": max(v for _, v in depth),
            "mean": area / span if span else 0.0,
            "time_at_cap_ns": _at_cap(depth, cap, launch_calls),
            "in_flight_max": max(v for _, v in flight),
            "activities": len(mine),
        }
        depth_max.append(max(v for _, v in depth))
    w0 = min(s for s, _ in host) - origin
    w1 = max(e for _, e in host) - origin
    syncs = [
        (s - origin, e - origin)
        for k, (s, e, name) in calls.items()
        if _is_sync(name)
        or (isinstance(k, tuple) and "Memcpy" in name and _is_launch(name) and k[:2] in paged)
    ]
    mine = [m for m in matched if w0 <= m[1] < w1]
    d0, d1 = min(m[3] for m in mine), max(m[4] for m in mine)
    # no steps: the region is the whole trace, the device timeline every activity on the
    # device with most of them
    counts = Counter(a[5] for a in acts)
    dev = max(counts, key=lambda d: (counts[d], d))
    timeline = [(a[0] - origin, a[1] - origin) for a in acts if a[5] == dev]
    region = (min([w0] + [a for a, _ in timeline]), max([w1] + [b for _, b in timeline]))
    # a whole program: its warm-up is the lead-in before the device's first activity, and any
    # long first context call after it (schema 4); the steady state follows
    first_call: dict[str, tuple[int, int]] = {}
    for cs, ce, name in sorted(calls.values()):
        first_call.setdefault(name, (cs - origin, ce - origin))
    warm = [min(a for a, _ in timeline)] + [
        ce for name, (cs, ce) in first_call.items() if name in _CONTEXT and ce - cs >= 10_000_000
    ]
    if region[0] < max(warm) < region[1]:
        region = (max(warm), region[1])
    ((_lo, _hi, busy, idle),) = _shares([(w0, w1)], region, timeline, [])
    device_acts = [
        (a[0] - origin, a[1] - origin, launch.get((a[3] >> 24, a[4]))) for a in acts if a[5] == dev
    ]
    bound = _causes(region, device_acts, syncs, [], clocks_bad=False)
    bound["region"] = region[1] - region[0]
    step = {
        "step": 0,
        "start_ns": w0,
        "end_ns": w1,
        "cpu_ns": w1 - w0,
        "activities": len(mine),
        "device_start_ns": d0,
        "device_end_ns": d1,
        "device_ns": d1 - d0,
        "gpu_busy_ns": busy,
        "gpu_idle_ns": idle,
        "sync_count": sum(1 for s, _ in syncs if w0 <= s < w1),
        "sync_wait_ns": _union([(max(s, w0), min(e, w1)) for s, e in syncs if s < w1 and e > w0]),
        "run_ahead_ns": None,  # a whole trace has no step end to run ahead of
        "queue_max": max(depth_max),  # one step: the whole queue lies inside it
        "in_flight_steps": 0,  # the only step: none before it
    }
    return {
        "launch_to_start_ns": _all_percentiles([a - ls for _, ls, _, a, _ in matched]),
        "queue_delay_ns": _all_percentiles([max(a - le, 0) for _, _, le, a, _ in matched]),
        "queue": queue,
        "steps": [step],
        "sync_total_ns": sum(e - s for s, e in syncs),
        "bound": bound,
    }
