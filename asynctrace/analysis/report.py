"""The :class:`Report`: every figure of one trace, with a versioned JSON form.

``analyze(trace)`` runs the pure analyses (launches, queue, steps, syncs, verdict) and returns a
frozen Report. ``Report.to_json()`` / ``Report.from_json()`` round-trip it; the schema is
documented in docs/report-json.md and versioned by ``schema_version``.

``analyze_detail(trace)`` returns the same report with the detail beside it (each idle gap, each
stream's queue over time) for the views that draw more than the report carries (``annotate``);
the detail is not part of the JSON form.

``summarize_records`` does the same for the records a capture session wrote.

Schema 2 (this version) adds ``bound`` (what bounds the run: label, figures, evidence, advice),
``steps[i].bound`` and ``warnings``, and changes the meaning of ``steps[i].gpu_busy_ns`` /
``gpu_idle_ns``: they are the step's share of the device timeline (the shares partition the
run, so they add up to its totals), no longer its own activities' window.
"""

from __future__ import annotations

import re
from pathlib import PurePath

import msgspec
import numpy as np

from asynctrace.analysis.bound import (
    Bound,
    IdleGaps,
    ReportWarning,
    bound_of_trace,
)
from asynctrace.analysis.launches import LaunchStats, launch_stats, link_launches
from asynctrace.analysis.queue import (
    DEFAULT_QUEUE_CAP,
    QueueSeries,
    StreamQueue,
    queue_series,
    queue_stats,
    stream_groups,
)
from asynctrace.analysis.steps import StepFigures, split_steps, step_windows
from asynctrace.analysis.syncs import SyncCall, SyncSummary, find_syncs
from asynctrace.analysis.verdict import judge_steps
from asynctrace.errors import TraceFormatError
from asynctrace.records import Records, StepRecord, SyncSite
from asynctrace.traces.model import ActivityKind, Trace

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "ActivityCounts",
    "Analysis",
    "FigureStats",
    "RecordsSummary",
    "Report",
    "TraceInfo",
    "VerdictInfo",
    "analyze",
    "analyze_detail",
    "rank_from_name",
    "step_records",
    "summarize_records",
    "sync_sites",
]

REPORT_SCHEMA_VERSION = 2


class TraceInfo(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    format: str
    device: str
    #: from the trace's distributed info, else from the file name (``rank<N>``, ``rank-N``)
    rank: int | None
    world_size: int | None
    events: int
    #: events the loader read and did not keep, by reason
    skipped: dict[str, int] = msgspec.field(default_factory=dict)


class ActivityCounts(msgspec.Struct, frozen=True, kw_only=True):
    total: int
    #: stream id as a string ("device:stream" on multi-device traces) → activities
    per_stream: dict[str, int]
    #: "kernel", "memcpy", "memset" → activities
    per_kind: dict[str, int]


class VerdictInfo(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str
    findings: list[str] = msgspec.field(default_factory=list)


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """Every figure of one trace. Build it with :func:`analyze`."""

    schema_version: int = REPORT_SCHEMA_VERSION
    trace: TraceInfo
    activities: ActivityCounts
    launch: LaunchStats
    #: stream key (as in ``activities.per_stream``) → queue figures
    queue: dict[str, StreamQueue]
    queue_cap: int = DEFAULT_QUEUE_CAP
    syncs: SyncSummary
    #: where the steps came from: "profiler", "nvtx", "annotation", "optimizer", "trace" or
    #: "none"
    step_source: str
    steps: list[StepFigures]
    verdict: VerdictInfo
    #: what bounds the run (None only in reports of schema 1)
    bound: Bound | None = None
    #: consistency warnings: figures that the trace itself makes unreliable
    warnings: list[ReportWarning] = msgspec.field(default_factory=list)

    def to_json(self, *, indent: int = 0) -> str:
        data = msgspec.json.encode(self)
        if indent:
            data = msgspec.json.format(data, indent=indent)
        return data.decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> Report:
        """Read a report written by :meth:`to_json`; refuse a newer schema."""
        try:
            version = msgspec.json.decode(data, type=_Version).schema_version
            if version > REPORT_SCHEMA_VERSION:
                raise TraceFormatError(
                    "<report>",
                    f"report schema {version} is newer than this asynctrace "
                    f"({REPORT_SCHEMA_VERSION}); upgrade asynctrace",
                )
            return msgspec.json.decode(data, type=cls)
        except msgspec.DecodeError as e:
            raise TraceFormatError("<report>", f"not an asynctrace report ({e})") from None
        except RecursionError:
            raise TraceFormatError(
                "<report>", "not an asynctrace report (nested too deeply)"
            ) from None


class _Version(msgspec.Struct):
    schema_version: int


_RANK = re.compile(r"(?i)rank[-_]?(\d+)")


def rank_from_name(name: str) -> int | None:
    """The N of ``rank<N>``, ``rank-N`` or ``rank_N`` in a file name, else None."""
    m = _RANK.search(PurePath(name).name)
    return int(m.group(1)) if m else None


def step_records(steps: list[StepFigures], *, clocks_agree: bool = True) -> list[StepRecord]:
    """The per-step figures of a trace as the records the verdict judges (without run-ahead
    and in-flight figures where the clocks disagree: they would be wrong)."""
    return [
        StepRecord(
            step=s.step,
            start_ns=s.start_ns,
            frontend_ns=s.cpu_ns,
            device_ns=s.device_ns if s.device_start_ns is not None else None,
            run_ahead_ns=s.run_ahead_ns if clocks_agree else None,
            in_flight=s.in_flight_steps if clocks_agree else 0,
            sync_count=s.sync_count,
            sync_wait_ns=s.sync_wait_ns,
        )
        for s in steps
    ]


def sync_sites(summary: SyncSummary) -> list[SyncSite]:
    """The sites of a trace's syncs made inside steps, as the records the verdict judges (the
    API name where no site): "N syncs per step at A (op ×k)" counts what the steps counted, not
    a sync before the first step or after the last."""
    groups: dict[tuple[str, str], list[SyncCall]] = {}
    for c in summary.calls:
        if c.step is not None:
            groups.setdefault((c.site or c.op, c.op), []).append(c)
    return [
        SyncSite(
            site=site,
            op=op,
            count=len(cs),
            wait_ns=sum(c.dur_ns for c in cs),
            steps=len({c.step for c in cs}),
        )
        for (site, op), cs in groups.items()
    ]


class Analysis(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """A report and the analysis detail beside it: what views draw that the report does not
    carry (each idle gap, each stream's queue over time). Made once by :func:`analyze_detail`
    for the views that need it (``asynctrace annotate``); not part of the report's JSON form.
    """

    report: Report
    #: every idle gap of the device timeline, with its cause and step (bound analysis)
    gaps: IdleGaps
    #: stream key (as in ``report.queue``) → (queue depth, in flight) over time
    queue_series: dict[str, tuple[QueueSeries, QueueSeries]]


def analyze(
    trace: Trace, *, queue_cap: int = DEFAULT_QUEUE_CAP, keep_sync_calls: bool = True
) -> Report:
    """All figures of one trace (pure; reads no file, imports no torch)."""
    return analyze_detail(trace, queue_cap=queue_cap, keep_sync_calls=keep_sync_calls).report


def analyze_detail(
    trace: Trace, *, queue_cap: int = DEFAULT_QUEUE_CAP, keep_sync_calls: bool = True
) -> Analysis:
    """:func:`analyze`, and the detail beside the report (the idle gaps, the queue series),
    from the same single run of the analyses."""
    links = link_launches(trace)
    groups = stream_groups(trace)
    series = queue_series(trace, links, groups=groups)
    windows = step_windows(trace)
    steps = split_steps(trace, links, windows=windows, queues=series)
    syncs = find_syncs(trace, windows=windows)
    sites = sync_sites(syncs)  # from the calls: before they may be dropped
    group_of, keys = groups
    per_stream = np.bincount(group_of, minlength=len(keys))
    kinds = trace.activities.kind
    per_kind = {k.name.lower(): int(np.count_nonzero(kinds == k)) for k in ActivityKind}
    has_device = len(trace.activities) > 0
    tb = bound_of_trace(
        trace,
        links,
        windows,
        syncs=syncs,
        queues=series,
        cap=queue_cap,
        step_sync_wait_ns=[s.sync_wait_ns for s in steps],
        group_keys=keys,
        group_of=group_of,
    )
    steps = [
        msgspec.structs.replace(s, gpu_busy_ns=b.busy_ns, gpu_idle_ns=b.idle_ns, bound=b)
        for s, b in zip(steps, tb.steps, strict=True)
    ]
    whole = bool(windows) and windows[0].source == "trace"
    v = judge_steps(
        step_records(steps, clocks_agree=not tb.clocks_disagree),
        asynchronous=has_device,
        sync_sites=sites,
        sync_cost_fraction=tb.sync_cost_fraction if has_device else None,
        whole_trace=whole,
    )
    report = Report(
        trace=TraceInfo(
            source=trace.source,
            format=trace.format,
            device=trace.device_name,
            rank=trace.rank if trace.rank is not None else rank_from_name(trace.source),
            world_size=trace.world_size,
            events=trace.n_events,
            skipped=dict(trace.skipped),
        ),
        activities=ActivityCounts(
            total=len(trace.activities),
            per_stream={k: int(c) for k, c in zip(keys, per_stream.tolist(), strict=True)},
            per_kind=per_kind,
        ),
        launch=launch_stats(trace, links),
        queue=queue_stats(trace, links, cap=queue_cap, series=series, groups=groups),
        queue_cap=queue_cap,
        syncs=syncs if keep_sync_calls else msgspec.structs.replace(syncs, calls=[]),
        step_source=windows[0].source if windows else "none",
        steps=steps,
        verdict=VerdictInfo(code=v.code, message=v.message, findings=list(v.findings)),
        bound=tb.run,
        warnings=tb.warnings,
    )
    gaps = tb.gaps  # bound_of_trace always gives them; an empty set where it would not
    if gaps is None:
        empty = np.zeros(0, np.int64)
        gaps = IdleGaps(empty, empty, np.zeros(0, np.uint8), np.zeros(0, bool), empty)
    return Analysis(report=report, gaps=gaps, queue_series=series)


class FigureStats(msgspec.Struct, frozen=True, kw_only=True):
    """Mean, median and nearest-rank p90 of one per-step figure over the steps that have it."""

    n: int
    mean: float
    median: float
    p90: int


class RecordsSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The per-step summary of one session's records."""

    schema_version: int = REPORT_SCHEMA_VERSION
    source: str
    rank: int | None
    device: str
    device_kind: str
    steps: int
    complete: bool
    #: figure name ("frontend_ns", "device_ns", ...) → statistics
    figures: dict[str, FigureStats]
    sync_sites: list[SyncSite]
    verdict: VerdictInfo
    #: what bounds the session (estimated from its step records; see bound_of_records)
    bound: Bound | None = None


_RECORD_FIGURES = (
    "frontend_ns",
    "device_ns",
    "run_ahead_ns",
    "data_wait_ns",
    "sync_wait_ns",
    "sync_count",
    "in_flight",
)


def summarize_records(records: Records) -> RecordsSummary:
    """Mean/median/p90 of each per-step figure of a session, its verdict and what bounds it
    (pure): the live session's own summary (:class:`~asynctrace.analysis.accumulate.
    StepAccumulator`) over every step of the file."""
    from asynctrace.analysis.accumulate import StepAccumulator

    h = records.header
    acc = StepAccumulator(window=max(1, len(records.steps))).extend(records.steps)
    stats = acc.figures()
    figures: dict[str, FigureStats] = {}
    for name in _RECORD_FIGURES:
        f = stats[name]
        figures[name] = (
            FigureStats(n=0, mean=0.0, median=0.0, p90=0)
            if f is None
            else FigureStats(n=f.count, mean=f.mean, median=f.median, p90=int(f.p90))
        )
    code, message, findings = acc.verdict(
        asynchronous=h.asynchronous, sync_sites=records.syncs, sync_detection=h.sync_detection
    )
    return RecordsSummary(
        source=records.path,
        rank=h.rank if h.rank is not None else rank_from_name(records.path),
        device=h.device_name,
        device_kind=h.device_kind,
        steps=len(records.steps),
        complete=records.complete,
        figures=figures,
        sync_sites=list(records.syncs),
        verdict=VerdictInfo(code=code, message=message, findings=findings),
        bound=acc.bound(asynchronous=h.asynchronous),
    )
