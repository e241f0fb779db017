"""``gather_ranks=True``: rank 0 collects every rank's step summary at the session's end."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctrace.capture.devices import CudaDevice, Device
from asynctrace.capture.distributed import DEFAULT_LAST_STEPS
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import SessionHeader, StepRecord

if TYPE_CHECKING:
    from asynctrace.analysis.ranks import RankTable

__all__ = ["RankGatherSink"]


class RankGatherSink(BaseSink):
    """After the records are written, gathers them over the process group (a collective: every
    rank must enable it). Only a session that ended cleanly gathers: a failed rank may never
    reach the collective, and the others would wait for it."""

    def __init__(
        self,
        *,
        device: Callable[[], Device],
        records_path: Callable[[], Path | None],
        collected: Callable[[], None] = lambda: None,
    ) -> None:
        self._device = device
        self._records_path = records_path
        self._collected = collected
        #: the per-rank table (rank 0); else None
        self.table: RankTable | None = None
        # the last steps, for a gather before the session's end (destroy_process_group)
        self._recent: deque[StepRecord] = deque(maxlen=DEFAULT_LAST_STEPS)
        #: whether this rank took part in a gather (its table is rank 0's)
        self.gathered = False
        self._undo: Callable[[], None] | None = None

    def start(self, header: SessionHeader) -> None:
        self.table = None
        self._recent.clear()
        self.gathered = False
        from asynctrace.capture import distributed as _distributed

        # scripts destroy the group before the session ends (most do): gather then
        self._undo = _distributed.wrap_destroy(self._gather_before_destroy)

    def step_batch(self, records: list[StepRecord]) -> None:
        self._recent.extend(records)

    def _gather_before_destroy(self) -> None:
        # the steps so far, handed on from the session's batch first; those after are not in
        # the table
        self._collected()
        self.gathered = True
        self._gather(list(self._recent))

    def finish(self, end: SessionEnd) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()
        if self.gathered:
            # gathered when the script destroyed the group: the table stands
            return
        self.table = None
        if not end.started or end.error is not None:
            return
        self._gather(None)

    def _gather(self, steps: list[StepRecord] | None) -> None:
        """Over the default group: ``steps``, or (None) this rank's records file's tail."""
        from asynctrace.capture import distributed as _distributed

        if not _distributed.is_distributed():
            return
        self.gathered = True
        on_device: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        device = self._device()
        if isinstance(device, CudaDevice):
            import torch

            # NCCL's object gather moves its tensors to torch's *current* device: on ranks that
            # never called set_device that is cuda:0 on every rank, and NCCL fails or hangs
            on_device = torch.cuda.device(device.index)
        with on_device:
            if steps is None:
                gathered = _distributed.gather_records(self._records_path())
            else:
                gathered = _distributed.gather_steps(steps, records_path=self._records_path())
        if gathered is not None:  # rank 0
            from asynctrace.analysis.ranks import rank_table

            self.table = rank_table(gathered.steps, records_paths=gathered.records_paths)

    def __repr__(self) -> str:
        return "RankGatherSink()"
