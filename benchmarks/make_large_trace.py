"""Make a large synthetic Kineto trace by replicating a real one.

Each copy is shifted in time (by the source's span plus a gap) and in every id that links events
(correlation, External id, flow id, Python id), so the copies stay separate steps of one long run
rather than duplicates. Usage::

    python benchmarks/make_large_trace.py SRC.json.gz OUT.json --target-mb 400
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id", "Ev Idx")


def _open(path: Path) -> Any:
    return gzip.open(path, "rt") if path.suffix == ".gz" else path.open()


def replicate(src: Path, dst: Path, target_bytes: int) -> tuple[int, int]:
    with _open(src) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0) or 0) for e in timed)
    span_us = math.ceil(t1 - t0) + 1000
    max_id = 0
    for e in events:
        args = e.get("args") or {}
        for k in ID_ARGS:
            v = args.get(k)
            if isinstance(v, int) and v < 2**62:
                max_id = max(max_id, v)
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
    id_step = max_id + 1
    one = sum(len(json.dumps(e)) + 2 for e in events)
    copies = max(1, math.ceil(target_bytes / one))
    meta = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    with dst.open("w") as out:
        out.write("{\n")
        for k, v in meta.items():
            out.write(f"  {json.dumps(k)}: {json.dumps(v)},\n")
        out.write('  "traceEvents": [\n')
        first = True
        for c in range(copies):
            for e in events:
                if c and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + c * span_us
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + c * id_step
                args = e2.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for k in ID_ARGS:
                        v = args.get(k)
                        if isinstance(v, int) and 0 <= v < 2**62:
                            args[k] = v + c * id_step
                    e2["args"] = args
                name = e2.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    n = int(name.split("#", 1)[1])
                    e2["name"] = f"ProfilerStep#{n + c * 1000}"
                out.write(("  " if first else ",\n  ") + json.dumps(e2))
                first = False
        out.write("\n  ]\n}\n")
    return copies, dst.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--target-mb", type=float, default=400.0)
    a = ap.parse_args(argv)
    copies, size = replicate(a.src, a.dst, int(a.target_mb * 1e6))
    print(f"{a.dst}: {copies} copies of {a.src.name}, {size / 1e6:.0f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
