"""Several ranks side by side: a per-rank table, the slowest rank, and per-step skew.

The slowest rank is the one with the largest mean host step time (``cpu_ns``); the skew of a
step is the spread (max − min) of its ``cpu_ns`` over the ranks that have that step number.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report

__all__ = ["RankComparison", "RankRow", "StepSkew", "compare_ranks"]


class RankRow(msgspec.Struct, frozen=True, kw_only=True):
    rank: int | None
    source: str
    steps: int
    cpu_ns_mean: float
    device_ns_mean: float
    gpu_busy_ns_mean: float
    sync_wait_ns_mean: float
    sync_count: int
    slowest: bool
    #: what bounds the rank's run (``report.bound.label``), None for a schema-1 report
    bound: str | None = None


class StepSkew(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    ranks: int
    min_cpu_ns: int
    max_cpu_ns: int
    skew_ns: int
    #: rank with the longest host time in this step
    slowest_rank: int | None


class RankComparison(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = REPORT_SCHEMA_VERSION
    ranks: list[RankRow]
    slowest_rank: int | None
    step_skew: list[StepSkew]


def _mean(values: list[int]) -> float:
    return float(np.mean(values)) if values else 0.0


def compare_ranks(reports: Sequence[Report]) -> RankComparison:
    """Compare reports of one job's ranks (pure); ordered by rank, unknown ranks last."""
    ordered = sorted(
        reports, key=lambda r: (r.trace.rank is None, r.trace.rank or 0, r.trace.source)
    )
    means = [_mean([s.cpu_ns for s in r.steps]) for r in ordered]
    slowest_i = int(np.argmax(means)) if len(ordered) > 1 else -1
    rows = [
        RankRow(
            rank=r.trace.rank,
            source=r.trace.source,
            steps=len(r.steps),
            cpu_ns_mean=means[i],
            device_ns_mean=_mean([s.device_ns for s in r.steps]),
            gpu_busy_ns_mean=_mean([s.gpu_busy_ns for s in r.steps]),
            sync_wait_ns_mean=_mean([s.sync_wait_ns for s in r.steps]),
            sync_count=r.syncs.count,
            slowest=i == slowest_i,
            bound=r.bound.label if r.bound is not None else None,
        )
        for i, r in enumerate(ordered)
    ]
    by_step: dict[int, list[tuple[int, int | None]]] = {}
    for r in ordered:
        for s in r.steps:
            by_step.setdefault(s.step, []).append((s.cpu_ns, r.trace.rank))
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
                min_cpu_ns=lo,
                max_cpu_ns=hi,
                skew_ns=hi - lo,
                slowest_rank=hi_rank,
            )
        )
    return RankComparison(
        ranks=rows,
        slowest_rank=ordered[slowest_i].trace.rank if slowest_i >= 0 else None,
        step_skew=skew,
    )
