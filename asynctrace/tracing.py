"""``asynctrace.trace()`` and :class:`Session`: a capture session with its outputs plugged in.

The capture itself (:class:`~asynctrace.capture.session.CaptureSession`) only measures and
emits; this layer turns the options of :class:`~asynctrace.capture.options.TraceOptions` into
sinks, in this order: the summary (every step into the accumulator), TensorBoard, the records
file, the live line, the deep-mode annotator, the rank gather, then the user's own ``sinks``.
At the end it prints the summary (``print_summary``: the session's
:class:`~asynctrace.analysis.report.Report`, as ``asynctrace report`` prints one) and the
per-rank table.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from asynctrace.capture.options import TraceOptions
from asynctrace.capture.session import CaptureSession, current_session
from asynctrace.capture.signals import TerminatedBySignal
from asynctrace.capture.sinks import Sink
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import Note
from asynctrace.sinks import (
    AnnotateSink,
    LiveSink,
    RankGatherSink,
    RecordsSink,
    SummarySink,
    TensorBoardSink,
)

if TYPE_CHECKING:
    from asynctrace.analysis.ranks import RankTable
    from asynctrace.analysis.report import Report

__all__ = ["Session", "current_session", "trace"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Session(CaptureSession):
    """A capture session with the outputs its options ask for: context manager and decorator.

    ``Session(name, sinks=[...], **options)`` takes every option of
    :class:`~asynctrace.capture.options.TraceOptions`; prefer :func:`trace`, which is the same.
    """

    def __init__(
        self, name: str | None = None, *, sinks: Iterable[Any] = (), **options: Any
    ) -> None:
        opts = TraceOptions.from_mapping(options, what="asynctrace.trace()")
        self._summary = SummarySink(window=opts.window, strict=opts.strict)
        self._tensorboard = (
            TensorBoardSink(opts.dir, report=self._report_now) if opts.tensorboard else None
        )
        self._records = (
            RecordsSink(opts.dir, summary_line=self._summary_line, notes=self._sink_notes)
            if opts.write
            else None
        )
        # on-demand windows (capture, SIGUSR2) are annotated like deep mode's
        on_demand = opts.on_demand and opts.write and not opts.profiling
        self._annotate = AnnotateSink() if _annotates(opts) or on_demand else None
        self._ranks = (
            RankGatherSink(
                device=lambda: self.device,
                records_path=self._records_destination,
                collected=lambda: self.read_collected(lambda: None),
            )
            if opts.gather_ranks
            else None
        )
        own: list[Sink | None] = [
            self._summary,
            self._tensorboard,
            self._records,
            LiveSink() if opts.live else None,
            self._annotate,
            self._ranks,
        ]
        super().__init__(name, options=opts, sinks=[*(s for s in own if s is not None), *sinks])
        self._report: Report | None = None
        self._summary_error: str | None = None

    # ------------------------------------------------------------------ the outputs
    @property
    def records_path(self) -> Path | None:
        """Where the last run's records were written (set at exit); None before or if not."""
        return self._records.path if self._records is not None else None

    def _records_destination(self) -> Path | None:
        return self._records.destination if self._records is not None else None

    @property
    def rank_table(self) -> RankTable | None:
        """The per-rank table gathered at exit (rank 0, ``gather_ranks=True``); else None."""
        return self._ranks.table if self._ranks is not None else None

    @property
    def ranks_gathered(self) -> bool:
        """Whether this rank took part in the rank gather (``gather_ranks=True``)."""
        return self._ranks is not None and self._ranks.gathered

    @property
    def tensorboard_dir(self) -> Path | None:
        """The TensorBoard run folder of the last run (``<dir>/<name>/<time>-<pid>``)."""
        return self._tensorboard.path if self._tensorboard is not None else None

    @property
    def annotated(self) -> list[Path]:
        """The annotated copies of the deep-mode traces written so far."""
        return list(self._annotate.annotated) if self._annotate is not None else []

    @property
    def traces(self) -> list[Path]:
        """The deep-mode traces written so far."""
        return [Path(p) for p in self._traces]

    def _sink_notes(self) -> list[Note]:
        notes: list[Note] = []
        if self._tensorboard is not None:
            notes.extend(self._tensorboard.notes)
        return notes

    def _summary_line(self, notes: Iterable[Note]) -> Any:
        return self._summary.summary_line(notes=list(notes))

    def _report_now(self) -> Report:
        """The summary as it stands (TensorBoard's text at the end, ``summary()`` live)."""
        if self._summary.end is not None:
            return self._summary.final(notes=self._sink_notes())
        from asynctrace.analysis.report import session_report

        header = self._header
        assert header is not None
        return self.read_collected(
            lambda: session_report(
                self._summary.acc,
                header=header,
                path=header.name,
                wall_ns=self.elapsed_ns(),
                sync_sites=self.sync_sites(),
                notes=[*self._clock.end_notes(), *self._sites.notes(), *self._sinks.failures],
                # the run goes on: its records have no summary line yet
                complete=False,
            )
        )

    def _final_report(self) -> Report:
        end = self._summary.end
        said = set(end.notes) if end is not None else set()
        # what failed while the sinks finished came after the session's end was told
        notes = [*self._sink_notes(), *(n for n in self._sinks.failures if n not in said)]
        rec = self._records
        if rec is not None and rec.error is not None:
            written = Note(code="records-not-written", text=rec.error)
            if written not in notes and written not in said:
                notes.append(written)
        path = self.records_path
        return self._summary.final(notes=notes, records_path=str(path) if path else None)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Session:
        self._report = None
        super().__enter__()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._pid != os.getpid():
            # a forked child leaving the block it inherited: nothing to end, nothing to print
            return
        try:
            try:
                self._exit(exc)
            finally:
                self._report = self._summary_or_warning()
            report = self._report
            # a job stopped by SIGTERM/SIGHUP ends as completed so far: its summary is printed
            stopped = isinstance(exc, TerminatedBySignal)
            if (
                self.options.print_summary
                and report is not None
                and (report.source.error is None or stopped)
            ):
                from asynctrace.render.text import print_summary

                print_summary(report)
                table = self.rank_table
                if table is not None:
                    from asynctrace.render.ranks import format_rank_table

                    print(format_rank_table(table))
        finally:
            # then the stop signal kills the process, as it would have without us
            self._after_exit()

    def _summary_or_warning(self) -> Report | None:
        """The final report; a bug while building it is one warning (the records are written
        by then) and :meth:`summary` says it, unless ``strict``."""
        self._summary_error = None
        if self._summary.end is None:
            return None
        try:
            return self._final_report()
        except Exception as e:
            if self.strict:
                raise
            self._summary_error = f"{type(e).__name__}: {e}"
            warnings.warn(
                f"asynctrace could not build the session's summary ({self._summary_error}); "
                "its records are written",
                AsyncTraceWarning,
                stacklevel=3,
            )
            return None

    def summary(self) -> Report:
        """The report of the session (:class:`~asynctrace.analysis.report.Report`, the type
        ``asynctrace report`` makes of its records): live while it runs (steps collected so
        far), final after it ends. The printed summary shows exactly these figures."""
        if self._active:
            return self._report_now()
        if self._report is not None:
            return self._report
        if self._summary_error is not None:
            raise CaptureError(
                f"the summary of session {self.name or 'session'!r} could not be built: "
                f"{self._summary_error}"
            )
        if self._summary.end is not None:
            return self._final_report()
        if self._header is None:
            raise CaptureError("summary() before the session ran: enter it first")
        # the end was cut short before the sinks finished: what was measured, as it stands
        return self._report_now()


def _annotates(opts: TraceOptions) -> bool:
    if not opts.profiling:
        return False
    profile = opts.profile
    return bool(getattr(profile, "annotate", True))


@overload
def trace(name: Callable[_P, _R], /) -> Callable[_P, _R]: ...


@overload
def trace(name: str | None = None, *, sinks: Iterable[Any] = (), **options: Any) -> Session: ...


def trace(
    name: str | Callable[..., Any] | None = None, *, sinks: Iterable[Any] = (), **options: Any
) -> Session | Callable[..., Any]:
    """A capture session over a training loop: ``with asynctrace.trace() as session:``.

    Also a decorator, with or without arguments: ``@asynctrace.trace`` /
    ``@asynctrace.trace("train")`` runs each call of the function in a session named after it.

    ``name`` is the records file's first field (default: the decorated function's name or
    ``"session"``); ``sinks`` are your own outputs (:mod:`asynctrace.capture.sinks`: a callable
    given each step record, or an object with ``start``/``step``/``trace_written``/``finish``);
    ``options`` are those of :class:`~asynctrace.capture.options.TraceOptions` (``dir``,
    ``device``, ``detect_syncs``, ``profile``, ``tensorboard``, ...).
    """
    if callable(name):
        return Session(sinks=sinks, **options)(name)
    return Session(name, sinks=sinks, **options)
