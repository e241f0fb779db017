"""Build a :class:`~asynctrace.traces.model.Trace` row by row.

Used by the loaders that decode event by event and by tests that hand-build traces with known
answers. Times given here are already integer ns from the trace origin.
"""

from __future__ import annotations

from collections.abc import Mapping

from asynctrace.traces._columns import blocking_copies
from asynctrace.traces.model import (
    Activities,
    ActivityKind,
    DeviceSyncs,
    Flows,
    HostRanges,
    PythonFrames,
    RangeKind,
    RuntimeCalls,
    RuntimeKind,
    StringTable,
    Trace,
)

__all__ = ["TraceBuilder"]


class TraceBuilder:
    """Collects rows in Python lists and turns them into sorted numpy columns once."""

    def __init__(self, source: str = "<built>", format: str = "synthetic") -> None:
        self.source = source
        self.format = format
        self.strings = StringTable()
        self._rt: list[tuple[int, int, int, int, int, int, int]] = []
        self._act: list[tuple[int, int, int, int, int, int, int, int]] = []
        self._rng: list[tuple[int, int, int, int, int, int, int]] = []
        self._py: list[tuple[int, int, int, int, int]] = []
        self._dsync: list[tuple[int, int, int, int, int]] = []
        self._flows: list[tuple[int, int, int]] = []

    def runtime(
        self,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        kind: RuntimeKind = RuntimeKind.OTHER,
        correlation: int = -1,
        pid: int = 0,
        tid: int = 0,
    ) -> None:
        self._rt.append(
            (start_ns, dur_ns, pid, tid, self.strings.intern(name), int(kind), correlation)
        )

    def activity(
        self,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        kind: ActivityKind = ActivityKind.KERNEL,
        stream: int = 7,
        device: int = 0,
        correlation: int = -1,
        pid: int = 0,
    ) -> None:
        self._act.append(
            (
                start_ns,
                dur_ns,
                pid,
                device,
                stream,
                self.strings.intern(name),
                int(kind),
                correlation,
            )
        )

    def range(
        self,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        kind: RangeKind = RangeKind.OP,
        step: int = -1,
        pid: int = 0,
        tid: int = 0,
    ) -> None:
        self._rng.append((start_ns, dur_ns, pid, tid, self.strings.intern(name), int(kind), step))

    def python_frame(
        self, name: str, start_ns: int, dur_ns: int, *, pid: int = 0, tid: int = 0
    ) -> None:
        self._py.append((start_ns, dur_ns, pid, tid, self.strings.intern(name)))

    def device_sync(
        self, start_ns: int, dur_ns: int, *, stream: int = -1, correlation: int = -1, pid: int = 0
    ) -> None:
        self._dsync.append((start_ns, dur_ns, pid, stream, correlation))

    def flow(self, id: int, start_ts_ns: int, end_ts_ns: int) -> None:
        self._flows.append((id, start_ts_ns, end_ts_ns))

    def build(
        self,
        *,
        device_name: str = "unknown",
        rank: int | None = None,
        world_size: int | None = None,
        origin_ns: int = 0,
        metadata: Mapping[str, str] | None = None,
        skipped: Mapping[str, int] | None = None,
    ) -> Trace:
        """The trace; a ``MEMCPY`` call whose copy is named ``... Pageable ...`` (as Kineto names
        it) becomes a ``BLOCKING_MEMCPY``, as the loaders make it."""
        import numpy as np

        strings = self.strings.freeze()
        activities = Activities.from_rows(self._act).sorted_by_start()
        paged = np.array(["Pageable" in x for x in strings] or [False], dtype=bool)
        pageable = (activities.kind == int(ActivityKind.MEMCPY)) & paged[activities.name]
        runtime = blocking_copies(
            RuntimeCalls.from_rows(self._rt).sorted_by_start(),
            activities.pid,
            activities.correlation,
            pageable,
        )
        return Trace(
            source=self.source,
            format=self.format,
            strings=strings,
            runtime=runtime,
            activities=activities,
            ranges=HostRanges.from_rows(self._rng).sorted_by_start(),
            python_frames=PythonFrames.from_rows(self._py).sorted_by_start(),
            device_syncs=DeviceSyncs.from_rows(self._dsync).sorted_by_start(),
            flows=Flows.from_rows(self._flows),
            device_name=device_name,
            rank=rank,
            world_size=world_size,
            origin_ns=origin_ns,
            metadata=dict(metadata or {}),
            skipped=dict(skipped or {}),
        )
