"""The names of the files asynctrace writes and reads, in one place: a records file's name and
the rules that make any name from user input safe, the trace suffixes a folder is listed for,
and the suffixes of what asynctrace derives from a trace (which a listing leaves out).

A leaf (nothing of ours imported): capture names what it writes with it, the loaders and the
views tell the files apart with it.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

__all__ = [
    "ANNOTATED_SUFFIX",
    "DERIVED_SUFFIXES",
    "LISTED_TRACE_SUFFIXES",
    "PROFILER_TRACE_SUFFIX",
    "RECORDS_SUFFIX",
    "TRACE_SUFFIXES",
    "annotated_path",
    "is_records_name",
    "records_file_name",
    "sanitize_name",
]

RECORDS_SUFFIX = ".records.jsonl"

#: File names :func:`~asynctrace.traces.load.find_traces` picks up
#: (``{worker}.{time_ns}.pt.trace.json.gz`` included).
TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz", ".sqlite", ".sqlite3")

#: What deep mode writes for each window: ``{worker}.{time_ns}.pt.trace.json.gz``, the layout
#: the TensorBoard profiler plugin reads.
PROFILER_TRACE_SUFFIX = ".pt.trace.json.gz"

#: the trace files a log folder is listed for (a TensorBoard logdir holds other JSON files
#: too): compressed Kineto traces, Nsight Systems exports and ``*.pt.trace.json``
LISTED_TRACE_SUFFIXES: tuple[str, ...] = (".json.gz", ".sqlite", ".sqlite3", ".pt.trace.json")

#: The annotated copy deep mode writes next to each trace (``Profile(annotate=True)``:
#: ``{worker}.{time_ns}.annotated.json.gz``, the trace plus our overlay).
ANNOTATED_SUFFIX = ".annotated.json.gz"

#: What asynctrace writes beside the traces, which a folder's listing leaves out: annotated
#: copies (the same rank again) and JSON summaries (``demo.summary.json``).
DERIVED_SUFFIXES: tuple[str, ...] = (ANNOTATED_SUFFIX, ".annotated.json", ".summary.json")

_UNSAFE = re.compile(r"[^A-Za-z0-9_+\-]+")


def is_records_name(name: str) -> bool:
    """Whether a file name is a session's records: ``*.records.jsonl``, or
    ``*.records.jsonl.tmp`` (its session still runs, or was killed before renaming it)."""
    return name.endswith((RECORDS_SUFFIX, RECORDS_SUFFIX + ".tmp"))


def sanitize_name(name: str, *, default: str = "session", max_len: int = 80) -> str:
    """A file-name-safe version of ``name``: no separators, no ``..``, no leading dot.

    Every run of characters outside ``[A-Za-z0-9_+-]`` becomes one ``_``; dots are replaced
    too because they separate the fields of a records file name.
    """
    cleaned = _UNSAFE.sub("_", name).strip("_")[:max_len]
    return cleaned or default


def records_file_name(
    name: str, *, pid: int, rank: int | None, time_ns: int, host: str | None = None
) -> str:
    """``<name>.<host>.<pid>[.rank<N>].<time_ns>.records.jsonl``, every field sanitized."""
    host_part = sanitize_name(host if host is not None else socket.gethostname(), default="host")
    rank_part = "" if rank is None else f".rank{int(rank)}"
    return f"{sanitize_name(name)}.{host_part}.{int(pid)}{rank_part}.{int(time_ns)}{RECORDS_SUFFIX}"


def annotated_path(trace: Path) -> Path:
    """``x.123.pt.trace.json.gz`` -> ``x.123.annotated.json.gz``."""
    name = trace.name
    for suffix in (PROFILER_TRACE_SUFFIX, ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return trace.with_name(name[: -len(suffix)] + ANNOTATED_SUFFIX)
    return trace.with_name(name + ANNOTATED_SUFFIX)
