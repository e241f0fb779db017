"""Deep mode's annotator: an annotated copy beside each profiler trace the session writes."""

from __future__ import annotations

from pathlib import Path

from asynctrace.capture.sinks import BaseSink
from asynctrace.records import Note
from asynctrace.records.names import annotated_path

__all__ = ["AnnotateSink"]


class AnnotateSink(BaseSink):
    """Writes ``<trace>.annotated.json.gz`` for each trace; :attr:`annotated` lists them.

    A trace that cannot be annotated (too large for this host's memory, say) is a warning from
    the session, never an error in the training loop: the plain trace is already on disk.
    """

    def __init__(self) -> None:
        self.annotated: list[Path] = []

    def trace_written(self, path: Path) -> None:
        from asynctrace.analysis.report import analyze_detail
        from asynctrace.export.chrome import annotate_file, overlay_source
        from asynctrace.files.sources import load_source

        # analysed once, reduced to what the overlay draws before the trace's text is read
        source = overlay_source(analyze_detail(load_source(path)))
        self.annotated.append(annotate_file(path, annotated_path(path), source))

    def describe_failure(self, error: BaseException) -> str:
        return (
            f"asynctrace: could not annotate a deep-mode trace ({type(error).__name__}: "
            f"{error}); the trace itself is written, later ones are not annotated"
        )

    def failure_note(self, error: BaseException) -> Note:
        return Note(
            code="annotate-failed",
            text=f"deep-mode traces not annotated: {type(error).__name__}: {error}",
        )

    def __repr__(self) -> str:
        return "AnnotateSink()"
