"""``asynctrace report --html OUT.html``: one page of what the report command analysed.

The command analyses each file once (:func:`~asynctrace.analysis.report.analyze_detail`) and
hands the analyses over; nothing is loaded or analysed again here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asynctrace.analysis.ranks import CrossRank, RankComparison
    from asynctrace.analysis.report import Analysis

__all__ = ["write_report_html"]


def write_report_html(
    path: str | os.PathLike[str],
    analyses: Sequence[Analysis],
    *,
    ranks: RankComparison | None,
    cross: CrossRank | None,
) -> None:
    """Write the page of the runs (traces and sessions' records alike, in the order given),
    with the ranks' comparison and cross-rank figures where the folder had them."""
    from asynctrace.render.html import combined_html, write_html

    write_html(path, combined_html(analyses, ranks=ranks, cross=cross))
