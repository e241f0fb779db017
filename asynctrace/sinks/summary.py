"""The exit summary's sink: every step into a :class:`~asynctrace.analysis.accumulate.
StepAccumulator`, and the session's :class:`~asynctrace.analysis.accumulate.SessionReport`."""

from __future__ import annotations

from collections.abc import Sequence

from asynctrace.analysis.accumulate import SessionReport, StepAccumulator, session_report
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.records import SessionHeader, SessionSummary, StepRecord

__all__ = ["SummarySink"]


class SummarySink(BaseSink):
    """Accumulates the steps; builds the summary (live while the session runs, final after)."""

    def __init__(self, *, window: int) -> None:
        self.acc = StepAccumulator(window=window)
        #: the session's end, once it ended
        self.end: SessionEnd | None = None

    def start(self, header: SessionHeader) -> None:
        # one object serves every run of its session; each run is summarized on its own
        self.acc = StepAccumulator(window=self.acc.window)
        self.end = None
        # the accumulator's own method: one call less per step of the user's loop
        self.step = self.acc.add  # type: ignore[method-assign,assignment]

    def step(self, record: StepRecord) -> None:
        self.acc.add(record)

    def finish(self, end: SessionEnd) -> None:
        self.end = end

    def final(self, *, notes: Sequence[str] = (), records_path: str | None = None) -> SessionReport:
        """The report of the ended session; ``notes`` follow the session's own."""
        end = self.end
        assert end is not None, "final() before the session ended"
        return session_report(
            self.acc,
            header=end.header,
            wall_ns=end.wall_ns,
            collected_at_exit=end.collected_at_exit,
            sync_sites=end.syncs,
            notes=[*end.notes, *notes],
            error=end.error,
            records_path=records_path,
        )

    def summary_line(self, *, notes: Sequence[str] = ()) -> SessionSummary:
        """The records file's last line."""
        report = self.final(notes=notes)
        return SessionSummary(
            steps=report.steps,
            wall_ns=report.wall_ns,
            collected_at_exit=report.collected_at_exit,
            verdict=report.verdict,
            notes=report.notes,
            error=report.error,
        )
