"""Named ranges: NVTX in the ``asynctrace`` domain, plus ``record_function`` while profiling.

``asynctrace.range("forward")`` is a context manager and a decorator. Each use pushes an NVTX
range in one domain, ``asynctrace``, with a registered string and a colour derived from the
name (stable across runs and processes), and pops it on exit even when the body raises.

Cost matters because users wrap every step in ranges, so:

* the NVTX domain is created on first use; with no NVTX tool attached the ``nvtx`` package
  hands back a do-nothing domain and we skip the NVTX calls entirely;
* event attributes (registered string + colour) are built once per distinct name and kept in a
  bounded cache, so a hot ``with range("forward")`` costs two dict look-ups and two C calls;
* ``torch.profiler.record_function`` costs microseconds even when no profiler runs, so it is
  opened only while one is active (a ~40 ns C check per range).

The capture session uses the internal fast path, :func:`_handle` / :func:`_push` / :func:`_pop`,
for its per-step ranges (``step N``). :func:`open_ranges` counts ranges pushed and not yet
popped (all threads together), for tests that check balance.
"""

from __future__ import annotations

import functools
import inspect
import threading
import zlib
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch

from asynctrace.errors import CaptureError, OptionError

__all__ = ["DOMAIN", "PALETTE", "Range", "color_of", "nvtx_attached", "open_ranges", "range"]

#: the NVTX domain every asynctrace range lives in
DOMAIN = "asynctrace"

#: ARGB colours (opaque) a range name is hashed onto; distinct enough side by side in Nsight
PALETTE: tuple[int, ...] = (
    0xFF4E79A7,
    0xFFF28E2B,
    0xFFE15759,
    0xFF76B7B2,
    0xFF59A14F,
    0xFFEDC948,
    0xFFB07AA1,
    0xFFFF9DA7,
    0xFF9C755F,
    0xFFBAB0AC,
)

#: distinct names whose NVTX attributes are kept; beyond that the oldest are dropped
_CACHE_SIZE = 4096

_P = ParamSpec("_P")
_R = TypeVar("_R")

# A C function, so checking "is a profiler running" costs tens of ns instead of the µs
# record_function costs when no profiler is there to see it.
_profiler_enabled: Callable[[], bool] = torch._C._autograd._profiler_enabled


def color_of(name: str) -> int:
    """The ARGB colour of a range called ``name``: crc32 of the name onto :data:`PALETTE`.

    crc32 rather than ``hash()`` because string hashes are salted per process.
    """
    return PALETTE[zlib.crc32(name.encode("utf-8")) % len(PALETTE)]


class _Handle:
    """A name ready to push: the NVTX attributes, or None where no tool is attached."""

    __slots__ = ("attributes", "name")

    def __init__(self, name: str, attributes: Any) -> None:
        self.name = name
        self.attributes = attributes


class _Nvtx:
    """The process's NVTX state for the ``asynctrace`` domain (created on first use)."""

    __slots__ = ("_cache", "_lock", "_register", "attached", "depth", "domain")

    def __init__(self) -> None:
        import nvtx

        self.domain: Any = nvtx.get_domain(DOMAIN)
        # nvtx hands back a DummyDomain (every method a no-op) when no tool is attached
        self.attached: bool = isinstance(self.domain, nvtx.Domain)
        self._cache: dict[tuple[str, int | None], _Handle] = {}
        self._lock = threading.Lock()
        self.depth = 0
        register = getattr(self.domain, "get_registered_string", None)
        # Domain.get_registered_string is an unbounded lru_cache; per-step names ("step 81234")
        # would grow it forever, so register through the uncached function and keep our own
        # bounded cache instead.
        self._register: Callable[..., Any] | None = getattr(register, "__wrapped__", None)

    def cached(self, name: str, color: int | None) -> _Handle | None:
        return self._cache.get((name, color))

    def handle(self, name: str, color: int | None, *, cache: bool) -> _Handle:
        key = (name, color)
        h = self._cache.get(key)
        if h is not None:
            return h
        if not self.attached:
            h = _Handle(name, None)
        else:
            if self._register is not None:
                message = self._register(self.domain, name)
            else:  # pragma: no cover - older nvtx without the lru_cache wrapper
                message = self.domain.get_registered_string(name)
            attrs = self.domain.get_event_attributes(
                color=color_of(name) if color is None else color
            )
            attrs.message = message
            h = _Handle(name, attrs)
        if cache:
            with self._lock:
                if len(self._cache) >= _CACHE_SIZE:
                    # dicts keep insertion order: drop the oldest name
                    del self._cache[next(iter(self._cache))]
                self._cache[key] = h
        return h


_state: _Nvtx | None = None
_state_lock = threading.Lock()


def _nvtx() -> _Nvtx:
    global _state
    s = _state
    if s is None:
        with _state_lock:
            if _state is None:
                _state = _Nvtx()
            s = _state
    return s


def nvtx_attached() -> bool:
    """Whether an NVTX tool (Nsight Systems, an injection library) receives our ranges."""
    return _nvtx().attached


def open_ranges() -> int:
    """Ranges pushed by asynctrace and not yet popped, all threads together."""
    s = _state
    return 0 if s is None else s.depth


def _handle(name: str, *, color: int | None = None, cache: bool = True) -> _Handle:
    """Resolve ``name`` once; pass ``cache=False`` for names used once (``step N``)."""
    return _nvtx().handle(name, color, cache=cache)


def _push(handle: _Handle) -> None:
    """Push an NVTX range on this thread (no record_function)."""
    s = _state or _nvtx()
    if handle.attributes is not None:
        s.domain.push_range(handle.attributes)
    s.depth += 1


def _pop() -> None:
    """Pop the innermost range :func:`_push` opened on this thread."""
    s = _state or _nvtx()
    s.depth -= 1
    if s.attached:
        s.domain.pop_range()


class Range:
    """``with asynctrace.range("forward"):`` or ``@asynctrace.range("forward")``.

    As a context manager one object may be entered again on the same thread (each exit closes
    the innermost entry); as a decorator each call is independent, on any thread.
    """

    __slots__ = ("_handle", "_open", "_rf", "color", "name")

    def __init__(self, name: str, *, color: int | None = None) -> None:
        if not name:
            raise OptionError("asynctrace.range needs a non-empty name")
        self.name = name
        self.color = color
        s = _state
        h = s.cached(name, color) if s is not None else None
        self._handle = h if h is not None else _handle(name, color=color)
        self._open = 0
        # (entry index, record_function) for entries made while a profiler was active
        self._rf: list[tuple[int, Any]] | None = None

    def __enter__(self) -> Range:
        if _profiler_enabled():
            rf: Any = torch.autograd.profiler.record_function(self.name)
            rf.__enter__()
            if self._rf is None:
                self._rf = []
            self._rf.append((self._open, rf))
        self._open += 1
        h = self._handle
        s = _state or _nvtx()
        if h.attributes is not None:
            s.domain.push_range(h.attributes)
        s.depth += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            _pop()
        finally:
            self._open -= 1
            rfs = self._rf
            if rfs and rfs[-1][0] == self._open:
                rfs.pop()[1].__exit__(*exc_info)

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        if (
            inspect.iscoroutinefunction(fn)
            or inspect.isgeneratorfunction(fn)
            or inspect.isasyncgenfunction(fn)
        ):
            # calling one returns before its body runs, and the body then runs between other
            # code on the same thread: an NVTX range (a per-thread push/pop stack) cannot follow
            raise CaptureError(
                f"asynctrace.range({self.name!r}) cannot decorate "
                f"{getattr(fn, '__name__', fn)!r}, an async or generator function: its body "
                "does not run inside the call; put `with asynctrace.range(...):` around code "
                "without an await or yield in it"
            )
        name = self.name
        handle = self._handle

        # Per call state lives on the stack, so concurrent calls from threads stay paired.
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            rf: Any = None
            if _profiler_enabled():
                rf = torch.autograd.profiler.record_function(name)
                rf.__enter__()
            _push(handle)
            try:
                return fn(*args, **kwargs)
            finally:
                try:
                    _pop()
                finally:
                    if rf is not None:
                        rf.__exit__(None, None, None)

        return wrapper

    def __repr__(self) -> str:
        return f"asynctrace.range({self.name!r})"


def range(name: str, *, color: int | None = None) -> Range:
    """A named range: NVTX push/pop in domain ``asynctrace`` (+ ``record_function`` while a
    torch profiler is active). Use as ``with asynctrace.range("forward"):`` or as a decorator.

    ``color`` is an ARGB int; by default a stable colour derived from ``name``.
    """
    return Range(name, color=color)
