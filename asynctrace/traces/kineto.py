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
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from asynctrace.traces import model
from asynctrace.traces._kineto_build import _Assembly
from asynctrace.traces._kineto_filing import _CAT_CODE, _LAUNCH_FLOW_CATS
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


if TYPE_CHECKING:
    # numpy is imported in the functions that make arrays, json and decimal where they are
    # used: every millisecond of import is paid by each `asynctrace report`, and the reading
    # and filing run without numpy, so that the report command imports it in a thread meanwhile

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


_FIRST_TS = re.compile(rb'"ts"\s*:\s*-?(\d+)\.')


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


class _Loader(_Assembly):
    """Reads the text in chunks, cuts each at an event boundary and decodes it (the module
    docstring); the filing (:mod:`asynctrace.traces._kineto_filing`) and the build
    (:mod:`asynctrace.traces._kineto_build`) are its bases'."""

    def __init__(
        self, path: Path, blocks: Iterator[bytes], chunk_bytes: int, *, accelerate: bool = True
    ) -> None:
        super().__init__(str(path))
        self.path = path
        self.fast = _kineto_fast if accelerate else None
        self.fast_cache = self.fast.new_cache() if self.fast is not None else None
        #: chunks filed by the accelerator and by the Python path (for tests and benchmarks)
        self.fast_chunks = 0
        self.slow_chunks = 0
        self.blocks = blocks
        self.chunk_bytes = chunk_bytes
        #: text decoded at once: starts small, then set from the bytes per event seen
        self.cut_bytes = min(chunk_bytes, _FIRST_CUT_BYTES)
        self.buf = bytearray()
        self.eof = False
        self.sniffed = False

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


_TOO_DEEP_REASON = "malformed JSON: values nested too deeply to decode"


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
