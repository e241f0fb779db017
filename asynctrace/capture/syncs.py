"""Synchronization detection (interface; the detection itself is being written).

A :class:`SyncDetector` watches for host-device synchronizations while started and calls
``on_sync`` with a :class:`SyncEvent` for each one. The capture session owns one per session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SyncDetector", "SyncEvent"]


@dataclass(frozen=True)
class SyncEvent:
    #: what synchronized: "aten::_local_scalar_dense", "cudaStreamSynchronize", ...
    op: str
    #: innermost frame outside torch and asynctrace, "path/to/file.py:123"
    site: str
    #: frames, innermost first, as "file.py:123 in func"
    stack: tuple[str, ...] = ()
    #: host time spent blocked, where known (0 where not measurable)
    wait_ns: int = 0


class SyncDetector:
    """Calls ``on_sync`` for each synchronization between ``start()`` and ``stop()``.

    ``mode``: "auto" (CUDA hooks on CUDA, nothing on CPU), "cuda", "lint" (a TorchDispatchMode
    that flags ops which would synchronize on an accelerator; works on CPU), "off".
    ``stop()`` restores every global setting ``start()`` changed.
    """

    def __init__(self, on_sync: Callable[[SyncEvent], None], *, mode: str = "auto") -> None:
        self.on_sync = on_sync
        self.mode = mode

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None
