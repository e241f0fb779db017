"""``trace(live=True)``: one status line in the terminal with the latest step's figures
(:class:`LiveSink`, drawn by :class:`LiveStatus`).

Refreshed at most once a second, so a fast loop pays one clock read and one comparison per
step; silent when the output is not a terminal (a log file gets nothing).

The line is kept to the terminal's width (read at each refresh, so a resize is followed) and
never wraps. The script's own output goes on its own lines: while the line is shown,
``sys.stdout`` and ``sys.stderr`` are wrapped so that each write first clears the line
(carriage return, erase to the end of the line) and, once the write has ended its line, the
status line is drawn again below it. A write that leaves the cursor mid-line (``print(x,
end="")``) is not followed by the line: it comes back at the next refresh that finds the cursor
at the start of a line, so it never runs into the script's text.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from typing import Any, TextIO

from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import SessionHeader, StepRecord
from asynctrace.records.units import format_ns

__all__ = ["LiveSink", "LiveStatus"]

_REFRESH_NS = 1_000_000_000
#: carriage return, then erase from the cursor to the end of the line (ANSI EL)
_CLEAR = "\r\x1b[K"


def _ms(ns: int | None) -> str:
    return "-" if ns is None else format_ns(ns)


class _Redraw:
    """A stand-in for ``sys.stdout``/``sys.stderr`` while the live line is shown: clears the
    line before each write and draws it again after a write that ended its line. Everything
    else (``fileno``, ``encoding``, ``isatty``, …) is the wrapped stream's."""

    def __init__(self, wrapped: TextIO, live: LiveStatus) -> None:
        self._wrapped = wrapped
        self._status = live

    def write(self, text: str) -> int:
        return self._status._around_write(self._wrapped, text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class LiveStatus:
    """A one-line status in the terminal; ``update`` is cheap between refreshes.

    ``stream``: where the line goes (default: ``sys.stderr``); ``console``: a rich Console
    whose file, terminal detection and width are used instead (tests)."""

    def __init__(self, name: str, *, stream: TextIO | None = None, console: Any = None) -> None:
        self._console = console
        self._stream: TextIO = (
            console.file if console is not None else stream if stream is not None else sys.stderr
        )
        if isinstance(self._stream, _Redraw):
            # another session's live line wraps stderr: draw on what it wraps
            self._stream = self._stream._wrapped
        self._name = name
        self._next_ns = 0
        self.refreshes = 0
        #: the text shown now ("" when the line is not on the screen)
        self._shown = ""
        #: the last text drawn, to draw again after the script's output
        self._text = ""
        #: whether the cursor is at the start of a line (what was written last ended one)
        self._at_line_start = True
        self._started = False
        self._wrappers: list[tuple[str, _Redraw]] = []
        # the script's threads print too: one write and its redraw at a time
        self._lock = threading.RLock()

    @property
    def enabled(self) -> bool:
        if self._console is not None:
            return bool(self._console.is_terminal)
        isatty = getattr(self._stream, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (OSError, ValueError):  # a closed stream
            return False

    def width(self) -> int:
        """Columns of the terminal the line goes to (at each refresh: a resize is followed)."""
        if self._console is not None:
            return int(self._console.width)
        try:
            return os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return shutil.get_terminal_size().columns

    def start(self) -> None:
        if not self.enabled or self._started:
            return
        self._started = True
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if isinstance(current, _Redraw):
                continue
            wrapper = _Redraw(current, self)
            setattr(sys, name, wrapper)
            self._wrappers.append((name, wrapper))

    def update(self, rec: StepRecord, *, now_ns: int | None = None) -> None:
        if not self._started:
            return
        now = time.monotonic_ns() if now_ns is None else now_ns
        if now < self._next_ns:
            return
        self._next_ns = now + _REFRESH_NS
        self.refreshes += 1
        with self._lock:
            self._text = self.line(rec)
            if self._at_line_start:
                self._draw()

    def line(self, rec: StepRecord) -> str:
        mem = rec.mem_allocated_bytes
        return (
            f"asynctrace {self._name}: step {rec.step}  frontend {_ms(rec.frontend_ns)}  "
            f"device {_ms(rec.device_ns)}  run-ahead {_ms(rec.run_ahead_ns)}  "
            f"in flight {rec.in_flight}  syncs {rec.sync_count}"
            + (f"  mem {mem / 2**20:.0f} MiB" if mem is not None else "")
        )

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        with self._lock:
            self._clear()
            self._text = ""
        for name, wrapper in reversed(self._wrappers):
            # only ours goes: a stream the script set since (redirect_stdout) is theirs
            if getattr(sys, name) is wrapper:
                setattr(sys, name, wrapper._wrapped)
        self._wrappers.clear()

    # -- drawing -----------------------------------------------------------------------------

    def _draw(self) -> None:
        # one column short of the width: a line that fills the last column wraps on some
        # terminals as soon as anything follows it
        text = self._text[: max(self.width() - 1, 0)]
        if not text:
            return
        self._write_own(_CLEAR + text)
        self._shown = text

    def _clear(self) -> None:
        if self._shown:
            self._write_own(_CLEAR)
            self._shown = ""

    def _write_own(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (
            OSError,
            ValueError,
        ):  # the terminal went away: the status line is not worth an error
            self._shown = ""

    def _around_write(self, stream: TextIO, text: str) -> int:
        if not text:
            return stream.write(text)
        with self._lock:
            if self._shown:
                if stream is not self._stream:
                    # the other stream's buffered text must not land after our clear
                    self._flush(stream)
                self._clear()
            written = stream.write(text)
            self._at_line_start = text.endswith("\n")
            if self._at_line_start and self._text and self._started:
                self._flush(stream)
                self._draw()
            return written

    @staticmethod
    def _flush(stream: TextIO) -> None:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


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
