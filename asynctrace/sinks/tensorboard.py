"""The TensorBoard sink: per-step scalars while the session runs, a text summary at its end.

Each session is a run of its own, ``<dir>/<name>/<time>``, so two sessions of one name are two
runs side by side in TensorBoard rather than one folder in which only the newer shows.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.export.tensorboard import TensorBoardWriter, summary_markdown
from asynctrace.records import Note, SessionHeader
from asynctrace.records.names import sanitize_name

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report

__all__ = ["TensorBoardSink", "run_stamp"]


_stamps_given: set[str] = set()
_stamps_lock = threading.Lock()


def run_stamp(started_unix_ns: int) -> str:
    """``<YYYYmmdd-HHMMSS>-<pid>``: a session's TensorBoard run under ``<dir>/<name>/``, one
    run per session, sorted by time.

    The stamp has one-second resolution, so a second session of this process in the same
    second gets ``-2``, a third ``-3`` (and so on): two sessions never share a run folder,
    whose scalars would mix. Another process has another pid.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started_unix_ns / 1e9))
    base = f"{stamp}-{os.getpid()}"
    with _stamps_lock:
        run, n = base, 1
        while run in _stamps_given:
            n += 1
            run = f"{base}-{n}"
        _stamps_given.add(run)
    return run


class TensorBoardSink(BaseSink):
    """Writes each step's scalars (in a background thread) and the summary text at the end."""

    def __init__(self, dir: str | os.PathLike[str], *, report: Callable[[], Report]) -> None:
        self.dir = Path(dir)
        self._report = report
        self._writer: TensorBoardWriter | None = None
        #: what the summary should say about the events (steps dropped, writer failed)
        self.notes: list[Note] = []
        #: the run folder of the last session
        self.path: Path | None = None

    def start(self, header: SessionHeader) -> None:
        self.notes = []
        # <dir>/<name>/<time>-<pid>: the writer sanitizes its run name, so one level each
        self._writer = TensorBoardWriter(
            self.dir / sanitize_name(header.name),
            run=run_stamp(header.started_unix_ns),
            background=True,
        )
        self.path = self._writer.path
        # the writer's own method takes each step: one call less in the user's loop
        self.step = self._writer.add_step  # type: ignore[method-assign,assignment]

    def finish(self, end: SessionEnd) -> None:
        w, self._writer = self._writer, None
        if w is None:
            return
        try:
            if end.started:
                w.add_text(summary_markdown(self._report()))
        finally:
            try:
                w.close()
            finally:
                if w.dropped:
                    self.notes.append(
                        Note(
                            code="tensorboard-steps-dropped",
                            text=f"{w.dropped} step(s) not written to TensorBoard: its writer "
                            "fell behind",
                        )
                    )

    def forget_in_child(self) -> None:
        self._writer = None

    def describe_failure(self, error: BaseException) -> str:
        self._close_quietly()
        where = self.path if self.path is not None else self.dir
        return (
            f"asynctrace could not write TensorBoard events under {where}: {error}; "
            "training continues without them"
        )

    def failure_note(self, error: BaseException) -> Note:
        return Note(code="tensorboard-failed", text=f"TensorBoard events stopped: {error}")

    def _close_quietly(self) -> None:
        w, self._writer = self._writer, None
        if w is not None:
            with contextlib.suppress(Exception):
                w.close()

    def __repr__(self) -> str:
        return f"TensorBoardSink({str(self.dir)!r})"
