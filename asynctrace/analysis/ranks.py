"""Several ranks side by side: a per-rank table, the slowest rank, and per-step skew.

Two views of one job's ranks, both on their step records (the one step record type of
sessions and traces): :func:`compare_ranks` of whole reports (``asynctrace report DIR``), and
:func:`rank_table` of each rank's recent steps as gathered at a session's end over
torch.distributed (``gather_ranks=True``), or read from records files.

The slowest rank is the one with the largest mean host step time (``frontend_ns``); the skew
of a step is the spread (max − min) of its ``frontend_ns`` over the ranks that have that step
number. Reports of traces and of sessions' records compare alike: they hold the same step
records. A folder is compared run by run (:func:`compare_runs`): only the files that are one
job's ranks (:func:`group_runs`) share a table.

Cross-rank figures of many ranks at once: the reduce after the per-rank map.

``cross_rank(reports)`` is a pure function of the per-rank :class:`Report` objects (small: a
report holds figures, never the trace model), vectorised over every (rank, step) pair, so a
job of thousands of ranks reduces in one process in O(R·S log(R·S)) for R ranks of S steps —
never rank against rank:

* **per-step skew** of host step time (``frontend_ns``) over the ranks that have the step number,
  summarised as nearest-rank percentiles and the step where it is largest (the per-step rows
  are :attr:`RankComparison.step_skew`);
* the **slowest rank overall** (largest mean ``frontend_ns``, as :func:`compare_ranks` chooses it)
  and **how often each rank is the slowest of a step** (the stragglers);
* the ranks whose **bound label** differs from the majority's, where the reports carry one
  (``report.bound.label``; reports without that field are left out of this figure, and
  ``bound`` is None when none has it).

Ties go as in :func:`compare_ranks`: ranks ordered by rank number
(unknown ranks last, then by source), the first of equal values wins.

A folder is not a job: :func:`group_runs` says which files are one run's ranks (the definition
is in docs/how-it-works.md, "Runs: which files are one job"), and only those are reduced
together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Generic, Literal, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis._quantiles import nearest_rank
from asynctrace.analysis.launches import Percentiles, percentiles
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report, SourceInfo
from asynctrace.errors import OptionError
from asynctrace.records import StepRecord

__all__ = [
    "BoundOutlier",
    "BoundSplit",
    "CrossRank",
    "Metric",
    "RankComparison",
    "RankRow",
    "RankSlowest",
    "RankStep",
    "RankSummary",
    "RankTable",
    "RunComparison",
    "RunGroup",
    "StepSkew",
    "bound_label",
    "compare_ranks",
    "compare_runs",
    "cross_rank",
    "group_runs",
    "job_of",
    "order_ranks",
    "rank_table",
]

# ---------------------------------------------------------------------------------------------
# Cross-rank figures: the reduce after the per-rank map


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


class _Reduce(msgspec.Struct, frozen=True, eq=False):
    """The reduce both rank views are made of (:func:`compare_ranks`, :func:`cross_rank`), over
    reports in rank order: the slowest rank, and per step number on two ranks or more (in step
    order) the fastest and slowest host time and the first rank (in rank order) with the
    slowest."""

    #: index (in rank order) of the largest mean ``frontend_ns``; None with fewer than two ranks
    slowest: int | None
    step: npt.NDArray[np.int64]
    #: how many of the ranks' steps have that number
    ranks: npt.NDArray[np.int64]
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    #: index (in rank order) of the rank with ``hi``
    hi_rank: npt.NDArray[np.int64]


def _reduce(ordered: Sequence[Report]) -> _Reduce:
    """The ranks' reduce (:class:`_Reduce`), vectorised over every (rank, step) pair."""
    n_steps = np.array([len(r.steps) for r in ordered], dtype=np.int64)
    rank_i = np.repeat(np.arange(len(ordered), dtype=np.int64), n_steps)
    step = np.fromiter((s.step for r in ordered for s in r.steps), np.int64, int(n_steps.sum()))
    cpu = np.fromiter((s.frontend_ns for r in ordered for s in r.steps), np.int64, len(step))
    means = [_mean([s.frontend_ns for s in r.steps]) or 0.0 for r in ordered]
    order = np.lexsort((rank_i, -cpu, step))  # by step, longest first, then rank order
    s_step, s_cpu, s_rank = step[order], cpu[order], rank_i[order]
    first = np.flatnonzero(np.r_[True, s_step[1:] != s_step[:-1]])[: len(s_step)]
    last = (np.r_[first[1:], len(s_step)] - 1)[: len(first)]
    n_per = last - first + 1
    keep = n_per >= 2
    return _Reduce(
        slowest=int(np.argmax(means)) if len(ordered) > 1 else None,
        step=s_step[first][keep],
        ranks=n_per[keep],
        lo=s_cpu[last][keep],
        hi=s_cpu[first][keep],
        hi_rank=s_rank[first][keep],
    )


def cross_rank(reports: Sequence[Report]) -> CrossRank:
    """Cross-rank figures of one job's per-rank reports (pure)."""
    ordered = order_ranks(reports)
    red = _reduce(ordered)
    slowest, hi_rank = red.slowest, red.hi_rank
    skew = red.hi - red.lo
    worst = int(np.argmax(skew)) if len(skew) else -1

    counts = np.bincount(hi_rank, minlength=len(ordered))
    by_count = sorted(np.flatnonzero(counts).tolist(), key=lambda i: (-int(counts[i]), i))
    return CrossRank(
        ranks=len(ordered),
        steps=len(skew),
        slowest_rank=ordered[slowest].source.rank if slowest is not None else None,
        slowest_source=ordered[slowest].source.path if slowest is not None else None,
        step_skew_ns=percentiles(skew),
        worst_step=int(red.step[worst]) if worst >= 0 else None,
        worst_step_rank=ordered[int(hi_rank[worst])].source.rank if worst >= 0 else None,
        slowest_by_step=[
            RankSlowest(
                rank=ordered[i].source.rank, source=ordered[i].source.path, steps=int(counts[i])
            )
            for i in by_count
        ],
        bound=_bound_split(ordered),
    )


RunKind = Literal["session", "trace", "file"]


class RunGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Files of one run: the ranks of one job, or one file that is a run of its own."""

    #: "session": the records of one distributed session (one session name and world size);
    #: "trace": the traces of one job (a rank and one world size in each file's metadata);
    #: "file": a file that is a run of its own (no rank, or a rank that cannot join a job)
    kind: RunKind
    #: the session name; for traces of one job, ``"world size N"`` (or ``"world size ?"``);
    #: for a trace that is its own run, its file name
    name: str
    world_size: int | None
    #: indices of the run's files in the sources given, in rank order (unknown ranks last)
    members: list[int]
    #: their paths and ranks, index for index with ``members``
    sources: list[str]
    ranks: list[int | None]
    #: ranks of ``0 .. world_size-1`` that no file of the run has (None: world size unknown)
    missing_ranks: int | None = None
    #: why this file is a run of its own though it names a job: its rank is outside the world
    #: size, or another file of that job holds the same rank
    warnings: list[str] = msgspec.field(default_factory=list)


def _label(src: SourceInfo) -> str:
    return PurePath(src.path).name


def _job_key(src: SourceInfo) -> tuple[str, str, int | None] | None:
    """The job a file says it is a rank of, or None where it is a run of its own: a session's
    records by session name and world size, a trace by world size; a file needs a rank, and a
    world size (where known) above 1."""
    if src.rank is None or (src.world_size is not None and src.world_size <= 1):
        return None
    if src.session is not None:
        return ("session", src.session.name, src.world_size)
    if src.format == "records":
        return None  # a records file without its header: nothing says which run it is
    return ("trace", "", src.world_size)


def _run_name(kind: str, name: str, world: int | None) -> str:
    if kind == "session":
        return name
    return f"world size {'?' if world is None else world}"


def group_runs(sources: Sequence[SourceInfo]) -> list[RunGroup]:
    """Which of these files are one run (pure; ``sources`` are the reports' ``source``).

    Files are one job's ranks where their metadata says so: the same run (records: the same
    session name; traces: a rank in the trace), the same world size, distinct ranks below it.
    Every other file is a run of its own: no rank (a single-process session or trace), a world
    size of 1, a rank at or above its world size, or a rank that an earlier file (in the order
    given) already holds in that run; the last two carry a warning saying so. Runs are in the
    order of their first file.
    """
    jobs: dict[tuple[str, str, int | None], list[int]] = {}
    #: per job, rank → the file that holds it
    holders: dict[tuple[str, str, int | None], dict[int, int]] = {}
    alone: dict[int, list[str]] = {}
    first: dict[tuple[str, str, int | None], int] = {}
    for i, src in enumerate(sources):
        key, rank = _job_key(src), src.rank
        if key is None or rank is None:
            alone[i] = []
            continue
        world = key[2]
        if rank < 0 or (world is not None and rank >= world):
            alone[i] = [
                f"{_label(src)}: rank {rank} is outside "
                f"{'any world' if world is None else f'world size {world}'}; reported as a run "
                "of its own"
            ]
            continue
        held = holders.setdefault(key, {})
        if rank in held:
            other = _label(sources[held[rank]])
            alone[i] = [
                f"{_label(src)}: rank {rank} of {_run_name(*key)} is in {other} already "
                "(two runs in one folder?); reported as a run of its own, outside that run's "
                "rank table"
            ]
            continue
        held[rank] = i
        jobs.setdefault(key, []).append(i)
        first.setdefault(key, i)

    runs: list[tuple[int, RunGroup]] = []
    for key, members in jobs.items():
        kind, name, world = key
        members = sorted(members, key=lambda j: (sources[j].rank or 0, sources[j].path))
        ranks = [sources[j].rank for j in members]
        runs.append(
            (
                first[key],
                RunGroup(
                    kind="session" if kind == "session" else "trace",
                    name=_run_name(kind, name, world),
                    world_size=world,
                    members=members,
                    sources=[sources[j].path for j in members],
                    ranks=ranks,
                    missing_ranks=None if world is None else world - len(ranks),
                ),
            )
        )
    for i, notes in alone.items():
        src = sources[i]
        runs.append(
            (
                i,
                RunGroup(
                    kind="file",
                    name=src.session.name if src.session is not None else _label(src),
                    world_size=src.world_size,
                    members=[i],
                    sources=[src.path],
                    ranks=[src.rank],
                    warnings=notes,
                ),
            )
        )
    runs.sort(key=lambda r: r[0])
    return [r for _, r in runs]


# ---------------------------------------------------------------------------------------------
# The per-rank table and the runs of a folder

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
    as :func:`_reduce` makes it; ties go to the first rank, so it is deterministic."""
    hi, lo = max(times), min(times)
    return _Spread(lo, hi, ranks[times.index(hi)], ranks[times.index(lo)])


def compare_ranks(reports: Sequence[Report]) -> RankComparison:
    """Compare reports of one job's ranks (pure); ordered by rank, unknown ranks last."""
    ordered = order_ranks(reports)
    red = _reduce(ordered)
    rows = [
        _row(r, _mean([s.frontend_ns for s in r.steps]) or 0.0, i == red.slowest)
        for i, r in enumerate(ordered)
    ]
    skew = [
        StepSkew(
            step=int(step),
            ranks=int(n),
            min_frontend_ns=int(lo),
            max_frontend_ns=int(hi),
            skew_ns=int(hi - lo),
            slowest_rank=ordered[int(i)].source.rank,
        )
        for step, n, lo, hi, i in zip(red.step, red.ranks, red.lo, red.hi, red.hi_rank, strict=True)
    ]
    return RankComparison(
        ranks=rows,
        slowest_rank=ordered[red.slowest].source.rank if red.slowest is not None else None,
        step_skew=skew,
    )


class RunComparison(msgspec.Struct, frozen=True, kw_only=True):
    """One run of a folder, and its ranks compared where it has two files or more."""

    run: RunGroup
    #: the rank table and the cross-rank figures of the run's files; None for a run of one file
    ranks: RankComparison | None
    cross_rank: CrossRank | None


def compare_runs(reports: Sequence[Report]) -> list[RunComparison]:
    """The reports grouped into runs (:func:`group_runs`), each run of
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
    """The rank table's median (a rank's step time, the median skew): the nearest-rank p50, as
    every figure across ranks (:attr:`CrossRank.step_skew_ns` ``.p50``) — an observed value, the
    lower middle one of an even count (skews 10 and 20: 10)."""
    return nearest_rank(sorted(values), 50) if values else None


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
