"""The Nsight Systems SQLite loader: real 2022 and 2024 exports, hand-built databases, bad input.

Every pinned figure is checked against an independent SQL query on the same file.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asynctrace.errors import TraceFormatError
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace
from asynctrace.traces.nsys import NSYS_STEP_DOMAIN, load_nsys
from tests.conftest import shared_trace

SAXPY_2022 = "pipit_saxpy_mpi_cuda_nsys2022.sqlite"
CLOVERLEAF_2024 = "pipit_cloverleaf_cuda_nsys2024.sqlite"
CON_KERNEL = "extrap_con_kernel.sqlite"
CONCURRENT16 = "extrap_concurrent16_nvtx_streams.sqlite"
ALL_FILES = (SAXPY_2022, CLOVERLEAF_2024, CON_KERNEL, CONCURRENT16)


@contextmanager
def _sql(path: Path) -> Iterator[sqlite3.Connection]:
    """An independent read-only connection for the reference counts."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as conn:
        conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        conn.create_function("base", 1, lambda s: re.sub(r"_v\d+$", "", s))
        yield conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _count(conn: sqlite3.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def _count_if(conn: sqlite3.Connection, table: str, sql: str) -> int:
    return _count(conn, sql) if table in _tables(conn) else 0


def _names(trace: Trace, column: np.ndarray[Any, Any]) -> list[str]:
    return [trace.strings[i] for i in column.tolist()]


# -- the four real exports -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_FILES)
@pytest.mark.real_traces
def test_counts_match_independent_sql(name: str) -> None:
    path = shared_trace("nsys", name)
    trace = load_nsys(path)
    with _sql(path) as db:
        kernels = _count_if(
            db, "CUPTI_ACTIVITY_KIND_KERNEL", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        )
        memcpys = _count_if(
            db, "CUPTI_ACTIVITY_KIND_MEMCPY", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        )
        memsets = _count_if(
            db, "CUPTI_ACTIVITY_KIND_MEMSET", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET"
        )
        syncs = _count_if(
            db,
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        )
        # one call per (process, correlation id, name without its _v<N> suffix)
        runtime = _count(
            db,
            "SELECT count(*) FROM (SELECT DISTINCT r.globalTid >> 24, r.correlationId, "
            "base(s.value) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId)",
        )
        nvtx = _count_if(
            db,
            "NVTX_EVENTS",
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) "
            "AND end IS NOT NULL",
        )
        streams = {
            int(r[0])
            for t in ("KERNEL", "MEMCPY", "MEMSET")
            if f"CUPTI_ACTIVITY_KIND_{t}" in _tables(db)
            for r in db.execute(f"SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_{t}")
        }
        sync_calls = _count(
            db,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
            "ON s.id = r.nameId WHERE base(s.value) GLOB '*Synchronize'",
        )
    kinds = trace.activities.kind
    assert int(np.count_nonzero(kinds == ActivityKind.KERNEL)) == kernels
    assert int(np.count_nonzero(kinds == ActivityKind.MEMCPY)) == memcpys
    assert int(np.count_nonzero(kinds == ActivityKind.MEMSET)) == memsets
    assert len(trace.device_syncs) == syncs
    assert len(trace.runtime) == runtime
    assert len(trace.ranges) == nvtx
    assert set(trace.activities.stream.tolist()) == streams
    assert int(np.count_nonzero(trace.runtime.kind == RuntimeKind.SYNC)) == sync_calls
    assert trace.format == "nsys"
    # tables come sorted by start and times are relative to the earliest event
    for table in (trace.runtime, trace.activities, trace.ranges, trace.device_syncs):
        assert np.all(np.diff(table.start_ns) >= 0)
        assert np.all(table.dur_ns >= 0)
    starts = [t.start_ns.min() for t in (trace.runtime, trace.activities, trace.ranges) if len(t)]
    assert min(starts) == 0


@pytest.mark.real_traces
def test_pinned_counts() -> None:
    """The figures the report will show, pinned (and equal to the SQL counts above)."""
    pinned = {
        # name: (kernels, memcpy, memset, runtime calls, device syncs, nvtx ranges, streams)
        SAXPY_2022: (5, 15, 0, 57, 0, 22, 1),
        CLOVERLEAF_2024: (1312, 279, 0, 3048, 1312, 0, 1),
        CON_KERNEL: (9, 11, 1, 71, 6, 0, 5),
        CONCURRENT16: (12, 30, 17, 184, 16, 76, 15),
    }
    for name, expected in pinned.items():
        t = load_nsys(shared_trace("nsys", name))
        k = t.activities.kind
        got = (
            int(np.count_nonzero(k == ActivityKind.KERNEL)),
            int(np.count_nonzero(k == ActivityKind.MEMCPY)),
            int(np.count_nonzero(k == ActivityKind.MEMSET)),
            len(t.runtime),
            len(t.device_syncs),
            len(t.ranges),
            len(np.unique(t.activities.stream)),
        )
        assert got == expected, name


@pytest.mark.real_traces
def test_device_name_and_metadata() -> None:
    t = load_nsys(shared_trace("nsys", CLOVERLEAF_2024))
    # four A100s listed, one used: the name is the used one's, once
    assert t.device_name == "NVIDIA A100-SXM4-80GB"
    assert t.metadata["nsys_version"] == "2024.5.1.113"
    t22 = load_nsys(shared_trace("nsys", SAXPY_2022))
    assert t22.device_name == "NVIDIA A100-SXM4-40GB"
    assert t22.metadata["nsys_version"] == "2022.2.1.31"  # from EXPORT_META_DATA (2022 name)
    # the Windows exports also list an Intel and a virtual GPU that ran nothing
    assert load_nsys(shared_trace("nsys", CON_KERNEL)).device_name == (
        "GeForce GTX 1060 with Max-Q Design"
    )


@pytest.mark.real_traces
def test_origin_is_earliest_event() -> None:
    path = shared_trace("nsys", CLOVERLEAF_2024)
    t = load_nsys(path)
    with _sql(path) as db:
        earliest = _count(
            db,
            "SELECT min(start) FROM (SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION ALL "
            "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
            "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
            "SELECT start FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)",
        )
        first_kernel = db.execute(
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1"
        ).fetchone()
    assert t.origin_ns == earliest
    k = np.flatnonzero(t.activities.kind == ActivityKind.KERNEL)[0]
    assert int(t.activities.start_ns[k]) == first_kernel[0] - earliest
    assert int(t.activities.dur_ns[k]) == first_kernel[1] - first_kernel[0]


@pytest.mark.real_traces
def test_pids_and_tids_from_global_ids() -> None:
    path = shared_trace("nsys", SAXPY_2022)
    t = load_nsys(path)
    with _sql(path) as db:
        gtid = _count(db, "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        os_pid = _count(db, f"SELECT pid FROM PROCESSES WHERE globalPid >> 24 = {gtid >> 24}")
    assert set(t.runtime.pid.tolist()) == {os_pid}
    assert set(t.activities.pid.tolist()) == {os_pid}
    assert set(t.runtime.tid.tolist()) == {gtid & 0xFFFFFF}
    assert t.metadata["pid_encoding"] == "os"


# -- the traps ------------------------------------------------------------------------------------


@pytest.mark.real_traces
def test_duplicate_runtime_rows_2022() -> None:
    """cudaLaunchKernel and cudaLaunchKernel_v7000 share a correlation id: one call kept."""
    path = shared_trace("nsys", SAXPY_2022)
    t = load_nsys(path)
    with _sql(path) as db:
        raw = _count(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        distinct = _count(
            db, "SELECT count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )
        # per correlation id, the widest of its rows
        widest = {
            int(c): (int(s), int(e))
            for c, s, e in db.execute(
                "SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME r1 WHERE "
                "end - start = (SELECT max(end - start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r2 "
                "WHERE r2.correlationId = r1.correlationId)"
            )
        }
    assert (raw, distinct) == (95, 57)  # the trap is really in the file
    assert len(t.runtime) == 57
    assert t.skipped["duplicate_runtime_rows"] == 38
    assert len(np.unique(t.runtime.correlation)) == 57
    names = _names(t, t.runtime.name)
    assert not any(re.search(r"_v\d+$", n) for n in names)
    assert names.count("cudaLaunchKernel") == 5
    got = {
        int(c): (int(s) + t.origin_ns, int(s + d) + t.origin_ns)
        for c, s, d in zip(t.runtime.correlation, t.runtime.start_ns, t.runtime.dur_ns, strict=True)
    }
    assert got == widest
    launches = t.runtime.kind == RuntimeKind.LAUNCH
    assert int(np.count_nonzero(launches)) == 5
    assert int(np.count_nonzero(t.runtime.kind == RuntimeKind.BLOCKING_MEMCPY)) == 15


@pytest.mark.real_traces
def test_kernels_starting_before_their_launch_returns_are_kept() -> None:
    for name, expected in ((SAXPY_2022, 2), (CLOVERLEAF_2024, 5)):
        path = shared_trace("nsys", name)
        t = load_nsys(path)
        with _sql(path) as db:
            early = _count(
                db,
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.start < "
                "(SELECT max(r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                "WHERE r.correlationId = k.correlationId)",
            )
        assert early == expected
        rt_end = dict(
            zip(
                t.runtime.correlation.tolist(),
                (t.runtime.start_ns + t.runtime.dur_ns).tolist(),
                strict=True,
            )
        )
        k = t.activities.kind == ActivityKind.KERNEL
        kept_early = sum(
            1
            for c, s in zip(
                t.activities.correlation[k].tolist(), t.activities.start_ns[k].tolist(), strict=True
            )
            if s < rt_end[c]
        )
        assert kept_early == expected


@pytest.mark.real_traces
def test_sync_type_codes_are_ignored_names_rule() -> None:
    """The 2024 export labels each cudaDeviceSynchronize "Event sync": we go by the call name."""
    path = shared_trace("nsys", CLOVERLEAF_2024)
    t = load_nsys(path)
    with _sql(path) as db:
        label = db.execute(
            "SELECT DISTINCT e.label FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y "
            "JOIN ENUM_CUPTI_SYNC_TYPE e ON e.id = y.syncType"
        ).fetchall()
    assert label == [("Event sync",)]
    by_corr = dict(zip(t.runtime.correlation.tolist(), range(len(t.runtime)), strict=True))
    for c in t.device_syncs.correlation.tolist():
        i = by_corr[c]
        assert t.strings[t.runtime.name[i]] == "cudaDeviceSynchronize"
        assert t.runtime.kind[i] == RuntimeKind.SYNC
    assert np.all(t.device_syncs.stream == -1)  # CUPTI's 0xFFFFFFFF: no stream


@pytest.mark.real_traces
def test_cloverleaf_every_kernel_followed_by_device_synchronize() -> None:
    t = load_nsys(shared_trace("nsys", CLOVERLEAF_2024))
    rt = t.runtime
    launch = np.flatnonzero(rt.kind == RuntimeKind.LAUNCH)
    assert len(launch) == 1312
    assert int(np.count_nonzero(rt.kind == RuntimeKind.SYNC)) == 1312
    assert len(set(rt.tid.tolist())) == 1  # one host thread: "next call" is well defined
    assert np.all(launch + 1 < len(rt))
    nxt = launch + 1
    assert all(t.strings[i] == "cudaDeviceSynchronize" for i in rt.name[nxt].tolist())
    # each kernel (joined by correlation id) ends before the synchronize after its launch returns
    act = t.activities
    k = np.flatnonzero(act.kind == ActivityKind.KERNEL)
    pos = {c: i for i, c in enumerate(act.correlation[k].tolist())}
    idx = k[[pos[c] for c in rt.correlation[launch].tolist()]]
    assert len(set(act.correlation[k].tolist())) == 1312
    kernel_end = act.start_ns[idx] + act.dur_ns[idx]
    assert np.all(kernel_end <= rt.start_ns[nxt] + rt.dur_ns[nxt])
    # hence never more than one kernel launched and unfinished: the next launch comes later
    assert np.all(rt.start_ns[launch[1:]] >= kernel_end[:-1])


@pytest.mark.real_traces
def test_unmatched_kernels_are_kept() -> None:
    """extrap's con_kernel file carries two synthetic kernels whose ids no call has."""
    path = shared_trace("nsys", CON_KERNEL)
    t = load_nsys(path)
    with _sql(path) as db:
        orphans = _count(
            db,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT EXISTS (SELECT 1 FROM "
            "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId)",
        )
    known = set(t.runtime.correlation.tolist())
    k = t.activities.kind == ActivityKind.KERNEL
    assert orphans == 2
    assert sum(c not in known for c in t.activities.correlation[k].tolist()) == 2


@pytest.mark.real_traces
def test_nvtx_ranges_names_and_rank() -> None:
    path = shared_trace("nsys", SAXPY_2022)
    t = load_nsys(path)
    with _sql(path) as db:
        expected = sorted(
            str(r[0])
            for r in db.execute(
                "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                "ON s.id = e.textId WHERE e.eventType = 59"
            )
        )
    assert sorted(_names(t, t.ranges.name)) == expected
    assert _names(t, t.ranges.name).count("MPI_Send") == 10  # registered strings (textId)
    assert np.all(t.ranges.kind == RangeKind.NVTX)
    assert t.rank == 0  # the "MPI Rank 0" thread name


# -- speed ---------------------------------------------------------------------------------------


@pytest.mark.real_traces
def test_2024_file_loads_fast() -> None:
    path = shared_trace("nsys", CLOVERLEAF_2024)
    load_nsys(path)  # warm the page cache and imports
    # CPU time, not wall time: a loaded machine stretches the wall clock, not the work
    t0 = time.process_time()
    load_nsys(path)
    cpu_s = time.process_time() - t0
    # ~6,000 rows; measured ~30 ms here. A generous bound that still catches per-row slowness.
    assert cpu_s < 1.0


# -- hand-built databases with known answers -----------------------------------------------

_SCHEMAS = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER, end INTEGER, deviceId INTEGER, "
    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
    "shortName INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER, end INTEGER, deviceId INTEGER, "
    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, copyKind INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start INTEGER, end INTEGER, deviceId INTEGER, "
    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER, end INTEGER, eventClass INTEGER, "
    "globalTid INTEGER, correlationId INTEGER, nameId INTEGER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "start INTEGER, end INTEGER, deviceId INTEGER, "
    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER",
    "NVTX_EVENTS": "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
    "globalTid INTEGER, textId INTEGER, domainId INTEGER",
    "TARGET_INFO_GPU": "id INTEGER, name TEXT",
    "TARGET_INFO_CUDA_DEVICE": "gpuId INTEGER, cudaId INTEGER, pid INTEGER",
}


def _make_db(path: Path, rows: dict[str, Sequence[tuple[Any, ...]]]) -> Path:
    with closing(sqlite3.connect(path)) as conn:
        for table, data in rows.items():
            conn.execute(f"CREATE TABLE {table} ({_SCHEMAS[table]})")
            if data:
                marks = ", ".join("?" * len(data[0]))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
        conn.commit()
    return path


def _gtid(pid: int, tid: int) -> int:
    # nsys serialization: bit 48 set (hardware/VM id), pid in bits 24..47, tid in 0..23
    return (1 << 48) | (pid << 24) | tid


def test_hand_built_export(tmp_path: Path) -> None:
    pid, tid = 4242, 4243
    g, gp = _gtid(pid, tid), _gtid(pid, 0)
    strings = [
        (1, "cudaLaunchKernel_v7000"),
        (2, "cudaLaunchKernel"),
        (3, "void kern<int>(int)"),
        (4, "kern"),
        (5, "cudaMemcpyAsync_v3020"),
        (6, "cudaStreamSynchronize_v3020"),
        (7, "step 7"),
        (8, "cudaMemsetAsync_v3020"),
    ]
    db = _make_db(
        tmp_path / "built.sqlite",
        {
            "StringIds": strings,
            "CUPTI_ACTIVITY_KIND_RUNTIME": [
                (1000, 1100, 0, g, 10, 1),  # launch, inner row
                (990, 1110, 67, g, 10, 2),  # same call, outer row: the one kept
                (1200, 1250, 0, g, 11, 5),
                (1300, 1320, 0, g, 13, 8),
                (1400, 2000, 0, g, 12, 6),
            ],
            "CUPTI_ACTIVITY_KIND_KERNEL": [(1050, 1500, 0, 7, 10, gp, 3, 4)],
            "CUPTI_ACTIVITY_KIND_MEMCPY": [(1510, 1600, 0, 7, 11, gp, 2)],
            "CUPTI_ACTIVITY_KIND_MEMSET": [(1610, 1620, 0, 8, 13, gp)],
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [(1401, 1999, 0, 0xFFFFFFFF, 12, gp, 1)],
            "NVTX_EVENTS": [
                (500, None, 75, NSYS_STEP_DOMAIN, g, None, 1),  # domain create
                (900, 2100, 59, None, g, 7, 1),  # "step 7" in domain asynctrace
                (950, 2050, 59, "step 8", g, None, 0),  # "step 8" in the default domain: NVTX
                (960, 2040, 60, "ProfilerStep#3", g, None, 0),
                (970, None, 59, "never popped", g, None, 0),
            ],
            "TARGET_INFO_GPU": [(1, "Other GPU"), (0, "Test GPU")],
        },
    )
    t = load_nsys(db)
    assert t.origin_ns == 900
    assert t.device_name == "Test GPU"
    assert t.skipped == {"duplicate_runtime_rows": 1, "nvtx_unended": 1}

    rt = t.runtime
    assert _names(t, rt.name) == [
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaStreamSynchronize",
    ]
    assert rt.start_ns.tolist() == [90, 300, 400, 500]
    assert rt.dur_ns.tolist() == [120, 50, 20, 600]
    assert rt.kind.tolist() == [
        RuntimeKind.LAUNCH,
        RuntimeKind.MEMCPY,
        RuntimeKind.MEMSET,
        RuntimeKind.SYNC,
    ]
    assert rt.pid.tolist() == [pid] * 4
    assert rt.tid.tolist() == [tid] * 4
    assert rt.correlation.tolist() == [10, 11, 13, 12]

    act = t.activities
    assert _names(t, act.name) == ["void kern<int>(int)", "Memcpy DtoH", "Memset"]
    assert act.kind.tolist() == [ActivityKind.KERNEL, ActivityKind.MEMCPY, ActivityKind.MEMSET]
    assert act.start_ns.tolist() == [150, 610, 710]
    assert act.dur_ns.tolist() == [450, 90, 10]
    assert act.stream.tolist() == [7, 7, 8]
    assert act.pid.tolist() == [pid] * 3
    assert act.correlation.tolist() == [10, 11, 13]

    ds = t.device_syncs
    assert (ds.start_ns.tolist(), ds.dur_ns.tolist(), ds.stream.tolist()) == ([501], [598], [-1])
    assert ds.correlation.tolist() == [12]

    rg = t.ranges
    assert _names(t, rg.name) == ["step 7", "step 8", "ProfilerStep#3"]
    assert rg.kind.tolist() == [RangeKind.STEP, RangeKind.NVTX, RangeKind.STEP]
    assert rg.step.tolist() == [7, -1, 3]
    assert rg.start_ns.tolist() == [0, 50, 60]
    assert rg.dur_ns.tolist() == [1200, 1100, 1080]


def test_step_domain_matches_capture_ranges() -> None:
    ranges = pytest.importorskip("asynctrace.capture.ranges")
    assert ranges.DOMAIN == NSYS_STEP_DOMAIN


def test_shared_os_pid_falls_back_to_global_keys(tmp_path: Path) -> None:
    """Two hosts' processes with one OS pid (a merged report) must not be joined together."""
    a, b = (1 << 48) | (77 << 24) | 1, (2 << 48) | (77 << 24) | 1
    db = _make_db(
        tmp_path / "two_hosts.sqlite",
        {
            "StringIds": [(1, "cudaLaunchKernel_v7000"), (2, "k")],
            "CUPTI_ACTIVITY_KIND_RUNTIME": [(0, 10, 0, a, 5, 1), (0, 10, 0, b, 5, 1)],
            "CUPTI_ACTIVITY_KIND_KERNEL": [
                (20, 30, 0, 7, 5, a & ~0xFFFFFF, 2, 2),
                (25, 35, 0, 7, 5, b & ~0xFFFFFF, 2, 2),
            ],
        },
    )
    t = load_nsys(db)
    assert t.metadata["pid_encoding"] == "global"
    assert len(t.runtime) == 2  # same correlation id, different processes: both kept
    assert sorted(t.runtime.pid.tolist()) == sorted([a >> 24, b >> 24])
    assert sorted(t.activities.pid.tolist()) == sorted([a >> 24, b >> 24])


def test_non_utf8_strings_are_decoded_leniently(tmp_path: Path) -> None:
    db = tmp_path / "latin1.sqlite"
    _make_db(db, {"StringIds": [], "CUPTI_ACTIVITY_KIND_RUNTIME": []})
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO StringIds VALUES (1, CAST(X'4765698B' AS TEXT))")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 5, 0, 1, 1, 1)")
        conn.commit()
    t = load_nsys(db)
    assert t.strings[t.runtime.name[0]] == "Gei\ufffd"


def test_missing_kernel_table_is_a_trace_without_kernels(tmp_path: Path) -> None:
    """nsys writes a table only when it has rows: no kernel table is a valid export."""
    db = _make_db(
        tmp_path / "nokernels.sqlite",
        {
            "StringIds": [(1, "cudaMalloc_v3020")],
            "CUPTI_ACTIVITY_KIND_RUNTIME": [(100, 200, 0, _gtid(1, 1), 1, 1)],
        },
    )
    t = load_nsys(db)
    assert len(t.activities) == 0
    assert len(t.runtime) == 1
    assert t.device_name == "unknown"


# -- bad input -------------------------------------------------------------------------------


def test_random_bytes_named_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "random.sqlite"
    bad.write_bytes(np.random.default_rng(0).bytes(8192))
    with pytest.raises(TraceFormatError, match="not a readable SQLite database") as info:
        load_nsys(bad)
    assert info.value.path == str(bad)


def test_text_file_named_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "trace.sqlite"
    bad.write_text('{"traceEvents": []}')
    with pytest.raises(TraceFormatError, match="SQLite"):
        load_nsys(bad)


def test_empty_database(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(TraceFormatError, match="no StringIds table"):
        load_nsys(empty)
    other = _make_db(tmp_path / "other.sqlite", {})
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(TraceFormatError, match="not an Nsight Systems SQLite export"):
        load_nsys(other)


def test_export_without_cuda_or_nvtx_data(tmp_path: Path) -> None:
    db = _make_db(tmp_path / "osrt_only.sqlite", {"StringIds": [(1, "read")]})
    with pytest.raises(TraceFormatError, match="no CUDA or NVTX data"):
        load_nsys(db)


def test_table_missing_a_required_column(tmp_path: Path) -> None:
    db = tmp_path / "odd.sqlite"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"CREATE TABLE StringIds ({_SCHEMAS['StringIds']})")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (begin INTEGER, finish INTEGER)")
        conn.commit()
    with pytest.raises(TraceFormatError, match="lacks column"):
        load_nsys(db)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_nsys(tmp_path / "nope.sqlite")
    with pytest.raises(TraceFormatError, match="no such file"):
        load_nsys(tmp_path)  # a folder is not an export either


@pytest.mark.parametrize(
    ("table", "row"),
    [
        ("CUPTI_ACTIVITY_KIND_KERNEL", (10, None, 0, 7, 1, 0, 1, 1)),  # no end
        ("CUPTI_ACTIVITY_KIND_KERNEL", ("soon", 20, 0, 7, 1, 0, 1, 1)),  # text time
        ("NVTX_EVENTS", (None, 20, 59, "r", 1, None, 0)),  # no start
    ],
)
def test_malformed_values(tmp_path: Path, table: str, row: tuple[Any, ...]) -> None:
    db = _make_db(tmp_path / "malformed.sqlite", {"StringIds": [(1, "k")], table: [row]})
    with pytest.raises(TraceFormatError, match=r"NULL or non-integer|malformed values"):
        load_nsys(db)


def test_device_name_through_cuda_device_table(tmp_path: Path) -> None:
    """CUDA ordinal 0 of the process is GPU 2 of the machine (CUDA_VISIBLE_DEVICES=2)."""
    db = _make_db(
        tmp_path / "visible.sqlite",
        {
            "StringIds": [(1, "k")],
            "CUPTI_ACTIVITY_KIND_KERNEL": [(0, 10, 0, 7, 1, _gtid(5, 0), 1, 1)],
            "TARGET_INFO_GPU": [(0, "GPU zero"), (2, "GPU two")],
            "TARGET_INFO_CUDA_DEVICE": [(2, 0, 5)],
        },
    )
    assert load_nsys(db).device_name == "GPU two"


def test_negative_durations_of_every_activity_table_are_counted(tmp_path: Path) -> None:
    # kernels, copies and memsets all count as "activity": the counts add up (the last table's
    # count used to replace the others')
    gp = _gtid(4242, 0)
    db = _make_db(
        tmp_path / "negative.sqlite",
        {
            "StringIds": [(3, "kern")],
            "CUPTI_ACTIVITY_KIND_KERNEL": [
                (1000, 900, 0, 7, 10, gp, 3, 3),
                (2000, 1500, 0, 7, 11, gp, 3, 3),
            ],
            "CUPTI_ACTIVITY_KIND_MEMCPY": [(3000, 2990, 0, 7, 12, gp, 1)],
            "CUPTI_ACTIVITY_KIND_MEMSET": [(4000, 4010, 0, 7, 13, gp)],
        },
    )
    t = load_nsys(db)
    assert t.skipped["activity_negative_duration_clamped"] == 3
    assert t.activities.dur_ns.tolist() == [0, 0, 0, 10]
