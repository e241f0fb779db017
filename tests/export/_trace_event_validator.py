"""A strict checker of the Trace Event Format (the JSON that chrome://tracing, Perfetto and
TensorBoard's trace viewer read), run on every trace asynctrace writes.

It follows the format document ("Trace Event Format", Google, the catapult spec) closely:

* the file is a JSON array of events or an object with a ``traceEvents`` array
  (``displayTimeUnit`` "ms"/"ns" if present);
* every event is an object with a known ``ph``; ``name`` a string; ``pid``/``tid`` integers
  (strings are legal JSON-wise but Perfetto and TensorBoard's plugin want integers, so
  ``strict_ids`` makes them an error); ``ts`` a finite number except on metadata; ``args``
  an object;
* ``X`` has a finite ``dur`` ≥ 0; ``B``/``E`` nest per (pid, tid) like a stack, matched by name
  where ``E`` names one, and none is left open at the end;
* ``C`` has a non-empty ``args`` of finite numbers;
* ``i``/``I`` scope ``s`` is ``g``, ``p`` or ``t``;
* ``M`` is one of the metadata names with the argument it needs;
* flow ``s``/``t``/``f``: ``id`` (or ``bind_id``), ``cat``; per (cat, id) one ``s`` first, then
  ``t``s, then one ``f``, in time order; ``bp`` is only ``"e"``; a flow start (and a ``t``, and an
  ``f`` with ``bp: "e"``) must lie inside a slice (``X`` or ``B``/``E``) on its own thread — that is
  its binding point —, an ``f`` without ``bp`` binds to the next slice starting at or after it on
  its thread, which must exist;
* ``b``/``e``/``n`` async events need ``id`` and ``cat``; ``b``/``e`` pair up.

:func:`tb_profiler_problems` checks what the TensorBoard PyTorch-profiler plugin additionally
needs to parse a trace: integer ``tid`` on op events, an integer after ``ProfilerStep#``, and
``cat`` and ``dur`` on every complete event.
"""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["load_events", "tb_profiler_problems", "validate", "validate_file"]

PHASES = set("BEXiIC" + "bne" + "stf" + "PNOD" + "M" + "Vv" + "R" + "c" + "()")
METADATA = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
    "process_uptime_seconds": None,
}
_SLICE_EPS_US = 1e-6  # one femtosecond: ts values are µs floats with ns precision


def load_events(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Events and the top-level object (None for a bare list) of a .json / .json.gz trace."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_constant=_reject_constant)
    if isinstance(doc, list):
        return doc, None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("top level is neither an array nor an object with a traceEvents array")
    return doc["traceEvents"], doc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def validate(
    events: list[Any], *, doc: dict[str, Any] | None = None, strict_ids: bool = True
) -> list[str]:
    """Every violation found, as ``"event <i>: <problem>"`` lines (empty when valid)."""
    errors: list[str] = []
    if doc is not None and "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        errors.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is not 'ms' or 'ns'")
    slices: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    stacks: dict[tuple[Any, Any], list[tuple[str, float, int]]] = defaultdict(list)
    flows: dict[tuple[Any, Any], list[tuple[str, float, int, dict[str, Any]]]] = defaultdict(list)
    asyncs: dict[tuple[Any, Any, Any], int] = defaultdict(int)

    for i, e in enumerate(events):

        def err(msg: str, i: int = i) -> None:
            errors.append(f"event {i}: {msg}")

        if not isinstance(e, dict):
            err("not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            err(f"unknown ph {ph!r}")
            continue
        if "name" in e and not isinstance(e["name"], str):
            err("name is not a string")
        if ph not in ("M",) and not isinstance(e.get("name", ""), str):
            err("name missing")
        if "args" in e and not isinstance(e["args"], dict):
            err("args is not an object")
        if "cat" in e and not isinstance(e["cat"], str):
            err("cat is not a string")
        for key in ("pid", "tid"):
            if key not in e:
                if (
                    key == "pid"
                    or ph not in ("M", "C")
                    or (ph == "M" and "thread" in e.get("name", ""))
                ):
                    err(f"{key} missing")
                continue
            v = e[key]
            if strict_ids and not _is_int(v):
                err(f"{key} {v!r} is not an integer")
            elif not (_is_int(v) or isinstance(v, str)):
                err(f"{key} {v!r} is neither an integer nor a string")
        if ph != "M" and not _is_num(e.get("ts")):
            err(f"ts {e.get('ts')!r} is not a finite number")
            continue
        ts = float(e.get("ts", 0))
        thread = (e.get("pid"), e.get("tid"))
        if ph == "X":
            if not _is_num(e.get("dur")) or e["dur"] < 0:
                err(f"complete event without a finite dur >= 0 ({e.get('dur')!r})")
            else:
                slices[thread].append((ts, ts + float(e["dur"])))
            if "tdur" in e and not _is_num(e["tdur"]):
                err("tdur is not a number")
        elif ph == "B":
            if "name" not in e:
                err("B without a name")
            stacks[thread].append((str(e.get("name", "")), ts, i))
        elif ph == "E":
            if not stacks[thread]:
                err("E without an open B on its thread")
            else:
                name, start, _ = stacks[thread].pop()
                if "name" in e and e["name"] != name:
                    err(f"E named {e['name']!r} closes B named {name!r}")
                if ts < start:
                    err("E before its B")
                slices[thread].append((start, ts))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args:
                err("counter without args")
            elif not all(_is_num(v) for v in args.values()):
                err(f"counter args must be finite numbers: {args!r}")
            if "name" not in e:
                err("counter without a name")
        elif ph in ("i", "I"):
            if e.get("s", "t") not in ("g", "p", "t"):
                err(f"instant scope {e.get('s')!r} is not g, p or t")
            if "name" not in e:
                err("instant without a name")
        elif ph == "M":
            name = e.get("name")
            if name not in METADATA:
                err(f"unknown metadata {name!r}")
                continue
            need = METADATA[name]
            args = e.get("args")
            if need is not None:
                if not isinstance(args, dict) or need not in args:
                    err(f"{name} needs args.{need}")
                elif need == "sort_index" and not _is_int(args[need]):
                    err(f"{name} sort_index is not an integer")
                elif need == "name" and not isinstance(args[need], str):
                    err(f"{name} name is not a string")
        elif ph in ("s", "t", "f"):
            fid = e.get("id", e.get("bind_id"))
            if fid is None:
                err("flow event without id")
                continue
            if not (_is_int(fid) or isinstance(fid, str)):
                err(f"flow id {fid!r} is neither an integer nor a string")
            if "cat" not in e:
                err("flow event without cat")
            if "bp" in e and e["bp"] != "e":
                err(f"flow bp {e['bp']!r} is not 'e'")
            if ph == "s" and "bp" in e:
                err("bp on a flow start (only f takes it)")
            flows[(e.get("cat"), fid)].append((ph, ts, i, e))
        elif ph in ("b", "e", "n"):
            if "id" not in e and "id2" not in e:
                err("async event without id")
            if "cat" not in e:
                err("async event without cat")
            key = (e.get("cat"), e.get("id", str(e.get("id2"))), e.get("name"))
            if ph == "b":
                asyncs[key] += 1
            elif ph == "e":
                asyncs[key] -= 1
                if asyncs[key] < 0:
                    err("async end without a begin")

    for thread, stack in stacks.items():
        for name, _, i in stack:
            errors.append(f"event {i}: B {name!r} on {thread} never ended")

    # each thread's slices sorted by start, with the latest end among each prefix: "a slice
    # holds ts" is then one bisection, not a scan of the thread per flow event (which made a
    # real trace of 87 k events take minutes)
    starts: dict[tuple[Any, Any], list[float]] = {}
    reach: dict[tuple[Any, Any], list[float]] = {}
    for thread, spans in slices.items():
        spans.sort()
        starts[thread] = [a for a, _ in spans]
        reach[thread] = list(itertools.accumulate((b for _, b in spans), max))
    for (cat, fid), seq in flows.items():
        seq.sort(key=lambda x: (x[1], "stf".index(x[0])))
        phs = [p for p, *_ in seq]
        if phs.count("s") != 1 or phs[0] != "s":
            errors.append(f"flow ({cat}, {fid}): needs exactly one s, first (got {phs})")
        if phs.count("f") > 1 or (phs.count("f") == 1 and phs[-1] != "f"):
            errors.append(f"flow ({cat}, {fid}): at most one f, last (got {phs})")
        for ph, ts, i, e in seq:
            thread = (e.get("pid"), e.get("tid"))
            thread_starts, thread_reach = starts.get(thread, []), reach.get(thread, [])
            if ph in ("s", "t") or e.get("bp") == "e":
                # the slices starting at or before ts (+ eps); does one of them end at or after?
                k = bisect.bisect_right(thread_starts, ts + _SLICE_EPS_US)
                if not (k and thread_reach[k - 1] + _SLICE_EPS_US >= ts):
                    errors.append(
                        f"event {i}: flow {ph} ({cat}, {fid}) at ts {ts} is inside no slice on "
                        f"its thread: it has nothing to bind to"
                    )
            elif not (thread_starts and thread_starts[-1] >= ts - _SLICE_EPS_US):
                errors.append(
                    f"event {i}: flow f ({cat}, {fid}) at ts {ts} has no slice starting at or "
                    f"after it on its thread"
                )
    return errors


def validate_file(path: str | Path, *, strict_ids: bool = True) -> list[str]:
    events, doc = load_events(path)
    return validate(events, doc=doc, strict_ids=strict_ids)


_STEP = re.compile(r"^ProfilerStep#(.*)$")


def tb_profiler_problems(events: list[dict[str, Any]]) -> list[str]:
    """What stops the TensorBoard PyTorch-profiler plugin from parsing these events."""
    out: list[str] = []
    for i, e in enumerate(events):
        if e.get("ph") != "X":
            continue
        if "cat" not in e or "dur" not in e:
            out.append(f"event {i}: complete event without cat or dur")
        if e.get("cat") in ("cpu_op", "Operator", "user_annotation") and not _is_int(e.get("tid")):
            out.append(f"event {i}: op event with non-integer tid {e.get('tid')!r}")
        m = _STEP.match(str(e.get("name", "")))
        if m and not m.group(1).isdigit():
            out.append(f"event {i}: {e['name']!r}: no integer after ProfilerStep#")
    return out
