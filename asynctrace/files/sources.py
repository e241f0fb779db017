"""The one loader of everything asynctrace analyses: traces and a capture session's records.

``load_source(path)`` returns a :class:`~asynctrace.traces.model.Trace` (Kineto JSON, Nsight
Systems SQLite, sniffed by content) or the :class:`~asynctrace.records.Records` a session
wrote (``*.records.jsonl``, by name); :func:`~asynctrace.analysis.report.analyze` takes either.
``find_sources(folder)`` lists a folder of ranks: its traces and its records. Commands ask
which kind a file is nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.records import Records, read_records
from asynctrace.records.names import (
    DERIVED_SUFFIXES,
    LISTED_TRACE_SUFFIXES,
    RECORDS_SUFFIX,
    TRACE_SUFFIXES,
    is_records_name,
)
from asynctrace.traces.load import find_traces, load
from asynctrace.traces.model import Trace
from asynctrace.traces.reading import DEFAULT_MAX_INFLATED_BYTES

__all__ = ["FolderSources", "Source", "find_sources", "load_source", "source_kind"]

#: What :func:`load_source` returns.
Source = Trace | Records


def load_source(
    path: str | os.PathLike[str], *, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
) -> Source:
    """Load one file: a session's records (``*.records.jsonl``, or ``.tmp`` for a running or
    killed session) or a trace. Raises :class:`TraceFormatError` naming the file and the
    reason for anything unreadable."""
    p = Path(path)
    if is_records_name(p.name):
        return read_records(p)
    return load(p, max_inflated_bytes=max_inflated_bytes)


class FolderSources(msgspec.Struct, frozen=True, kw_only=True):
    """The files of a folder of ranks, each list in natural name order."""

    traces: list[Path]
    records: list[Path]

    @property
    def all(self) -> list[Path]:
        return [*self.traces, *self.records]


def find_sources(directory: str | os.PathLike[str]) -> FolderSources:
    """The trace files (:func:`~asynctrace.traces.load.find_traces`) and session records
    directly inside ``directory``. Raises :class:`TraceFormatError` when the folder does not
    exist or holds neither."""
    d = Path(directory)
    traces = [p for p in find_traces(d, allow_empty=True) if not is_records_name(p.name)]
    try:
        records = sorted(p for p in d.iterdir() if p.is_file() and is_records_name(p.name))
    except OSError as e:
        raise TraceFormatError(str(d), f"cannot list the directory: {e.strerror or e}") from None
    if not traces and not records:
        kinds = ", ".join("*" + s for s in (RECORDS_SUFFIX, *TRACE_SUFFIXES))
        raise TraceFormatError(
            str(d), f"no trace files or session records ({kinds}) in this directory"
        )
    return FolderSources(traces=traces, records=records)


def source_kind(name: str) -> str | None:
    """What :func:`load_source` reads a file of this name as, for listing a log folder:
    ``"records"``, ``"trace"`` or None (not a file of ours, a hidden one, or a copy derived
    from a trace)."""
    if name.startswith("."):
        return None
    if is_records_name(name):
        return "records"
    low = name.lower()
    if low.endswith(LISTED_TRACE_SUFFIXES) and not low.endswith(DERIVED_SUFFIXES):
        return "trace"
    return None
