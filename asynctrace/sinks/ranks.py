"""``gather_ranks=True``: rank 0 collects every rank's step summary at the session's end."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctrace.capture.devices import CudaDevice, Device
from asynctrace.capture.sinks import BaseSink, SessionEnd

if TYPE_CHECKING:
    from asynctrace.analysis.ranks import RankTable

__all__ = ["RankGatherSink"]


class RankGatherSink(BaseSink):
    """After the records are written, gathers them over the process group (a collective: every
    rank must enable it). Only a session that ended cleanly gathers: a failed rank may never
    reach the collective, and the others would wait for it."""

    def __init__(
        self, *, device: Callable[[], Device], records_path: Callable[[], Path | None]
    ) -> None:
        self._device = device
        self._records_path = records_path
        #: the per-rank table (rank 0); else None
        self.table: RankTable | None = None

    def finish(self, end: SessionEnd) -> None:
        self.table = None
        if not end.started or end.error is not None:
            return
        from asynctrace.capture import _distributed

        if not _distributed.is_distributed():
            return
        on_device: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        device = self._device()
        if isinstance(device, CudaDevice):
            import torch

            # NCCL's object gather moves its tensors to torch's *current* device: on ranks that
            # never called set_device that is cuda:0 on every rank, and NCCL fails or hangs
            on_device = torch.cuda.device(device.index)
        with on_device:
            gathered = _distributed.gather_records(self._records_path())
        if gathered is not None:  # rank 0
            from asynctrace.analysis.ranks import rank_table

            self.table = rank_table(gathered.steps, records_paths=gathered.records_paths)

    def __repr__(self) -> str:
        return "RankGatherSink()"
