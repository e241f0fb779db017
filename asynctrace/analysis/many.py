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

A folder is not a job: :func:`group_runs` says which files are one run's ranks (the definition
is in docs/how-it-works.md, "Runs: which files are one job"), and only those are reduced
together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import PurePath
from typing import Literal

import msgspec
import numpy as np

from asynctrace.analysis.launches import Percentiles, percentiles
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report, SourceInfo

__all__ = [
    "BoundOutlier",
    "BoundSplit",
    "CrossRank",
    "RankSlowest",
    "RunGroup",
    "bound_label",
    "cross_rank",
    "group_runs",
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
