"""Mutations of trace, export and records files, and the one contract every case must meet.

Shared by the CI-sized fuzz tests (``tests/fuzz/test_fuzz_*.py``) and the long run
(``benchmarks/fuzz_long.py``). A mutation is a list of :class:`Op`; each op carries a kind and
three integers that pick what it touches (an event, a key, a value, a byte offset) modulo the
sizes of the seed, so hypothesis can draw and shrink them as plain integers.

The contract (:func:`check_trace_file`, :func:`check_records_file`): reading the file ends in a
report (load + analyze + JSON + text rendering all succeed) or in ``TraceFormatError``, within
a deadline; any other exception is a bug.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import shutil
import signal
import sqlite3
import zlib
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from asynctrace.analysis.report import Report, analyze
from asynctrace.errors import TraceFormatError
from asynctrace.records import read_records
from asynctrace.render.text import render_report
from asynctrace.traces.load import load

__all__ = [
    "CORPUS",
    "DEADLINE_S",
    "KINETO_OPS",
    "NSYS_OPS",
    "RECORDS_OPS",
    "CaseTimeout",
    "Op",
    "check_records_file",
    "check_trace_file",
    "deadline",
    "kineto_corpus_seeds",
    "kineto_shared_seeds",
    "mutate_kineto",
    "mutate_nsys",
    "mutate_records",
    "nsys_corpus_seeds",
    "nsys_shared_seeds",
    "records_corpus_seeds",
    "slice_events",
]

CORPUS = Path(__file__).resolve().parent / "corpus"

#: Wall-clock limit of one case. Seeds are a few KB, so a healthy case takes milliseconds; a
#: case that needs seconds is a hang or a blow-up.
DEADLINE_S = 10.0

#: Cap on inflation in the fuzz runs: small enough that a bomb is cut in milliseconds.
FUZZ_MAX_INFLATED_BYTES = 4 << 20


@dataclass(frozen=True)
class Op:
    kind: str
    a: int = 0
    b: int = 0
    c: int = 0


# Values that break the types a loader expects.
WEIRD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    -(10**30),
    1e300,
    -1e300,
    5e-324,
    "",
    "abc",
    "123",
    " 7 ",
    "-5",
    "1e3",
    "NaN",
    "²",
    "٣",
    "9" * 5000,
    "ProfilerStep#" + "9" * 30,
    "\x00",
    "[bold red]x[/]",
    "[link=file:///etc/passwd]click[/link]",
    ":warning:",
    "\\",
    "é\u202ertl\ud7ff",
    [],
    {},
    [1, 2],
    {"a": 1},
    {"correlation": {"x": []}},
)

# Number tokens written as raw text (json.dumps cannot write most of them).
RAW_NUMBERS: tuple[bytes, ...] = (
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"1E3",
    b"-0",
    b"0.0000001",
    b"1712195495519689.047",
    b"-1712195495519689.047",
    b"99999999999999999999999999999.123",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"9223372036854775807",
    b"1.5e15",
    b"123456789.1234567",
    b"00012",
    b"1.",
    b".5",
    b"+1",
)

_INVALID_UTF8: tuple[bytes, ...] = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")

KINETO_OPS: tuple[str, ...] = (
    "drop_key",
    "wrong_type",
    "args_wrong_type",
    "args_drop",
    "duplicate",
    "swap",
    "reverse",
    "negative_dur",
    "huge",
    "nan",
    "deep",
    "change_cat",
    "change_ph",
    "long_name",
    "envelope",
    "empty_events",
    "many_flows",
    # byte level, applied after serialising
    "raw_number",
    "invalid_utf8",
    "truncate",
    "flip_byte",
    "delete_span",
    "insert_bytes",
    "duplicate_span",
    "bom_and_space",
    "gzip",
    "gzip_truncate",
    "gzip_corrupt",
    "gzip_trailing_garbage",
    "gzip_bomb",
)

_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s")
_ARG_KEYS = ("correlation", "stream", "device", "External id", "external id", "Python id")
_CATS = (
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_runtime",
    "cuda_driver",
    "runtime",
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_sync",
    "ac2g",
    "async",
    "fwdbwd",
    "",
    "??",
)
_PHS = ("X", "s", "f", "t", "B", "E", "i", "M", "C", "", "XX")
_ENVELOPE_KEYS = (
    "traceEvents",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "schemaVersion",
    "traceName",
    "nodes",
    "schema",
)
_BYTE_OPS = frozenset(KINETO_OPS[KINETO_OPS.index("raw_number") :])


def _events(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events: list[Any] = doc["traceEvents"]
        return events
    return []


def _nested(depth: int) -> Any:
    # a marker expanded after serialising: json.dumps itself would recurse that deep
    return f"__deep_{depth}__"


_DEEP_MARKER = re.compile(rb'"__deep_(\d+)__"')


def _expand_deep(text: bytes) -> bytes:
    return _DEEP_MARKER.sub(lambda m: b"[" * int(m.group(1)) + b"]" * int(m.group(1)), text)


def _apply_doc_op(doc: Any, op: Op) -> Any:
    events = _events(doc)
    if op.kind == "envelope":
        if not isinstance(doc, dict):
            return {"traceEvents": doc} if op.c % 2 else WEIRD_VALUES[op.a % len(WEIRD_VALUES)]
        key = _ENVELOPE_KEYS[op.a % len(_ENVELOPE_KEYS)]
        if op.b % 3 == 0:
            doc.pop(key, None)
        else:
            doc[key] = WEIRD_VALUES[op.c % len(WEIRD_VALUES)]
        return doc
    if op.kind == "empty_events":
        events.clear()
        return doc
    if not events:
        return doc
    i = op.a % len(events)
    ev = events[i]
    if not isinstance(ev, dict):
        events[i] = WEIRD_VALUES[op.b % len(WEIRD_VALUES)]
        return doc
    if op.kind == "drop_key":
        ev.pop(_KEYS[op.b % len(_KEYS)], None)
    elif op.kind == "wrong_type":
        ev[_KEYS[op.b % len(_KEYS)]] = WEIRD_VALUES[op.c % len(WEIRD_VALUES)]
    elif op.kind == "args_wrong_type":
        args = ev.get("args")
        if not isinstance(args, dict):
            args = ev["args"] = {}
        args[_ARG_KEYS[op.b % len(_ARG_KEYS)]] = WEIRD_VALUES[op.c % len(WEIRD_VALUES)]
    elif op.kind == "args_drop":
        if op.b % 2:
            ev.pop("args", None)
        elif isinstance(ev.get("args"), dict):
            ev["args"].pop(_ARG_KEYS[op.c % len(_ARG_KEYS)], None)
    elif op.kind == "duplicate":
        # same ids, same correlation: duplicated events and duplicated flow ids
        for _ in range(1 + op.b % 3):
            events.insert(i, json.loads(json.dumps(ev)))
    elif op.kind == "swap":
        j = op.b % len(events)
        events[i], events[j] = events[j], events[i]
    elif op.kind == "reverse":
        events.reverse()
    elif op.kind == "negative_dur":
        dur = ev.get("dur")
        ev["dur"] = -dur if isinstance(dur, int | float) and dur else -(1 + op.b % 10**6)
    elif op.kind == "huge":
        key = ("ts", "dur", "id", "pid", "tid")[op.b % 5]
        ev[key] = (2**63, 2**64, -(2**63) - 1, 10**30, 1e300, 2**62, -(2**62))[op.c % 7]
    elif op.kind == "nan":
        key = ("ts", "dur", "id", "pid")[op.b % 4]
        ev[key] = (math.nan, math.inf, -math.inf)[op.c % 3]
    elif op.kind == "deep":
        depth = (3, 64, 200, 1_000, 5_000, 100_000)[op.c % 6]
        if op.b % 2:
            ev[_KEYS[op.b % len(_KEYS)]] = _nested(depth)
        else:
            args = ev.get("args")
            if not isinstance(args, dict):
                args = ev["args"] = {}
            args[("stream", "unused_key", "correlation")[op.b % 3]] = _nested(depth)
    elif op.kind == "change_cat":
        ev["cat"] = _CATS[op.b % len(_CATS)]
    elif op.kind == "change_ph":
        ev["ph"] = _PHS[op.b % len(_PHS)]
    elif op.kind == "long_name":
        ev["name"] = (
            ("ProfilerStep#" + "9" * (1 + op.c % 40)) if op.b % 2 else "x" * (op.c % 200_000)
        )
    elif op.kind == "many_flows":
        ts = ev.get("ts", 0)
        for k in range(op.b % 50):
            events.append(
                {
                    "ph": "f" if k % 2 else "s",
                    "cat": "ac2g",
                    "id": op.c % 7,
                    "pid": 1,
                    "tid": 1,
                    "ts": ts,
                    "bp": "e",
                }
            )
    return doc


def _apply_byte_op(data: bytes, op: Op) -> bytes:
    n = max(len(data), 1)
    if op.kind == "raw_number":
        # replace the a-th number value after a key with a raw token
        starts = [i + 2 for i in _find_all(data, b'":') if i + 2 < len(data)]
        starts = [s for s in starts if data[s : s + 1] in b"-0123456789 " and data[s : s + 1]]
        if not starts:
            return data
        s = starts[op.a % len(starts)]
        while s < len(data) and data[s] == 0x20:
            s += 1
        e = s
        while e < len(data) and data[e] in b"+-0123456789.eE":
            e += 1
        return data[:s] + RAW_NUMBERS[op.b % len(RAW_NUMBERS)] + data[e:]
    if op.kind == "invalid_utf8":
        quotes = _find_all(data, b'"')
        if not quotes:
            return data + _INVALID_UTF8[op.b % len(_INVALID_UTF8)]
        q = quotes[op.a % len(quotes)] + 1
        return data[:q] + _INVALID_UTF8[op.b % len(_INVALID_UTF8)] + data[q:]
    if op.kind == "truncate":
        return data[: op.a % n]
    if op.kind == "flip_byte":
        i = op.a % n
        return data[:i] + bytes([(data[i] if data else 0) ^ (1 << (op.b % 8))]) + data[i + 1 :]
    if op.kind == "delete_span":
        i = op.a % n
        return data[:i] + data[i + 1 + op.b % 64 :]
    if op.kind == "insert_bytes":
        i = op.a % n
        junk = (b"{", b"}", b"[", b"]", b",", b'"', b"\\", b":", b"\x00", b"\n", b"},{")[op.b % 11]
        return data[:i] + junk * (1 + op.c % 3) + data[i:]
    if op.kind == "duplicate_span":
        i = op.a % n
        j = min(n, i + 1 + op.b % 4096)
        return data[:j] + data[i:j] + data[j:]
    if op.kind == "bom_and_space":
        return b"\xef\xbb\xbf" * (op.a % 2) + b" \n\t" * (op.b % 5) + data + b"\n " * (op.c % 3)
    if op.kind == "gzip":
        return gzip.compress(data, compresslevel=1, mtime=0)
    if op.kind == "gzip_truncate":
        z = gzip.compress(data, compresslevel=1, mtime=0)
        return z[: op.a % len(z)]
    if op.kind == "gzip_corrupt":
        z = bytearray(gzip.compress(data, compresslevel=1, mtime=0))
        i = op.a % len(z)
        z[i] ^= 1 << (op.b % 8)
        return bytes(z)
    if op.kind == "gzip_trailing_garbage":
        z = gzip.compress(data, compresslevel=1, mtime=0)
        tail = (b"\x00" * 8, b"garbage", gzip.compress(b"]", mtime=0), z[:10], b"\x1f\x8b")
        return z + tail[op.b % len(tail)]
    if op.kind == "gzip_bomb":
        # far more text than FUZZ_MAX_INFLATED_BYTES, in a few KB
        filler = (b" ", b"\x00", b'{"ph":"X"},', b"[", b"0")[op.b % 5]
        co = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        head = data[: op.a % n]
        parts = [co.compress(head)]
        block = filler * (1 << 20 // len(filler))
        for _ in range(8 + op.c % 8):
            parts.append(co.compress(block))
        parts.append(co.flush())
        return b"".join(parts)
    raise ValueError(f"unknown byte op {op.kind}")


def _find_all(data: bytes, needle: bytes, limit: int = 4096) -> list[int]:
    out: list[int] = []
    i = data.find(needle)
    while i >= 0 and len(out) < limit:
        out.append(i)
        i = data.find(needle, i + 1)
    return out


def mutate_kineto(doc: Any, ops: Sequence[Op]) -> bytes:
    """File bytes of ``doc`` (a parsed Kineto JSON, copied, not changed) after ``ops``."""
    doc = json.loads(json.dumps(doc))
    for op in ops:
        if op.kind not in _BYTE_OPS:
            doc = _apply_doc_op(doc, op)
    data = _expand_deep(
        json.dumps(doc, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    )
    for op in ops:
        if op.kind in _BYTE_OPS:
            data = _apply_byte_op(data, op)
    return data


# --------------------------------------------------------------------------------------------
# Seeds


def slice_events(doc: Any, *, per_group: int = 12) -> Any:
    """A small trace from a big one: the first ``per_group`` events of each (ph, cat), in
    file order, with the envelope kept."""
    seen: dict[tuple[Any, Any], int] = {}
    kept = []
    for ev in _events(doc):
        key = (ev.get("ph"), ev.get("cat")) if isinstance(ev, dict) else (None, None)
        if seen.get(key, 0) < per_group:
            seen[key] = seen.get(key, 0) + 1
            kept.append(ev)
    if isinstance(doc, list):
        return kept
    out = dict(doc)
    out["traceEvents"] = kept
    return out


def _read_json(path: Path) -> Any:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


#: real traces small enough to mutate whole (a few KB of events after slicing)
SHARED_KINETO_SEEDS: tuple[str, ...] = (
    "hta_2022_small_base.json.gz",
    "hta_a100_event_sync.json.gz",
    "hta_a100_event_sync_multistream.json.gz",
    "hta_cpu_only_rank34.json.gz",
    "hta_large_integer_edge.json.gz",
    "hta_mi250_hip.json.gz",
    "hta_triton_example.json.gz",
    "kineto_synthetic_newest_schema.json",
    "tracelens_h100_bert_small_with_stack.json.gz",
    "tracelens_mi300_vllm_graph_replay.json.gz",
)


def kineto_shared_seeds(kineto_dir: Path) -> list[tuple[str, Any]]:
    """Sliced real traces from ``kineto_dir`` (missing files are left out)."""
    return [
        (name, slice_events(_read_json(kineto_dir / name)))
        for name in SHARED_KINETO_SEEDS
        if (kineto_dir / name).exists()
    ]


def kineto_corpus_seeds() -> list[tuple[str, Any]]:
    """The committed seeds (``corpus/kineto/*.json``): parsed, for mutation."""
    out = []
    for p in sorted((CORPUS / "kineto").glob("seed_*.json")):
        out.append((p.name, _read_json(p)))
    return out


# --------------------------------------------------------------------------------------------
# Nsight Systems exports

NSYS_OPS: tuple[str, ...] = (
    "drop_table",
    "drop_column",
    "null_column",
    "text_column",
    "real_column",
    "blob_column",
    "huge_column",
    "negative_duration",
    "duplicate_rows",
    "delete_rows",
    "null_string",
    "garbage_string",
    "empty_db",
    "truncate_file",
    "flip_file_byte",
    "zero_page",
)

_NSYS_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "TARGET_INFO_SESSION_START_TIME",
)
_HUGE_SQL = ("9223372036854775807", "-9223372036854775808", "1e300", "-1", "0", "4294967295")


def _tables(conn: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return [t for t in _NSYS_TABLES if t in names] or names


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def mutate_nsys(seed: Path, out: Path, ops: Sequence[Op]) -> None:
    """Copy the export ``seed`` to ``out`` and apply ``ops`` (SQL first, then bytes)."""
    shutil.copyfile(seed, out)
    sql_ops = [op for op in ops if op.kind not in ("truncate_file", "flip_file_byte", "zero_page")]
    if sql_ops:
        with closing(sqlite3.connect(out)) as conn:
            for op in sql_ops:
                try:
                    _nsys_sql_op(conn, op)
                except sqlite3.Error:
                    # NOT NULL, a primary key, a view over the table: this file cannot hold
                    # that change, so there is nothing to test
                    conn.rollback()
            conn.commit()
    for op in ops:
        if op.kind in ("truncate_file", "flip_file_byte", "zero_page"):
            data = bytearray(out.read_bytes())
            if not data:
                # an earlier op truncated the file to nothing: nothing left to flip or zero
                continue
            n = len(data)
            if op.kind == "truncate_file":
                del data[op.a % n :]
            elif op.kind == "flip_file_byte":
                # mostly the header and the schema pages, where a flip matters most
                i = (op.a % 8192 if op.c % 2 else op.a) % n
                data[i] ^= 1 << (op.b % 8)
            else:
                page = 4096
                i = (op.a % max(n // page, 1)) * page
                data[i : i + page] = bytes(min(page, n - i))
            out.write_bytes(bytes(data))


def _nsys_sql_op(conn: sqlite3.Connection, op: Op) -> None:
    tables = _tables(conn)
    if not tables:
        return
    table = tables[op.a % len(tables)]
    cols = _columns(conn, table)
    col = cols[op.b % len(cols)] if cols else None
    q = f'"{table}"'
    if op.kind == "drop_table":
        conn.execute(f"DROP TABLE {q}")
    elif op.kind == "drop_column" and col is not None and len(cols) > 1:
        try:
            conn.execute(f'ALTER TABLE {q} DROP COLUMN "{col}"')
        except sqlite3.OperationalError:
            # a primary key or indexed column: rebuild the table without it
            keep = ", ".join(f'"{c}"' for c in cols if c != col)
            conn.execute(f"CREATE TABLE tmp_fuzz AS SELECT {keep} FROM {q}")
            conn.execute(f"DROP TABLE {q}")
            conn.execute(f"ALTER TABLE tmp_fuzz RENAME TO {q}")
    elif col is not None and op.kind in (
        "null_column",
        "text_column",
        "real_column",
        "blob_column",
        "huge_column",
    ):
        value = {
            "null_column": "NULL",
            "text_column": "'abc'",
            "real_column": "1.5",
            "blob_column": "x'00ff'",
            "huge_column": _HUGE_SQL[op.c % len(_HUGE_SQL)],
        }[op.kind]
        where = "" if op.c % 3 == 0 else f" WHERE rowid % {2 + op.c % 5} = 0"
        conn.execute(f'UPDATE {q} SET "{col}" = {value}{where}')
    elif op.kind == "negative_duration" and {"start", "end"} <= set(cols):
        conn.execute(f"UPDATE {q} SET end = start - {1 + op.c % 1000} WHERE rowid % 2 = 0")
    elif op.kind == "duplicate_rows":
        conn.execute(f"INSERT INTO {q} SELECT * FROM {q} LIMIT {1 + op.c % 20}")
    elif op.kind == "delete_rows":
        conn.execute(f"DELETE FROM {q} WHERE rowid % {1 + op.c % 4} = 0")
    elif op.kind == "null_string" and "StringIds" in tables:
        conn.execute(f"UPDATE StringIds SET value = NULL WHERE id % {1 + op.c % 5} = 0")
    elif op.kind == "garbage_string" and "StringIds" in tables:
        conn.execute(
            f"UPDATE StringIds SET value = CAST(x'ff00c35b' AS TEXT) WHERE id % {1 + op.c % 5} = 0"
        )
    elif op.kind == "empty_db":
        for t in tables:
            conn.execute(f'DELETE FROM "{t}"')


#: the Nsight Systems exports in ../shared/traces/nsys small enough to copy per case
SHARED_NSYS_SEEDS: tuple[str, ...] = (
    "extrap_con_kernel.sqlite",
    "extrap_concurrent16_nvtx_streams.sqlite",
)


def nsys_shared_seeds(nsys_dir: Path) -> list[Path]:
    return [nsys_dir / n for n in SHARED_NSYS_SEEDS if (nsys_dir / n).exists()]


def nsys_corpus_seeds() -> list[Path]:
    return sorted((CORPUS / "nsys").glob("seed_*.sqlite"))


# --------------------------------------------------------------------------------------------
# Session records

RECORDS_OPS: tuple[str, ...] = (
    "drop_line",
    "duplicate_line",
    "swap_lines",
    "drop_key",
    "wrong_type",
    "huge",
    "truncate",
    "flip_byte",
    "invalid_utf8",
    "deep",
    "raw_number",
)
_RECORD_KEYS = (
    "type",
    "schema",
    "version",
    "name",
    "pid",
    "rank",
    "step",
    "start_ns",
    "frontend_ns",
    "device_ns",
    "run_ahead_ns",
    "in_flight",
    "sync_count",
    "sync_wait_ns",
    "site",
    "count",
    "steps",
    "stack",
    "asynchronous",
    "wall_ns",
    "notes",
)


def records_corpus_seeds() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted((CORPUS / "records").glob("*.records.jsonl"))]


def mutate_records(data: bytes, ops: Sequence[Op]) -> bytes:
    lines: list[Any] = []
    for raw in data.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            lines.append(raw)
    for op in ops:
        if op.kind in ("truncate", "flip_byte", "invalid_utf8", "raw_number"):
            continue
        if not lines:
            break
        i = op.a % len(lines)
        line = lines[i]
        if op.kind == "drop_line":
            del lines[i]
        elif op.kind == "duplicate_line":
            lines.insert(i, line)
        elif op.kind == "swap_lines":
            j = op.b % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif isinstance(line, dict):
            key = _RECORD_KEYS[op.b % len(_RECORD_KEYS)]
            if op.kind == "drop_key":
                line.pop(key, None)
            elif op.kind == "wrong_type":
                line[key] = WEIRD_VALUES[op.c % len(WEIRD_VALUES)]
            elif op.kind == "huge":
                line[key] = (2**63, 2**64 - 1, 2**64, -(2**63), 10**30, 1e300)[op.c % 6]
            elif op.kind == "deep":
                line[key] = _nested((10, 200, 5_000, 100_000)[op.c % 4])
    out = b"\n".join(
        json.dumps(x, allow_nan=True).encode() if not isinstance(x, bytes) else x for x in lines
    )
    out = _expand_deep(out)
    for op in ops:
        if op.kind in ("truncate", "flip_byte", "invalid_utf8", "raw_number"):
            out = _apply_byte_op(out, op)
    return out


# --------------------------------------------------------------------------------------------
# The contract


class CaseTimeout(Exception):
    """A case ran past its deadline (raised from a SIGPROF handler)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the main thread if the block uses more than ``seconds``
    of CPU time.

    CPU time, not wall time: a loaded machine stretches the wall clock of a case, not its work
    (a wall-clock deadline failed cases on a busy 2-core machine). A case blocked without
    working is pytest-timeout's to end: this leaves its SIGALRM alone.
    """

    def on_overrun(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout(f"case used more than its {seconds} s of CPU time")

    old = signal.signal(signal.SIGPROF, on_overrun)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _render(report: Report) -> None:
    """The text and JSON views of a report (a trace's or a session's)."""
    console = Console(file=io.StringIO(), width=160, no_color=True, color_system=None)
    render_report(report, console, steps=True)
    report.to_json()


def check_trace_file(
    path: Path, *, max_inflated_bytes: int = FUZZ_MAX_INFLATED_BYTES, render: bool = True
) -> str:
    """``"report"`` or ``"refused"``; any other exception propagates (a bug)."""
    with deadline(DEADLINE_S):
        try:
            trace = load(path, max_inflated_bytes=max_inflated_bytes)
        except TraceFormatError as e:
            if "\n" in str(e):
                raise AssertionError(f"multi-line error message: {e!r}") from None
            return "refused"
        report = analyze(trace)
        if render:
            _render(report)
    return "report"


def check_records_file(path: Path) -> str:
    with deadline(DEADLINE_S):
        try:
            records = read_records(path)
        except TraceFormatError as e:
            if "\n" in str(e):
                raise AssertionError(f"multi-line error message: {e!r}") from None
            return "refused"
        _render(analyze(records))
    return "records"
