"""The live status line's sink (``trace(live=True)``)."""

from __future__ import annotations

from asynctrace.capture._live import LiveStatus
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import SessionHeader, StepRecord

__all__ = ["LiveSink"]


class LiveSink(BaseSink):
    """One status line in the terminal, refreshed at most once a second."""

    def __init__(self) -> None:
        self._status: LiveStatus | None = None

    def start(self, header: SessionHeader) -> None:
        self._status = LiveStatus(header.name)
        self._status.start()

    def step(self, record: StepRecord) -> None:
        s = self._status
        if s is not None:
            s.update(record)

    def finish(self, end: SessionEnd) -> None:
        s, self._status = self._status, None
        if s is not None:
            s.stop()

    def forget_in_child(self) -> None:
        self._status = None

    def __repr__(self) -> str:
        return "LiveSink()"
