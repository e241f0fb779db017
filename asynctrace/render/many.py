"""Text view of a folder's runs (:class:`~asynctrace.analysis.ranks.RunComparison`) and of the
cross-rank figures of each job (:class:`~asynctrace.analysis.many.CrossRank`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from asynctrace.render.printable import printable
from asynctrace.render.text import format_ns, render_ranks

if TYPE_CHECKING:
    from rich.console import Console

    from asynctrace.analysis.many import CrossRank, RunGroup
    from asynctrace.analysis.ranks import RunComparison

__all__ = ["render_cross_rank", "render_runs"]

#: stragglers and bound outliers listed in text (the JSON has them all)
_SHOWN = 10


def _shown(text: str) -> str:
    return escape(printable(text))


def _who(rank: int | None, source: str | None) -> str:
    name = _shown(PurePath(source).name) if source else "?"
    return f"rank {rank} ({name})" if rank is not None else name


def _first(items: Sequence[str]) -> str:
    """The first :data:`_SHOWN` of ``items``, and how many more there are."""
    more = len(items) - _SHOWN
    return ", ".join(items[:_SHOWN]) + (f", and {more} more" if more > 0 else "")


def render_cross_rank(cross: CrossRank, console: Console, *, of: str | None = None) -> None:
    """Print the cross-rank summary: slowest rank, skew percentiles, stragglers, bound split;
    ``of`` names the run."""
    run = "" if of is None else f" of {_shown(of)}"
    t = Table(title=f"across ranks{run} ({cross.ranks})", show_header=False)
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


def _ranks(run: RunGroup) -> str:
    have = [r for r in run.ranks if r is not None]
    if not have:
        return "-"
    shown = ", ".join(map(str, have[:_SHOWN])) + (", …" if len(have) > _SHOWN else "")
    if run.missing_ranks:
        shown += f" ({run.missing_ranks} of {run.world_size} missing)"
    return shown


def _what(run: RunGroup) -> str:
    if run.kind == "session":
        return "session ranks"
    if run.kind == "trace":
        return "trace ranks"
    return "one file"


def render_runs(runs: Sequence[RunComparison], console: Console) -> None:
    """Print a folder's runs, then the rank table and cross-rank figures of each run of several
    files. A folder that is one job prints no runs table, only its ranks; every warning (a
    duplicate rank, a rank outside the world size) is printed."""
    jobs = [r for r in runs if r.ranks is not None]
    warnings = [w for r in runs for w in r.run.warnings]
    if len(runs) > 1:
        title = f"runs in this folder ({len(runs)})"
        if not jobs:
            title += (
                ": no two files are ranks of one job, so no rank table "
                "(asynctrace compare A B puts two runs side by side)"
            )
        t = Table(title=title)
        for col in ("run", "kind", "files", "ranks", "world size"):
            t.add_column(col, justify="left")
        for r in runs:
            g = r.run
            files = (
                _shown(PurePath(g.sources[0]).name) if len(g.sources) == 1 else str(len(g.sources))
            )
            t.add_row(
                _shown(g.name),
                _what(g),
                files,
                _ranks(g),
                "-" if g.world_size is None else str(g.world_size),
            )
        console.print(t)
    for w in warnings:
        console.print(f"warning: {_shown(w)}", highlight=False, soft_wrap=True)
    for r in jobs:
        assert r.ranks is not None
        name = r.run.name if len(runs) > 1 else None
        render_ranks(r.ranks, console, of=name)
        if r.cross_rank is not None:
            render_cross_rank(r.cross_rank, console, of=name)
