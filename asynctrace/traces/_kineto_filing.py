"""Filing a Kineto trace's events into columns (the Python path; the accelerator files the
same rows in C): each event's category says its table, and its fields go to that table's
per-chunk lists, turned into numpy parts after every chunk (times rounded to the ns once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.traces import model
from asynctrace.traces._apis import RUNTIME_CATEGORIES

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from asynctrace.traces.model import I64

__all__: list[str] = []

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

#: marks a ``ts: null`` read as raw text (never a real time: below -9.2e15 µs)
_NO_TS = -(2**63)

_I64_MIN = -(2**63)

_I64_MAX = 2**63 - 1

# |µs| below this times 1000 still fits in int64
_MAX_ABS_US = _I64_MAX // 1000

_EXACT_US_LIMIT = float(2**43)

#: CPU-to-device launch flows across generations; other flows (``fwdbwd``) are not launches.
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async", "async_cpu_to_gpu"})


def _is_i64_digits(s: str) -> bool:
    """True for a plain decimal (ASCII digits only) that fits in int64: ``str.isdigit`` also
    accepts digits ``int()`` refuses (``"²"``), and ``int()`` refuses > 4300 digits."""
    return s.isascii() and s.isdigit() and (len(s) < 19 or (len(s) < 40 and int(s) <= _I64_MAX))


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


def _raw_us_to_ns(raw: bytes, loader: _Filing) -> int:
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


class _Filing:
    """The columns a loader files events into, and the counts it keeps while it reads."""

    #: the accelerator and its cache, None where it is off (set by the loader)
    fast: Any
    fast_cache: Any
    #: timestamps decoded as raw text, parsed exactly (set by the loader per chunk)
    exact: bool

    def __init__(self, src: str) -> None:
        self.src = src
        self.exact = False
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

    def fail(self, reason: str) -> TraceFormatError:
        return TraceFormatError(self.src, reason)

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

    def _collect(self, events: list[Any]) -> bool:
        """Append ``events`` to the columns; False (nothing kept) if ``ts`` needs exact parsing."""
        cat_code = _CAT_CODE.get
        ids = self.ids
        name_ids = self.name_ids
        intern = self.strings.intern
        skipped: dict[str, int] = {}
        slices, rt_corr, (a_dev, a_stream, a_kind, a_corr), r_kind = self._slice_lists()
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
        return self._keep_chunk(len(events), skipped)

    def _slice_lists(
        self,
    ) -> tuple[list[tuple[list[Any], ...]], list[Any], tuple[list[Any], ...], list[Any]]:
        """The lists :meth:`_collect` appends to: by category code, those of the columns every
        host or device slice has; then the runtime calls' correlation, the activities' own
        columns (device, stream, kind, correlation) and the ranges' kind."""
        slices = [
            tuple(t.lists[n] for n in ("ts", "dur", "pid", "tid", "name"))
            for t in (self.rt, self.act, self.act, self.act, self.rng, self.rng, self.rng, self.py)
        ]
        act = tuple(self.act.lists[n] for n in ("device", "stream", "kind", "corr"))
        return slices, self.rt.lists["corr"], act, self.rng.lists["kind"]

    def _keep_chunk(self, n_events: int, skipped: dict[str, int]) -> bool:
        """The chunk's lists into numpy parts, and its counts kept; False (nothing kept) if
        ``ts`` must be re-read exactly."""
        if not self._flush():
            return False
        for key, n in skipped.items():
            self.skipped[key] = self.skipped.get(key, 0) + n
        self.n_events += n_events
        # every event but those counted as "no ph" has one
        self.n_with_ph += n_events - skipped.get("no ph", 0)
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
