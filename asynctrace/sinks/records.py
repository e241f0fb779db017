"""The records file's sink: ``<dir>/<name>.<host>.<pid>[.rank<N>].<time_ns>.records.jsonl``.

Written to ``<name>.tmp`` while the session runs and renamed when it ends, so a file without
``.tmp`` is always complete (docs/formats.md). A file that cannot be written is a warning (the
session goes on without it) or, with ``strict=True``, a :class:`~asynctrace.CaptureError`.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import Note, SessionHeader, SessionSummary, StepRecord
from asynctrace.records.names import records_file_name
from asynctrace.records.writer import RecordsWriter

__all__ = ["RecordsSink"]

#: records file names tried (time_ns, time_ns + 1, ...) before giving up on writing
_MAX_NAME_TRIES: Final = 1000


class RecordsSink(BaseSink):
    """Streams the session's records to its file; ``summary_line`` gives the last line."""

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        summary_line: Callable[[Sequence[Note]], SessionSummary],
        notes: Callable[[], Sequence[Note]] = tuple,
    ) -> None:
        self.dir = Path(dir)
        self._summary_line = summary_line
        self._notes = notes
        self._writer: RecordsWriter | None = None
        #: where the records were written (once the session ended); None if not written
        self.path: Path | None = None
        #: why the records could not be written, as the summary says it
        self.error: str | None = None

    @property
    def destination(self) -> Path | None:
        """Where the records go: :attr:`path` once written, the final name while running."""
        w = self._writer
        return w.path if w is not None and self.path is None else self.path

    def start(self, header: SessionHeader) -> None:
        self.path = None
        self.error = None
        # Names carry host, pid and rank, so only a session of this process can want the same
        # one (same name, same time_ns); the later moves its time_ns on by a ns until free.
        t = header.started_unix_ns
        for _ in range(_MAX_NAME_TRIES):
            fname = records_file_name(header.name, pid=header.pid, rank=header.rank, time_ns=t)
            writer = RecordsWriter(self.dir / fname)
            try:
                writer.open()
            except FileExistsError:
                t += 1
                continue
            except OSError as e:
                writer.abort(remove=True)
                raise self._failed(e) from None
            break
        else:
            raise self._failed(
                FileExistsError(errno.EEXIST, f"{_MAX_NAME_TRIES} names in a row are taken")
            )
        self._writer = writer
        try:
            writer.write(header)
            writer.flush()
        except OSError as e:
            raise self._failed(e) from None

    def step(self, record: StepRecord) -> None:
        self.step_batch([record])

    def step_batch(self, records: list[StepRecord]) -> None:
        """The session's steps, a batch at a time: encoded and written at once."""
        w = self._writer
        if w is not None:
            try:
                w.write_all(records)
            except OSError as e:
                raise self._failed(e) from None

    def finish(self, end: SessionEnd) -> None:
        w, self._writer = self._writer, None
        if w is None:
            return
        if not end.started:
            # the session never started: its file holds a header only, no run to keep
            w.abort(remove=True)
            return
        try:
            for row in end.syncs:
                w.write(row)
            w.write(self._last_line(end))
            self.path = w.finish()
        except OSError as e:
            self._writer = w
            raise self._failed(e) from None
        except BaseException:
            # interrupted (Ctrl-C, a signal handler raising): what was flushed stays as .tmp
            w.abort()
            raise

    def _last_line(self, end: SessionEnd) -> SessionSummary:
        try:
            return self._summary_line(self._notes())
        except Exception as e:
            # a bug of the summary must not cost the records: the line says what is known
            return SessionSummary(
                steps=end.steps,
                wall_ns=end.wall_ns,
                collected_at_exit=end.collected_at_exit,
                notes=[
                    *end.notes,
                    Note(
                        code="summary-failed",
                        text=f"no summary: building it failed ({type(e).__name__}: {e})",
                    ),
                ],
                error=end.error,
            )

    def forget_in_child(self) -> None:
        w, self._writer = self._writer, None
        if w is not None:
            # closes the child's copy of the descriptor only; nothing is written or renamed
            w.abort()

    def _failed(self, error: OSError) -> OSError:
        w, self._writer = self._writer, None
        where = w.tmp_path if w is not None else self.dir
        if w is not None:
            w.abort(remove=True)
        self.error = f"records not written: {error.strerror or error}"
        self._where = where
        return error

    def describe_failure(self, error: BaseException) -> str:
        where = getattr(self, "_where", self.dir)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        return (
            f"asynctrace could not write the session records under {where}: {reason}; "
            "training continues without them (pass write=False to silence this, or "
            "strict=True to make it an error)"
        )

    def failure_note(self, error: BaseException) -> Note:
        return Note(code="records-not-written", text=self.error or f"records not written: {error}")

    def __repr__(self) -> str:
        return f"RecordsSink({str(self.dir)!r})"
