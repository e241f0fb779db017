"""Load an Nsight Systems SQLite export (``nsys export --type sqlite``) into a :class:`Trace`.

Tables read (every one but ``StringIds`` is optional: nsys writes a table only when it has rows):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET`` → :class:`Activities`;
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (runtime *and* driver API calls) → :class:`RuntimeCalls`;
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` → :class:`DeviceSyncs`;
* ``NVTX_EVENTS`` (push/pop and start/end ranges, domain names) → :class:`HostRanges`;
* ``StringIds``, ``TARGET_INFO_GPU`` (device name), ``TARGET_INFO_SESSION_START_TIME`` and
  ``META_DATA_EXPORT`` / ``EXPORT_META_DATA`` (versions) for names and metadata.

nsys already stores integer nanoseconds; times are made relative to the earliest event kept
(``Trace.origin_ns`` holds that event's raw nsys timestamp).

Processes and threads come from nsys's serialized global ids: the process key is
``globalTid >> 24`` (``globalPid >> 24`` for device rows), the thread id ``globalTid & 0xFFFFFF``.
``pid`` columns hold the OS pid (``(globalTid >> 24) & 0xFFFFFF``, what nsys itself shows) unless
two processes of the export share one OS pid (a merged multi-node report); then every ``pid``
column holds the full process key instead, so launch linking stays per process
(``metadata["pid_encoding"]`` says which).

Traps in real exports, handled here:

* 2022 exports hold two runtime rows per call (``cudaLaunchKernel`` and ``cudaLaunchKernel_v7000``,
  one nested in the other) with one correlation id: one row per (process, correlation id, name
  without the ``_v<N>`` suffix) is kept, the widest, and the dropped rows are counted in
  ``Trace.skipped["duplicate_runtime_rows"]``. Names are stored without that suffix.
* ``syncType`` codes in ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` disagree with the export's own
  ``ENUM_CUPTI_SYNC_TYPE`` table (a 2024 export labels every ``cudaDeviceSynchronize`` "Event
  sync"); synchronizations are classified by the runtime call's name
  (:func:`asynctrace.traces._apis.classify_runtime`), never by ``syncType``.
* kernels that start before their launch call returns are kept as they are.
* strings that are not valid UTF-8 (a Latin-1 Windows user name in one real export) are decoded
  with replacement characters rather than failing the load.

NVTX ranges named like an asynctrace session's steps (``step N`` in domain ``asynctrace``), and
``ProfilerStep#N`` ranges in any domain, become ``RangeKind.STEP`` rows with ``step`` = N.
Ranges without an end (never popped / ended) are counted in ``Trace.skipped["nvtx_unended"]``.

Errors: a missing file, a file that is not an SQLite database, a database without nsys's
``StringIds`` table, one with no CUDA and no NVTX table, a table lacking a required column, or a
NULL / text where nsys always writes an integer raise
:class:`~asynctrace.errors.TraceFormatError` naming the file and the reason.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.errors import TraceFormatError
from asynctrace.traces import model
from asynctrace.traces._apis import classify_runtime
from asynctrace.traces._columns import blocking_copies, clamp_durations, distinct
from asynctrace.traces.model import I32, I64

__all__ = [
    "DEFAULT_DEADLINE_S",
    "NSYS_STEP_DOMAIN",
    "NVTX_RANGE_EVENT_TYPES",
    "load_nsys",
]

_T = TypeVar("_T", model.RuntimeCalls, model.Activities, model.DeviceSyncs, model.HostRanges)

#: NVTX domain whose ``step N`` ranges are an asynctrace session's steps. Kept equal to
#: ``asynctrace.capture.ranges.DOMAIN`` by a test: loaders must not import the capture side.
NSYS_STEP_DOMAIN = "asynctrace"
_STEP_NAME = re.compile(r"step (\d+)")
_PROFILER_STEP_NAME = re.compile(r"ProfilerStep#(\d+)")

#: ``NVTX_EVENTS.eventType`` values of ranges: push/pop (59), start/end (60) and their
#: ``NVTXT`` twins (70, 71), as nsys's own stats scripts define them.
NVTX_RANGE_EVENT_TYPES: tuple[int, ...] = (59, 60, 70, 71)
_NVTX_DOMAIN_CREATE = 75
_NVTX_THREAD_NAME = 39

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_NVTX = "NVTX_EVENTS"
_EVENT_TABLES = (_KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _SYNC, _NVTX)

# CUpti_ActivityMemcpyKind: fixed by CUPTI, so a name table here is safe across nsys versions.
_COPY_KINDS: Mapping[int, str] = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD (unified)",
    12: "DtoH (unified)",
    13: "DtoD (unified)",
}

# CUPTI writes "no stream" as an unsigned 32-bit -1.
_NO_STREAM = 0xFFFFFFFF
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_FETCH_ROWS = 1 << 16


#: How long reading one export may take before it is refused. Real exports read in seconds
#: (docs/performance.md); a crafted one could keep SQLite busy forever.
DEFAULT_DEADLINE_S = 300.0
#: SQLite virtual-machine steps between two looks at the clock.
_PROGRESS_STEPS = 20_000


def load_nsys(path: str | os.PathLike[str], *, deadline_s: float | None = None) -> model.Trace:
    """Read an Nsight Systems SQLite export into the columnar trace model.

    Raises :class:`~asynctrace.errors.TraceFormatError` (never another exception) when the file
    is missing, is not an SQLite database, or is not an nsys export with CUDA or NVTX data, or
    when reading it takes longer than ``deadline_s`` (default :data:`DEFAULT_DEADLINE_S`).
    Tables are read, never views: a view where nsys writes a table is refused (a view runs
    any query, one that never ends included).
    """
    limit = DEFAULT_DEADLINE_S if deadline_s is None else deadline_s
    name = os.fspath(path)
    file = Path(name)
    if not file.is_file():
        raise TraceFormatError(name, "no such file")
    # immutable=1: exports are never written while we read them, and it lets SQLite skip
    # locking, which fails on some network file systems and read-only folders.
    uri = Path(os.path.realpath(file)).as_uri() + "?mode=ro&immutable=1"
    clock = _Deadline(limit)
    try:
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            # Real exports hold strings that are not valid UTF-8 (a Windows user name in
            # Latin-1, for one); they are names for display, so decode them leniently.
            conn.text_factory = _decode_text
            conn.set_progress_handler(clock.expired, _PROGRESS_STEPS)
            return _Reader(name, conn).read()
    except sqlite3.Error as exc:
        if clock.hit:
            raise TraceFormatError(
                name,
                f"reading it took longer than {limit:g} s; stopped there (a damaged or crafted "
                "export?)",
            ) from None
        # SQLite quotes the broken schema text, newlines included: keep the reason one line
        reason = " ".join(str(exc).split())
        raise TraceFormatError(name, f"not a readable SQLite database ({reason})") from None
    except (TypeError, ValueError, OverflowError) as exc:
        # A NULL or text where nsys always writes an integer: a damaged or hand-made file.
        raise TraceFormatError(name, f"malformed values in the export ({exc})") from None
    except MemoryError:
        raise TraceFormatError(name, "too large to load into memory") from None


class _Deadline:
    """SQLite's progress handler: non-zero (interrupt the statement) once the time is up."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.hit = False

    def expired(self) -> int:
        if time.monotonic() >= self.end:
            self.hit = True
            return 1
        return 0


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Reader:
    def __init__(self, path: str, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self.strings = model.StringTable()
        self.skipped: dict[str, int] = {}
        #: per activity (as _activities concatenates them): a copy to or from pageable memory
        self.pageable: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
        self.columns: dict[str, frozenset[str]] = {}
        self.views: set[str] = set()
        self._string_ids: dict[int, str] | None = None

    # -- helpers -----------------------------------------------------------------------------

    def _fail(self, reason: str) -> TraceFormatError:
        return TraceFormatError(self.path, reason)

    def _has(self, table: str) -> bool:
        if table.lower() in self.views:
            raise self._fail(
                f"{table} is a view, not a table: nsys exports hold tables, and a view may run "
                "any query (a crafted file?); refusing it"
            )
        return table in self.columns

    def _col(self, table: str, column: str, default: str = "-1") -> str:
        """SQL for ``column`` of ``table``, NULL and absence read as ``default``."""
        if column in self.columns[table]:
            return f"ifnull({column}, {default})"
        return default

    def _require(self, table: str, *names: str) -> None:
        missing = [c for c in names if c not in self.columns[table]]
        if missing:
            raise self._fail(
                f"table {table} lacks column(s) {', '.join(missing)}: not an nsys export this "
                "version of asynctrace can read"
            )

    def _ints(self, table: str, sql: str, width: int) -> I64:
        """Rows of integers as one (n, width) int64 array, fetched in bounded chunks."""
        cur = self.conn.execute(sql)
        chunks: list[I64] = []
        while True:
            rows = cur.fetchmany(_FETCH_ROWS)
            if not rows:
                break
            try:
                chunks.append(np.array(rows, dtype=np.int64).reshape(len(rows), width))
            except (TypeError, ValueError, OverflowError):
                raise self._fail(
                    f"table {table} holds a NULL or non-integer time or id where nsys always "
                    "writes an integer"
                ) from None
        if not chunks:
            return np.empty((0, width), dtype=np.int64)
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]

    def _string(self, string_id: int) -> str:
        if self._string_ids is None:
            self._string_ids = dict(self.conn.execute("SELECT id, value FROM StringIds"))
        return self._string_ids.get(string_id, f"<string {string_id}>")

    def _intern_ids(self, ids: I64) -> I32:
        """Map StringIds ids to indices of our string table, one lookup per distinct id."""
        return self._intern_labels(ids, lambda sid: self._string(sid) if sid >= 0 else "?")

    def _intern_labels(self, codes: I64, label: Callable[[int], str]) -> I32:
        """Intern ``label(code)`` once per distinct code and map every row to it."""
        uniq, inverse = np.unique(codes, return_inverse=True)
        mapped = np.array([self.strings.intern(label(int(k))) for k in uniq], dtype=np.int32)
        return mapped[inverse.reshape(-1)]

    # -- the whole file ----------------------------------------------------------------------

    def read(self) -> model.Trace:
        for table, kind in self.conn.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"
        ):
            if kind == "view":
                # real exports hold views of their own (EXTRAP_*): never read, and refused
                # where a table is looked for (names are case-insensitive in SQLite)
                self.views.add(str(table).lower())
                continue
            info = self.conn.execute("SELECT name FROM pragma_table_info(?)", (table,))
            self.columns[str(table)] = frozenset(str(row[0]) for row in info)
        if not self._has("StringIds"):
            raise self._fail(
                "not an Nsight Systems SQLite export (it has no StringIds table); "
                "make one with `nsys export --type sqlite report.nsys-rep`"
            )
        if not any(self._has(t) for t in _EVENT_TABLES):
            raise self._fail(
                "this Nsight Systems export holds no CUDA or NVTX data; "
                "profile with `nsys profile -t cuda,nvtx ...`"
            )

        tables = self._runtime(), self._activities(), self._syncs(), self._nvtx()
        starts = [t.start_ns for t in tables if len(t)]
        origin = int(min(int(s.min()) for s in starts)) if starts else 0
        pid_of, encoding = _pid_mapping([t.pid for t in tables])

        def rebased(table: _T) -> _T:
            """Times from the origin, process keys as pids, sorted by start."""
            moved = msgspec.structs.replace(
                table, start_ns=table.start_ns - origin, pid=pid_of(table.pid)
            )
            return moved.sorted_by_start()

        runtime, activities, device_syncs, ranges = tables
        runtime = blocking_copies(runtime, activities.pid, activities.correlation, self.pageable)
        metadata = self._metadata()
        metadata["pid_encoding"] = encoding
        return model.Trace(
            source=self.path,
            format="nsys",
            strings=self.strings.freeze(),
            runtime=rebased(runtime),
            activities=rebased(activities),
            ranges=rebased(ranges),
            python_frames=model.PythonFrames.empty(),
            device_syncs=rebased(device_syncs),
            flows=model.Flows.empty(),
            device_name=self._device_name(distinct(activities.device).tolist()),
            rank=self._mpi_rank(),
            origin_ns=origin,
            metadata=metadata,
            skipped={k: v for k, v in self.skipped.items() if v},
        )

    # -- tables --------------------------------------------------------------------------------

    def _runtime(self) -> model.RuntimeCalls:
        """Runtime and driver calls, one row per call: raw times, process keys as pids."""
        if not self._has(_RUNTIME):
            return model.RuntimeCalls.empty()
        t = _RUNTIME
        self._require(t, "start", "end", "nameId")
        rows = self._ints(
            t,
            f"SELECT start, end, {self._col(t, 'globalTid')}, {self._col(t, 'correlationId')}, "
            f"nameId FROM {t}",
            5,
        )
        start, end, gtid, corr, name_id = (rows[:, i] for i in range(5))
        # One name per distinct nameId: strip the ABI version suffix, then classify.
        uniq, inverse = np.unique(name_id, return_inverse=True)
        inverse = inverse.reshape(-1)
        names = np.empty(len(uniq), dtype=np.int32)
        kinds = np.empty(len(uniq), dtype=np.uint8)
        for i, sid in enumerate(uniq.tolist()):
            base = _VERSION_SUFFIX.sub("", self._string(sid))
            names[i] = self.strings.intern(base)
            kinds[i] = int(classify_runtime(base))
        calls = model.RuntimeCalls(
            start_ns=start,
            dur_ns=clamp_durations(end - start, "runtime", self.skipped),
            pid=_process_key(gtid),
            tid=np.where(gtid >= 0, gtid & 0xFFFFFF, -1),
            name=names[inverse],
            kind=kinds[inverse],
            correlation=_correlation(corr),
        )
        keep = _dedupe_runtime(calls.pid, calls.correlation, calls.name, calls.dur_ns)
        self.skipped["duplicate_runtime_rows"] = len(calls) - len(keep)
        return calls.take(keep)

    def _activities(self) -> model.Activities:
        """Kernels, copies and memsets, table by table: raw times, process keys as pids."""
        parts: list[model.Activities] = []
        pageable: list[npt.NDArray[np.bool_]] = []
        for table, kind in (
            (_KERNEL, model.ActivityKind.KERNEL),
            (_MEMCPY, model.ActivityKind.MEMCPY),
            (_MEMSET, model.ActivityKind.MEMSET),
        ):
            if not self._has(table):
                continue
            self._require(table, "start", "end")
            c = self._col
            if kind is model.ActivityKind.KERNEL:
                cols = self.columns[table]
                if "demangledName" in cols and "shortName" in cols:
                    label = "ifnull(demangledName, shortName)"
                elif "demangledName" in cols or "shortName" in cols:
                    label = c(table, "demangledName" if "demangledName" in cols else "shortName")
                else:
                    raise self._fail(f"table {table} has neither demangledName nor shortName")
            elif kind is model.ActivityKind.MEMCPY:
                label = c(table, "copyKind", "0")
            else:
                label = "0"
            # CUPTI's memory kind 1 is pageable host memory
            paged = "0"
            if kind is model.ActivityKind.MEMCPY:
                paged = f"({c(table, 'srcKind', '0')} = 1 OR {c(table, 'dstKind', '0')} = 1)"
            rows = self._ints(
                table,
                f"SELECT start, end, {c(table, 'globalPid')}, {c(table, 'deviceId')}, "
                f"{c(table, 'streamId')}, {c(table, 'correlationId')}, {label}, {paged} "
                f"FROM {table}",
                8,
            )
            start, end, gpid, dev, stream, corr, label_v, paged_v = (rows[:, i] for i in range(8))
            pageable.append(paged_v != 0)
            if kind is model.ActivityKind.KERNEL:
                name = self._intern_ids(label_v)
            elif kind is model.ActivityKind.MEMCPY:
                name = self._intern_labels(
                    label_v, lambda k: f"Memcpy {_COPY_KINDS.get(k, 'unknown')}"
                )
            else:
                name = self._intern_labels(label_v, lambda _k: "Memset")
            parts.append(
                model.Activities(
                    start_ns=start,
                    dur_ns=clamp_durations(end - start, "activity", self.skipped),
                    pid=_process_key(gpid),
                    device=dev.astype(np.int32),
                    stream=_stream(stream),
                    name=name,
                    kind=np.full(len(start), int(kind), dtype=np.uint8),
                    correlation=_correlation(corr),
                )
            )
        self.pageable = np.concatenate(pageable) if pageable else np.zeros(0, np.bool_)
        return model.Activities.concat(parts)

    def _syncs(self) -> model.DeviceSyncs:
        """Device-side synchronizations: raw times, process keys as pids."""
        if not self._has(_SYNC):
            return model.DeviceSyncs.empty()
        t = _SYNC
        self._require(t, "start", "end")
        rows = self._ints(
            t,
            f"SELECT start, end, {self._col(t, 'globalPid')}, {self._col(t, 'streamId')}, "
            f"{self._col(t, 'correlationId')} FROM {t}",
            5,
        )
        start, end, gpid, stream, corr = (rows[:, i] for i in range(5))
        return model.DeviceSyncs(
            start_ns=start,
            dur_ns=clamp_durations(end - start, "device_sync", self.skipped),
            pid=_process_key(gpid),
            stream=_stream(stream),
            correlation=_correlation(corr),
        )

    def _nvtx(self) -> model.HostRanges:
        """NVTX ranges that ended: raw times, process keys as pids."""
        if not self._has(_NVTX):
            return model.HostRanges.empty()
        t = _NVTX
        self._require(t, "start", "eventType")
        cols = self.columns[t]
        text = "e.text" if "text" in cols else "NULL"
        if "textId" in cols:
            text = f"coalesce({text}, s.value)"
            join = "LEFT JOIN StringIds AS s ON s.id = e.textId"
        else:
            join = ""
        end = "e.end" if "end" in cols else "NULL"
        gtid = "ifnull(e.globalTid, -1)" if "globalTid" in cols else "-1"
        domain = "ifnull(e.domainId, 0)" if "domainId" in cols else "0"
        types = ", ".join(str(v) for v in (*NVTX_RANGE_EVENT_TYPES, _NVTX_DOMAIN_CREATE))
        cur = self.conn.execute(
            f"SELECT e.start, {end}, e.eventType, {gtid}, {domain}, ifnull({text}, '') "
            f"FROM {t} AS e {join} WHERE e.eventType IN ({types})"
        )
        rows = cur.fetchall()
        domains: dict[tuple[int, int], str] = {}
        for _start, _stop, etype, g, dom, label in rows:
            if etype == _NVTX_DOMAIN_CREATE:
                domains[(g >> 24 if g >= 0 else -1, dom)] = label
        out: list[tuple[int, int, int, int, int, int, int]] = []
        unended = 0
        for start, stop, etype, g, dom, label in rows:
            if etype == _NVTX_DOMAIN_CREATE:
                continue
            if stop is None:
                unended += 1
                continue
            key = g >> 24 if g >= 0 else -1
            kind, step = model.RangeKind.NVTX, -1
            match = _PROFILER_STEP_NAME.fullmatch(label)
            if match is None and domains.get((key, dom)) == NSYS_STEP_DOMAIN:
                match = _STEP_NAME.fullmatch(label)
            if match is not None:
                kind, step = model.RangeKind.STEP, int(match.group(1))
            out.append(
                (
                    start,
                    max(stop - start, 0),
                    key,
                    g & 0xFFFFFF if g >= 0 else -1,
                    self.strings.intern(label),
                    int(kind),
                    step,
                )
            )
        self.skipped["nvtx_unended"] = unended
        return model.HostRanges.from_rows(out)

    # -- descriptive -----------------------------------------------------------------------------

    def _device_name(self, used_devices: Iterable[int]) -> str:
        """Names of the GPUs that ran something; exports also list integrated/virtual GPUs."""
        gpu = "TARGET_INFO_GPU"
        if not self._has(gpu) or "name" not in self.columns[gpu]:
            return "unknown"
        # exports name the device's id column "id" or "deviceId"
        id_col = next((c for c in ("id", "deviceId") if c in self.columns[gpu]), None)
        if id_col is None:
            return "unknown"
        rows = self.conn.execute(f"SELECT {id_col}, name FROM {gpu}").fetchall()
        names = {int(i): str(n) for i, n in rows if n and i is not None}
        used = [d for d in used_devices if d >= 0]
        # Activities carry the process's CUDA ordinal; newer exports map it to the GPU table's
        # id through TARGET_INFO_CUDA_DEVICE, older ones (no such table) use one numbering.
        ids: list[int] = used
        cuda = "TARGET_INFO_CUDA_DEVICE"
        if self._has(cuda) and {"cudaId", "gpuId"} <= self.columns[cuda]:
            pairs = self.conn.execute(f"SELECT cudaId, gpuId FROM {cuda}").fetchall()
            ids = [int(g) for c, g in pairs if c in used and g is not None] or used
        distinct = list(dict.fromkeys(names[i] for i in ids if i in names))
        return ", ".join(distinct) if distinct else "unknown"

    def _mpi_rank(self) -> int | None:
        # nsys's MPI tracing names the rank's main thread "MPI Rank N" through NVTX.
        if not self._has(_NVTX) or "text" not in self.columns[_NVTX]:
            return None
        ranks = {
            int(m.group(1))
            for (text,) in self.conn.execute(
                f"SELECT DISTINCT text FROM {_NVTX} WHERE eventType = {_NVTX_THREAD_NAME}"
            )
            if text and (m := re.fullmatch(r"MPI Rank (\d+)", str(text)))
        }
        return ranks.pop() if len(ranks) == 1 else None

    def _metadata(self) -> dict[str, str]:
        meta: dict[str, str] = {}
        # 2022 exports call the table EXPORT_META_DATA, 2024 exports META_DATA_EXPORT.
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self._has(table) and {"name", "value"} <= self.columns[table]:
                values = dict(self.conn.execute(f"SELECT name, value FROM {table}"))
                for ours, theirs in (
                    ("nsys_version", "EXPORT_PRODUCT_VERSION"),
                    ("nsys_schema_version", "EXPORT_SCHEMA_VERSION"),
                ):
                    if values.get(theirs) is not None:
                        meta[ours] = str(values[theirs])
                break
        table = "TARGET_INFO_SESSION_START_TIME"
        if self._has(table) and "utcEpochNs" in self.columns[table]:
            row = self.conn.execute(f"SELECT utcEpochNs FROM {table}").fetchone()
            if row and row[0] is not None:
                meta["session_start_utc_ns"] = str(row[0])
        return meta


def _dedupe_runtime(key: I64, corr: I64, name: I32, dur: I64) -> I64:
    """Row indices to keep: per (process, correlation id, name) the longest row, in file order.

    Rows without a correlation id are never duplicates of each other.
    """
    n = len(key)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    # Sort so that each group's widest row comes first, then keep group heads.
    order = np.lexsort((np.arange(n), -dur, name, corr, key))
    k, c, m = key[order], corr[order], name[order]
    head = np.ones(n, dtype=bool)
    head[1:] = (k[1:] != k[:-1]) | (c[1:] != c[:-1]) | (m[1:] != m[:-1])
    head |= c < 0
    return np.sort(order[head])


def _process_key(global_id: I64) -> I64:
    """The process part (``>> 24``) of nsys's serialized ``globalTid`` / ``globalPid``."""
    return np.where(global_id >= 0, global_id >> 24, -1)


def _stream(stream: I64) -> I64:
    return np.where(stream == _NO_STREAM, -1, stream)


def _correlation(corr: I64) -> I64:
    # ids are positive: 0, and a NULL (read as -1), mean none
    return np.where(corr > 0, corr, -1)


def _pid_mapping(keys: list[I64]) -> tuple[Callable[[I64], I64], str]:
    """How process keys become ``pid`` values: the OS pid where that is unambiguous."""
    all_keys = distinct(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    all_keys = all_keys[all_keys >= 0]
    os_pids = all_keys & 0xFFFFFF
    if len(distinct(os_pids)) == len(all_keys):

        def to_os(k: I64) -> I64:
            return np.where(k >= 0, k & 0xFFFFFF, -1)

        return to_os, "os"

    def identity(k: I64) -> I64:
        return k

    return identity, "global"
