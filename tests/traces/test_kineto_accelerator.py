"""The compiled Kineto accelerator (``_kineto_fast.c``) against the reference Python path.

The contract: for any input, ``load_kineto(p, accelerate=True)`` and ``accelerate=False`` give
the same :class:`Trace` (every column with the same dtype and bytes, the same strings,
metadata, skipped counts...) or raise :class:`TraceFormatError` with the same message. The
accelerator may give a chunk up to the reference path whenever it likes; reading a value
differently, or accepting what the reference path refuses, is a bug.

Checked on every real trace (and that the big ones are filed by the accelerator, so that a
silent fall back to the slow path is caught), on the committed fuzz corpus, on generated
events of every shape (hypothesis, derandomized), on byte-level mutations of those, and on
pinned tricky inputs.

Without the compiled extension the module is skipped, unless ``ASYNCTRACE_REQUIRE_ACCELERATOR=1``
(CI), where its absence is an error.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynctrace.errors import TraceFormatError
from asynctrace.traces import kineto
from asynctrace.traces.kineto import DEFAULT_CHUNK_BYTES, HAVE_ACCELERATOR, load_kineto
from tests.conftest import KINETO_DIR, examples
from tests.fuzz._mutators import CORPUS, KINETO_OPS, Op, kineto_corpus_seeds, mutate_kineto

if not HAVE_ACCELERATOR:
    if os.environ.get("ASYNCTRACE_REQUIRE_ACCELERATOR") == "1":
        pytest.fail(
            "ASYNCTRACE_REQUIRE_ACCELERATOR=1 but asynctrace.traces._kineto_fast did not import "
            "(the C extension was not built: pip install -e . needs a C compiler)",
            pytrace=False,
        )
    pytest.skip(
        "the Kineto accelerator (asynctrace.traces._kineto_fast) is not compiled",
        allow_module_level=True,
    )


# --------------------------------------------------------------------------------------------
# Loading both ways and comparing


def snapshot(obj: Any) -> Any:
    """A comparable form of a Trace: Struct fields walked, arrays as (dtype, shape, bytes)."""
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, msgspec.Struct):
        return (
            type(obj).__name__,
            {n: snapshot(getattr(obj, n)) for n in obj.__struct_fields__},
        )
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return (type(obj).__name__, tuple(snapshot(v) for v in obj))
    return obj


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two snapshots first differ (for a readable failure), or None."""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} != {type(b).__name__}: {a!r:.300} vs {b!r:.300}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a, key=repr)} != {sorted(b, key=repr)}"
        for k in a:
            d = first_difference(a[k], b[k], f"{where}.{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, tuple) and a and a[0] == "ndarray" and len(a) == 4:
        if a != b:
            _, dt, shape, raw = a
            _, dt2, shape2, raw2 = b
            if (dt, shape) != (dt2, shape2):
                return f"{where}: dtype/shape {dt}{shape} != {dt2}{shape2}"
            x = np.frombuffer(raw, dtype=dt).reshape(shape)
            y = np.frombuffer(raw2, dtype=dt).reshape(shape)
            i = int(np.flatnonzero(x != y)[0])
            return f"{where}[{i}]: {x[i]!r} != {y[i]!r}"
        return None
    if isinstance(a, tuple):
        if len(a) != len(b):
            return f"{where}: length {len(a)} != {len(b)}: {a!r:.300} vs {b!r:.300}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d is not None:
                return d
        return None
    return None if a == b else f"{where}: {a!r:.300} != {b!r:.300}"


@dataclasses.dataclass
class Loaded:
    outcome: tuple[str, Any]  # ("trace", snapshot) or ("error", message)
    fast_chunks: int
    slow_chunks: int


@contextmanager
def _counting_loaders() -> Iterator[list[Any]]:
    """Record every ``_Loader`` that runs inside the block (to read its chunk counters)."""
    seen: list[Any] = []
    original = kineto._Loader.run

    def run(self: Any) -> Any:
        seen.append(self)
        return original(self)

    kineto._Loader.run = run  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        kineto._Loader.run = original  # type: ignore[method-assign]


@contextmanager
def _small_cuts(enabled: bool) -> Iterator[None]:
    """Let a small file be cut into many chunks of about ``chunk_bytes``: by default the last
    MiB is kept back for the end of the array, and a decode covers at least 64 KiB."""
    if not enabled:
        yield
        return
    saved = {name: getattr(kineto, name) for name in ("_TAIL_BYTES", "_MIN_CUT_BYTES")}
    kineto._TAIL_BYTES = 16
    kineto._MIN_CUT_BYTES = 1
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(kineto, name, value)


def load_both_ways(
    path: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, **kw: Any
) -> tuple[Loaded, Loaded]:
    """Load ``path`` with and without the accelerator. A ``chunk_bytes`` below the default
    also cuts small files into chunks of about that size (see ``_small_cuts``)."""
    out = []
    for accelerate in (True, False):
        with _counting_loaders() as seen, _small_cuts(chunk_bytes < DEFAULT_CHUNK_BYTES):
            try:
                trace = load_kineto(path, chunk_bytes=chunk_bytes, accelerate=accelerate, **kw)
                outcome: tuple[str, Any] = ("trace", snapshot(trace))
            except TraceFormatError as e:
                outcome = ("error", str(e))
        fast = sum(loader.fast_chunks for loader in seen)
        slow = sum(loader.slow_chunks for loader in seen)
        out.append(Loaded(outcome, fast, slow))
    assert out[1].fast_chunks == 0, "accelerate=False must not use the accelerator"
    return out[0], out[1]


def assert_same(path: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, **kw: Any) -> Loaded:
    """Load ``path`` both ways, assert identical outcomes; the accelerated one's counters."""
    fast, ref = load_both_ways(path, chunk_bytes=chunk_bytes, **kw)
    diff = first_difference(fast.outcome, ref.outcome)
    if diff is not None:
        size = path.stat().st_size
        head = path.read_bytes()[:600] if size else b""
        pytest.fail(
            f"accelerated and reference loads differ on {path.name} ({size} bytes, "
            f"chunk_bytes={chunk_bytes}): {diff}\n"
            f"accelerated: {_short(fast.outcome)}\nreference:   {_short(ref.outcome)}\n"
            f"input starts: {head!r}",
            pytrace=False,
        )
    return fast


def _short(outcome: tuple[str, Any]) -> str:
    if outcome[0] == "error":
        return f"error {outcome[1]!r}"
    return "trace"


# --------------------------------------------------------------------------------------------
# Real traces

#: real traces large enough that every chunk must go through the accelerator
BIG_REAL_TRACES = (
    "hta_a100_16ranks_rank0_graphlaunch.json.gz",
    "hta_v100_ns_resolution_rank0.json.gz",
    "tracelens_b200_compile_culaunchkernelex.json.gz",
    "kineto_2021_resnet50_barelist.json.gz",
    "hta_a100_nccl_launchkernelexc.json.gz",
)


def _real_kineto_files() -> list[str]:
    if not KINETO_DIR.is_dir():
        return []
    return sorted(p.name for p in KINETO_DIR.iterdir() if p.is_file())


def _real_trace(name: str) -> Path:
    path = KINETO_DIR / name
    if not path.exists():
        pytest.skip(f"real trace {path} not available (../shared/traces is absent)")
    return path


@pytest.mark.real_traces
def test_real_traces_are_present() -> None:
    if not KINETO_DIR.is_dir():
        pytest.skip(f"real traces not available ({KINETO_DIR} is absent on a user's clone)")
    names = set(_real_kineto_files())
    assert set(BIG_REAL_TRACES) <= names


@pytest.mark.real_traces
@pytest.mark.parametrize("name", _real_kineto_files() or ["(none)"])
def test_real_trace_same_both_ways(name: str) -> None:
    if name == "(none)":
        pytest.skip(f"real traces not available ({KINETO_DIR} is absent on a user's clone)")
    got = assert_same(_real_trace(name))
    if name in BIG_REAL_TRACES:
        assert got.outcome[0] == "trace"
        assert got.fast_chunks > 0
        assert got.slow_chunks == 0, (
            f"{got.slow_chunks} of {got.fast_chunks + got.slow_chunks} chunks fell back to "
            "the Python path: the accelerator gave up on real Kineto text"
        )


@pytest.mark.real_traces
@pytest.mark.parametrize(
    ("name", "chunk_bytes"),
    [
        ("hta_a100_alexnet_syncs.json.gz", 4096),
        ("tracelens_h100_bert_small_with_stack.json.gz", 3000),
        ("hta_sampled_rank0.json.gz", 65536),
        ("hta_mi250_hip.json.gz", 700),
    ],
)
def test_real_trace_small_chunks(name: str, chunk_bytes: int) -> None:
    # many cuts, each chunk filed on its own (names and labels carried across chunks)
    got = assert_same(_real_trace(name), chunk_bytes=chunk_bytes)
    assert got.fast_chunks > 1


# --------------------------------------------------------------------------------------------
# The committed fuzz corpus

_CORPUS_FILES = sorted(p.name for p in (CORPUS / "kineto").iterdir() if p.is_file())


@pytest.mark.parametrize("name", _CORPUS_FILES)
def test_corpus_file_same_both_ways(name: str) -> None:
    path = CORPUS / "kineto" / name
    assert_same(path)
    assert_same(path, chunk_bytes=512)


_SEEDS = kineto_corpus_seeds()


def test_accelerator_seed_is_filed_by_the_accelerator() -> None:
    # the corpus seed of tricky but well-formed shapes (escapes, unicode, labels, every table)
    got = assert_same(CORPUS / "kineto" / "seed_accel_edge_shapes.json")
    assert got.outcome[0] == "trace"
    assert got.fast_chunks > 0
    assert got.slow_chunks == 0


@pytest.mark.parametrize("op", KINETO_OPS)
def test_every_corpus_mutation_same_both_ways(tmp_path: Path, op: str) -> None:
    # each mutation kind of the fuzz tests, once on every seed
    path = tmp_path / "case.json"
    for _, doc in _SEEDS:
        path.write_bytes(mutate_kineto(doc, [Op(op, 7, 11, 13)]))
        assert_same(path, max_inflated_bytes=4 << 20)


# --------------------------------------------------------------------------------------------
# Generated events
#
# Events are written as raw JSON text (not json.dumps), so that they can hold what real files
# and broken files hold: escapes, lone surrogates, invalid UTF-8, exponents, numbers beyond
# int64 and float64, duplicate and escaped keys, odd whitespace.

MISSING = b"<missing>"

_CATS = (
    b'"kernel"',
    b'"cuda_runtime"',
    b'"cuda_driver"',
    b'"cpu_op"',
    b'"user_annotation"',
    b'"gpu_user_annotation"',
    b'"python_function"',
    b'"cuda_sync"',
    b'"gpu_memcpy"',
    b'"gpu_memset"',
    b'"ac2g"',
    b'"async"',
    b'"fwdbwd"',
    b'"Kernel"',
    b'"Runtime"',
    b'"Operator"',
    b'"unknown"',
    b'""',
    b'"k\\u00e9rnel"',
    b'"ker\\u006eel"',
    b'"kern\xc3\xa9l"',
    b"null",
    MISSING,
    b"7",
)
_PHS = (
    b'"X"',
    b'"X"',
    b'"X"',
    b'"s"',
    b'"f"',
    b'"i"',
    b'"M"',
    b'"C"',
    b'""',
    MISSING,
    b"null",
    b"5",
    b'"\\u0058"',
    b'"\xc3\xa9"',
    b'"XX"',
)
_NAMES = (
    b'"cudaLaunchKernel"',
    b'"cuLaunchKernelEx"',
    b'"cudaStreamSynchronize"',
    b'"cudaGraphLaunch"',
    b'"void gemm<float>(int)"',
    b'"aten::mm"',
    b'"ProfilerStep#3"',
    b'"ProfilerStep#99999999999999999999"',
    b'"Memcpy DtoH (Device -> Pinned)"',
    b'""',
    b'"a\\nb\\t\\"q\\"\\\\ \\/"',
    b'"caf\\u00e9"',
    b'"caf\xc3\xa9"',
    b'"\\ud83d\\ude00 emoji"',
    b'"\xf0\x9f\x98\x80 emoji"',
    b'"' + b"long \\n\\u00e9 \xc3\xa9 " * 40 + b'"',
    b'"lone \\ud800"',
    b'"lone \\udc00 low"',
    b'"bad \xff utf8"',
    b'"overlong \xc0\xaf"',
    b'"nul \\u0000"',
    b'"ctl \x01"',
    b'"},{\\"ph\\":\\"X\\"}"',
    b'"},{"',
    b"null",
    MISSING,
    b"12",
)
_IDS = (
    b"0",
    b"1",
    b"7",
    b"12345",
    b"-1",
    b"-3",
    b"4093687616",
    b"9223372036854775807",
    b"9223372036854775808",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b'"123"',
    b'" 7 "',
    b'"-5"',
    b'"Spans"',
    b'"Traces"',
    b'""',
    b'"\xc2\xb2"',
    b'"l\\u00e4bel"',
    b'"l\xc3\xa4bel"',
    b"null",
    MISSING,
    b"1.0",
    b"1.5",
    b"1e2",
    b"true",
    b"[1]",
)
_ARG_VALUES = (
    b"0",
    b"1",
    b"7",
    b"12345",
    b"-1",
    b"9223372036854775807",
    b"18446744073709551616",
    b"1.0",
    b"1.5",
    b"2e3",
    b'"7"',
    b'"abc"',
    b'" 12 "',
    b"true",
    b"false",
    b"null",
    b'{"x": [1, {"y": null}]}',
    b"[]",
)
_EXTRA_VALUES = (
    b'"e"',
    b"1",
    b'{"a": [1, 2.5, {"b": [true, false, null]}], "c": "\\u00e9"}',
    b"-0.5e-3",
    b"1e999",
    b"123456789012345678901234567890",
    b"[[[[[]]]]]",
    b'"\\ud800"',
    b'"\xff"',
    b"null",
    b'"},{"',
)
_EXTRA_KEYS = (b'"bp"', b'"s"', b'"External id"', b'"nested"', b'"\\u0070id"', b'"p\\u0068"')
_WS = (b"", b"", b"", b" ", b"\n", b"  ", b"\t", b"\r\n")


def _decimal(draw: Callable[[Any], Any], lo: int, hi: int) -> bytes:
    ip = draw(st.integers(lo, hi))
    digits = draw(st.integers(0, 6))
    if not digits:
        return b"%d" % ip
    frac = draw(st.integers(0, 10**digits - 1))
    return b"%d.%0*d" % (ip, digits, frac)


def _coin(draw: Callable[[Any], Any], p: float) -> bool:
    return p > 0 and draw(st.integers(0, 999)) < p * 1000


@st.composite
def times(draw: Callable[[Any], Any], epoch: bool, weird: float) -> bytes:
    """A ``ts`` or ``dur`` value: what Kineto writes or, with probability ``weird``, anything."""
    if _coin(draw, weird):
        return draw(st.sampled_from(_WEIRD_TIMES))
    kind = draw(st.integers(0, 11))
    if kind < 7:
        if epoch:
            # epoch µs with ns decimals: beyond float64's ns precision
            return b"%d.%03d" % (
                draw(st.integers(1_700_000_000_000_000, 1_700_000_100_000_000)),
                draw(st.integers(0, 999)),
            )
        return b"%d" % draw(st.integers(0, 10**7))
    return _decimal(draw, -(10**4) if kind == 11 else 0, 10**10)


_WEIRD_TIMES = (
    b"0",
    b"-0",
    b"-0.0",
    b"1.5e3",
    b"15E-1",
    b"1e999",
    b"-1e999",
    b"1e-999",
    b"1e999999999",
    b"1" + b"0" * 400 + b".5",
    b"0." + b"0" * 400 + b"1",
    b"1712195495519689.047",
    b"1712195495519689",
    b"1712195495519689.5",
    b"1712195495519689.0471",
    b"-1712195495519689.047",
    b"8796093022208.001",
    b"8796093022207.999",
    b"9007199254740993",
    b"9223372036854775.807",
    b"9223372036854775807",
    b"9223372036854775808",
    b"123456789.1234567",
    b"0.1",
    b"2.675",
    b'"123"',
    b'"1.5"',
    b"null",
    b"true",
    b"[1]",
    b"{}",
    MISSING,
)


@st.composite
def args_objects(draw: Callable[[Any], Any], weird: float) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return MISSING
    if _coin(draw, weird / 3):
        return draw(st.sampled_from((b"null", b"[]", b"[1, 2]", b'"args"', b"3")))
    items = []
    for key in (b'"correlation"', b'"stream"', b'"device"'):
        if draw(st.integers(0, 3)):
            value = (
                draw(st.sampled_from(_ARG_VALUES))
                if _coin(draw, weird)
                else b"%d" % draw(st.integers(0, 50))
            )
            items.append(key + b": " + value)
    if draw(st.integers(0, 3)) == 0:
        items.append(b'"grid": [1, 1, 1], "nested": {"correlation": 1.5, "z": [{}]}')
    if _coin(draw, weird / 3):
        # a duplicate or escaped key
        items.append(
            draw(st.sampled_from((b'"correlation": 3', b'"corr\\u0065lation": 3', b'"stream": 2')))
        )
    draw(st.randoms(use_true_random=False)).shuffle(items)
    return b"{" + b", ".join(items) + b"}"


_COMMON_PHS = (b'"X"', b'"X"', b'"X"', b'"X"', b'"X"', b'"s"', b'"f"', b'"i"', b'"M"', MISSING)
_COMMON_CATS = (*_CATS[:13], b'"Trace"', MISSING)
_COMMON_NAMES = _NAMES[:16]  # well-formed (escapes and UTF-8 included)
_COMMON_IDS = (
    b"0",
    b"1",
    b"7",
    b"-7",
    b"4093687616",
    b'"Spans"',
    b'"PyTorch Profiler"',
    b'"12"',
    b'"l\\u00e4bel"',
)


@st.composite
def events(draw: Callable[[Any], Any], epoch: bool, weird: float) -> bytes:
    """One element of ``traceEvents`` as JSON text; each part is what real traces hold or,
    with probability ``weird``, anything."""
    if _coin(draw, weird / 5):
        return draw(st.sampled_from((b"5", b"null", b'"event"', b"[]", b"[{}]", b"{}")))

    def pick(common: tuple[bytes, ...], anything: tuple[bytes, ...]) -> bytes:
        return draw(st.sampled_from(anything if _coin(draw, weird) else common))  # type: ignore[no-any-return]

    fields = [
        (b'"ph"', pick(_COMMON_PHS, _PHS)),
        (b'"cat"', pick(_COMMON_CATS, _CATS)),
        (b'"name"', pick(_COMMON_NAMES, _NAMES)),
        (b'"pid"', pick(_COMMON_IDS, _IDS)),
        (b'"tid"', pick((*_COMMON_IDS, b"null", MISSING), _IDS)),
        (b'"ts"', draw(times(epoch, weird))),
        (b'"dur"', draw(times(False, weird))),
        (b'"id"', pick(tuple(b"%d" % i for i in range(8)), _IDS)),
        (b'"args"', draw(args_objects(weird))),
    ]
    fields = [(k, v) for k, v in fields if v != MISSING]
    for _ in range(draw(st.integers(0, 2))):
        fields.append((pick(_EXTRA_KEYS[:4], _EXTRA_KEYS), pick(_EXTRA_VALUES[:3], _EXTRA_VALUES)))
    if fields and _coin(draw, weird / 3):
        # a duplicate key (msgspec keeps the last one)
        key, _ = fields[draw(st.integers(0, len(fields) - 1))]
        fields.append((key, draw(st.sampled_from((b"1", b'"X"', b"null", b'"kernel"')))))
    rnd = draw(st.randoms(use_true_random=False))
    if rnd.random() < 0.3:
        rnd.shuffle(fields)

    def ws() -> bytes:
        return rnd.choice(_WS)

    body = b",".join(ws() + k + ws() + b":" + ws() + v + ws() for k, v in fields)
    return b"{" + body + ws() + b"}"


@st.composite
def trace_texts(draw: Callable[[Any], Any]) -> bytes:
    """A whole file: a bare list or an object with metadata around ``traceEvents``."""
    epoch = draw(st.integers(0, 4)) == 0
    weird = draw(st.sampled_from((0.0, 0.0, 0.005, 0.02, 0.05, 0.2)))
    evs = draw(st.lists(events(epoch, weird), min_size=1, max_size=60))
    sep = draw(st.sampled_from((b",", b", ", b",\n", b"\n,\n  ")))
    body = sep.join(evs)
    if draw(st.integers(0, 3)) == 0:
        return b"[" + body + b"]"
    meta = [
        b'"schemaVersion": 1',
        b'"deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]',
        b'"distributedInfo": {"rank": 3, "world_size": 8}',
        b'"baseTimeNanoseconds": 1700000000000000000',
        b'"traceName": "case"',
        b'"displayTimeUnit": "ms"',
    ]
    rnd = draw(st.randoms(use_true_random=False))
    before = [m for m in meta if rnd.random() < 0.3]
    after = [m for m in meta if m not in before and rnd.random() < 0.5]
    parts = [*before, b'"traceEvents": [\n' + body + b"\n]", *after]
    return b"{" + b",\n".join(parts) + b"}\n"


#: the full run (ASYNCTRACE_FULL_PROPERTIES=1): about 30 s together on 2 cores (the accelerated
#: and the reference load of each case); every push: about a third
GENERATED_EXAMPLES = examples(1000, quick=300)
MUTATED_EXAMPLES = examples(500, quick=150)
CORPUS_EXAMPLES = examples(300, quick=100)

_CHUNKS = st.sampled_from((64, 100, 257, 600, 1000, 1500, 4096, 4096, DEFAULT_CHUNK_BYTES))

#: derandomized, like the fuzz tests: CI sees the same cases every time
_PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _write(tmp: Path, data: bytes, gz: bool) -> Path:
    path = tmp / ("case.json.gz" if gz else "case.json")
    path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0) if gz else data)
    return path


@settings(_PROPERTY, max_examples=GENERATED_EXAMPLES)
@given(text=trace_texts(), chunk_bytes=_CHUNKS, gz=st.booleans())
def test_generated_events_same_both_ways(
    tmp_path_factory: pytest.TempPathFactory, text: bytes, chunk_bytes: int, gz: bool
) -> None:
    path = _write(tmp_path_factory.getbasetemp(), text, gz)
    assert_same(path, chunk_bytes=chunk_bytes)


def _mutate(data: bytes, kind: int, a: int, b: int) -> bytes:
    n = max(len(data), 1)
    i = a % n
    if kind == 0:  # truncate
        return data[:i]
    if kind == 1:  # flip one bit
        if not data:
            return data
        return data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1 :]
    if kind == 2:  # a fake event boundary inside a string
        quotes = [j for j in range(len(data)) if data[j] == 0x22]
        if not quotes:
            return data
        q = quotes[a % len(quotes)] + 1
        return data[:q] + (b"},{", b'},{"ph":"X"}', b"}, {", b"\\")[b % 4] + data[q:]
    if kind == 3:  # delete a span
        return data[:i] + data[i + 1 + b % 32 :]
    if kind == 4:  # duplicate a span
        j = min(n, i + 1 + b % 200)
        return data[:j] + data[i:j] + data[j:]
    # insert a structural byte
    junk = (b"{", b"}", b"[", b"]", b",", b'"', b":", b"\x00", b"\xff", b"\\u")[b % 10]
    return data[:i] + junk + data[i:]


@settings(_PROPERTY, max_examples=MUTATED_EXAMPLES)
@given(
    text=trace_texts(),
    mutations=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2**32), st.integers(0, 2**32)),
        min_size=1,
        max_size=3,
    ),
    chunk_bytes=_CHUNKS,
)
def test_mutated_text_same_both_ways(
    tmp_path_factory: pytest.TempPathFactory,
    text: bytes,
    mutations: list[tuple[int, int, int]],
    chunk_bytes: int,
) -> None:
    for kind, a, b in mutations:
        text = _mutate(text, kind, a, b)
    path = _write(tmp_path_factory.getbasetemp(), text, False)
    assert_same(path, chunk_bytes=chunk_bytes)


_u32 = st.integers(min_value=0, max_value=2**32 - 1)


@settings(_PROPERTY, max_examples=CORPUS_EXAMPLES)
@given(
    seed=st.sampled_from(_SEEDS),
    ops=st.lists(
        st.builds(Op, st.sampled_from(KINETO_OPS), _u32, _u32, _u32), min_size=1, max_size=3
    ),
    chunk_bytes=_CHUNKS,
)
def test_mutated_corpus_same_both_ways(
    tmp_path_factory: pytest.TempPathFactory,
    seed: tuple[str, Any],
    ops: list[Op],
    chunk_bytes: int,
) -> None:
    path = tmp_path_factory.getbasetemp() / "corpus_case.json"
    path.write_bytes(mutate_kineto(seed[1], ops))
    assert_same(path, chunk_bytes=chunk_bytes, max_inflated_bytes=4 << 20)


# --------------------------------------------------------------------------------------------
# Pinned cases

_KERNEL = (
    b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, '
    b'"args": {"correlation": 5, "stream": 7, "device": 0}}'
)
_LAUNCH = (
    b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
    b'"ts": 8, "dur": 1, "args": {"correlation": 5}}'
)
_FLOWS = (
    b'{"ph": "s", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 8},'
    b'{"ph": "f", "cat": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 10, "bp": "e"}'
)


def _trace(*events: bytes) -> bytes:
    return b'{"traceEvents": [' + b",".join(events) + b'], "schemaVersion": 1}'


#: inputs the accelerator files itself (the common shape of real traces)
HANDLED: dict[str, bytes] = {
    "plain_kernel_launch_flows": _trace(_KERNEL, _LAUNCH, _FLOWS),
    "bare_list": b"[" + b",".join((_KERNEL, _LAUNCH, _FLOWS)) + b"]",
    "ns_decimals": _trace(
        _KERNEL.replace(b'"ts": 10', b'"ts": 10.125').replace(b'"dur": 2', b'"dur": 2.5'),
        _LAUNCH.replace(b'"ts": 8', b'"ts": 8.001'),
    ),
    "epoch_us_exact_decimal": _trace(
        _KERNEL.replace(b'"ts": 10', b'"ts": 1712195495519689.047'),
        _LAUNCH.replace(b'"ts": 8', b'"ts": 1712195495519680.5'),
    ),
    "string_pid_tid_labels": _trace(
        _LAUNCH.replace(b'"pid": 1, "tid": 1', b'"pid": "Spans", "tid": "4093687616"'),
        _KERNEL.replace(b'"tid": 7', b'"tid": "stream 7"'),
    ),
    "skipped_kinds": _trace(
        b'{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}',
        b'{"ph": "i", "s": "g", "name": "mark", "ts": 1}',
        b'{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "ts": 1, "dur": 9}',
        b'{"ph": "s", "cat": "fwdbwd", "id": 3, "ts": 4}',
        b'{"name": "no ph"}',
        b'{"ph": "", "name": "empty ph"}',
        _KERNEL,
    ),
    "escaped_and_unicode_names": _trace(
        _KERNEL.replace(b'"name": "k"', b'"name": "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\n"'),
        _KERNEL.replace(b'"name": "k"', b'"name": "caf\xc3\xa9 \xf0\x9f\x98\x80"'),
    ),
    "null_args_and_name": _trace(
        _KERNEL.replace(b'"name": "k", ', b"").replace(
            b'"args": {"correlation": 5, "stream": 7, "device": 0}', b'"args": null'
        ),
        _LAUNCH.replace(b'"name": "cudaLaunchKernel"', b'"name": null'),
    ),
    "whitespace_everywhere": b' \n{ "traceEvents" :\n[\n  '
    + _KERNEL.replace(b", ", b" ,\n\t ").replace(b": ", b" :\r\n ")
    + b" ,\n  "
    + _LAUNCH
    + b"\n]\n}\n",
}

#: inputs the accelerator must leave to the reference path (or read exactly as it does)
GIVES_UP: dict[str, bytes] = {
    "float_correlation": _trace(_KERNEL.replace(b'"correlation": 5', b'"correlation": 5.0')),
    "string_correlation": _trace(_KERNEL.replace(b'"correlation": 5', b'"correlation": "5"')),
    "bool_stream": _trace(_KERNEL.replace(b'"stream": 7', b'"stream": true')),
    "huge_device": _trace(_KERNEL.replace(b'"device": 0', b'"device": 18446744073709551616')),
    "lone_surrogate_name": _trace(_KERNEL.replace(b'"name": "k"', b'"name": "k\\ud800"')),
    "lone_low_surrogate_name": _trace(_KERNEL.replace(b'"name": "k"', b'"name": "\\udc00k"')),
    "invalid_utf8_name": _trace(_KERNEL.replace(b'"name": "k"', b'"name": "k\xff"')),
    "invalid_utf8_cat": _trace(_KERNEL.replace(b'"cat": "kernel"', b'"cat": "kern\xc3"')),
    "overlong_utf8_name": _trace(_KERNEL.replace(b'"name": "k"', b'"name": "\xc0\xaf"')),
    "ts_exponent_huge": _trace(_LAUNCH, _KERNEL.replace(b'"ts": 10', b'"ts": 1e999999999')),
    "ts_exponent_small": _trace(_KERNEL.replace(b'"ts": 10', b'"ts": 1.5e1')),
    "duplicate_ts": _trace(_KERNEL.replace(b'"ts": 10', b'"ts": 10, "ts": 11')),
    "duplicate_ph": _trace(_KERNEL.replace(b'"ph": "X"', b'"ph": "i", "ph": "X"')),
    "escaped_key_ph": _trace(_KERNEL.replace(b'"ph": "X"', b'"p\\u0068": "X"')),
    "escaped_key_correlation": _trace(
        _KERNEL.replace(b'"correlation": 5', b'"c\\u006frrelation": 6')
    ),
    "escaped_category": _trace(_KERNEL.replace(b'"cat": "kernel"', b'"cat": "ker\\u006eel"')),
    "escaped_ph": _trace(_KERNEL.replace(b'"ph": "X"', b'"ph": "\\u0058"')),
    "ph_null": _trace(_KERNEL.replace(b'"ph": "X"', b'"ph": null')),
    "ph_number": _trace(_KERNEL.replace(b'"ph": "X"', b'"ph": 5')),
    "ts_null": _trace(_KERNEL.replace(b'"ts": 10', b'"ts": null')),
    "ts_string": _trace(_KERNEL.replace(b'"ts": 10', b'"ts": "10"')),
    "ts_beyond_int64_ns": _trace(_KERNEL.replace(b'"ts": 10', b'"ts": 9223372036854776')),
    "ts_float_and_big_int": _trace(
        _KERNEL.replace(b'"ts": 10', b'"ts": 10.5'),
        _LAUNCH.replace(b'"ts": 8', b'"ts": 9007199254740993'),
    ),
    # the first timestamp with decimals is small: float64 mode, until the epoch one
    "epoch_float_after_sniff": _trace(
        _KERNEL.replace(b'"ts": 10', b'"ts": 10.5'),
        _LAUNCH.replace(b'"ts": 8', b'"ts": 1712195495519689.047'),
        _KERNEL.replace(b'"ts": 10', b'"ts": 11.25'),
    ),
    "exact_ts_four_decimals": _trace(
        _KERNEL.replace(b'"ts": 10', b'"ts": 1712195495519689.0475'),
    ),
    "dur_beyond_2_53": _trace(_KERNEL.replace(b'"dur": 2', b'"dur": 9007199254740993')),
    "pid_float": _trace(_KERNEL.replace(b'"pid": 0', b'"pid": 0.0')),
    "pid_beyond_int64": _trace(_KERNEL.replace(b'"pid": 0', b'"pid": 9223372036854775808')),
    "flow_string_id": _trace(_FLOWS.replace(b'"id": 5', b'"id": "5"')),
    "flow_float_id": _trace(_FLOWS.replace(b'"id": 5', b'"id": 5.0')),
    "args_array": _trace(_KERNEL.replace(b'"args": {', b'"args": [{').replace(b"}}", b"}]}")),
    "deep_unknown_value": _trace(
        _KERNEL.replace(b'"ph": "X"', b'"ph": "X", "deep": ' + b"[" * 200 + b"]" * 200)
    ),
    # numbers float64 cannot hold, where the accelerator does not read the value: msgspec
    # still refuses them in the typed fields ts and dur ("Number out of range")
    "instant_ts_exponent_overflow": _trace(b'{"ph": "i", "ts": 1e999}', _KERNEL),
    "skipped_x_dur_exponent_overflow": _trace(
        b'{"ph": "X", "cat": "Trace", "ts": 1, "dur": -1e400}', _KERNEL
    ),
    "flow_dur_exponent_overflow": _trace(_FLOWS.replace(b'"ts": 8', b'"ts": 8, "dur": 2e308')),
    "instant_dur_long_digits_overflow": _trace(
        _KERNEL, b'{"ph": "M", "ts": 1, "dur": 1' + b"0" * 400 + b".5}"
    ),
    # (a first timestamp with 400 digits: exact mode, where ts is read as text, not a float)
    "instant_ts_long_digits_exact": _trace(_KERNEL, b'{"ph": "M", "ts": 1' + b"0" * 400 + b".5}"),
    "instant_ts_exponent_underflow": _trace(_KERNEL, b'{"ph": "i", "ts": 1e-999}'),
    "unknown_key_exponent_overflow": _trace(
        _KERNEL.replace(b'"ph": "X"', b'"ph": "X", "q": 1e999')
    ),
}


@pytest.mark.parametrize("name", sorted(HANDLED))
def test_pinned_handled_by_accelerator(tmp_path: Path, name: str) -> None:
    path = tmp_path / "case.json"
    path.write_bytes(HANDLED[name])
    got = assert_same(path)
    assert got.outcome[0] == "trace"
    assert got.fast_chunks > 0
    assert got.slow_chunks == 0


@pytest.mark.parametrize("name", sorted(GIVES_UP))
@pytest.mark.parametrize("chunk_bytes", [DEFAULT_CHUNK_BYTES, 64])
def test_pinned_left_to_reference(tmp_path: Path, name: str, chunk_bytes: int) -> None:
    path = tmp_path / "case.json"
    path.write_bytes(GIVES_UP[name])
    assert_same(path, chunk_bytes=chunk_bytes)


def test_labels_and_names_carry_across_chunks(tmp_path: Path) -> None:
    # names and string labels seen by the reference path in one chunk, then by the accelerator
    # in the next (and back): one string table, one label numbering
    rnd = random.Random(5)
    evs = []
    for i in range(400):
        ev = {
            "ph": "X",
            "cat": rnd.choice(["kernel", "cuda_runtime", "cpu_op", "python_function"]),
            "name": rnd.choice(["a", "b", "caf\u00e9", "ProfilerStep#2", ""]),
            "pid": rnd.choice([1, "Spans", "12", "lab\u00e9l"]),
            "tid": rnd.choice([7, "PyTorch Profiler", " 9 "]),
            "ts": i,
            "dur": 1,
            "args": {"correlation": i},
        }
        if i % 37 == 5:
            ev["args"] = {"correlation": 1.0 * i}  # this chunk goes to the reference path
        evs.append(ev)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    got = assert_same(path, chunk_bytes=800)
    assert got.fast_chunks > 0
    assert got.slow_chunks > 0


def test_many_names_and_labels(tmp_path: Path) -> None:
    # thousands of distinct names and string labels, over many chunks: the accelerator's
    # caches grow and must keep agreeing with the reference's string table and label numbers
    evs = [
        {
            "ph": "X",
            "cat": ("kernel", "cpu_op", "cuda_runtime")[i % 3],
            "name": f"name {i % 2500} \u00e9",
            "pid": f"proc {i % 1500}",
            "tid": f"thread {i % 700}" if i % 5 else i,
            "ts": i,
            "dur": 1,
        }
        for i in range(6000)
    ]
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    got = assert_same(path, chunk_bytes=20_000)
    assert got.fast_chunks > 10
    assert got.slow_chunks == 0
