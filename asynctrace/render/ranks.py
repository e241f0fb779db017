"""The per-rank step table as plain text: what rank 0 prints at the end of a distributed
session (``gather_ranks=True``) and ``asynctrace run --gather-ranks``."""

from __future__ import annotations

from asynctrace.analysis.ranks import RankTable

__all__ = ["format_rank_table"]


def _ms(ns: int | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:.3f}"


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
                *(_ms(v) for v in row.time_ns),
                f"rank{row.slowest_rank}",
                _ms(row.skew_ns),
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
        f"  skew: median {_ms(table.median_skew_ns)} ms, max {_ms(table.max_skew_ns)} ms"
        + ("" if table.max_skew_step is None else f" (step {table.max_skew_step})")
    )
    for r in table.per_rank:
        lines.append(
            f"  rank{r.rank}: {r.steps} steps, median {_ms(r.median_ns)} ms, "
            f"slowest on {r.slowest_count} steps"
            + ("" if r.records_path is None else f", records {r.records_path}")
        )
    return "\n".join(lines)
