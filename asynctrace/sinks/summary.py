"""The exit summary's sink: every step into a :class:`~asynctrace.analysis.accumulate.
StepAccumulator`, and the session's :class:`~asynctrace.analysis.report.Report`
(:func:`~asynctrace.analysis.report.session_report`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asynctrace.analysis.accumulate import StepAccumulator
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.errors import AsyncTraceWarning
from asynctrace.records import Note, SessionHeader, SessionSummary, StepRecord

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report

__all__ = ["SummarySink"]


class SummarySink(BaseSink):
    """Accumulates the steps; builds the summary (live while the session runs, final after)."""

    def __init__(self, *, window: int, strict: bool = False) -> None:
        self.acc = StepAccumulator(window=window)
        self.strict = strict
        #: why judging the steps failed (then the summary has figures and no verdict)
        self.judge_error: str | None = None
        #: the session's end, once it ended
        self.end: SessionEnd | None = None

    def start(self, header: SessionHeader) -> None:
        # one object serves every run of its session; each run is summarized on its own
        self.acc = StepAccumulator(window=self.acc.window)
        self.end = None
        self.judge_error = None

    def step(self, record: StepRecord) -> None:
        self.acc.add(record)

    def step_batch(self, records: list[StepRecord]) -> None:
        add = self.acc.add
        for rec in records:
            add(rec)

    def finish(self, end: SessionEnd) -> None:
        self.end = end

    def final(self, *, notes: Sequence[Note] = (), records_path: str | None = None) -> Report:
        """The report of the ended session; ``notes`` follow the session's own. Its
        ``source.path`` is ``records_path``, else the session's name. Judging the steps is
        analysis run at the end of a training job: where it fails, the figures are still
        reported, with a note (and one warning) instead of a verdict."""
        # not at import: the report's analysis (numpy) is needed at the session's end only
        from asynctrace.analysis.report import session_report

        end = self.end
        assert end is not None, "final() before the session ended"
        args: dict[str, Any] = {
            "header": end.header,
            "path": records_path if records_path is not None else end.header.name,
            "wall_ns": end.wall_ns,
            "collected_at_exit": end.collected_at_exit,
            "sync_sites": end.syncs,
            "error": end.error,
        }
        if self.judge_error is None:
            try:
                return session_report(self.acc, notes=[*end.notes, *notes], **args)
            except Exception as e:
                if self.strict:
                    raise
                self.judge_error = f"{type(e).__name__}: {e}"
                warnings.warn(
                    f"asynctrace could not judge the session's steps ({self.judge_error}); the "
                    "records and figures are complete",
                    AsyncTraceWarning,
                    stacklevel=2,
                )
        failed = Note(
            code="verdict-failed", text=f"no verdict: judging the steps failed ({self.judge_error})"
        )
        return session_report(self.acc, notes=[*end.notes, *notes, failed], judge=False, **args)

    def summary_line(self, *, notes: Sequence[Note] = ()) -> SessionSummary:
        """The records file's last line."""
        report = self.final(notes=notes)
        s = report.source
        return SessionSummary(
            steps=s.events,
            wall_ns=s.wall_ns if s.wall_ns is not None else 0,
            collected_at_exit=s.collected_at_exit,
            verdict=report.verdict.code or None,
            notes=report.notes,
            error=s.error,
        )
