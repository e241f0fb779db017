"""An independent reading of a Kineto trace: stdlib json and plain loops, no asynctrace code.

Used to pin the figures our loader + analyses produce on real traces. It follows the
definitions in docs/analysis.md literally, one event at a time, with exact decimal timestamps.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

__all__ = ["reference_figures"]

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
    for e in runtime:
        corr = e.get("args", {}).get("correlation")
        if _is_launch(e["name"]) and corr is not None and int(corr) not in launches:
            launches[int(corr)] = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)))

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

    syncs = [e for e in runtime if _is_sync(e["name"])]
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
        for corr, start, end, name_id, gtid in con.execute(
            "SELECT correlationId, start, end, nameId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            " ORDER BY start"
        ):
            name = re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", strings[name_id])
            key = (gtid >> 24, corr)
            if _is_launch(name) and key not in launches:
                launches[key] = (start, end)
            if _is_sync(name):
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
