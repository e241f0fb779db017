"""The Kineto loader against every real trace (counts checked by an independent stdlib-json
count of the same file) and against hand-built files whose answers are known."""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asynctrace.errors import TraceFormatError
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace
from tests.conftest import KINETO_DIR, shared_trace

# table sizes per real file: runtime, activities, ranges, python frames, device syncs, flows
PINNED: dict[str, tuple[int, int, int, int, int, int]] = {
    "hta_2022_small_base.json.gz": (5, 18, 10, 0, 0, 0),
    "hta_a100_16ranks_rank0_graphlaunch.json.gz": (33924, 7747, 25545, 0, 0, 6875),
    "hta_a100_alexnet_syncs.json.gz": (361, 98, 367, 0, 41, 139),
    "hta_a100_event_sync.json.gz": (12, 5, 11, 0, 4, 7),
    "hta_a100_event_sync_multistream.json.gz": (39, 6, 6, 0, 5, 8),
    "hta_a100_nccl_launchkernelexc.json.gz": (8740, 3774, 14418, 0, 0, 3774),
    "hta_cpu_only_rank34.json.gz": (0, 0, 15, 0, 0, 0),
    "hta_large_integer_edge.json.gz": (0, 1, 1, 0, 0, 0),
    "hta_mi250_hip.json.gz": (21, 16, 75, 0, 0, 16),
    "hta_sampled_rank0.json.gz": (1204, 1204, 2402, 0, 0, 0),
    "hta_sampled_rank1.json.gz": (1154, 1154, 2367, 0, 0, 0),
    "hta_triton_example.json.gz": (2, 1, 4, 0, 0, 1),
    "hta_v100_ns_resolution_rank0.json.gz": (15329, 6095, 23995, 0, 0, 6095),
    "kineto_2021_resnet50_barelist.json.gz": (10800, 9927, 42438, 0, 0, 9162),
    "kineto_synthetic_newest_schema.json": (1, 1, 4, 0, 2, 1),
    "tracelens_b200_compile_culaunchkernelex.json.gz": (1372, 929, 4815, 15230, 0, 929),
    "tracelens_h100_bert_small_with_stack.json.gz": (132, 61, 481, 1385, 0, 61),
    "tracelens_mi300_sglang_decode_hipgraph.json.gz": (29, 558, 63, 821, 0, 14),
    "tracelens_mi300_vllm_graph_replay.json.gz": (20, 434, 101, 984, 0, 13),
}


def _read_json(path: Path) -> Any:
    raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    return json.loads(raw, parse_float=Decimal)


def _events(doc: Any) -> list[dict[str, Any]]:
    return doc if isinstance(doc, list) else doc["traceEvents"]


def _independent_counts(events: list[dict[str, Any]]) -> tuple[int, int, int, int, int, int]:
    """Table sizes by the documented rules, counted without the loader."""
    c: Counter[str] = Counter()
    starts: set[Any] = set()
    ends: list[Any] = []
    for e in events:
        cat = e.get("cat")
        if e.get("ph") == "X" and "ts" in e:
            if cat in ("cuda_runtime", "runtime", "Runtime", "cuda_driver"):
                c["rt"] += 1
            elif str(cat).lower() in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"):
                c["act"] += 1
            elif cat in ("cpu_op", "Operator", "user_annotation", "gpu_user_annotation"):
                c["rng"] += 1
            elif cat == "python_function":
                c["py"] += 1
            elif cat == "cuda_sync":
                c["sync"] += 1
        elif e.get("ph") in ("s", "f") and cat in ("ac2g", "async", "async_cpu_to_gpu"):
            if e["ph"] == "s":
                starts.add(e["id"])
            else:
                ends.append(e["id"])
    flows = sum(1 for i in ends if i in starts)
    return (c["rt"], c["act"], c["rng"], c["py"], c["sync"], flows)


def _sizes(t: Trace) -> tuple[int, int, int, int, int, int]:
    return (
        len(t.runtime),
        len(t.activities),
        len(t.ranges),
        len(t.python_frames),
        len(t.device_syncs),
        len(t.flows),
    )


@pytest.fixture(scope="module")
def loaded() -> dict[str, Trace]:
    if not KINETO_DIR.exists():
        pytest.skip(f"real traces not available at {KINETO_DIR}")
    return {name: load_kineto(KINETO_DIR / name) for name in PINNED}


@pytest.mark.real_traces
@pytest.mark.parametrize("name", sorted(PINNED))
def test_real_trace_table_sizes(name: str, loaded: dict[str, Trace]) -> None:
    path = shared_trace("kineto", name)
    t = loaded[name]
    assert _sizes(t) == PINNED[name]
    assert _sizes(t) == _independent_counts(_events(_read_json(path)))
    for table in (t.runtime, t.activities, t.ranges, t.python_frames, t.device_syncs):
        if len(table):
            assert np.all(np.diff(table.start_ns) >= 0), "tables are sorted by start"
            assert int(table.start_ns.min()) >= 0
    assert t.format == "kineto"


@pytest.mark.real_traces
def test_every_real_kineto_file_is_covered() -> None:
    if not KINETO_DIR.exists():
        pytest.skip(f"real traces not available at {KINETO_DIR}")
    names = {p.name for p in KINETO_DIR.iterdir()} - {"NOT_KINETO_execution_trace.json.gz"}
    assert names == set(PINNED)


@pytest.mark.real_traces
def test_ns_resolution_kept_exactly(loaded: dict[str, Trace]) -> None:
    # 1712195495519689.047 µs is beyond float64's ns precision: compare with exact decimals.
    name = "hta_v100_ns_resolution_rank0.json.gz"
    doc = _read_json(shared_trace("kineto", name))
    t = loaded[name]
    assert t.metadata["timestamps"] == "exact decimal"
    ops = [e for e in _events(doc) if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    want = sorted(int(e["ts"] * 1000) for e in ops)
    got = sorted(
        int(s) + t.origin_ns
        for s, k in zip(t.ranges.start_ns, t.ranges.kind, strict=True)
        if k == 0
    )
    assert got == want
    assert any(w % 1000 for w in want), "the file really has sub-µs digits"
    durs = sorted(int((e["dur"] * 1000).to_integral_value()) for e in ops)
    assert sorted(int(d) for d in t.ranges.dur_ns[t.ranges.kind == RangeKind.OP]) == durs
    # origin: the earliest kept event
    all_x = [e for e in _events(doc) if e.get("ph") == "X" and e.get("cat") != "Trace"]
    assert t.origin_ns == min(int(e["ts"] * 1000) for e in all_x)
    assert t.device_name == "Tesla V100-SXM2-32GB"
    assert (t.rank, t.world_size) == (0, 1)
    steps = t.ranges.step[t.ranges.kind == RangeKind.STEP]
    assert len(steps) == 5


@pytest.mark.real_traces
def test_base_time_nanoseconds_in_origin(loaded: dict[str, Trace]) -> None:
    name = "hta_a100_nccl_launchkernelexc.json.gz"
    doc = _read_json(shared_trace("kineto", name))
    t = loaded[name]
    base = int(doc["baseTimeNanoseconds"])
    first = min(
        Decimal(e["ts"]) * 1000
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") not in ("Trace", None)
    )
    assert t.origin_ns == base + int(first.to_integral_value())
    assert (t.rank, t.world_size) == (0, 2)
    names = Counter(t.name_of(int(n)) for n in t.runtime.name[t.runtime.kind == RuntimeKind.LAUNCH])
    assert names["cudaLaunchKernelExC"] > 0


@pytest.mark.real_traces
@pytest.mark.parametrize(
    ("name", "api", "kind", "count"),
    [
        (
            "hta_a100_16ranks_rank0_graphlaunch.json.gz",
            "cudaGraphLaunch",
            RuntimeKind.GRAPH_LAUNCH,
            70,
        ),
        (
            "hta_a100_16ranks_rank0_graphlaunch.json.gz",
            "cudaStreamSynchronize",
            RuntimeKind.SYNC,
            75,
        ),
        (
            "hta_a100_16ranks_rank0_graphlaunch.json.gz",
            "cudaStreamWaitEvent",
            RuntimeKind.OTHER,
            None,
        ),
        (
            "tracelens_b200_compile_culaunchkernelex.json.gz",
            "cuLaunchKernelEx",
            RuntimeKind.LAUNCH,
            220,
        ),
        (
            "tracelens_b200_compile_culaunchkernelex.json.gz",
            "cudaLaunchKernelExC",
            RuntimeKind.LAUNCH,
            180,
        ),
        ("hta_mi250_hip.json.gz", "hipExtModuleLaunchKernel", RuntimeKind.LAUNCH, None),
        ("hta_mi250_hip.json.gz", "hipDeviceSynchronize", RuntimeKind.SYNC, None),
        (
            "tracelens_mi300_sglang_decode_hipgraph.json.gz",
            "hipGraphLaunch",
            RuntimeKind.GRAPH_LAUNCH,
            None,
        ),
        (
            "tracelens_mi300_vllm_graph_replay.json.gz",
            "hipEventSynchronize",
            RuntimeKind.SYNC,
            None,
        ),
        ("hta_a100_alexnet_syncs.json.gz", "cudaDeviceSynchronize", RuntimeKind.SYNC, 5),
        ("hta_a100_alexnet_syncs.json.gz", "cudaStreamSynchronize", RuntimeKind.SYNC, 16),
    ],
)
def test_runtime_kinds(
    name: str, api: str, kind: RuntimeKind, count: int | None, loaded: dict[str, Trace]
) -> None:
    t = loaded[name]
    doc = _read_json(shared_trace("kineto", name))
    expected = sum(1 for e in _events(doc) if e.get("ph") == "X" and e.get("name") == api)
    assert expected > 0
    if count is not None:
        assert expected == count
    rows = [i for i, n in enumerate(t.runtime.name) if t.name_of(int(n)) == api]
    assert len(rows) == expected
    assert set(t.runtime.kind[rows].tolist()) == {int(kind)}


@pytest.mark.real_traces
def test_bare_list_2021_with_string_tids(loaded: dict[str, Trace]) -> None:
    t = loaded["kineto_2021_resnet50_barelist.json.gz"]
    assert t.device_name == "unknown"
    assert t.rank is None
    # decimal-string tids keep their value, so slices and flows ("4093687616" vs 4093687616) agree
    assert 4093687616 in set(t.runtime.tid.tolist())
    labels = json.loads(t.metadata["id_labels"])
    assert labels["stream 7"] <= -2
    steps = sorted(t.ranges.step[t.ranges.kind == RangeKind.STEP].tolist())
    assert steps == [5, 6, 7, 8, 9, 10]
    kinds = Counter(t.activities.kind.tolist())
    assert kinds == {ActivityKind.KERNEL: 9538, ActivityKind.MEMSET: 377, ActivityKind.MEMCPY: 12}
    # 'async' flows: each matched flow's id is a runtime correlation id
    assert set(t.flows.id.tolist()) <= set(t.runtime.correlation.tolist())


@pytest.mark.real_traces
def test_large_integers_and_null_stream(loaded: dict[str, Trace]) -> None:
    t = loaded["hta_large_integer_edge.json.gz"]
    assert t.activities.stream.tolist() == [-1]
    assert t.activities.correlation.tolist() == [-1]
    assert t.ranges.start_ns.tolist() == [100_000]
    assert t.activities.start_ns.tolist() == [0]
    assert t.origin_ns == 100_000


@pytest.mark.real_traces
def test_cpu_only_trace(loaded: dict[str, Trace]) -> None:
    t = loaded["hta_cpu_only_rank34.json.gz"]
    assert t.device_name == "cpu"
    assert (t.rank, t.world_size) == (34, 300)


@pytest.mark.real_traces
def test_execution_trace_refused() -> None:
    path = shared_trace("kineto", "NOT_KINETO_execution_trace.json.gz")
    with pytest.raises(TraceFormatError, match="PyTorch execution trace") as info:
        load_kineto(path)
    assert info.value.path == str(path)


# -- hand-built files -------------------------------------------------------------------------


def _write(tmp_path: Path, doc: Any, name: str = "t.json", *, indent: int | None = 1) -> Path:
    p = tmp_path / name
    text = json.dumps(doc, indent=indent).encode()
    p.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return p


def _x(cat: str, name: str, ts: Any, dur: Any = 1, **args: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts}
    e["dur"] = dur
    if args:
        e["args"] = args
    return e


def test_hand_built_trace(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#7", 10, 100),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=11),
        {"ph": "s", "cat": "ac2g", "id": 11, "pid": 1, "tid": 2, "ts": 20, "name": "ac2g"},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 40,
            "dur": 3,
            "args": {"stream": 7, "device": 0},
        },
        {
            "ph": "f",
            "cat": "ac2g",
            "id": 11,
            "pid": 0,
            "tid": 7,
            "ts": 40,
            "name": "ac2g",
            "bp": "e",
        },
        _x("cuda_runtime", "cudaStreamSynchronize", 30, 20, correlation=12),
        _x("cuda_sync", "Stream Sync", 35, 15, stream=7, correlation=12),
        _x("python_function", "train.py(3): step", 9, 101),
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    t = load_kineto(_write(tmp_path, {"traceEvents": events, "baseTimeNanoseconds": 5000}))
    assert t.origin_ns == 5000 + 9000
    assert t.ranges.kind.tolist() == [RangeKind.STEP]
    assert t.ranges.step.tolist() == [7]
    assert t.ranges.start_ns.tolist() == [1000]
    assert t.runtime.kind.tolist() == [RuntimeKind.LAUNCH, RuntimeKind.SYNC]
    # the kernel had no correlation: the flow ending on it supplies 11
    assert t.activities.correlation.tolist() == [11]
    assert t.activities.stream.tolist() == [7]
    assert t.flows.id.tolist() == [11]
    assert (t.flows.start_ts_ns.tolist(), t.flows.end_ts_ns.tolist()) == ([11000], [31000])
    assert t.device_syncs.stream.tolist() == [7]
    assert t.python_frames.dur_ns.tolist() == [101000]
    assert t.skipped == {"ph=M": 1}


def test_negative_durations_clamped_and_counted(tmp_path: Path) -> None:
    # As the Nsight Systems loader does: an event with a negative duration is kept at its
    # start with duration 0, and counted, so no figure sees an end before a start (a step's
    # device_ns was negative: first start 50 µs, "last end" 30 µs).
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
        _x("kernel", "k", 50, -20, correlation=1, stream=7, device=0),
        _x("cuda_runtime", "cudaStreamSynchronize", 60, -3),
        _x("cuda_sync", "Stream Sync", 60, -3, stream=7),
        _x("python_function", "train.py(3): step", 0, -1),
        _x("cpu_op", "aten::mm", 5, -2),
    ]
    t = load_kineto(_write(tmp_path, {"traceEvents": events}))
    assert t.activities.dur_ns.tolist() == [0]
    assert t.activities.start_ns.tolist() == [50000]
    assert sorted(t.runtime.dur_ns.tolist()) == [0, 5000]
    assert t.device_syncs.dur_ns.tolist() == [0]
    assert t.python_frames.dur_ns.tolist() == [0]
    assert sorted(t.ranges.dur_ns.tolist()) == [0, 100000]
    assert t.skipped == {
        "activity_negative_duration_clamped": 1,
        "runtime_negative_duration_clamped": 1,
        "device_sync_negative_duration_clamped": 1,
        "python_frame_negative_duration_clamped": 1,
        "range_negative_duration_clamped": 1,
    }


def test_exact_decimal_timestamps_of_any_width(tmp_path: Path) -> None:
    # beyond 2**43 µs with varying digit counts: the per-value exact path
    base = 1712195495519689
    texts = [f"{base}.047", f"{base + 1}.5", f"{base + 2}", f"{base + 3}.0005", f"{base + 4}.0015"]
    body = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1}}'
        for ts in texts
    )
    null_ts = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": null}'
    p = tmp_path / "t.json"
    p.write_text(f'{{"traceEvents": [{body}, {null_ts}]}}')
    t = load_kineto(p)
    want = [int((Decimal(s) * 1000).to_integral_value()) for s in texts]  # half to even
    assert [int(s) + t.origin_ns for s in t.ranges.start_ns] == want
    # 0.5 ns and 1.5 ns round half to even
    assert want[3] % 1000 == 0
    assert want[4] % 1000 == 2
    assert t.skipped["X without ts"] == 1


def test_fractional_us_below_2_43_are_exact_in_float(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ns = rng.integers(0, 2**43 * 1000 - 1, size=2000)
    texts = [f"{n // 1000}.{n % 1000:03d}" for n in ns.tolist()]
    body = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": {s}, "dur": 0.001}}'
        for s in texts
    )
    p = tmp_path / "t.json"
    p.write_text(f'{{"traceEvents": [{body}]}}')
    t = load_kineto(p)
    assert t.metadata["timestamps"] == "float64"
    assert sorted(int(s) + t.origin_ns for s in t.ranges.start_ns) == sorted(ns.tolist())
    assert set(t.ranges.dur_ns.tolist()) == {1}


def test_chunk_cuts_inside_strings_and_nested_objects(tmp_path: Path) -> None:
    tricky = ["a},{b", "}, {", '"},{"', "x}\n,\n{y", "]}", "[{]}"]
    events = []
    for i in range(300):
        name = tricky[i % len(tricky)] + str(i)
        ev = _x("cpu_op", name, 1000 + i, 2, correlation=i)
        ev["args"]["nested"] = [{"a": "},{"}, {"b": [{"c": 1}, {"d": "}]"}]}]
        events.append(ev)
    events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 0, "ts": 5})
    doc = {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "G0"}, {"id": 1, "name": "G1"}],
        "distributedInfo": {"rank": 3, "world_size": 4, "pg_config": [{"ranks": [0, 1]}]},
    }
    for indent in (None, 1):
        p = _write(tmp_path, doc, indent=indent)
        ref = load_kineto(p)
        assert len(ref.ranges) == 300
        assert sorted(ref.strings) == sorted({*(e["name"] for e in events)})
        for chunk in (37, 200, 1000, 4096):
            t = load_kineto(p, chunk_bytes=chunk)
            assert _sizes(t) == _sizes(ref)
            for a, b in ((t.ranges, ref.ranges), (t.activities, ref.activities)):
                assert a.start_ns.tolist() == b.start_ns.tolist()
                assert [t.name_of(int(n)) for n in a.name] == [ref.name_of(int(n)) for n in b.name]
            assert (t.rank, t.world_size, t.device_name) == (3, 4, "G0")


@pytest.mark.real_traces
def test_small_chunks_match_one_chunk_on_a_real_file(loaded: dict[str, Trace]) -> None:
    name = "hta_a100_event_sync_multistream.json.gz"
    ref = loaded[name]
    t = load_kineto(shared_trace("kineto", name), chunk_bytes=500)
    assert _sizes(t) == _sizes(ref)
    assert t.runtime.start_ns.tolist() == ref.runtime.start_ns.tolist()
    assert t.activities.correlation.tolist() == ref.activities.correlation.tolist()
    assert t.device_name == ref.device_name
    assert t.origin_ns == ref.origin_ns


# -- bad input ---------------------------------------------------------------------------------


def _refused(path: Path, match: str, **kwargs: Any) -> TraceFormatError:
    with pytest.raises(TraceFormatError, match=match) as info:
        load_kineto(path, **kwargs)
    assert info.value.path == str(path)
    return info.value


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "empty file"),
        (b"  \n ", "empty file"),
        (b'{"a": 1}', "no traceEvents"),
        (b"[1, 2]", "not a Kineto trace"),
        (b"42", "expected a JSON object or list"),
        (b"hello", "expected a JSON object or list"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1}', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1}]', "truncated JSON"),
        (b'{"traceEvents": [{"ph": "X", "name": "abc', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1},]}', "malformed JSON"),
        (b'[{"ph": "X", "ts": 1}] trailing', "after the closing"),
        (b'[{"a": 1}]', 'no element of the JSON list has a "ph"'),
        (b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}', "not a Kineto trace"),
    ],
)
def test_bad_json_is_refused(tmp_path: Path, content: bytes, match: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    _refused(p, match)


def test_truncated_real_sized_json(tmp_path: Path) -> None:
    events = [_x("cpu_op", f"op{i}", i, 1) for i in range(5000)]
    text = json.dumps({"traceEvents": events}).encode()
    p = tmp_path / "cut.json"
    p.write_bytes(text[: len(text) * 2 // 3])
    _refused(p, "truncated")
    _refused(p, "truncated", chunk_bytes=1000)


def test_truncated_and_corrupt_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"traceEvents": [_x("cpu_op", "op", 1)] * 2000}).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    _refused(p, "truncated gzip")
    bad = bytearray(data)
    bad[30:60] = b"\xff" * 30
    p.write_bytes(bytes(bad))
    _refused(p, "corrupt gzip|malformed|truncated")
    p.write_bytes(data + b"garbage")
    _refused(p, "corrupt gzip")


def test_gzip_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    # 64 MiB of spaces squeezed into ~64 KiB; a 1 MiB limit must stop inflation early
    comp = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    blob = comp.compress(b"[" + b" " * (64 << 20)) + comp.flush()
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(blob)
    assert len(blob) < 1 << 20
    err = _refused(p, "gzip bomb", max_inflated_bytes=1 << 20)
    assert "1,048,576" in err.reason


def test_missing_file(tmp_path: Path) -> None:
    _refused(tmp_path / "nope.json", "no such file")


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_x("cpu_op", "op", i) for i in range(10)]}).encode()
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(text[:50]) + gzip.compress(text[50:]))
    assert len(load_kineto(p).ranges) == 10
