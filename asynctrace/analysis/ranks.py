"""Several ranks side by side: a per-rank table, the slowest rank, and per-step skew.

Two views of one job's ranks, both on their step records (the one step record type of
sessions and traces): :func:`compare_ranks` of whole reports (``asynctrace report DIR``), and
:func:`rank_table` of each rank's recent steps as gathered at a session's end over
torch.distributed (``gather_ranks=True``), or read from records files.

The slowest rank is the one with the largest mean host step time (``frontend_ns``); the skew
of a step is the spread (max − min) of its ``frontend_ns`` over the ranks that have that step
number. Reports of traces and of sessions' records compare alike: they hold the same step
records. A folder is compared run by run (:func:`compare_runs`): only the files that are one
job's ranks (:func:`~asynctrace.analysis.many.group_runs`) share a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, Literal, TypeVar

import msgspec
import numpy as np

from asynctrace.analysis.many import CrossRank, RunGroup, cross_rank, group_runs, order_ranks
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report
from asynctrace.errors import OptionError
from asynctrace.records import StepRecord

__all__ = [
    "Metric",
    "RankComparison",
    "RankRow",
    "RankStep",
    "RankSummary",
    "RankTable",
    "RunComparison",
    "StepSkew",
    "compare_ranks",
    "compare_runs",
    "job_of",
    "rank_table",
]

Metric = Literal["auto", "frontend", "device"]


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


_R = TypeVar("_R")


@dataclass(frozen=True)
class _Spread(Generic[_R]):
    lo: int
    hi: int
    slowest: _R
    fastest: _R


def _spread(times: Sequence[int], ranks: Sequence[_R]) -> _Spread[_R]:
    """A step's times on several ranks (in rank order): the skew of the step is ``hi − lo``,
    the one definition of both views; ties go to the first rank, so it is deterministic."""
    hi, lo = max(times), min(times)
    return _Spread(lo, hi, ranks[times.index(hi)], ranks[times.index(lo)])


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
        k = _spread([v for v, _ in vals], [r for _, r in vals])
        skew.append(
            StepSkew(
                step=step,
                ranks=len(vals),
                min_frontend_ns=k.lo,
                max_frontend_ns=k.hi,
                skew_ns=k.hi - k.lo,
                slowest_rank=k.slowest,
            )
        )
    return RankComparison(
        ranks=rows,
        slowest_rank=ordered[slowest_i].source.rank if slowest_i >= 0 else None,
        step_skew=skew,
    )


class RunComparison(msgspec.Struct, frozen=True, kw_only=True):
    """One run of a folder, and its ranks compared where it has two files or more."""

    run: RunGroup
    #: the rank table and the cross-rank figures of the run's files; None for a run of one file
    ranks: RankComparison | None
    cross_rank: CrossRank | None


def compare_runs(reports: Sequence[Report]) -> list[RunComparison]:
    """The reports grouped into runs (:func:`~asynctrace.analysis.many.group_runs`), each run of
    several files with its rank table and cross-rank figures (pure)."""
    out = []
    for run in group_runs([r.source for r in reports]):
        several = [reports[i] for i in run.members] if len(run.members) > 1 else None
        out.append(
            RunComparison(
                run=run,
                ranks=compare_ranks(several) if several else None,
                cross_rank=cross_rank(several) if several else None,
            )
        )
    return out


def job_of(runs: Sequence[RunComparison]) -> RunComparison | None:
    """The run whose ranks a folder's one-job views show (``ranks`` and ``cross_rank`` of the
    folder's JSON, the HTML page): the only run with several files, else None."""
    jobs = [r for r in runs if r.ranks is not None]
    return jobs[0] if len(jobs) == 1 else None


@dataclass(frozen=True)
class RankStep:
    """One step across ranks; ``time_ns`` is the table's metric, indexed like its ``ranks``."""

    step: int
    time_ns: tuple[int, ...]
    slowest_rank: int
    fastest_rank: int
    #: slowest rank's time minus fastest rank's time for this step (>= 0)
    skew_ns: int


@dataclass(frozen=True)
class RankSummary:
    rank: int
    #: steps this rank reported (its last ``last_steps``)
    steps: int
    median_ns: int | None
    #: steps (of those all ranks reported) on which this rank was the slowest
    slowest_count: int
    records_path: str | None = None


@dataclass(frozen=True)
class RankTable:
    """Per-step times of every rank, the slowest rank and the skew per step."""

    #: "frontend_ns" or "device_ns": which step figure the times are
    metric: str
    ranks: tuple[int, ...]
    #: steps every rank reported, in step order
    steps: tuple[RankStep, ...]
    per_rank: tuple[RankSummary, ...]
    median_skew_ns: int | None
    max_skew_ns: int | None
    max_skew_step: int | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (ints, strings, lists, None)."""
        out = asdict(self)
        out["ranks"] = list(self.ranks)
        out["steps"] = [{**asdict(s), "time_ns": list(s.time_ns)} for s in self.steps]
        out["per_rank"] = [asdict(r) for r in self.per_rank]
        return out


def _median(values: Sequence[int]) -> int | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    # integer ns: round half up so the figure is reproducible without floats
    return (s[mid - 1] + s[mid] + 1) // 2


def _choose_metric(per_rank: Mapping[int, Sequence[StepRecord]], metric: Metric) -> str:
    if metric == "frontend":
        return "frontend_ns"
    if metric == "device":
        return "device_ns"
    if metric != "auto":
        raise OptionError(f"metric must be 'auto', 'frontend' or 'device', got {metric!r}")
    has_device = any(s.device_ns is not None for steps in per_rank.values() for s in steps)
    all_device = all(s.device_ns is not None for steps in per_rank.values() for s in steps)
    # device time is what the ranks wait on each other for in collectives, but only if every
    # rank measured it; mixing figures across ranks would make the skew meaningless
    return "device_ns" if has_device and all_device else "frontend_ns"


def rank_table(
    per_rank: Mapping[int, Sequence[StepRecord]],
    *,
    metric: Metric = "frontend",
    records_paths: Mapping[int, str | None] | None = None,
) -> RankTable:
    """Build the per-rank table from each rank's step records (pure).

    The default compares host step time (``frontend_ns``), the figure ``asynctrace report``
    compares across ranks too; ``metric="device"`` compares ``device_ns``, and ``"auto"`` uses
    ``device_ns`` where every step of every rank has it. Only steps every rank reported (matched
    by step number) are compared.
    """
    name = _choose_metric(per_rank, metric)
    ranks = tuple(sorted(per_rank))
    times: dict[int, dict[int, int]] = {}
    for r in ranks:
        t: dict[int, int] = {}
        for s in per_rank[r]:
            v = getattr(s, name)
            if v is not None:
                t[s.step] = int(v)
        times[r] = t
    common = set.intersection(*(set(t) for t in times.values())) if ranks else set()
    rows: list[RankStep] = []
    slowest_count = dict.fromkeys(ranks, 0)
    for step in sorted(common):
        values = tuple(times[r][step] for r in ranks)
        k = _spread(values, ranks)
        slowest_count[k.slowest] += 1
        rows.append(
            RankStep(
                step=step,
                time_ns=values,
                slowest_rank=k.slowest,
                fastest_rank=k.fastest,
                skew_ns=k.hi - k.lo,
            )
        )
    skews = [row.skew_ns for row in rows]
    worst = max(rows, key=lambda row: row.skew_ns, default=None)
    paths = records_paths or {}
    return RankTable(
        metric=name,
        ranks=ranks,
        steps=tuple(rows),
        per_rank=tuple(
            RankSummary(
                rank=r,
                steps=len(per_rank[r]),
                median_ns=_median(list(times[r].values())),
                slowest_count=slowest_count[r],
                records_path=paths.get(r),
            )
            for r in ranks
        ),
        median_skew_ns=_median(skews),
        max_skew_ns=None if worst is None else worst.skew_ns,
        max_skew_step=None if worst is None else worst.step,
    )
