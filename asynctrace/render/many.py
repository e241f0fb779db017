"""Text view of the cross-rank figures (:class:`~asynctrace.analysis.many.CrossRank`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from asynctrace.render.text import format_ns

if TYPE_CHECKING:
    from rich.console import Console

    from asynctrace.analysis.many import CrossRank

__all__ = ["render_cross_rank"]

#: stragglers and bound outliers listed in text (the JSON has them all)
_SHOWN = 10


def _who(rank: int | None, source: str | None) -> str:
    name = escape(PurePath(source).name) if source else "?"
    return f"rank {rank} ({name})" if rank is not None else name


def _first(items: Sequence[str]) -> str:
    """The first :data:`_SHOWN` of ``items``, and how many more there are."""
    more = len(items) - _SHOWN
    return ", ".join(items[:_SHOWN]) + (f", and {more} more" if more > 0 else "")


def render_cross_rank(cross: CrossRank, console: Console) -> None:
    """Print the cross-rank summary: slowest rank, skew percentiles, stragglers, bound split."""
    t = Table(title=f"across ranks ({cross.ranks})", show_header=False)
    t.add_column("figure", justify="left")
    t.add_column("value", justify="left")
    t.add_row("slowest rank (mean frontend)", _who(cross.slowest_rank, cross.slowest_source))
    k = cross.step_skew_ns
    if cross.steps:
        t.add_row(
            f"per-step skew ({cross.steps} steps)",
            f"p50 {format_ns(k.p50)}, p90 {format_ns(k.p90)}, max {format_ns(k.max)} "
            f"(step {cross.worst_step}, slowest "
            f"{'?' if cross.worst_step_rank is None else cross.worst_step_rank})",
        )
        t.add_row(
            "slowest of a step, most often",
            _first([f"{_who(s.rank, s.source)} ×{s.steps}" for s in cross.slowest_by_step]),
        )
    else:
        t.add_row("per-step skew", "no step number on two ranks")
    b = cross.bound
    if b is None:
        t.add_row("bound label", "not in these reports")
    else:
        split = ", ".join(f"{escape(label)} ×{n}" for label, n in b.ranks.items())
        t.add_row("bound label", f"majority {escape(b.majority)} ({split})")
        if b.outliers:
            t.add_row(
                "ranks that differ",
                _first([f"{_who(o.rank, o.source)}: {escape(o.label)}" for o in b.outliers]),
            )
    console.print(t)
