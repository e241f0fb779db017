"""Several ranks side by side: a per-rank table, the slowest rank, and per-step skew.

The slowest rank is the one with the largest mean host step time (``frontend_ns``); the skew
of a step is the spread (max − min) of its ``frontend_ns`` over the ranks that have that step
number. Reports of traces and of sessions' records compare alike: they hold the same step
records.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace.analysis.many import order_ranks
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report

__all__ = ["RankComparison", "RankRow", "StepSkew", "compare_ranks"]


class RankRow(msgspec.Struct, frozen=True, kw_only=True):
    rank: int | None
    source: str
    steps: int
    frontend_ns_mean: float
    #: over the steps with a device figure; None where none has one
    device_ns_mean: float | None
    #: the mean step's busy share of the device timeline; None for a session (not measured)
    gpu_busy_ns_mean: float | None
    sync_wait_ns_mean: float
    #: syncs made inside steps
    sync_count: int
    slowest: bool
    #: what bounds the rank's run (``report.bound.label``), None for a schema-1 report
    bound: str | None = None


class StepSkew(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    ranks: int
    min_frontend_ns: int
    max_frontend_ns: int
    skew_ns: int
    #: rank with the longest host time in this step
    slowest_rank: int | None


class RankComparison(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = REPORT_SCHEMA_VERSION
    ranks: list[RankRow]
    slowest_rank: int | None
    step_skew: list[StepSkew]


def _mean(values: Sequence[int | None]) -> float | None:
    have = [v for v in values if v is not None]
    return float(np.mean(have)) if have else None


def _row(r: Report, mean_ns: float, slowest: bool) -> RankRow:
    busy = _mean([b.busy_ns for b in r.step_bounds]) if r.trace is not None else None
    return RankRow(
        rank=r.source.rank,
        source=r.source.path,
        steps=len(r.steps),
        frontend_ns_mean=mean_ns,
        device_ns_mean=_mean([s.device_ns for s in r.steps]),
        gpu_busy_ns_mean=busy,
        sync_wait_ns_mean=_mean([s.sync_wait_ns for s in r.steps]) or 0.0,
        sync_count=sum(s.sync_count for s in r.steps),
        slowest=slowest,
        bound=r.bound.label if r.bound is not None else None,
    )


def compare_ranks(reports: Sequence[Report]) -> RankComparison:
    """Compare reports of one job's ranks (pure); ordered by rank, unknown ranks last."""
    ordered = order_ranks(reports)
    means = [_mean([s.frontend_ns for s in r.steps]) or 0.0 for r in ordered]
    slowest_i = int(np.argmax(means)) if len(ordered) > 1 else -1
    rows = [_row(r, means[i], i == slowest_i) for i, r in enumerate(ordered)]
    by_step: dict[int, list[tuple[int, int | None]]] = {}
    for r in ordered:
        for s in r.steps:
            by_step.setdefault(s.step, []).append((s.frontend_ns, r.source.rank))
    skew = []
    for step in sorted(by_step):
        vals = by_step[step]
        if len(vals) < 2:
            continue
        lo = min(v for v, _ in vals)
        hi, hi_rank = max(vals, key=lambda x: x[0])
        skew.append(
            StepSkew(
                step=step,
                ranks=len(vals),
                min_frontend_ns=lo,
                max_frontend_ns=hi,
                skew_ns=hi - lo,
                slowest_rank=hi_rank,
            )
        )
    return RankComparison(
        ranks=rows,
        slowest_rank=ordered[slowest_i].source.rank if slowest_i >= 0 else None,
        step_skew=skew,
    )
