"""The :class:`Report`: every figure of one run — a trace or a session's records — with a
versioned JSON form.

``analyze(source)`` takes what a loader returned (:func:`asynctrace.load_source`: a
:class:`~asynctrace.traces.model.Trace` or the :class:`~asynctrace.records.Records` a capture
session wrote) and returns one frozen Report. Both kinds become the same step records
(:class:`~asynctrace.records.StepRecord`), summarized, judged and labelled by the same code; a
trace adds what only a trace has (activities, launches, queues, each sync call, per-step
extras) in ``Report.trace``. ``Report.to_json()`` / ``Report.from_json()`` round-trip it; the
schema is documented in docs/report-json.md and versioned by ``schema_version``.

``session_report(acc, ...)`` is the one path from a session's accumulated steps
(:class:`~asynctrace.analysis.accumulate.StepAccumulator`) to its Report: a live session's
``summary()`` and its exit summary, and a records file read back (``analyze(records)`` runs it
over every step of the file), so they agree by construction.

``analyze_detail(source)`` returns the same report with the detail beside it (each idle gap,
each stream's queue over time, the launch links, the per-step series) for the views that draw
more than the report carries; the detail is not part of the JSON form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis._bound_model import StepBound, WarmUp
from asynctrace.analysis._trust import check_trust
from asynctrace.analysis.accumulate import FigureStats, StepAccumulator, warmup_in_window
from asynctrace.analysis.bound import (
    Bound,
    IdleGaps,
    ReportWarning,
    TraceBound,
    bound_of_trace,
)
from asynctrace.analysis.diagnosis import Finding, diagnose, sync_cost_fraction
from asynctrace.analysis.kernels import DeviceTime, HostOpTime, host_op_times
from asynctrace.analysis.launches import (
    LaunchLinks,
    LaunchStats,
    Percentiles,
    launch_stats,
    link_launches,
)
from asynctrace.analysis.queue import (
    DEFAULT_QUEUE_CAP,
    QueueSeries,
    StreamQueue,
    queue_series,
    queue_stats,
    stream_groups,
)
from asynctrace.analysis.records_bound import bound_columns_of_records
from asynctrace.analysis.series import (
    MAX_BINS,
    BoundSeries,
    StepSeries,
    bound_series,
    steps_series,
)
from asynctrace.analysis.steps import (
    StepWindow,
    TraceStep,
    split_steps,
    step_windows,
    sync_rows,
    without_clock_figures,
)
from asynctrace.analysis.syncs import SyncCall, SyncSummary, find_syncs
from asynctrace.analysis.verdict import judge_steps, verdict_line
from asynctrace.analysis.warmup import find_warmup
from asynctrace.errors import TraceFormatError
from asynctrace.records import Note, Records, SessionHeader, StepRecord, SyncSite
from asynctrace.traces.model import ActivityKind, Trace

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "ActivityCounts",
    "Analysis",
    "Report",
    "SourceInfo",
    "TraceFigures",
    "VerdictInfo",
    "analyze",
    "analyze_detail",
    "rank_from_name",
    "report_diagnosis",
    "session_report",
    "sync_sites",
    "warmup_steps",
]

REPORT_SCHEMA_VERSION = 4


class SourceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What was analysed."""

    #: the file (or the name a trace was built under)
    path: str
    #: "kineto", "nsys", "synthetic" (traces) or "records" (a capture session's records)
    format: str
    device: str
    #: whether device work runs asynchronously to the host: a trace with device activity, a
    #: session on CUDA/ROCm (False on the CPU backend, where device time is host time)
    asynchronous: bool
    #: from the trace's distributed info or the session header, else from the file name
    #: (``rank<N>``, ``rank-N``)
    rank: int | None
    world_size: int | None
    #: events the trace held, or the steps of a session (its records' step lines)
    events: int
    #: events the loader read and did not keep, by reason
    skipped: dict[str, int] = msgspec.field(default_factory=dict)
    #: False for a records file without its summary line (a killed run)
    complete: bool = True
    #: records only: the header the session wrote (device kind, clocks, capture settings)
    session: SessionHeader | None = None
    #: records only: the session's wall time, as its summary line says (a live session's:
    #: so far); None for a trace and a killed run's records
    wall_ns: int | None = None
    #: records only: steps still pending on the device at the session's end, collected then
    collected_at_exit: int = 0
    #: records only: the exception that ended the session's block, if one did
    error: str | None = None


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
    #: the code of each finding, in the same order (schema 4; [] in a report read from an
    #: older schema)
    codes: list[str] = msgspec.field(default_factory=list)

    @property
    def line(self) -> str:
        """``code: message`` with the code said once, as every view shows the verdict."""
        return verdict_line(self.code, self.message)


class TraceFigures(msgspec.Struct, frozen=True, kw_only=True):
    """What only a trace has: device activities, launches, queues, each sync call, and the
    trace-only extras of each step (index for index with ``Report.steps``)."""

    activities: ActivityCounts
    launch: LaunchStats
    #: stream key (as in ``activities.per_stream``) → queue figures
    queue: dict[str, StreamQueue]
    queue_cap: int = DEFAULT_QUEUE_CAP
    syncs: SyncSummary
    #: where the steps came from: "profiler", "nvtx", "annotation", "optimizer", "trace" or
    #: "none"
    step_source: str
    steps: list[TraceStep]
    #: device time per activity name (every kernel, copy and memset name) over the steady
    #: state's steps, most busy time first; their ``busy_ns`` add up to those steps' busy time
    #: (:mod:`asynctrace.analysis.kernels`); [] in reports saved before it
    kernels: list[DeviceTime] = msgspec.field(default_factory=list)
    #: host time per top-level operator of the launching thread over the steady steps' host
    #: spans, most first (:mod:`asynctrace.analysis.kernels`); [] in reports saved before it
    host_ops: list[HostOpTime] = msgspec.field(default_factory=list)
    #: figures left out because the host and device clocks disagree (the ``clock-mismatch``
    #: warning): "launch delays" (their percentiles are 0), "queue depth" (``queue`` is {}),
    #: "run-ahead", "idle causes"; [] where the clocks agree
    withheld: list[str] = msgspec.field(default_factory=list)


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """Every figure of one run (a trace or a session's records). Build it with
    :func:`analyze`."""

    schema_version: int = REPORT_SCHEMA_VERSION
    source: SourceInfo
    #: one record per step, the same type a capture session writes (a live session's summary:
    #: its last ``window`` steps, those its medians and verdict cover; ``source.events`` counts
    #: them all)
    steps: list[StepRecord]
    #: each step's share of the device timeline and its label, index for index with ``steps``
    #: (a trace's; empty for a session's records, whose per-step estimates only the pictures
    #: draw: :func:`analyze_detail` bins them)
    step_bounds: list[StepBound] = msgspec.field(default_factory=list)
    #: figure name ("frontend_ns", "device_ns", ...) → statistics over the steps that have it
    figures: dict[str, FigureStats] = msgspec.field(default_factory=dict)
    #: sync sites of syncs made inside steps
    sync_sites: list[SyncSite] = msgspec.field(default_factory=list)
    verdict: VerdictInfo
    #: what bounds the run (in the steady state)
    bound: Bound | None = None
    #: the findings, costliest first; ``diagnosis[0]`` is the headline every view shows first
    diagnosis: list[Finding] = msgspec.field(default_factory=list)
    #: start-up work left out of the steady state; None where none was found
    warmup: WarmUp | None = None
    #: consistency warnings: figures that the input itself makes unreliable
    warnings: list[ReportWarning] = msgspec.field(default_factory=list)
    #: what the session said of its own figures (its records' summary line); [] for a trace
    notes: list[Note] = msgspec.field(default_factory=list)
    #: what only a trace has; None for a session's records
    trace: TraceFigures | None = None

    @property
    def whole_trace(self) -> bool:
        """Whether the run was judged as one step: a trace without steps."""
        return self.trace is not None and self.trace.step_source in ("trace", "none")

    def to_json(self, *, indent: int = 0) -> str:
        data = msgspec.json.encode(self)
        if indent:
            data = msgspec.json.format(data, indent=indent)
        return data.decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> Report:
        """Read a report written by :meth:`to_json` (schemas 1 and 2 of traces are read into
        this one, docs/report-json.md); refuse a newer schema."""
        try:
            version = msgspec.json.decode(data, type=_Version).schema_version
            if version > REPORT_SCHEMA_VERSION:
                raise TraceFormatError(
                    "<report>",
                    f"report schema {version} is newer than this asynctrace "
                    f"({REPORT_SCHEMA_VERSION}); upgrade asynctrace",
                )
            if version < 3:
                old = msgspec.convert(_from_schema_2(msgspec.json.decode(data)), type=cls)
                # the summary schema 3 adds, from the steps it always had
                acc = StepAccumulator(window=max(1, len(old.steps))).extend(old.steps)
                old = msgspec.structs.replace(old, figures=_figures(acc))
            else:
                old = msgspec.json.decode(data, type=cls)
            if version < 4:
                old = _to_schema_4(old)
            return old
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise TraceFormatError("<report>", f"not an asynctrace report ({e})") from None
        except (KeyError, TypeError, AttributeError) as e:
            raise TraceFormatError("<report>", f"not an asynctrace report ({e!r})") from None
        except RecursionError:
            raise TraceFormatError(
                "<report>", "not an asynctrace report (nested too deeply)"
            ) from None


def _from_schema_2(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-1/2 trace report's JSON in schema 3's shape (the same figures: the step fields
    that only a trace has move to ``trace.steps``, busy/idle shares to ``step_bounds``)."""
    t = obj["trace"]
    steps = obj.get("steps", [])
    extras = ("name", "end_ns", "activities", "device_start_ns", "device_end_ns", "queue_max")
    has_device = obj["activities"]["total"] > 0
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "source": {
            "path": t["source"],
            "format": t["format"],
            "device": t["device"],
            "asynchronous": has_device,
            "rank": t.get("rank"),
            "world_size": t.get("world_size"),
            "events": t["events"],
            "skipped": t.get("skipped", {}),
        },
        "steps": [
            {
                "step": s["step"],
                "start_ns": s["start_ns"],
                "frontend_ns": s["cpu_ns"],
                "device_ns": s["device_ns"] if s.get("device_start_ns") is not None else None,
                "run_ahead_ns": s.get("run_ahead_ns"),
                "in_flight": s.get("in_flight_steps", 0),
                "sync_count": s["sync_count"],
                "sync_wait_ns": s["sync_wait_ns"],
            }
            for s in steps
        ],
        "step_bounds": [s["bound"] for s in steps if s.get("bound") is not None],
        "verdict": obj["verdict"],
        "bound": obj.get("bound"),
        "warnings": obj.get("warnings", []),
        "trace": {
            "activities": obj["activities"],
            "launch": obj["launch"],
            "queue": obj["queue"],
            "queue_cap": obj.get("queue_cap", DEFAULT_QUEUE_CAP),
            "syncs": obj["syncs"],
            "step_source": obj["step_source"],
            "steps": [{k: s[k] for k in extras} for s in steps],
        },
    }


def _to_schema_4(old: Report) -> Report:
    """A report of schema 1–3 with what schema 4 adds, from the figures it always had: the
    verdict judged again (syncs by the idle they open, each finding's code), this version's
    advice, and the diagnosis."""
    from asynctrace.analysis.advice import advice_for

    b = old.bound
    if b is not None:
        b = msgspec.structs.replace(
            b, advice=advice_for(b.label, b, asynchronous=old.source.asynchronous)
        )
    h = old.source.session
    t = old.trace
    measured = old.source.asynchronous and (
        t is not None or (h is not None and h.sync_detection == "cuda")
    )
    v = judge_steps(
        old.steps,
        asynchronous=old.source.asynchronous,
        sync_sites=old.sync_sites,
        sync_cost_fraction=sync_cost_fraction(b) if measured else None,
        whole_trace=old.whole_trace,
    )
    new = msgspec.structs.replace(
        old,
        schema_version=REPORT_SCHEMA_VERSION,
        bound=b,
        verdict=VerdictInfo(
            code=v.code, message=v.message, findings=list(v.findings), codes=list(v.codes)
        ),
    )
    return msgspec.structs.replace(new, diagnosis=report_diagnosis(new))


class _Version(msgspec.Struct):
    schema_version: int


def report_diagnosis(report: Report, sync_cost_ns: int | None = None) -> list[Finding]:
    """:func:`~asynctrace.analysis.diagnosis.diagnose` of a report's own figures: what
    ``Report.diagnosis`` holds (pure). ``sync_cost_ns``: what the syncs cost, where the
    timeline gave it (``TraceBound.sync_cost_ns``); else the bound's sync idle."""
    t = report.trace
    # a session's summary holds only its recent steps; the diagnosis counts them all
    steps = report.source.events if report.source.session is not None else len(report.steps)
    return diagnose(
        bound=report.bound,
        asynchronous=report.source.asynchronous,
        has_device_activity=t.activities.total > 0 if t is not None else report.source.asynchronous,
        trace=t is not None,
        steps=steps,
        figures=report.figures,
        sync_sites=report.sync_sites,
        warnings=report.warnings,
        warmup=report.warmup,
        verdict_codes=report.verdict.codes,
        verdict_findings=report.verdict.findings,
        whole_trace=report.whole_trace,
        sync_cost_ns=sync_cost_ns,
        step_records=report.steps,
    )


_RANK = re.compile(r"(?i)rank[-_]?(\d+)")


def rank_from_name(name: str) -> int | None:
    """The N of ``rank<N>``, ``rank-N`` or ``rank_N`` in a file name, else None."""
    m = _RANK.search(PurePath(name).name)
    return int(m.group(1)) if m else None


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


class Analysis:
    """A report and the analysis detail beside it: what views draw that the report does not
    carry. Made once by :func:`analyze_detail`; not part of the report's JSON form. Renderers
    and exporters take this and compute nothing.

    The binned per-step series are made on first use, once: a view that does not draw them
    (the TensorBoard plugin's timeline, the annotated trace) does not pay for a long session's
    per-step bound estimates.
    """

    __slots__ = ("_bounds", "_series", "max_bins", "report", "trace")

    def __init__(
        self, *, report: Report, trace: TraceDetail | None = None, max_bins: int = MAX_BINS
    ) -> None:
        self.report = report
        #: the trace analysed, and its detail; None for a session's records
        self.trace = trace
        self.max_bins = max_bins
        self._series: StepSeries | None = None
        self._bounds: BoundSeries | None = None

    @property
    def series(self) -> StepSeries:
        """The per-step figures in at most ``max_bins`` bins."""
        if self._series is None:
            self._series = steps_series(self.report.steps, max_bins=self.max_bins)
        return self._series

    @property
    def bounds(self) -> BoundSeries:
        """What bounds each step, in the same bins."""
        if self._bounds is None:
            self._bounds = _bounds(self.report, max_bins=self.max_bins)
        return self._bounds

    def __repr__(self) -> str:
        return f"Analysis(report={self.report.source.path!r})"


class TraceDetail(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """The detail of a trace's analysis that views draw from."""

    trace: Trace
    links: LaunchLinks
    windows: list[StepWindow]
    #: every idle gap of the device timeline, with its cause and step (bound analysis)
    gaps: IdleGaps
    #: stream key (as in ``report.trace.queue``) → (queue depth, in flight) over time
    queue_series: dict[str, tuple[QueueSeries, QueueSeries]]
    #: each activity's stream, as an index into ``stream_keys`` (``queue.stream_groups``)
    stream_of: npt.NDArray[np.intp]
    stream_keys: list[str]


Source = Trace | Records


def analyze(
    source: Source,
    *,
    queue_cap: int = DEFAULT_QUEUE_CAP,
    keep_sync_calls: bool = True,
) -> Report:
    """All figures of one trace or one session's records (pure; reads no file, imports no
    torch)."""
    if isinstance(source, Records):
        return _records_report(source)
    return _trace_analysis(source, queue_cap=queue_cap, keep_sync_calls=keep_sync_calls)[0]


def analyze_detail(
    source: Source,
    *,
    queue_cap: int = DEFAULT_QUEUE_CAP,
    keep_sync_calls: bool = True,
    max_bins: int = MAX_BINS,
) -> Analysis:
    """:func:`analyze`, and the detail beside the report (idle gaps, queue series, launch
    links, per-step series), from the same single run of the analyses."""
    if isinstance(source, Records):
        return Analysis(report=_records_report(source), max_bins=max_bins)
    report, detail = _trace_analysis(source, queue_cap=queue_cap, keep_sync_calls=keep_sync_calls)
    return Analysis(report=report, trace=detail, max_bins=max_bins)


def _figures(acc: StepAccumulator) -> dict[str, FigureStats]:
    return {k: v for k, v in acc.figures().items() if v is not None}


def _trace_analysis(
    trace: Trace, *, queue_cap: int, keep_sync_calls: bool
) -> tuple[Report, TraceDetail]:
    trust = check_trust(trace, link_launches(trace))
    links = trust.links
    groups = stream_groups(trace)
    series = queue_series(trace, links, groups=groups)
    windows = step_windows(trace)
    blocking = sync_rows(trace)
    syncs = find_syncs(trace, windows=windows, rows=blocking)
    sites = sync_sites(syncs)  # from the calls: before they may be dropped
    group_of, keys = groups
    has_device = len(trace.activities) > 0
    plain = split_steps(trace, links, windows=windows, queues=series, syncs=blocking)
    warmup = find_warmup(trace, windows)
    tb = bound_of_trace(
        trace,
        links,
        windows,
        syncs=syncs,
        queues=series,
        cap=queue_cap,
        step_sync_wait_ns=[s.sync_wait_ns for s in plain.steps],
        group_keys=keys,
        group_of=group_of,
        warmup=warmup,
    )
    # where the clocks disagree, the figures that compare them would be wrong: left out
    split = (
        without_clock_figures(plain) if tb.clocks_disagree or trust.run_ahead_withheld else plain
    )
    whole = bool(windows) and windows[0].source == "trace"
    # the figures that compare the host's clock with the device's are left out where those
    # clocks disagree (docs/how-it-works.md, the clock rule)
    cross = tb.clocks_disagree
    # syncs are judged by what they cost, as the diagnosis ranks them: the host's wait while
    # the device stays busy costs nothing
    sync_cost = tb.sync_cost_ns
    run = trust.bound(tb.run)
    v = judge_steps(
        split.steps,
        asynchronous=has_device,
        sync_sites=sites,
        sync_cost_fraction=sync_cost_fraction(tb.run, sync_cost) if has_device else None,
        whole_trace=whole,
    )
    acc = StepAccumulator(window=max(1, len(split.steps))).extend(split.steps)
    report = Report(
        source=_source_info(trace, asynchronous=has_device),
        steps=split.steps,
        step_bounds=trust.step_bounds(tb.steps),
        figures=_figures(acc),
        sync_sites=sites,
        verdict=VerdictInfo(
            code=v.code, message=v.message, findings=list(v.findings), codes=list(v.codes)
        ),
        bound=run,
        warmup=warmup,
        warnings=[*tb.warnings, *trust.warnings],
        trace=TraceFigures(
            activities=_activity_counts(trace, keys, group_of),
            launch=launch_stats(trace, links) if not cross else _without_delays(trace, links),
            queue={}
            if cross
            else queue_stats(trace, links, cap=queue_cap, series=series, groups=groups),
            withheld=list(CROSS_CLOCK_FIGURES) if cross else [],
            queue_cap=queue_cap,
            syncs=syncs if keep_sync_calls else msgspec.structs.replace(syncs, calls=[]),
            step_source=windows[0].source if windows else "none",
            steps=split.extras,
        ),
    )
    report = _with_times_and_diagnosis(report, trace, tb.kernels, sync_cost)
    return report, _trace_detail(trace, links, windows, tb, series, groups)


def _source_info(trace: Trace, *, asynchronous: bool) -> SourceInfo:
    return SourceInfo(
        path=trace.source,
        format=trace.format,
        device=trace.device_name,
        asynchronous=asynchronous,
        rank=trace.rank if trace.rank is not None else rank_from_name(trace.source),
        world_size=trace.world_size,
        events=trace.n_events,
        skipped=dict(trace.skipped),
    )


def _with_times_and_diagnosis(
    report: Report, trace: Trace, kernels: list[DeviceTime], sync_cost: int | None
) -> Report:
    """The report with its time per kernel (the bound's, over the run's region) and per
    operator, then its diagnosis (which reads them)."""
    figs = report.trace
    assert figs is not None  # a trace's report
    report = msgspec.structs.replace(
        report,
        trace=msgspec.structs.replace(figs, kernels=kernels, host_ops=_host_ops(trace, report)),
    )
    return msgspec.structs.replace(report, diagnosis=report_diagnosis(report, sync_cost))


def _trace_detail(
    trace: Trace,
    links: LaunchLinks,
    windows: list[StepWindow],
    tb: TraceBound,
    series: dict[str, tuple[QueueSeries, QueueSeries]],
    groups: tuple[npt.NDArray[np.intp], list[str]],
) -> TraceDetail:
    gaps = _gaps_of(tb)
    group_of, keys = groups
    return TraceDetail(
        trace=trace,
        links=links,
        windows=windows,
        gaps=gaps,
        queue_series=series,
        stream_of=group_of,
        stream_keys=keys,
    )


def _gaps_of(tb: TraceBound) -> IdleGaps:
    """The trace bound's idle gaps (bound_of_trace always gives them; an empty set where it
    would not)."""
    if tb.gaps is not None:
        return tb.gaps
    empty = np.zeros(0, np.int64)
    return IdleGaps(empty, empty, np.zeros(0, np.uint8), np.zeros(0, bool), empty)


def warmup_steps(report: Report) -> int:
    """How many of the report's leading steps are warm-up, outside the steady state
    (:func:`~asynctrace.analysis.accumulate.warmup_in_window`): a session's summary holds the
    last window of its ``source.events`` steps; a trace or records file read back, them all."""
    if report.warmup is None:
        return 0
    kept = len(report.steps)
    seen = report.source.events if report.source.session is not None else kept
    return warmup_in_window(report.warmup.steps, seen=max(seen, kept), kept=kept)


def _host_ops(trace: Trace, report: Report) -> list[HostOpTime]:
    """The top-level operators' host time over the steady steps' host spans."""
    figs = report.trace
    w = warmup_steps(report)
    if figs is None or w >= len(report.steps) or not figs.steps:
        return []
    return host_op_times(
        trace, start_ns=report.steps[w].start_ns, end_ns=max(x.end_ns for x in figs.steps[w:])
    )


#: what a trace's report leaves out where the host and device clocks disagree
CROSS_CLOCK_FIGURES = ("launch delays", "queue depth", "run-ahead", "idle causes")


def _without_delays(trace: Trace, links: LaunchLinks) -> LaunchStats:
    """The launch counts without their delays, which compare the two clocks."""
    stats = launch_stats(trace, links)
    return msgspec.structs.replace(
        stats, queue_delay_ns=Percentiles(), launch_to_start_ns=Percentiles()
    )


def _activity_counts(trace: Trace, keys: list[str], group_of: np.ndarray) -> ActivityCounts:
    per_stream = np.bincount(group_of, minlength=len(keys))
    kinds = trace.activities.kind
    return ActivityCounts(
        total=len(trace.activities),
        per_stream={k: int(c) for k, c in zip(keys, per_stream.tolist(), strict=True)},
        per_kind={k.name.lower(): int(np.count_nonzero(kinds == k)) for k in ActivityKind},
    )


def _records_report(records: Records) -> Report:
    """A session's records as a report: the live session's own summary
    (:func:`session_report`) over every step of the file, its notes those of the file's
    summary line."""
    steps = records.steps
    end = records.summary
    return session_report(
        StepAccumulator(window=max(1, len(steps))).extend(steps),
        header=records.header,
        path=records.path,
        sync_sites=records.syncs,
        notes=end.notes if end is not None else [],
        own_notes=False,
        complete=records.complete,
        wall_ns=end.wall_ns if end is not None else None,
        collected_at_exit=end.collected_at_exit if end is not None else 0,
        error=end.error if end is not None else None,
    )


def session_report(
    acc: StepAccumulator,
    *,
    header: SessionHeader,
    path: str,
    sync_sites: Sequence[SyncSite],
    notes: Sequence[Note] = (),
    own_notes: bool = True,
    complete: bool = True,
    wall_ns: int | None = None,
    collected_at_exit: int = 0,
    error: str | None = None,
    judge: bool = True,
) -> Report:
    """The report of a session from its accumulated steps (pure): what a live session's
    ``summary()`` returns and what its records file reads back as. Medians, p90s, verdict and
    bound are over the accumulator's recent steps, the warm-up steps left out of the bound.
    ``notes`` come first, then (``own_notes``) what the accumulator says about its own figures.
    ``judge=False``: no verdict and no bound (the figures alone, where judging failed)."""
    h = header
    warmup = acc.warmup() if judge else None
    bound = acc.bound(asynchronous=h.asynchronous, warmup=warmup) if judge else None
    verdict = VerdictInfo(code="", message="")
    if judge:
        v = acc.judge(
            asynchronous=h.asynchronous,
            sync_sites=list(sync_sites),
            sync_detection=h.sync_detection,
            bound=bound,
        )
        verdict = VerdictInfo(
            code=v.code, message=v.message, findings=list(v.findings), codes=list(v.codes)
        )
    if own_notes:
        notes = [*notes, *acc.notes(asynchronous=h.asynchronous, verdict=verdict.code)]
    report = Report(
        source=SourceInfo(
            path=path,
            format="records",
            device=h.device_name,
            asynchronous=h.asynchronous,
            rank=h.rank if h.rank is not None else rank_from_name(path),
            world_size=h.world_size,
            events=acc.steps,
            complete=complete,
            session=h,
            wall_ns=wall_ns,
            collected_at_exit=collected_at_exit,
            error=error,
        ),
        steps=list(acc.recent),
        figures=_figures(acc),
        sync_sites=list(sync_sites),
        notes=list(notes),
        verdict=verdict,
        bound=bound,
        warmup=warmup,
    )
    if not judge:
        return report
    return msgspec.structs.replace(report, diagnosis=report_diagnosis(report))


def _bounds(report: Report, *, max_bins: int) -> BoundSeries:
    """Each step's bound in bins; a session's estimated here, for drawing only (its report
    holds the run's)."""
    bounds: list[StepBound] | npt.NDArray[np.int64] = report.step_bounds
    estimated = report.trace is None
    if not bounds and report.steps and estimated:
        bounds = bound_columns_of_records(report.steps, asynchronous=report.source.asynchronous)
    return bound_series(
        bounds,
        [s.step for s in report.steps] if len(bounds) else [],
        label=report.bound.label if report.bound is not None else "undetermined",
        estimated=estimated,
        max_bins=max_bins,
    )
