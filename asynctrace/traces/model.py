"""The columnar trace model every loader produces and every analysis reads.

One :class:`Trace` holds one process group's view of one profiling run (one rank). Each kind of
event is a table of equal-length numpy columns, so analyses run as vectorised array code and a
trace of millions of events costs tens of bytes per event.

Conventions, fixed for every loader:

* Times are ``int64`` nanoseconds from the trace's own origin (``Trace.origin_ns`` is that origin
  on the source's clock, for reference only). Conversion from µs / fractional µs happens once,
  at load, with rounding to the nearest ns.
* Names are ``int32`` indices into ``Trace.strings``.
* Missing integers (no correlation id, no stream) are ``-1``.
* Tables are sorted by ``start_ns`` (stable), so analyses may binary-search them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import msgspec

if TYPE_CHECKING:
    # numpy is imported where arrays are made, not here: the Kineto reader files a trace
    # without it, so `asynctrace report` can import numpy in a thread meanwhile
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Activities",
    "ActivityKind",
    "DeviceSyncs",
    "Flows",
    "HostRanges",
    "PythonFrames",
    "RangeKind",
    "RuntimeCalls",
    "RuntimeKind",
    "Trace",
]

I64: TypeAlias = "npt.NDArray[np.int64]"
I32: TypeAlias = "npt.NDArray[np.int32]"
U8: TypeAlias = "npt.NDArray[np.uint8]"


class ActivityKind(enum.IntEnum):
    """What a device activity is."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2


class RuntimeKind(enum.IntEnum):
    """What a host runtime/driver API call does, as far as asynchrony is concerned."""

    OTHER = 0
    #: launches one kernel (cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, ...)
    LAUNCH = 1
    #: queues a copy (cudaMemcpyAsync, hipMemcpyAsync, ...)
    MEMCPY = 2
    #: queues a memset
    MEMSET = 3
    #: launches a whole graph: many activities share its correlation id
    GRAPH_LAUNCH = 4
    #: blocks the host until device work completes (stream/device/event synchronize)
    SYNC = 5
    #: a copy the host waits for (cudaMemcpy without Async, ...)
    BLOCKING_MEMCPY = 6


class RangeKind(enum.IntEnum):
    """What a host-side range is."""

    #: an operator (``cpu_op``)
    OP = 0
    #: a user annotation (``record_function``, ``user_annotation``)
    ANNOTATION = 1
    #: a profiler step (``ProfilerStep#N``); ``HostRanges.step`` holds N
    STEP = 2
    #: an NVTX push/pop or start/end range
    NVTX = 3
    #: a device-side annotation (``gpu_user_annotation``)
    GPU_ANNOTATION = 4


_T = TypeVar("_T", bound="_Table")


# msgspec Structs, not dataclasses: a dataclass costs ~0.5 ms to define (it compiles its
# methods), and these classes are defined on every `asynctrace report` start-up.
# eq=False: tables compare (and hash) by identity; numpy columns have no truth value.
class _Table(msgspec.Struct, frozen=True, eq=False):
    """Equal-length columns; subclasses declare them as fields."""

    def __post_init__(self) -> None:
        lengths = {len(getattr(self, name)) for name in self.__struct_fields__}
        if len(lengths) > 1:
            raise ValueError(f"{type(self).__name__}: columns of unequal length {sorted(lengths)}")

    def __len__(self) -> int:
        return len(getattr(self, self.__struct_fields__[0]))

    @classmethod
    def empty(cls: type[_T]) -> _T:
        import numpy as np

        kwargs: dict[str, Any] = {}
        for name in cls.__struct_fields__:
            kwargs[name] = np.empty(0, dtype=_DTYPES.get(name, "int64"))
        return cls(**kwargs)

    @classmethod
    def from_rows(cls: type[_T], rows: Sequence[tuple[int, ...]]) -> _T:
        """A table of integer rows, each a tuple of the columns in the order of the fields."""
        import numpy as np

        if not rows:
            return cls.empty()
        arr = np.array(rows, dtype=np.int64)
        columns = enumerate(cls.__struct_fields__)
        return cls(**{n: arr[:, i].astype(_DTYPES.get(n, "int64"), copy=False) for i, n in columns})

    @classmethod
    def concat(cls: type[_T], parts: Sequence[_T]) -> _T:
        """The rows of ``parts``, one after the other."""
        import numpy as np

        if not parts:
            return cls.empty()
        names = cls.__struct_fields__
        return cls(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})

    def take(self: _T, index: npt.NDArray[Any]) -> _T:
        """A new table with the rows selected by ``index`` (indices or a boolean mask)."""
        return type(self)(**{n: getattr(self, n)[index] for n in self.__struct_fields__})

    def sorted_by_start(self: _T) -> _T:
        import numpy as np

        start: I64 = self.start_ns  # type: ignore[attr-defined]
        order = np.argsort(start, kind="stable")
        return self.take(order)

    def nbytes(self) -> int:
        return int(sum(getattr(self, n).nbytes for n in self.__struct_fields__))


#: columns that are not int64 (dtype names: numpy takes them as they are)
_DTYPES: dict[str, str] = {
    "name": "int32",
    "kind": "uint8",
    "device": "int32",
}


class RuntimeCalls(_Table, frozen=True, eq=False):
    """Host calls into the device runtime or driver (``cuda_runtime``, ``cuda_driver``, HIP)."""

    start_ns: I64
    dur_ns: I64
    pid: I64
    tid: I64
    name: I32
    kind: U8  # RuntimeKind
    correlation: I64


class Activities(_Table, frozen=True, eq=False):
    """Work executed on the device: kernels, copies, memsets."""

    start_ns: I64
    dur_ns: I64
    pid: I64
    device: I32
    stream: I64
    name: I32
    kind: U8  # ActivityKind
    correlation: I64


class DeviceSyncs(_Table, frozen=True, eq=False):
    """Device-side records of synchronizations (Kineto ``cuda_sync``, CUPTI SYNCHRONIZATION).

    They describe the same waits as the host's synchronizing calls; analyses use the host calls
    and keep these for display only, so that no wait is counted twice.
    """

    start_ns: I64
    dur_ns: I64
    pid: I64
    stream: I64
    correlation: I64


class HostRanges(_Table, frozen=True, eq=False):
    """Host-side ranges: operators, annotations, profiler steps, NVTX ranges.

    ``step`` is the N of ``ProfilerStep#N`` for ``RangeKind.STEP`` rows, else -1.
    """

    start_ns: I64
    dur_ns: I64
    pid: I64
    tid: I64
    name: I32
    kind: U8  # RangeKind
    step: I64


class PythonFrames(_Table, frozen=True, eq=False):
    """``python_function`` events (traces recorded with ``with_stack=True``).

    ``name`` is the frame as Kineto writes it: ``path/to/file.py(123): function``.
    """

    start_ns: I64
    dur_ns: I64
    pid: I64
    tid: I64
    name: I32


class Flows(_Table, frozen=True, eq=False):
    """Launch flows (``ac2g`` and older categories), resolved to their two endpoints' times.

    Kept for traces whose activities lack a correlation id; loaders already copy a flow's id into
    ``Activities.correlation`` where that was missing.
    """

    id: I64
    start_ts_ns: I64
    end_ts_ns: I64


class Trace(msgspec.Struct, frozen=True, eq=False):
    """One rank's profiling run, in columns.

    Build it with a loader (:func:`asynctrace.load`); analyses take it and never change it.
    """

    source: str
    format: str  #: "kineto", "nsys" or "synthetic"
    strings: tuple[str, ...]
    runtime: RuntimeCalls
    activities: Activities
    ranges: HostRanges
    python_frames: PythonFrames
    device_syncs: DeviceSyncs
    flows: Flows
    device_name: str = "unknown"
    rank: int | None = None
    world_size: int | None = None
    origin_ns: int = 0
    metadata: Mapping[str, str] = msgspec.field(default_factory=dict)
    #: counts of events the loader read but did not keep, by reason (for reports, never silent)
    skipped: Mapping[str, int] = msgspec.field(default_factory=dict)

    def name_of(self, index: int) -> str:
        return self.strings[index] if 0 <= index < len(self.strings) else "?"

    @property
    def n_events(self) -> int:
        return (
            len(self.runtime)
            + len(self.activities)
            + len(self.ranges)
            + len(self.python_frames)
            + len(self.device_syncs)
        )

    @property
    def end_ns(self) -> int:
        """The end of the latest event in the trace (0 for an empty trace)."""
        ends = [
            int((t.start_ns + t.dur_ns).max())
            for t in (self.runtime, self.activities, self.ranges, self.python_frames)
            if len(t)
        ]
        return max(ends, default=0)


class StringTable:
    """Interns names while a loader builds a trace."""

    __slots__ = ("_index", "_strings")

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._strings: list[str] = []

    def intern(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = len(self._strings)
            self._index[s] = i
            self._strings.append(s)
        return i

    def freeze(self) -> tuple[str, ...]:
        return tuple(self._strings)
