"""``load()``: open any trace file we understand, by content, not by name.

gzip → Kineto JSON inside; ``SQLite format 3`` → an Nsight Systems export; other text → Kineto
JSON. ``find_traces()`` lists the trace files of a folder of ranks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from asynctrace.errors import TraceFormatError
from asynctrace.records.names import DERIVED_SUFFIXES, TRACE_SUFFIXES
from asynctrace.traces.model import Trace
from asynctrace.traces.reading import DEFAULT_MAX_INFLATED_BYTES, _open_error, sniff

__all__ = ["find_traces", "load"]


def load(
    path: str | os.PathLike[str], *, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
) -> Trace:
    """Load one trace file (Kineto ``.json`` / ``.json.gz`` or Nsight Systems ``.sqlite``).

    The format is sniffed from the first bytes. ``max_inflated_bytes`` caps how far a gzip file
    may inflate (default 4 GiB). Raises :class:`TraceFormatError` naming the file and the
    reason for anything unreadable; never another exception for bad input.
    """
    p = Path(path)
    try:
        # a name the file system refuses (too long, say) raises here, not only on open
        is_dir, is_special = p.is_dir(), p.exists() and not p.is_file()
    except OSError as e:
        raise _open_error(p, e) from None
    if is_dir:
        raise TraceFormatError(
            str(p), "is a directory: load one file, or list its traces with find_traces()"
        )
    if is_special:
        # reading a FIFO blocks forever, a device never ends: refuse before opening
        raise TraceFormatError(str(p), "not a regular file (a FIFO, socket or device)")
    kind = sniff(p)
    if kind == "empty":
        raise TraceFormatError(str(p), "empty file")
    if kind == "sqlite":
        # imported here so that Kineto users never pay for the sqlite loader
        from asynctrace.traces.nsys import load_nsys

        return load_nsys(p)
    from asynctrace.traces.kineto import load_kineto

    return load_kineto(p, max_inflated_bytes=max_inflated_bytes)


def _natural_key(p: Path) -> tuple[object, ...]:
    # rank-2 before rank-10; ASCII digits only: "²".isdigit() is true but int("²") fails
    return tuple(int(t) if t.isdecimal() and t.isascii() else t for t in _DIGITS.split(p.name))


_DIGITS = re.compile(r"([0-9]+)")


def find_traces(directory: str | os.PathLike[str], *, allow_empty: bool = False) -> list[Path]:
    """The trace files directly inside ``directory`` (one per rank), in natural name order.

    Picks ``*.json``, ``*.json.gz``, ``*.sqlite``, ``*.sqlite3``; session records
    (``*.records.jsonl``) are not traces, and what asynctrace derives from a trace
    (:data:`~asynctrace.records.names.DERIVED_SUFFIXES`: annotated copies, summaries) would
    count a rank twice, so both are left out (:func:`load` still reads any of them by name).
    Raises :class:`TraceFormatError` when the folder does not exist or holds no trace
    (``allow_empty``: then an empty list, for a caller that looks for other files too).
    """
    d = Path(directory)
    try:
        exists, is_dir = d.exists(), d.is_dir()
    except OSError as e:
        raise _open_error(d, e) from None
    if not exists:
        raise TraceFormatError(str(d), "no such directory")
    if not is_dir:
        raise TraceFormatError(str(d), "not a directory")
    try:
        entries = list(d.iterdir())
    except OSError as e:
        raise TraceFormatError(str(d), f"cannot list the directory: {e.strerror or e}") from None
    candidates = [
        p
        for p in entries
        if p.is_file() and p.name.lower().endswith(TRACE_SUFFIXES) and not p.name.startswith(".")
    ]
    found = [p for p in candidates if not p.name.lower().endswith(DERIVED_SUFFIXES)]
    if not found and not allow_empty:
        derived = " (annotated copies and summaries are left out: name one to read it)"
        raise TraceFormatError(
            str(d),
            f"no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)}) in this directory"
            + (derived if candidates else ""),
        )
    return sorted(found, key=_natural_key)
