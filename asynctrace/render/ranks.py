"""The ranks of a job as text: the per-rank step table in plain text (what rank 0 prints at the
end of a distributed session, ``gather_ranks=True``, and ``asynctrace run --gather-ranks``),
and the rich tables of ``asynctrace report DIR``: a folder's runs
(:class:`~asynctrace.analysis.ranks.RunComparison`), each job's rank table and its cross-rank
figures (:class:`~asynctrace.analysis.ranks.CrossRank`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from asynctrace.analysis.ranks import RankComparison, RankTable
from asynctrace.records.units import format_column, format_ns
from asynctrace.render.printable import printable

if TYPE_CHECKING:
    from rich.console import Console

    from asynctrace.analysis.ranks import CrossRank, RunComparison, RunGroup, StepSkew

__all__ = [
    "RANK_HEAD",
    "SKEW_HEAD",
    "cross_rank_rows",
    "format_rank_table",
    "rank_rows",
    "render_cross_rank",
    "render_ranks",
    "render_runs",
    "skew_rows",
]


def format_rank_table(table: RankTable, *, max_rows: int = 20) -> str:
    """Plain-text table (ms): per step each rank's time, the slowest rank and the skew.

    Long runs show the ``max_rows`` steps with the largest skew, in step order.
    """
    label = "device" if table.metric == "device_ns" else "frontend"
    lines = [f"asynctrace: per-rank step {label} time (ms), {len(table.ranks)} ranks"]
    if not table.steps:
        lines.append("  no step was reported by every rank")
    else:
        rows = list(table.steps)
        note = ""
        if len(rows) > max_rows:
            rows = sorted(sorted(rows, key=lambda r: -r.skew_ns)[:max_rows], key=lambda r: r.step)
            note = f"  ({max_rows} of {len(table.steps)} steps shown: those with the largest skew)"
        head = ["step", *(f"rank{r}" for r in table.ranks), "slowest", "skew"]
        body = [
            [
                str(row.step),
                *(format_column(v) for v in row.time_ns),
                f"rank{row.slowest_rank}",
                format_column(row.skew_ns),
            ]
            for row in rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
        lines.extend(
            "  " + "  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body
        )
        if note:
            lines.append(note)
    lines.append(
        f"  skew: median {format_column(table.median_skew_ns)} ms, max "
        f"{format_column(table.max_skew_ns)} ms"
        + ("" if table.max_skew_step is None else f" (step {table.max_skew_step})")
    )
    for r in table.per_rank:
        lines.append(
            f"  rank{r.rank}: {r.steps} steps, median {format_column(r.median_ns)} ms, "
            f"slowest on {r.slowest_count} steps"
            + ("" if r.records_path is None else f", records {r.records_path}")
        )
    return "\n".join(lines)


#: stragglers and bound outliers listed in text (the JSON has them all)
_SHOWN = 10


def _shown(text: str) -> str:
    return escape(printable(text))


def _who(rank: int | None, source: str | None) -> str:
    name = PurePath(source).name if source else "?"
    return f"rank {rank} ({name})" if rank is not None else name


def _first(items: Sequence[str], shown: int) -> str:
    """The first ``shown`` of ``items``, and how many more there are."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f", and {more} more" if more > 0 else "")


def _rank(rank: int | None) -> str:
    return "?" if rank is None else str(rank)


#: the columns of :func:`rank_rows`
RANK_HEAD = (
    "rank",
    "file",
    "steps",
    "mean frontend",
    "mean device",
    "mean gpu busy",
    "mean sync wait",
    "syncs",
    "bound",
    "",
)


def rank_rows(comparison: RankComparison) -> list[tuple[str, ...]]:
    """The per-rank table as plain text (:data:`RANK_HEAD`; the slowest rank flagged), as the
    text report and the HTML page show it."""
    return [
        (
            _rank(r.rank),
            PurePath(r.source).name,
            str(r.steps),
            format_ns(r.frontend_ns_mean),
            format_ns(r.device_ns_mean),
            format_ns(r.gpu_busy_ns_mean),
            format_ns(r.sync_wait_ns_mean),
            str(r.sync_count),
            r.bound or "-",
            "slowest" if r.slowest else "",
        )
        for r in comparison.ranks
    ]


#: the columns of :func:`skew_rows`
SKEW_HEAD = ("step", "ranks", "min frontend", "max frontend", "skew", "slowest rank")


def skew_rows(steps: Sequence[StepSkew]) -> list[tuple[str, ...]]:
    """The per-step skew across ranks as plain text (:data:`SKEW_HEAD`)."""
    return [
        (
            str(k.step),
            str(k.ranks),
            format_ns(k.min_frontend_ns),
            format_ns(k.max_frontend_ns),
            format_ns(k.skew_ns),
            _rank(k.slowest_rank),
        )
        for k in steps
    ]


def cross_rank_rows(cross: CrossRank, *, shown: int = _SHOWN) -> list[tuple[str, str]]:
    """The cross-rank figures as plain (figure, value) rows: the slowest rank, the skew
    percentiles, the ranks slowest most often and how the bound labels split (the first
    ``shown`` of each list)."""
    rows = [("slowest rank (mean frontend)", _who(cross.slowest_rank, cross.slowest_source))]
    k = cross.step_skew_ns
    if cross.steps:
        rows.append(
            (
                f"per-step skew ({cross.steps} steps)",
                f"p50 {format_ns(k.p50)}, p90 {format_ns(k.p90)}, max {format_ns(k.max)} "
                f"(step {cross.worst_step}, slowest {_rank(cross.worst_step_rank)})",
            )
        )
        most = [f"{_who(s.rank, s.source)} ×{s.steps}" for s in cross.slowest_by_step]
        rows.append(("slowest of a step, most often", _first(most, shown)))
    else:
        rows.append(("per-step skew", "no step number on two ranks"))
    b = cross.bound
    if b is None:
        rows.append(("bound label", "not in these reports"))
    else:
        split = ", ".join(f"{label} ×{n}" for label, n in b.ranks.items())
        rows.append(("bound label", f"majority {b.majority} ({split})"))
        if b.outliers:
            differ = [f"{_who(o.rank, o.source)}: {o.label}" for o in b.outliers]
            rows.append(("ranks that differ", _first(differ, shown)))
    return rows


def render_ranks(comparison: RankComparison, console: Console, *, of: str | None = None) -> None:
    """Print the per-rank table (:func:`rank_rows`) and the per-step skews
    (:func:`skew_rows`); ``of`` names the run whose ranks they are."""
    run = "" if of is None else f" of {_shown(of)}"
    t = Table(title=f"ranks{run} ({len(comparison.ranks)})")
    for col in RANK_HEAD:
        t.add_column(col, justify="right")
    for row in rank_rows(comparison):
        t.add_row(*map(_shown, row))
    console.print(t)
    if comparison.step_skew:
        t = Table(title="per-step skew across ranks")
        for col in SKEW_HEAD:
            t.add_column(col, justify="right")
        for row in skew_rows(comparison.step_skew):
            t.add_row(*row)
        console.print(t)


def render_cross_rank(cross: CrossRank, console: Console, *, of: str | None = None) -> None:
    """Print the cross-rank summary (:func:`cross_rank_rows`); ``of`` names the run."""
    run = "" if of is None else f" of {_shown(of)}"
    t = Table(title=f"across ranks{run} ({cross.ranks})", show_header=False)
    t.add_column("figure", justify="left")
    t.add_column("value", justify="left")
    for figure, value in cross_rank_rows(cross):
        t.add_row(_shown(figure), _shown(value))
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
