"""Read Kineto / Chrome-trace JSON (every generation) into the columnar :class:`Trace`.

How it stays fast and bounded:

* The ``traceEvents`` array is never held whole. Inflated text is read in chunks of about
  ``chunk_bytes``; each chunk is cut at an event boundary (``}`` ``,`` ``{`` between two events),
  decoded by msgspec into typed Structs (only the fields we use), turned into numpy columns, and
  dropped. Peak memory is one chunk of text, its decoded events, and the columns.
* A cut found by the fast byte search can in principle fall inside a string or a nested object
  (``"x": "},{"``). Such a cut never yields valid JSON (a string or object stays open), so the
  decode fails and the chunk is re-cut with an exact tokenizer that knows strings and nesting.
* Timestamps: Kineto writes µs, either integers or with 3 decimals (ns resolution). A float64
  holds every ns exactly only below 2**43 µs (about 101 days; ``baseTimeNanoseconds`` traces
  are far below it). Epoch-µs traces with decimals (1.7e15 µs) are beyond it: float64 would be
  off by up to 125 ns. So timestamps are decoded as float first and, when a chunk has a
  fractional value at or above 2**43 µs, the chunk is decoded again with ``ts`` as raw text and
  parsed as an exact decimal. Every time is rounded to the nearest ns once, here.
* A negative ``dur`` (a corrupt event) is read as 0, the event kept at its start, and counted in
  ``Trace.skipped["<table>_negative_duration_clamped"]``, as the Nsight Systems loader does.

See ``docs/formats.md`` for what each generation looks like and how each field is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.traces import model
from asynctrace.traces._apis import RUNTIME_CATEGORIES, classify_runtime
from asynctrace.traces._columns import blocking_copies, clamp_durations, distinct
from asynctrace.traces.reading import DEFAULT_MAX_INFLATED_BYTES, iter_blocks, prefetched

try:
    from asynctrace.traces import _kineto_fast
except ImportError:  # not compiled (an install without a C compiler): the Python path only
    _kineto_fast = None  # type: ignore[assignment]

__all__ = ["DEFAULT_CHUNK_BYTES", "HAVE_ACCELERATOR", "load_kineto"]

#: True when the compiled accelerator (``_kineto_fast.c``) is importable.
HAVE_ACCELERATOR = _kineto_fast is not None

#: Inflated JSON text decoded at once. Small enough that one chunk's text and decoded events
#: stay in cache and in reused memory: measured on 26 MB traces, 2 MiB loads faster than 16 MiB
#: (the collecting loop misses cache less; fewer fresh pages) and halves peak RSS (61 vs 117 MB
#: for ``asynctrace report``); below 1 MiB the per-chunk costs start to show.
DEFAULT_CHUNK_BYTES = 2 << 20

#: How far into a JSON object we look for ``"traceEvents"`` before calling it something else.
_MAX_ENVELOPE_BYTES = 64 << 20
#: Inflated text comes from the file in blocks of at most this much. The text buffer holds up
#: to one chunk plus one block: 1 MiB blocks peak ~2.7 MiB lower than 2 MiB ones on a 26 MB
#: trace, at the same speed (docs/performance.md).
_BLOCK_BYTES = 1 << 20

#: At the end of the file, keep this much text back from the bulk chunks: the array's end and
#: the metadata after it (``deviceProperties``, ``traceName``) are found in this last piece.
_TAIL_BYTES = 1 << 20

#: One element of ``traceEvents`` may not exceed this: it must be held whole to be decoded, so
#: without a cap a single giant (or unterminated) element would hold the whole file in memory.
_MAX_ELEMENT_BYTES = 64 << 20

#: At most about this many events are decoded at once (see ``_Loader._adapt_cut``).
_EVENTS_PER_DECODE = 1 << 18
_FIRST_CUT_BYTES = 1 << 20
_MIN_CUT_BYTES = 64 << 10

_EXACT_US_LIMIT = float(2**43)
#: marks a ``ts: null`` read as raw text (never a real time: below -9.2e15 µs)
_NO_TS = -(2**63)
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
# |µs| below this times 1000 still fits in int64
_MAX_ABS_US = _I64_MAX // 1000

if TYPE_CHECKING:
    # numpy is imported in the functions that make arrays, json and decimal where they are
    # used: every millisecond of import is paid by each `asynctrace report`, and the reading
    # and filing run without numpy, so that the report command imports it in a thread meanwhile
    import numpy as np
    import numpy.typing as npt

    from asynctrace.traces.model import I64, U8

    _T = TypeVar("_T", bound=model._Table)


# --------------------------------------------------------------------------------------------
# Typed decoding. Only the fields we use are declared; msgspec skips the rest without building
# them. Every field is optional: generations differ in what they write.


_RAW_NULL = msgspec.Raw(b"null")


class _Args(msgspec.Struct, gc=False):
    correlation: int | float | str | None = None
    stream: int | float | str | None = None
    device: int | float | str | None = None


class _EventFields(msgspec.Struct, gc=False):
    """The fields of an event but ``ts``, whose type differs between the two decoders."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    dur: int | float | None = None
    id: int | str | None = None
    args: _Args | None = None


class _Event(_EventFields, gc=False):
    ts: int | float | None = None


class _EventExactTs(_EventFields, gc=False):
    """Same as :class:`_Event` but ``ts`` kept as its JSON text, parsed exactly later."""

    ts: msgspec.Raw = _RAW_NULL


class _DeviceProps(msgspec.Struct, gc=False):
    id: int | str | None = None
    name: str | None = None


class _Envelope(msgspec.Struct, gc=False):
    """The top-level object around ``traceEvents`` (fields kept raw: decoded leniently)."""

    traceEvents: msgspec.Raw = _RAW_NULL
    deviceProperties: msgspec.Raw = _RAW_NULL
    distributedInfo: msgspec.Raw = _RAW_NULL
    baseTimeNanoseconds: msgspec.Raw = _RAW_NULL
    schemaVersion: msgspec.Raw = _RAW_NULL
    traceName: msgspec.Raw = _RAW_NULL
    # present in PyTorch execution traces, which we refuse with a clear message
    nodes: msgspec.Raw = _RAW_NULL
    schema: msgspec.Raw = _RAW_NULL


_DEC_EVENTS = msgspec.json.Decoder(list[_Event])
_DEC_EVENTS_EXACT = msgspec.json.Decoder(list[_EventExactTs])
_DEC_ENVELOPE = msgspec.json.Decoder(_Envelope)


# --------------------------------------------------------------------------------------------
# Categories.

_RT, _KERNEL, _MEMCPY, _MEMSET, _OP, _ANNOT, _GPU_ANNOT, _PY, _SYNC = range(9)

_CAT_CODE: dict[str, int] = {c: _RT for c in RUNTIME_CATEGORIES}
_CAT_CODE.update(
    {
        "kernel": _KERNEL,
        "Kernel": _KERNEL,
        "mtia_ccp_events": _KERNEL,
        "gpu_memcpy": _MEMCPY,
        "Memcpy": _MEMCPY,
        "memcpy": _MEMCPY,
        "gpu_memset": _MEMSET,
        "Memset": _MEMSET,
        "memset": _MEMSET,
        "cpu_op": _OP,
        "Operator": _OP,
        "operator": _OP,
        "user_annotation": _ANNOT,
        "gpu_user_annotation": _GPU_ANNOT,
        "python_function": _PY,
        "cuda_sync": _SYNC,
    }
)
_ACT_KIND = {
    _KERNEL: model.ActivityKind.KERNEL,
    _MEMCPY: model.ActivityKind.MEMCPY,
    _MEMSET: model.ActivityKind.MEMSET,
}
_RANGE_KIND = {
    _OP: model.RangeKind.OP,
    _ANNOT: model.RangeKind.ANNOTATION,
    _GPU_ANNOT: model.RangeKind.GPU_ANNOTATION,
}
#: the model's column names that our columns spell otherwise
_COLUMN = {"start_ns": "ts", "dur_ns": "dur", "correlation": "corr"}

#: CPU-to-device launch flows across generations; other flows (``fwdbwd``) are not launches.
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async", "async_cpu_to_gpu"})

_FIRST_TS = re.compile(rb'"ts"\s*:\s*-?(\d+)\.')
_STEP_NAME = re.compile(r"ProfilerStep#(\d+)\Z")


# --------------------------------------------------------------------------------------------
# Public entry point.


def load_kineto(
    path: str | os.PathLike[str],
    *,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    accelerate: bool = True,
) -> model.Trace:
    """Load a Kineto / Chrome-trace JSON file (``.json`` or ``.json.gz``) into a :class:`Trace`.

    Raises :class:`TraceFormatError` naming the file and the reason for anything that is not a
    readable Kineto trace (an execution trace, truncated or corrupt input, a gzip bomb...).

    ``accelerate=False`` files every event through the pure-Python path even where the compiled
    accelerator is installed; the result is the same (the tests check it), only slower.
    """
    p = Path(path)
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be positive")
    block_bytes = min(chunk_bytes, _BLOCK_BYTES)

    def make() -> Generator[bytes, None, None]:
        return iter_blocks(p, max_inflated_bytes=max_inflated_bytes, block_bytes=block_bytes)

    blocks: Generator[bytes, None, None]
    if accelerate and HAVE_ACCELERATOR:
        # The accelerator files text faster than a reader thread can hand it over: the GIL
        # hand-offs cost more than inflating here (B200 trace, fresh process: 38 vs 46 ms).
        blocks = make()
    else:
        # read ahead about one chunk, so that inflating the next chunk overlaps decoding this one
        blocks = prefetched(make, depth=max(2, chunk_bytes // block_bytes))
    try:
        return _Loader(p, blocks, chunk_bytes, accelerate=accelerate).run()
    finally:
        blocks.close()


# --------------------------------------------------------------------------------------------
# Exact tokenizer, used to verify cuts and to find the end of the array when the fast search
# cannot. Strings are matched whole (escapes included); a lone quote means an unterminated one.

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|["{}\[\]]', re.DOTALL)
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")


class _Scan(msgspec.Struct):
    #: end (exclusive) of the last complete top-level element, or -1
    last_element_end: int = -1
    #: index of the ``]`` closing the array, or -1 when not reached
    array_end: int = -1
    #: True when the text ran out inside a string
    in_string: bool = False


def _scan_elements(buf: bytes | bytearray, start: int, stop: int) -> _Scan:
    """Walk the array's elements from ``start`` (depth 0 inside the array) up to ``stop``."""
    scan = _Scan()
    depth = 0
    for m in _TOKEN.finditer(buf, start, stop):
        tok = m.group()
        c = tok[0]
        if c == 0x22:  # '"'
            if len(tok) == 1:
                scan.in_string = True
                return scan
            continue
        if c in _OPEN:
            depth += 1
        elif depth == 0:
            scan.array_end = m.start()
            return scan
        else:
            depth -= 1
            if depth == 0:
                scan.last_element_end = m.end()
    return scan


def _object_depth_ok(prefix: bytes) -> bool:
    """True when ``prefix`` (from the top-level ``{``) ends at depth 1, outside any string."""
    depth = 0
    for m in _TOKEN.finditer(prefix):
        tok = m.group()
        c = tok[0]
        if c == 0x22:
            if len(tok) == 1:
                return False
            continue
        depth += 1 if c in _OPEN else -1
    return depth == 1


# --------------------------------------------------------------------------------------------
# Column collection.


class _IdMap:
    """Numbers for pid/tid labels given as strings. Decimal strings keep their value (the 2021
    format writes ``"tid": "4093687616"`` on slices and ``4093687616`` on flows); other labels
    get stable negative numbers from -2 down, in order of first appearance."""

    __slots__ = ("labels", "next_label")

    def __init__(self) -> None:
        self.labels: dict[str, int] = {}
        self.next_label = -2

    def __call__(self, v: int | str | None) -> int:
        if v is None:
            return -1
        if type(v) is int:
            return v
        s = str(v)
        n = self.labels.get(s)
        if n is None:
            t = s.strip()
            if _is_i64_digits(t):
                n = int(t)
            else:
                n = self.next_label
                self.next_label -= 1
            self.labels[s] = n
        return n


class _Cols(msgspec.Struct):
    """Per-chunk Python lists for one table; flushed into numpy parts after every chunk."""

    names: tuple[str, ...]
    lists: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    parts: dict[str, list[npt.NDArray[Any]]] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lists = {n: [] for n in self.names}
        self.parts = {n: [] for n in self.names}


class _Loader:
    def __init__(
        self, path: Path, blocks: Iterator[bytes], chunk_bytes: int, *, accelerate: bool = True
    ) -> None:
        self.path = path
        self.fast = _kineto_fast if accelerate else None
        self.fast_cache = self.fast.new_cache() if self.fast is not None else None
        #: chunks filed by the accelerator and by the Python path (for tests and benchmarks)
        self.fast_chunks = 0
        self.slow_chunks = 0
        self.src = str(path)
        self.blocks = blocks
        self.chunk_bytes = chunk_bytes
        #: text decoded at once: starts small, then set from the bytes per event seen
        self.cut_bytes = min(chunk_bytes, _FIRST_CUT_BYTES)
        self.buf = bytearray()
        self.eof = False
        self.exact = False
        self.sniffed = False
        self.strings = model.StringTable()
        #: name -> string index, read without a method call in the hot loop
        self.name_ids: dict[str | None, int] = {}
        self.ids = _IdMap()
        self.skipped: dict[str, int] = {}
        self.n_events = 0
        self.n_with_ph = 0
        self.int_clamped = 0
        self.not_numeric = 0
        self.rt = _Cols(("ts", "dur", "pid", "tid", "name", "corr"))
        self.act = _Cols(("ts", "dur", "pid", "tid", "device", "stream", "name", "kind", "corr"))
        self.rng = _Cols(("ts", "dur", "pid", "tid", "name", "kind"))
        self.py = _Cols(("ts", "dur", "pid", "tid", "name"))
        self.sync = _Cols(("ts", "dur", "pid", "stream", "corr"))
        self.flow = _Cols(("ts", "id", "is_start", "pid", "tid"))
        self.tables = (self.rt, self.act, self.rng, self.py, self.sync, self.flow)
        #: negative durations read as 0, by table (filled by the build)
        self.clamped: dict[str, int] = {}

    # -- errors --------------------------------------------------------------------------------

    def fail(self, reason: str) -> TraceFormatError:
        return TraceFormatError(self.src, reason)

    # -- buffer --------------------------------------------------------------------------------

    def fill(self, n: int) -> None:
        """Read until the buffer holds at least ``n`` bytes or the input ends."""
        while len(self.buf) < n and not self.eof:
            try:
                block = next(self.blocks)
            except StopIteration:
                self.eof = True
                return
            self.buf += block

    # -- top level -----------------------------------------------------------------------------

    def run(self) -> model.Trace:
        self.fill(1 << 16)
        buf = self.buf
        i = 0
        if buf.startswith(b"\xef\xbb\xbf"):
            i = 3
        while True:
            i = _skip_ws(buf, i)
            if i < len(buf) or self.eof:
                break
            # only whitespace so far: drop it rather than hold a whole file of it
            del buf[:i]
            i = 0
            self.fill(1 << 16)
        if i >= len(buf):
            raise self.fail("empty file (no JSON in it)")
        first = buf[i]
        if first == 0x5B:  # '['
            prefix: bytes | None = None
            events_start = i + 1
        elif first == 0x7B:  # '{'
            prefix, events_start = self._find_trace_events(i)
        else:
            raise self.fail(
                "not a Kineto trace: expected a JSON object or list, "
                f"found {bytes(buf[i : i + 20])!r}"
            )
        # The events loop shrinks self.buf and finally replaces it; a reference held here would
        # keep the last chunk's text (~2 MiB) alive through the build, at peak memory.
        del buf
        tail = self._read_events(events_start)
        envelope = self._decode_envelope(prefix, tail)
        return self._build(envelope)

    def _find_trace_events(self, obj_start: int) -> tuple[bytes, int]:
        pattern = re.compile(rb'"traceEvents"\s*:\s*\[')
        pos = obj_start
        while True:
            m = pattern.search(self.buf, pos)
            if m is not None:
                if _object_depth_ok(bytes(self.buf[obj_start : m.start()])):
                    return bytes(self.buf[obj_start : m.start()]), m.end()
                pos = m.end()
                continue
            if self.eof:
                self._refuse_non_trace(bytes(self.buf[obj_start:]))
            if len(self.buf) > _MAX_ENVELOPE_BYTES:
                head = bytes(self.buf[: 1 << 20])
                if b'"nodes"' in head and b'"schema"' in head:
                    raise self.fail(_EXEC_TRACE_REASON)
                raise self.fail(
                    f"not a Kineto trace: no traceEvents array in the first "
                    f"{_MAX_ENVELOPE_BYTES >> 20} MiB of this JSON object"
                )
            pos = max(obj_start, len(self.buf) - 64)
            self.fill(len(self.buf) + (4 << 20))

    def _refuse_non_trace(self, text: bytes) -> None:
        try:
            env = _DEC_ENVELOPE.decode(text)
        except msgspec.DecodeError as e:
            raise self.fail(_json_reason(e, truncated_hint=True)) from None
        except RecursionError:
            raise self.fail(_TOO_DEEP_REASON) from None
        if env.nodes != _RAW_NULL and env.schema != _RAW_NULL:
            raise self.fail(_EXEC_TRACE_REASON)
        raise self.fail("not a Kineto trace: the JSON object has no traceEvents array")

    # -- the events array ----------------------------------------------------------------------

    def _read_events(self, start: int) -> bytes:
        """Decode every element of the array starting at ``start``; return the text after it."""
        after_cut = False
        while True:
            self.fill(start + self.chunk_bytes)
            buf = self.buf
            # skip separators before the next element (a cut stops right after a '}')
            start = _skip_ws(buf, start)
            if after_cut and start < len(buf) and buf[start] == 0x2C:
                start = _skip_ws(buf, start + 1)
                after_cut = False
            if start >= len(buf) and not self.eof:
                # nothing but whitespace so far (a gzip bomb of spaces): drop it, read on
                del buf[:start]
                start = 0
                continue
            after_cut = True
            if start >= len(buf) and self.eof:
                raise self.fail("truncated JSON: the file ends inside the traceEvents array")
            if start < len(buf) and buf[start] == 0x5D:  # ']' right away: empty array / done
                return self._rest_after(start + 1)
            held = len(buf) - _TAIL_BYTES if self.eof else len(buf)
            limit = min(held, start + self.cut_bytes)
            cut = self._fast_cut(start, limit) if limit > start else -1
            if cut >= 0:
                if self._decode_range(start, cut, fallback=False):
                    start = self._advance(cut)
                    continue
                scan = _scan_elements(buf, start, limit)
            elif limit < held:
                # an element longer than the decode size: widen it over the text we hold
                self.cut_bytes *= 2
                continue
            elif not self.eof:
                # one element larger than a chunk: read more before cutting
                self._grow(start)
                continue
            else:
                end = self._fast_end(start)
                if end >= 0:
                    return self._rest_after(end + 1)
                scan = _scan_elements(buf, start, len(buf))
            start = self._apply_scan(start, scan)
            if start < 0:
                return self._rest_after(-start)

    def _apply_scan(self, start: int, scan: _Scan) -> int:
        """Decode what the exact scan found; the next start, or -(index after ``]``) at the end."""
        if scan.array_end >= 0:
            body_end = _rstrip_ws(self.buf, start, scan.array_end)
            if body_end > start:
                if self.buf[body_end - 1] == 0x2C:  # ','
                    raise self.fail("malformed JSON: trailing comma at the end of traceEvents")
                self._decode_range(start, body_end - 1, fallback=True)
            return -(scan.array_end + 1)
        if scan.last_element_end > start:
            cut = scan.last_element_end - 1
            self._decode_range(start, cut, fallback=True)
            return self._advance(cut)
        if self.eof:
            if scan.in_string:
                raise self.fail("truncated JSON: the file ends inside a string in traceEvents")
            raise self.fail("truncated JSON: the file ends inside the traceEvents array")
        # a single element is larger than what we hold: read more
        self._grow(start)
        return start

    def _adapt_cut(self, n_bytes: int, n_events: int) -> None:
        # Decoded events cost ~100 bytes each whatever their text: tiny events (a bomb of
        # '{},' repeated) would cost 30x their text, so decode fewer bytes at a time then.
        # Real events (200+ bytes each) keep the full chunk.
        if n_events:
            per_event = max(1, n_bytes // n_events)
            wanted = per_event * _EVENTS_PER_DECODE
            self.cut_bytes = max(_MIN_CUT_BYTES, min(self.chunk_bytes, wanted))

    def _grow(self, start: int) -> None:
        if len(self.buf) - start > _MAX_ELEMENT_BYTES:
            raise self.fail(
                f"one element of traceEvents is larger than {_MAX_ELEMENT_BYTES >> 20} MiB "
                "(a real event is a few hundred bytes): not a Kineto trace, or a damaged one"
            )
        self.chunk_bytes *= 2
        self.cut_bytes = self.chunk_bytes

    def _fast_cut(self, start: int, limit: int) -> int:
        """Index of the ``}`` of the last ``}``-``,``-``{`` boundary before ``limit``, or -1."""
        buf = self.buf
        pos = limit
        while True:
            j = buf.rfind(b"{", start + 1, pos)
            if j < 0:
                return -1
            k = _rstrip_ws(buf, start, j)
            if k > start and buf[k - 1] == 0x2C:  # ','
                k = _rstrip_ws(buf, start, k - 1)
                if k > start and buf[k - 1] == 0x7D:  # '}'
                    return k - 1
            pos = j

    def _fast_end(self, start: int) -> int:
        """Index of the ``]`` closing the array, tried from the end of the text backwards."""
        buf = self.buf
        pos = len(buf)
        tries = 0
        while tries < 16:
            q = buf.rfind(b"]", start, pos)
            if q < 0:
                return -1
            pos = q
            k = _rstrip_ws(buf, start, q)
            if k <= start or buf[k - 1] != 0x7D:
                continue
            # what follows the array must close it: ',' 'key'..., '}' or (bare list) nothing
            after = bytes(buf[q + 1 : q + 64]).lstrip()
            if after and after[:1] not in (b",", b"}"):
                continue
            tries += 1
            if self._decode_range(start, k - 1, fallback=None):
                return q
        return -1

    def _advance(self, cut: int) -> int:
        """Drop consumed text; the index of the next element's start in the shrunk buffer."""
        del self.buf[: cut + 1]
        return 0

    def _rest_after(self, i: int) -> bytes:
        rest = bytes(self.buf[i:])
        self.buf = bytearray()
        while not self.eof:
            self.fill(len(rest) + (1 << 20))
            rest += bytes(self.buf)
            self.buf = bytearray()
            if len(rest) > _MAX_ENVELOPE_BYTES:
                raise self.fail(
                    "not a Kineto trace: more than "
                    f"{_MAX_ENVELOPE_BYTES >> 20} MiB of JSON after traceEvents"
                )
        return rest

    def _decode_range(self, start: int, last: int, *, fallback: bool | None) -> bool:
        """Decode elements ``buf[start : last + 1]`` and collect them.

        ``fallback=False``: the cut came from the fast search; on a decode error return False
        so the caller re-cuts exactly. ``True``: the cut is exact, an error is the file's fault.
        ``None``: a candidate end; return False on error.
        """
        if not self.sniffed:
            # Decide from the first timestamp whether float64 can hold its ns, so that an
            # epoch-µs trace with decimals is decoded once, not twice.
            self.sniffed = True
            m = _FIRST_TS.search(self.buf, start, last + 1)
            # (a length test first: int() refuses more than 4300 digits)
            if m is not None and (len(m.group(1)) > 19 or int(m.group(1)) >= 2**43):
                self.exact = True
        n_before = self.n_events
        if self.fast is not None and self._collect_fast(start, last + 1):
            self._adapt_cut(last + 3 - start, self.n_events - n_before)
            return True
        self.slow_chunks += 1
        self._take_fast()
        text = b"".join((b"[", memoryview(self.buf)[start : last + 1], b"]"))
        try:
            if not self.exact:
                events: list[Any] = _DEC_EVENTS.decode(text)
                if self._collect(events):
                    self._adapt_cut(len(text), self.n_events - n_before)
                    return True
                del events
                self.exact = True
            self._collect(_DEC_EVENTS_EXACT.decode(text))
            self._adapt_cut(len(text), self.n_events - n_before)
            return True
        except msgspec.ValidationError as e:
            raise self.fail(f"not a Kineto trace: {e}") from None
        except msgspec.DecodeError as e:
            if fallback is not True:
                return False
            raise self.fail(_json_reason(e, truncated_hint=False)) from None
        except RecursionError:
            # a cut never deepens nesting, so this is the file's own depth whatever the cut
            raise self.fail(_TOO_DEEP_REASON) from None

    # -- per-chunk columns ---------------------------------------------------------------------

    def _take_fast(self) -> None:
        """Move the rows the accelerator has filed so far into the tables' parts (before rows
        from the Python path, so that row order stays event order; and before the build)."""
        import numpy as np

        if self.fast is None:
            return
        for table, cols in zip(self.tables, self.fast.take_columns(self.fast_cache), strict=True):
            if cols is None:
                continue
            for name, col in zip(table.names, cols, strict=True):
                # a view of the accelerator's own buffer: no copy
                arr: npt.NDArray[Any] = np.frombuffer(col, dtype=np.int64)
                table.parts[name].append(arr.astype(np.bool_) if name == "is_start" else arr)

    def _collect_fast(self, start: int, stop: int) -> bool:
        """File ``buf[start:stop]`` with the accelerator; False when it leaves the chunk to the
        Python path (anything outside the common shape of real traces; see the C file)."""
        assert self.fast is not None
        res = self.fast.collect(
            self.buf,
            start,
            stop,
            self.exact,
            _CAT_CODE,
            _LAUNCH_FLOW_CATS,
            self.name_ids,
            self.strings.intern,
            self.ids,
            self.fast_cache,
        )
        if res is None:
            return False
        n_events, n_ph, skipped = res
        for key, n in skipped.items():
            self.skipped[key] = self.skipped.get(key, 0) + n
        self.n_events += n_events
        self.n_with_ph += n_ph
        self.fast_chunks += 1
        return True

    def _collect(self, events: list[Any]) -> bool:
        """Append ``events`` to the columns; False (nothing kept) if ``ts`` needs exact parsing."""
        cat_code = _CAT_CODE.get
        ids = self.ids
        name_ids = self.name_ids
        intern = self.strings.intern
        skipped: dict[str, int] = {}
        # By category code, the lists of the columns every host or device slice has; the
        # table's own columns follow in the loop
        slices = [
            tuple(t.lists[n] for n in ("ts", "dur", "pid", "tid", "name"))
            for t in (self.rt, self.act, self.act, self.act, self.rng, self.rng, self.rng, self.py)
        ]
        rt_corr = self.rt.lists["corr"]
        a_dev, a_stream, a_kind, a_corr = (
            self.act.lists[n] for n in ("device", "stream", "kind", "corr")
        )
        r_kind = self.rng.lists["kind"]
        s_ts, s_dur, s_pid, s_stream, s_corr = self.sync.lists.values()
        f_ts, f_id, f_start, f_pid, f_tid = self.flow.lists.values()
        for e in events:
            ph = e.ph
            if ph == "X":
                cat = e.cat
                code = cat_code(cat)  # None for None too
                ts = e.ts
                if code is None or ts is None:
                    key = f"X cat={cat}" if ts is not None else "X without ts"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                pid = e.pid
                if type(pid) is not int:
                    pid = ids(pid)
                name = e.name
                nid = name_ids.get(name)
                if nid is None:
                    nid = name_ids[name] = intern(name if name is not None else "")
                a = e.args
                if code == _SYNC:
                    # a device-side row: no thread, no name
                    s_ts.append(ts)
                    s_dur.append(e.dur)
                    s_pid.append(pid)
                    s_stream.append(a.stream if a is not None else None)
                    s_corr.append(a.correlation if a is not None else None)
                    continue
                tid = e.tid
                if type(tid) is not int:
                    tid = ids(tid)
                c_ts, c_dur, c_pid, c_tid, c_name = slices[code]
                c_ts.append(ts)
                c_dur.append(e.dur)
                c_pid.append(pid)
                c_tid.append(tid)
                c_name.append(nid)
                if code == _RT:
                    rt_corr.append(a.correlation if a is not None else None)
                elif code <= _MEMSET:
                    a_kind.append(code)
                    if a is not None:
                        a_dev.append(a.device)
                        a_stream.append(a.stream)
                        a_corr.append(a.correlation)
                    else:
                        a_dev.append(None)
                        a_stream.append(None)
                        a_corr.append(None)
                elif code != _PY:
                    r_kind.append(code)
            elif ph == "s" or ph == "f":
                cat = e.cat
                if cat not in _LAUNCH_FLOW_CATS or e.ts is None:
                    key = f"flow cat={cat}"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                f_ts.append(e.ts)
                f_id.append(e.id)
                f_start.append(ph == "s")
                pid = e.pid
                f_pid.append(pid if type(pid) is int else ids(pid))
                tid = e.tid
                f_tid.append(tid if type(tid) is int else ids(tid))
            else:
                key = f"ph={ph}" if ph else "no ph"
                skipped[key] = skipped.get(key, 0) + 1
        if not self._flush():
            return False
        for key, n in skipped.items():
            self.skipped[key] = self.skipped.get(key, 0) + n
        self.n_events += len(events)
        # every event but those counted as "no ph" has one
        self.n_with_ph += len(events) - skipped.get("no ph", 0)
        return True

    def _flush(self) -> bool:
        """Turn this chunk's lists into numpy parts. False (and nothing kept) if ``ts`` must be
        re-read exactly."""
        import numpy as np

        tables = self.tables
        ts_arrays: list[I64] = []
        for t in tables:
            ts = t.lists["ts"]
            if not ts:
                ts_arrays.append(np.empty(0, np.int64))
                continue
            conv = self._ts_to_ns(ts)
            if conv is None:
                for u in tables:
                    for lst in u.lists.values():
                        lst.clear()
                return False
            ts_arrays.append(conv)
        for t, ts_ns in zip(tables, ts_arrays, strict=True):
            if not len(ts_ns):
                continue
            keep: npt.NDArray[np.bool_] | None = None
            if self.exact:
                # ``ts: null`` only shows up here, as raw text; drop those rows
                keep = ts_ns != _NO_TS
                n_drop = int(len(ts_ns) - keep.sum())
                if n_drop:
                    self.skipped["X without ts"] = self.skipped.get("X without ts", 0) + n_drop
                else:
                    keep = None
            for name, lst in t.lists.items():
                if name == "ts":
                    arr: npt.NDArray[Any] = ts_ns
                elif name == "dur":
                    arr = self._dur_to_ns(lst)
                elif name == "is_start":
                    arr = np.array(lst, dtype=np.bool_)
                else:
                    arr = self._int_col(lst)
                t.parts[name].append(arr if keep is None else arr[keep])
                lst.clear()
        return True

    def _int_col(self, values: list[Any]) -> I64:
        import numpy as np

        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            if (type(v) is float and v.is_integer()) or (
                type(v) is str and _is_i64_digits(v.strip().lstrip("-"))
            ):
                v = int(v)
            if type(v) is int and _I64_MIN <= v <= _I64_MAX:
                out[i] = v
            else:
                # beyond int64 (hta_large_integer_edge) or not a number: unknown, not a crash
                if type(v) is int:
                    self.int_clamped += 1
                elif v is not None:
                    self.not_numeric += 1
                out[i] = -1
        return out

    def _ts_to_ns(self, values: list[Any]) -> I64 | None:
        import numpy as np

        if self.exact:
            fixed = _fixed_width_us_to_ns(values)
            if fixed is not None:
                return fixed
            return np.array([_raw_us_to_ns(bytes(v), self) for v in values], dtype=np.int64)
        arr = np.array(values)
        if arr.dtype.kind == "i":
            if int(np.abs(arr).max()) > _MAX_ABS_US:
                raise self.fail("timestamp out of range (more than 9.2e15 µs)")
            return arr.astype(np.int64, copy=False) * 1000
        if arr.dtype.kind == "f":
            if float(np.abs(arr).max()) >= _EXACT_US_LIMIT:
                return None
            return _float_us_to_ns(arr)
        # object dtype: integers beyond int64 among them
        for v in values:
            if type(v) is int and not (-_MAX_ABS_US <= v <= _MAX_ABS_US):
                raise self.fail(f"timestamp out of range: {v}")
        return None

    def _dur_to_ns(self, values: list[Any]) -> I64:
        import numpy as np

        try:
            arr = np.array(values, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            arr = np.array([v if isinstance(v, int | float) else 0.0 for v in values], np.float64)
        arr[np.isnan(arr)] = 0.0  # dur missing (None) reads as NaN
        if arr.size and float(np.abs(arr).max()) > _MAX_ABS_US:
            raise self.fail("duration out of range (more than 9.2e15 µs)")
        return _float_us_to_ns(arr)

    # -- envelope & assembly -------------------------------------------------------------------

    def _decode_envelope(self, prefix: bytes | None, tail: bytes) -> _Envelope:
        if prefix is None:
            if tail.strip():
                raise self.fail("malformed JSON: data after the closing ] of the event list")
            if self.n_events and not self.n_with_ph:
                raise self.fail('not a trace: no element of the JSON list has a "ph" field')
            return _Envelope()
        text = prefix + b'"traceEvents": []' + tail
        try:
            return _DEC_ENVELOPE.decode(text)
        except msgspec.DecodeError as e:
            raise self.fail(_json_reason(e, truncated_hint=True)) from None
        except RecursionError:
            raise self.fail(_TOO_DEEP_REASON) from None

    def _build(self, env: _Envelope) -> model.Trace:
        self._take_fast()
        # Each table is sorted as soon as it is built, its unsorted columns dropped (see _join).
        starts = [_join(t, "ts") for t in self.tables]
        nonempty = [s for s in starts if len(s)]
        origin = min(int(s.min()) for s in nonempty) if nonempty else 0
        for column in nonempty:
            column -= origin  # in place: the joined columns are fresh arrays
        rt_ts, a_ts, r_ts, p_ts, s_ts, f_ts = starts
        del starts, nonempty
        strings = self.strings.freeze()
        runtime = self._runtime(rt_ts, strings)
        del rt_ts
        flows, unmatched_ends, ends = self._flows(f_ts)
        del f_ts
        activities = self._activities(a_ts, ends)
        del a_ts, ends
        runtime = blocking_copies(
            runtime, activities.pid, activities.correlation, _pageable(activities, strings)
        )
        ranges = self._ranges(r_ts, strings)
        del r_ts
        metadata, base_ns = self._metadata(env)
        rank, world = _distributed(env.distributedInfo)
        return model.Trace(
            source=self.src,
            format="kineto",
            strings=strings,
            runtime=runtime,
            activities=activities,
            ranges=ranges,
            python_frames=self._table(model.PythonFrames, self.py, "python_frame", p_ts),
            device_syncs=self._table(model.DeviceSyncs, self.sync, "device_sync", s_ts),
            flows=flows,
            device_name=_device_name(env.deviceProperties, activities),
            rank=rank,
            world_size=world,
            origin_ns=origin + (base_ns or 0),
            metadata=metadata,
            # last: the tables above have counted their negative durations by now
            skipped=self._skipped(unmatched_ends),
        )

    def _table(
        self, cls: type[_T], cols: _Cols, what: str, start: I64, **given: npt.NDArray[Any]
    ) -> _T:
        """Table ``cls`` of the rows in ``cols``, sorted by start: ``start`` (from the origin),
        the columns ``given``, and every other one joined from its parts, a negative duration
        read as 0 and counted."""
        dur = clamp_durations(_join(cols, "dur"), what, self.clamped)
        columns = {"start_ns": start, "dur_ns": dur, **given}
        for field in cls.__struct_fields__:
            if field not in columns:
                dtype = model._DTYPES.get(field, "int64")
                columns[field] = _join(cols, _COLUMN.get(field, field), dtype)
        return cls(**columns).sorted_by_start()

    def _runtime(self, ts: I64, strings: tuple[str, ...]) -> model.RuntimeCalls:
        import numpy as np

        name = _join(self.rt, "name", np.int32)
        # per-name lookup table indexed by string id: one pass over the rows, not one per name
        kind_of = np.zeros(max(len(strings), 1), dtype=np.uint8)
        for nid in distinct(name):
            kind_of[nid] = int(classify_runtime(strings[nid]))
        kind = kind_of[name]
        return self._table(model.RuntimeCalls, self.rt, "runtime", ts, name=name, kind=kind)

    def _flows(self, ts: I64) -> tuple[model.Flows, int, tuple[I64, I64, I64, I64]]:
        """The launch flows, one row per end ('f') whose start ('s') is in the trace; how many
        ends have no start; and every end's process, thread, time and id."""
        import numpy as np

        f_id = _join(self.flow, "id")
        f_start = _join(self.flow, "is_start", np.bool_)
        f_pid, f_tid = _join(self.flow, "pid"), _join(self.flow, "tid")
        s_mask = f_start & (f_id >= 0)
        e_mask = ~f_start & (f_id >= 0)
        sid, sts = f_id[s_mask], ts[s_mask]
        order = np.argsort(sid, kind="stable")
        sid, sts = sid[order], sts[order]
        eid, ets = f_id[e_mask], ts[e_mask]
        pos = np.searchsorted(sid, eid)
        pos_c = np.minimum(pos, max(len(sid) - 1, 0))
        matched = (pos < len(sid)) & (sid[pos_c] == eid) if len(sid) else np.zeros(len(eid), bool)
        flows = model.Flows(
            id=eid[matched], start_ts_ns=sts[pos_c[matched]], end_ts_ns=ets[matched]
        )
        return flows, int((~matched).sum()), (f_pid[e_mask], f_tid[e_mask], ets, eid)

    def _activities(self, ts: I64, ends: tuple[I64, I64, I64, I64]) -> model.Activities:
        import numpy as np

        corr = _join(self.act, "corr")
        pid = _join(self.act, "pid")
        missing = np.flatnonzero(corr < 0)
        e_pid, e_tid, e_ts, e_id = ends
        if len(missing) and len(e_id):
            # Kineto binds a flow end to the slice starting at the same time on the same track.
            tid = _join(self.act, "tid")
            by_track = {
                (int(p), int(t), int(s)): int(i)
                for p, t, s, i in zip(e_pid, e_tid, e_ts, e_id, strict=True)
            }
            for j in missing:
                found = by_track.get((int(pid[j]), int(tid[j]), int(ts[j])))
                if found is not None:
                    corr[j] = found
        kind = _kinds(_join(self.act, "kind"), _ACT_KIND)
        return self._table(
            model.Activities, self.act, "activity", ts, pid=pid, kind=kind, correlation=corr
        )

    def _ranges(self, ts: I64, strings: tuple[str, ...]) -> model.HostRanges:
        import numpy as np

        name = _join(self.rng, "name", np.int32)
        code = _join(self.rng, "kind")
        kind = _kinds(code, _RANGE_KIND)
        step = np.full(len(name), -1, dtype=np.int64)
        step_of = np.full(max(len(strings), 1), -1, dtype=np.int64)
        for nid in distinct(name):
            m = _STEP_NAME.match(strings[nid])
            if m is not None and _is_i64_digits(m.group(1)):
                step_of[nid] = int(m.group(1))
        if bool((step_of >= 0).any()):
            rows = (step_of[name] >= 0) & (code != _GPU_ANNOT)
            kind[rows] = int(model.RangeKind.STEP)
            step[rows] = step_of[name[rows]]
        return self._table(model.HostRanges, self.rng, "range", ts, name=name, kind=kind, step=step)

    def _metadata(self, env: _Envelope) -> tuple[dict[str, str], int | None]:
        """What the trace says about itself, and its ``baseTimeNanoseconds``."""
        metadata: dict[str, str] = {"timestamps": "exact decimal" if self.exact else "float64"}
        base_ns = _lenient(env.baseTimeNanoseconds, int)
        if base_ns is not None:
            metadata["baseTimeNanoseconds"] = str(base_ns)
        schema = _lenient(env.schemaVersion, int)
        if schema is not None:
            metadata["schemaVersion"] = str(schema)
        trace_name = _lenient(env.traceName, str)
        if trace_name:
            metadata["traceName"] = trace_name
        if self.ids.labels:
            labels = {k: v for k, v in self.ids.labels.items() if not k.strip().isdigit()}
            if labels:
                import json

                metadata["id_labels"] = json.dumps(labels, sort_keys=True)
        return metadata, base_ns

    def _skipped(self, unmatched_flow_ends: int) -> dict[str, int]:
        skipped = dict(self.skipped)
        if unmatched_flow_ends:
            skipped["flow end without start"] = unmatched_flow_ends
        skipped.update(self.clamped)
        if self.int_clamped:
            skipped["integer beyond int64 (read as -1)"] = self.int_clamped
        if self.not_numeric:
            skipped["non-numeric id or stream (read as -1)"] = self.not_numeric
        return skipped


def _pageable(activities: model.Activities, strings: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """The copies to or from pageable memory: Kineto names them ``Memcpy DtoH (Device ->
    Pageable)``, ``Memcpy HtoD (Pageable -> Device)``."""
    import numpy as np

    copy = activities.kind == int(model.ActivityKind.MEMCPY)
    names = distinct(activities.name[copy])
    paged = np.zeros(max(len(strings), 1), dtype=np.bool_)
    for nid in names.tolist():
        paged[nid] = "Pageable" in strings[nid]
    out: npt.NDArray[np.bool_] = copy & paged[activities.name]
    return out


def _join(cols: _Cols, name: str, dtype: Any = "int64") -> npt.NDArray[Any]:
    """One column of a table, its parts joined (and dropped from ``cols``)."""
    # Each column's parts are dropped as soon as they are joined, and each table is sorted as
    # soon as it is built (its unsorted columns dropped): peak memory stays near the parts
    # plus one table, not the parts, every joined column and every sorted table at once
    # (400 MB trace: 294 -> 167 MB peak RSS, with the accelerator handing each column over
    # whole).
    import numpy as np

    parts = cols.parts.pop(name, [])
    if not parts:
        return np.empty(0, dtype=dtype)
    # one part (every chunk filed by the accelerator): its buffer, as it is
    arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
    del parts
    return arr.astype(dtype, copy=False)


def _kinds(codes: I64, kind_of: Mapping[int, int]) -> U8:
    """Our category codes as the model's kinds."""
    import numpy as np

    kinds = np.zeros(len(codes), dtype=np.uint8)
    for code, kind in kind_of.items():
        kinds[codes == code] = int(kind)
    return kinds


_TOO_DEEP_REASON = "malformed JSON: values nested too deeply to decode"


def _is_i64_digits(s: str) -> bool:
    """True for a plain decimal (ASCII digits only) that fits in int64: ``str.isdigit`` also
    accepts digits ``int()`` refuses (``"²"``), and ``int()`` refuses > 4300 digits."""
    return s.isascii() and s.isdigit() and (len(s) < 19 or (len(s) < 40 and int(s) <= _I64_MAX))


_EXEC_TRACE_REASON = (
    "this is a PyTorch execution trace (nodes/schema), not a Kineto trace; record one with "
    "torch.profiler (export_chrome_trace or tensorboard_trace_handler)"
)


def _json_reason(e: msgspec.DecodeError, *, truncated_hint: bool) -> str:
    msg = str(e)
    if "truncated" in msg or (truncated_hint and "Input data was truncated" in msg):
        return f"truncated JSON ({msg})"
    return f"malformed JSON ({msg})"


_WS = re.compile(rb"[ \t\r\n]*")


def _skip_ws(buf: bytes | bytearray, start: int) -> int:
    m = _WS.match(buf, start)
    return m.end() if m is not None else start


def _rstrip_ws(buf: bytes | bytearray, start: int, end: int) -> int:
    while end > start and buf[end - 1] in b" \t\r\n":
        end -= 1
    return end


def _float_us_to_ns(arr: npt.NDArray[np.float64]) -> I64:
    # Split before scaling: the integer part is exact, and the fraction (exact by Sterbenz)
    # times 1000 rounds to the right ns whenever |µs| < 2**43.
    import numpy as np

    ip = np.floor(arr)
    return ip.astype(np.int64) * 1000 + np.rint((arr - ip) * 1000.0).astype(np.int64)


def _fixed_width_us_to_ns(values: list[Any]) -> I64 | None:
    """Vectorised exact parse when every value is written ``DDDD.ddd`` with one width (what
    Kineto writes); None otherwise."""
    import numpy as np

    lens = np.fromiter(map(len, values), np.int64, len(values))
    width = int(lens[0])
    if width < 5 or width > 22 or not bool((lens == width).all()):
        return None
    text = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(-1, width)
    if not bool((text[:, width - 4] == 0x2E).all()):
        return None
    digits = np.delete(text, width - 4, axis=1).astype(np.int64) - 0x30
    if bool(((digits < 0) | (digits > 9)).any()):
        return None
    n_int = width - 4
    if n_int > 16:
        return None  # could overflow int64 below; the per-value path range-checks it
    us = digits[:, :n_int] @ (10 ** np.arange(n_int - 1, -1, -1, dtype=np.int64))
    if bool((us > _MAX_ABS_US).any()):
        return None
    frac = digits[:, n_int:] @ np.array([100, 10, 1], dtype=np.int64)
    out: I64 = us * 1000 + frac
    return out


def _raw_us_to_ns(raw: bytes, loader: _Loader) -> int:
    if raw == b"null":
        return _NO_TS
    # Kineto's own form, "1712195495519689.047", parsed with integer arithmetic; anything else
    # (other digit counts, exponents, signs) exactly through Decimal.
    ns: int | None = None
    if len(raw) > 4 and raw[-4] == 0x2E and raw[0] != 0x2D:
        try:
            ns = int(raw[:-4]) * 1000 + int(raw[-3:])
        except ValueError:
            ns = None
    if ns is None:
        import decimal

        ctx = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)
        try:
            d = decimal.Decimal(raw.decode("ascii"))
            # 1e999999999 is valid JSON: refuse it before int() builds a billion-digit number
            if d.is_finite() and d.adjusted() > 24:
                raise loader.fail(f"timestamp out of range: {raw[:40]!r}")
            ns = int((d * 1000).to_integral_value(context=ctx))
        except (decimal.InvalidOperation, UnicodeDecodeError, ValueError, OverflowError):
            raise loader.fail(f"bad timestamp {raw[:40]!r}") from None
    if not _I64_MIN <= ns <= _I64_MAX:
        raise loader.fail(f"timestamp out of range: {raw[:40]!r}")
    return ns


def _lenient(raw: msgspec.Raw, typ: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw, type=typ | None)
    except (msgspec.DecodeError, RecursionError):
        return None


def _distributed(raw: msgspec.Raw) -> tuple[int | None, int | None]:
    info = _lenient(raw, dict[str, Any])
    if not isinstance(info, dict):
        return None, None

    def num(key: str) -> int | None:
        v = info.get(key)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and _is_i64_digits(v.strip()):
            return int(v)
        return None

    return num("rank"), num("world_size")


def _device_name(raw: msgspec.Raw, activities: model.Activities) -> str:
    import numpy as np

    props = _lenient(raw, list[_DeviceProps]) or []
    named = [p for p in props if p.name]
    if named:
        if len(activities):
            # the device this rank's activities ran on, when it is listed
            devs, counts = distinct(activities.device, counts=True)
            main = int(devs[np.argmax(counts)])
            for p in named:
                if p.id == main or (isinstance(p.id, str) and p.id.strip() == str(main)):
                    return str(p.name)
        return str(named[0].name)
    if not len(activities) and not props:
        return "cpu"
    return "unknown"
