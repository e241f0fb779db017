"""Cross-rank figures of many ranks at once: the reduce after the per-rank map.

``cross_rank(reports)`` is a pure function of the per-rank :class:`Report` objects (small: a
report holds figures, never the trace model), vectorised over every (rank, step) pair, so a
job of thousands of ranks reduces in one process in O(R·S log(R·S)) for R ranks of S steps —
never rank against rank:

* **per-step skew** of host step time (``frontend_ns``) over the ranks that have the step number,
  summarised as nearest-rank percentiles and the step where it is largest (the per-step rows
  are :attr:`RankComparison.step_skew <asynctrace.analysis.ranks.RankComparison>`);
* the **slowest rank overall** (largest mean ``frontend_ns``, as :func:`compare_ranks` chooses it)
  and **how often each rank is the slowest of a step** (the stragglers);
* the ranks whose **bound label** differs from the majority's, where the reports carry one
  (``report.bound.label``; reports without that field are left out of this figure, and
  ``bound`` is None when none has it).

Ties go as in :func:`~asynctrace.analysis.ranks.compare_ranks`: ranks ordered by rank number
(unknown ranks last, then by source), the first of equal values wins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace.analysis.launches import Percentiles, percentiles
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report

__all__ = [
    "BoundOutlier",
    "BoundSplit",
    "CrossRank",
    "RankSlowest",
    "bound_label",
    "cross_rank",
    "order_ranks",
]


class RankSlowest(msgspec.Struct, frozen=True, kw_only=True):
    """How often one rank had the longest host time of a step."""

    rank: int | None
    source: str
    #: steps (present on two ranks or more) in which this rank was the slowest
    steps: int


class BoundOutlier(msgspec.Struct, frozen=True, kw_only=True):
    rank: int | None
    source: str
    label: str


class BoundSplit(msgspec.Struct, frozen=True, kw_only=True):
    """The bound labels of the ranks that have one."""

    #: the most common label (ties: the one that sorts first)
    majority: str
    #: label → ranks with it, most common first
    ranks: dict[str, int]
    #: ranks whose label is not the majority's, in rank order
    outliers: list[BoundOutlier]
    #: reports without a bound label (left out above)
    unlabelled: int = 0


class CrossRank(msgspec.Struct, frozen=True, kw_only=True):
    """Cross-rank figures of one job (definitions in docs/analysis.md, "Many ranks")."""

    schema_version: int = REPORT_SCHEMA_VERSION
    #: reports reduced
    ranks: int
    #: step numbers present on two ranks or more (those with a skew)
    steps: int
    #: largest mean ``frontend_ns`` per step; None with fewer than two ranks
    slowest_rank: int | None
    slowest_source: str | None
    #: nearest-rank percentiles of the per-step skews (max − min of ``frontend_ns``)
    step_skew_ns: Percentiles
    #: the step with the largest skew (the first such), and its slowest rank
    worst_step: int | None
    worst_step_rank: int | None
    #: ranks that were the slowest of at least one step, most often first
    slowest_by_step: list[RankSlowest]
    #: None where no report carries a bound label
    bound: BoundSplit | None


def order_ranks(reports: Sequence[Report]) -> list[Report]:
    """The reports in rank order (unknown ranks last, then by source), as the rank table."""
    return sorted(reports, key=lambda r: (r.source.rank is None, r.source.rank or 0, r.source.path))


def bound_label(report: Report) -> str | None:
    """``report.bound.label`` where the report has that field, else None."""
    bound = getattr(report, "bound", None)
    label = getattr(bound, "label", None)
    return label if isinstance(label, str) else None


def _bound_split(ordered: Sequence[Report]) -> BoundSplit | None:
    labels = [bound_label(r) for r in ordered]
    counts = Counter(x for x in labels if x is not None)
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    majority = ranked[0][0]
    return BoundSplit(
        majority=majority,
        ranks=dict(ranked),
        outliers=[
            BoundOutlier(rank=r.source.rank, source=r.source.path, label=x)
            for r, x in zip(ordered, labels, strict=True)
            if x is not None and x != majority
        ],
        unlabelled=labels.count(None),
    )


def cross_rank(reports: Sequence[Report]) -> CrossRank:
    """Cross-rank figures of one job's per-rank reports (pure)."""
    ordered = order_ranks(reports)
    n_steps = np.array([len(r.steps) for r in ordered], dtype=np.int64)
    rank_i = np.repeat(np.arange(len(ordered), dtype=np.int64), n_steps)
    step = np.fromiter((s.step for r in ordered for s in r.steps), np.int64, int(n_steps.sum()))
    cpu = np.fromiter((s.frontend_ns for r in ordered for s in r.steps), np.int64, len(step))

    slowest: int | None = None
    if len(ordered) > 1:
        # as compare_ranks computes it, so both name the same rank
        means = [
            float(np.mean([s.frontend_ns for s in r.steps])) if r.steps else 0.0 for r in ordered
        ]
        slowest = int(np.argmax(means))

    # per step number: min, max and the first rank (in rank order) holding the max
    order = np.lexsort((rank_i, -cpu, step))  # by step, longest first, then rank order
    s_step, s_cpu, s_rank = step[order], cpu[order], rank_i[order]
    first = np.flatnonzero(np.r_[True, s_step[1:] != s_step[:-1]])[: len(s_step)]
    last = (np.r_[first[1:], len(s_step)] - 1)[: len(first)]
    n_per = last - first + 1
    keep = n_per >= 2
    hi, lo = s_cpu[first][keep], s_cpu[last][keep]
    hi_rank = s_rank[first][keep]
    skew = hi - lo
    worst = int(np.argmax(skew)) if len(skew) else -1

    counts = np.bincount(hi_rank, minlength=len(ordered))
    by_count = sorted(np.flatnonzero(counts).tolist(), key=lambda i: (-int(counts[i]), i))
    return CrossRank(
        ranks=len(ordered),
        steps=len(skew),
        slowest_rank=ordered[slowest].source.rank if slowest is not None else None,
        slowest_source=ordered[slowest].source.path if slowest is not None else None,
        step_skew_ns=percentiles(skew),
        worst_step=int(s_step[first][keep][worst]) if worst >= 0 else None,
        worst_step_rank=ordered[int(hi_rank[worst])].source.rank if worst >= 0 else None,
        slowest_by_step=[
            RankSlowest(
                rank=ordered[i].source.rank, source=ordered[i].source.path, steps=int(counts[i])
            )
            for i in by_count
        ],
        bound=_bound_split(ordered),
    )
