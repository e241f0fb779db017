"""``asynctrace report --html OUT.html``: load what the report analysed and write one page."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asynctrace.analysis.report import RecordsSummary, Report

__all__ = ["write_report_html"]


def write_report_html(
    out: str | os.PathLike[str],
    trace_paths: Sequence[Path],
    reports: Sequence[Report],
    records_paths: Sequence[Path],
    summaries: Sequence[RecordsSummary],
) -> Path:
    """Write the page; the traces are loaded again for the plots (the report kept no trace)."""
    from asynctrace.records import read_records
    from asynctrace.render.html import combined_html, write_html
    from asynctrace.traces.load import load

    page = combined_html(
        reports=[(r, load(p)) for p, r in zip(trace_paths, reports, strict=True)],
        records=[(s, read_records(p)) for p, s in zip(records_paths, summaries, strict=True)],
    )
    return write_html(out, page)
