"""``asynctrace report --html OUT.html``: load what the report analysed and write one page."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asynctrace.analysis.report import RecordsSummary, Report
    from asynctrace.records import Records

__all__ = ["write_report_html"]


def write_report_html(
    out: str | os.PathLike[str],
    trace_paths: Sequence[Path],
    reports: Sequence[Report],
    records: Sequence[Records],
    summaries: Sequence[RecordsSummary],
) -> Path:
    """Write the page; the traces are loaded again for the plots (the report kept no trace),
    the records are the ones the summaries were made from."""
    from asynctrace.render.html import combined_html, write_html
    from asynctrace.traces.load import load

    page = combined_html(
        reports=[(r, load(p)) for p, r in zip(trace_paths, reports, strict=True)],
        records=list(zip(summaries, records, strict=True)),
    )
    return write_html(out, page)
