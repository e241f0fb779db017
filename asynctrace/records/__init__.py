"""The records a capture session writes: one JSON-lines file per session and rank.

Layout (one JSON object per line, each with a ``type``):

1. ``{"type": "header", ...}`` — :class:`SessionHeader`: who, where, which device, clock alignment.
2. ``{"type": "step", ...}`` — one :class:`StepRecord` per completed step, in step order.
3. ``{"type": "sync", ...}`` — :class:`SyncSite` rows, one per synchronizing source line.
4. ``{"type": "summary", ...}`` — :class:`SessionSummary`, written last; its notes are
   :class:`Note` objects (``code``, ``text``).

A file is written to ``<name>.tmp`` while the session runs and renamed when it ends, so a
complete file always has its summary line; a reader accepts a file without one (a killed run,
whose last line may be cut short) and says so. All times are integer nanoseconds; device
figures are ``null`` where the device cannot measure them.

Version 2 (from 1): the summary's ``notes`` are ``{"code", "text"}`` objects, no longer strings.
:func:`read_records` reads version 1 files too; their notes become :class:`Note` objects of code
``"note"`` (the prose is kept as it was, never read for a code).

Beside it: :mod:`~asynctrace.records.writer` writes the file, :mod:`~asynctrace.records.names`
names it (and every other file asynctrace writes or lists), :mod:`~asynctrace.records.known_syncs`
is the table of library syncs whose tags the sync rows carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.records.names import RECORDS_SUFFIX, is_records_name

__all__ = [
    "RECORDS_SCHEMA",
    "RECORDS_SUFFIX",
    "RECORDS_VERSION",
    "Note",
    "Records",
    "SessionHeader",
    "SessionSummary",
    "StepPhases",
    "StepRecord",
    "SyncSite",
    "is_records_name",
    "read_records",
]

RECORDS_SCHEMA = "asynctrace.records"
#: 2: the summary's notes are :class:`Note` objects (1: strings; still read)
RECORDS_VERSION = 2


class SessionHeader(msgspec.Struct, frozen=True, kw_only=True, tag="header", tag_field="type"):
    schema: str = RECORDS_SCHEMA
    version: int = RECORDS_VERSION
    name: str
    host: str
    pid: int
    rank: int | None = None
    world_size: int | None = None
    #: "cuda", "rocm", "cpu", "fake", ...
    device_kind: str
    #: human name, e.g. "NVIDIA H200" or the CPU model
    device_name: str
    #: True where device work runs asynchronously to the host (CUDA/ROCm); False on CPU
    asynchronous: bool
    torch_version: str | None = None
    started_unix_ns: int
    #: how host and device clocks were aligned, and the offset found (device minus host)
    clock_method: str = "none"
    clock_offset_ns: int = 0
    clock_uncertainty_ns: int = 0
    #: the sync detector that ran: "cuda", "lint" or "off" (None: written before it was kept);
    #: sync figures of runs with different detectors do not compare
    sync_detection: str | None = None
    #: the capture settings that cost host time, as the session ran them (None: written before
    #: they were kept): deep mode (``profile=``: torch.profiler windows), TensorBoard scalars,
    #: the live status line. Step times of runs whose settings (or detectors) differ do not
    #: compare: ``asynctrace compare`` says so
    profile: bool | None = None
    tensorboard: bool | None = None
    live: bool | None = None


class StepPhases(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a step's host time went, ns; the five sum to the step's ``frontend_ns`` (which
    includes its data wait). Measured at a few boundaries per step, never per module
    (docs/how-it-works.md#phases): ``data`` inside DataLoader fetches (and ``session.steps``'
    ``next()``), ``backward`` inside ``torch.autograd.backward``, ``optimizer`` inside
    ``optimizer.step()`` (its step hooks), ``forward`` the rest of the step before a backward
    starts (from the end of the data fetch), ``other`` what follows a backward or an optimizer
    step."""

    data: int = 0
    forward: int = 0
    backward: int = 0
    optimizer: int = 0
    other: int = 0


class StepRecord(msgspec.Struct, frozen=True, kw_only=True, tag="step", tag_field="type"):
    step: int
    #: host time of the step's start, ns since the session started
    start_ns: int
    frontend_ns: int
    data_wait_ns: int = 0
    device_ns: int | None = None
    run_ahead_ns: int | None = None
    in_flight: int = 0
    sync_count: int = 0
    sync_wait_ns: int = 0
    mem_allocated_bytes: int | None = None
    mem_reserved_bytes: int | None = None
    #: the step's host time by phase; None where no phase boundary was seen in it (a loop
    #: with no DataLoader, backward or optimizer step), or in files of before phases
    phases_ns: StepPhases | None = None

    @property
    def issuing_ns(self) -> int:
        """The host's time issuing work in the step: its host time less its data and sync
        waits, never below zero (a wait can reach past the step's host span); every view's
        "host: issuing"."""
        return max(self.frontend_ns - self.data_wait_ns - self.sync_wait_ns, 0)


class SyncSite(msgspec.Struct, frozen=True, kw_only=True, tag="sync", tag_field="type"):
    #: "file.py:123"
    site: str
    #: what synchronized, e.g. "aten::_local_scalar_dense" or "cudaStreamSynchronize"
    op: str
    count: int
    wait_ns: int = 0
    steps: int = 0
    stack: list[str] = msgspec.field(default_factory=list)


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """What a summary says about how its figures were made: match on ``code``, never on
    ``text``. Codes are kebab-case and stable (docs/how-it-works.md lists them); the text is
    for people and may change."""

    #: e.g. "cpu-synchronous", "collected-at-exit", "records-not-written"
    code: str
    text: str


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True, tag="summary", tag_field="type"):
    steps: int
    wall_ns: int
    #: steps whose device figures were still pending at exit and were waited for then
    collected_at_exit: int = 0
    verdict: str | None = None
    notes: list[Note] = msgspec.field(default_factory=list)
    #: True when the session ended with an exception in user code
    error: str | None = None


class _SummaryV1(msgspec.Struct, frozen=True, tag="summary", tag_field="type"):
    """The summary line of a version-1 file, whose notes were strings: only told apart here;
    :func:`_upgraded` reads it as a :class:`SessionSummary`."""

    notes: list[str] = msgspec.field(default_factory=list)


def _upgraded(line: bytes, old: _SummaryV1) -> SessionSummary:
    """A version-1 summary line as version 2 has it. A version-1 note has no code: "note"
    says so, rather than one guessed from its prose."""
    fields = msgspec.json.decode(line)
    fields["notes"] = [Note(code="note", text=text) for text in old.notes]
    return msgspec.convert(fields, SessionSummary)


_Line = SessionHeader | StepRecord | SyncSite | SessionSummary
_decoder = msgspec.json.Decoder(_Line)
_decoder_v1 = msgspec.json.Decoder(SessionHeader | StepRecord | SyncSite | _SummaryV1)


class Records(msgspec.Struct, frozen=True, kw_only=True):
    """A session's records as read back from disk."""

    path: str
    header: SessionHeader
    steps: list[StepRecord]
    syncs: list[SyncSite]
    summary: SessionSummary | None
    #: False when the file had no summary line (the writer was killed)
    complete: bool


def _beyond_int64(obj: msgspec.Struct) -> str | None:
    """The first integer field of ``obj`` outside int64, or None."""
    # the values as one tuple (made in C): a third faster than a getattr per field, and this
    # runs for every line of a records file
    for i, v in enumerate(msgspec.structs.astuple(obj)):
        if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
            return obj.__struct_fields__[i]
    return None


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def read_records(path: str | Path) -> Records:
    """Read a records file; raise :class:`TraceFormatError` if it is not one."""
    p = Path(path)
    try:
        is_special = p.exists() and not p.is_file()
    except OSError as e:  # a name the file system refuses (too long, say)
        raise TraceFormatError(str(p), f"cannot read: {e.strerror or e}") from None
    if is_special:
        # reading a FIFO blocks forever, /dev/zero never ends: refuse before opening
        raise TraceFormatError(str(p), "not a regular file (a FIFO, socket or device)")
    try:
        f = open(p, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as e:
        raise TraceFormatError(str(p), f"cannot read: {e.strerror or e}") from None
    try:
        return _read_lines(p, f)
    except OSError as e:
        raise TraceFormatError(str(p), f"cannot read: {e.strerror or e}") from None
    finally:
        f.close()


def _read_lines(p: Path, f: BinaryIO) -> Records:
    # Line by line: a 10^6-step file (~220 MB) is never held whole, only its decoded records.
    header: SessionHeader | None = None
    steps: list[StepRecord] = []
    syncs: list[SyncSite] = []
    summary: SessionSummary | None = None
    decoder = _decoder  # the header says which version the other lines are
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            obj = decoder.decode(line)
            if isinstance(obj, _SummaryV1):
                obj = _upgraded(line, obj)
        except msgspec.DecodeError as e:
            if header is not None and not line.endswith(b"\n"):
                # the last line, cut short: the writer was killed in the middle of a write.
                # What came before it is read, as for any killed run (no summary line).
                break
            raise TraceFormatError(
                str(p), f"line {lineno}: not an asynctrace record ({e})"
            ) from None
        except RecursionError:
            raise TraceFormatError(
                str(p), f"line {lineno}: not an asynctrace record (nested too deeply)"
            ) from None
        bad = _beyond_int64(obj)
        if bad is not None:
            # msgspec reads uint64 into int; every figure downstream is int64
            raise TraceFormatError(
                str(p), f"line {lineno}: {bad} is out of range (records hold int64 values)"
            )
        if isinstance(obj, SessionHeader):
            if header is not None:
                raise TraceFormatError(str(p), f"line {lineno}: second header")
            if obj.schema == RECORDS_SCHEMA and obj.version < 1:
                raise TraceFormatError(
                    str(p), f"line {lineno}: version {obj.version} is not a valid records version"
                )
            if obj.schema != RECORDS_SCHEMA or obj.version > RECORDS_VERSION:
                raise TraceFormatError(
                    str(p),
                    f"records schema {obj.schema} v{obj.version} is newer than this asynctrace",
                )
            header = obj
            if obj.version == 1:
                decoder = _decoder_v1
        elif header is None:
            raise TraceFormatError(str(p), "records file does not start with a header line")
        elif isinstance(obj, StepRecord):
            steps.append(obj)
        elif isinstance(obj, SyncSite):
            syncs.append(obj)
        else:
            summary = obj
    if header is None:
        raise TraceFormatError(str(p), "empty records file")
    return Records(
        path=str(p),
        header=header,
        steps=steps,
        syncs=syncs,
        summary=summary,
        complete=summary is not None,
    )
