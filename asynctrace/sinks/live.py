"""The live status line's sink (``trace(live=True)``)."""

from __future__ import annotations

from asynctrace.capture._live import LiveStatus
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import SessionHeader

__all__ = ["LiveSink"]


class LiveSink(BaseSink):
    """One status line in the terminal, refreshed at most once a second."""

    def __init__(self) -> None:
        self._status: LiveStatus | None = None

    def start(self, header: SessionHeader) -> None:
        self._status = LiveStatus(header.name)
        self._status.start()
        # the status line's own method takes each step: one call less in the user's loop
        self.step = self._status.update  # type: ignore[method-assign,assignment]

    def finish(self, end: SessionEnd) -> None:
        s, self._status = self._status, None
        if s is not None:
            s.stop()

    def forget_in_child(self) -> None:
        self._status = None

    def __repr__(self) -> str:
        return "LiveSink()"
