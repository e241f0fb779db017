"""``trace(live=True)``: one status line in the terminal with the latest step's figures.

Refreshed at most once a second, so a fast loop pays one clock read and one comparison per
step; silent when the output is not a terminal (a log file gets nothing).
"""

from __future__ import annotations

import time
from typing import Any

from asynctrace.records import StepRecord

__all__ = ["LiveStatus"]

_REFRESH_NS = 1_000_000_000


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f} ms"


class LiveStatus:
    """A rich transient status line; ``update`` is cheap between refreshes."""

    def __init__(self, name: str, *, console: Any = None) -> None:
        from rich.console import Console

        self._console = console if console is not None else Console(stderr=True)
        self._name = name
        self._live: Any = None
        self._next_ns = 0
        self.refreshes = 0

    @property
    def enabled(self) -> bool:
        return bool(self._console.is_terminal)

    def start(self) -> None:
        if not self.enabled:
            return
        from rich.live import Live

        self._live = Live(
            "", console=self._console, auto_refresh=False, transient=True, redirect_stdout=False
        )
        self._live.start()

    def update(self, rec: StepRecord, *, now_ns: int | None = None) -> None:
        live = self._live
        if live is None:
            return
        now = time.monotonic_ns() if now_ns is None else now_ns
        if now < self._next_ns:
            return
        self._next_ns = now + _REFRESH_NS
        self.refreshes += 1
        live.update(self.line(rec), refresh=True)

    def line(self, rec: StepRecord) -> str:
        mem = rec.mem_allocated_bytes
        return (
            f"asynctrace {self._name}: step {rec.step}  frontend {_ms(rec.frontend_ns)}  "
            f"device {_ms(rec.device_ns)}  run-ahead {_ms(rec.run_ahead_ns)}  "
            f"in flight {rec.in_flight}  syncs {rec.sync_count}"
            + (f"  mem {mem / 2**20:.0f} MiB" if mem is not None else "")
        )

    def stop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()
