"""The diagnosis: one list of findings, ordered by what each costs in the steady state.

``diagnosis[0]`` is the headline every view shows first. A finding's ``code`` is a bound label
(``device-bound``, ``host-bound``, ``sync-bound``, ``input-bound``, ``dependency-bound``,
``undetermined``) or one of the other codes of :data:`FINDING_CODES`.

:func:`diagnose` builds the list from a run's figures, for a trace, a session's records and the
live session's exit summary alike (docs/how-it-works.md#diagnosis has the rules):

* **One finding per idle cause** of the bound (host, sync, input, dependency, unattributed),
  costing that cause's idle device time; the leading cause's finding carries the bound label,
  the others (and the leading one where a finer code fits) a code of their own:
  ``launch-overhead`` where most host idle lies in gaps shorter than
  :data:`~asynctrace.analysis.bound.LAUNCH_GAP_NS`, ``blocking-copy`` where blocking copies
  cost most of the sync idle, ``clock-mismatch`` where the clocks disagree. A cause other than
  the leading one is a finding only from :data:`MIN_FINDING_SHARE` of the region.
* **Device-bound** costs the device's busy time; it is the headline whenever it is the label
  (busy is then at least 85% of the region, more than any idle cause).
* **A sync costs the device idle it opens** (the bound's sync idle: gaps that began while the
  host was in a sync; in a session's records, the host's sync wait while the device kept pace),
  never its count: the host's wait while the device stays busy costs nothing.
* **Warm-up** costs its span but is outside the steady state: it never heads the list while a
  steady-state finding costs anything.
* **On a synchronous device** (a CPU session) the headline is ``cpu-synchronous``, costing the
  steps' whole time, and there is no ``device-bound``; a trace with no device activity is
  ``no-device-activity``. The syncs that would block an accelerator follow.
* The verdict's trend findings (``never-synchronized``, ``memory-creep``) cost no step time
  now; they follow the costs.

Ranked by ``cost_ns``, largest first (ties in the order above), so the bound label is the
headline wherever the headline is a bound label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from asynctrace.analysis._bound_model import (
    CAUSES,
    Bound,
    ReportWarning,
    SyncCost,
    WarmUp,
)
from asynctrace.analysis._bound_rule import LABELS
from asynctrace.analysis.advice import is_launch_overhead, short_name
from asynctrace.analysis.verdict import (
    data_wait_fraction,
    is_input_bound,
    over_sync_budget,
    syncs_per_step,
)
from asynctrace.records import StepRecord, SyncSite
from asynctrace.records.known_syncs import BLOCKING_COPY_OPS
from asynctrace.records.units import format_ns

if TYPE_CHECKING:
    from asynctrace.analysis.accumulate import FigureStats

__all__ = [
    "BOUND_CODES",
    "FINDING_CODES",
    "MIN_FINDING_SHARE",
    "Finding",
    "diagnose",
    "sync_cost_fraction",
]

#: the codes that are bound labels
BOUND_CODES = LABELS

#: every code a finding may carry
FINDING_CODES = (
    *BOUND_CODES,
    "launch-overhead",
    "warm-up",
    "blocking-copy",
    "over-synchronized",
    "clock-mismatch",
    "no-device-activity",
    "cpu-synchronous",
    # an idle cause that is not the leading one
    "host-work",
    "input-wait",
    "dependency-wait",
    "unattributed-idle",
    # the verdict's trend findings
    "never-synchronized",
    "memory-creep",
)

#: an idle cause other than the leading one is a finding from this share of the region
MIN_FINDING_SHARE: Final = 0.05


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that costs the run time, with its evidence and one next step."""

    code: str
    #: device idle or step time it costs in the steady state, ns
    cost_ns: int
    #: ``cost_ns`` over the region (0..1)
    share: float
    message: str
    #: one next step
    advice: str
    #: its figures, with units in the names (``idle_ns``, ``busy_pct``)
    evidence: dict[str, int | float | str] = msgspec.field(default_factory=dict)


def _share(part: int, whole: int) -> float:
    return round(min(1.0, max(0.0, part / whole)), 4) if whole > 0 else 0.0


def _median(figures: Mapping[str, FigureStats | None], name: str) -> float:
    f = figures.get(name)
    return f.median if f is not None and f.median == f.median else 0.0


def sync_cost_fraction(bound: Bound | None, sync_cost_ns: int | None = None) -> float:
    """What a run's syncs cost, over its region: ``sync_cost_ns`` (a trace's: the device idle
    they open plus the host's wait in them while the device waited for the host), else the bound's
    sync idle (a session's estimate: its sync wait while the device kept pace) — never the
    host's wait while the device stays busy. The verdict judges over-synchronization by this
    cost, as the diagnosis ranks syncs by it."""
    if bound is None or bound.region_ns <= 0:
        return 0.0
    cost = bound.idle_ns_by_cause.sync if sync_cost_ns is None else sync_cost_ns
    return min(1.0, cost / bound.region_ns)


def _site_kind(op: str) -> str:
    """A sync site's kind by its op's name, where no call says it (a session's sites, a trace's
    without device activity): an op of the one list of copies,
    :data:`~asynctrace.records.known_syncs.BLOCKING_COPY_OPS`. A trace's calls carry their own
    kind (``steps.sync_rows``: the same list, and the loaders' ``BLOCKING_MEMCPY`` calls), which
    the bound's sync costs keep."""
    return "blocking-copy" if op in BLOCKING_COPY_OPS else "sync"


def _sites_text(sites: Sequence[SyncSite], limit: int = 3) -> str:
    ranked = sorted(sites, key=lambda s: (-s.wait_ns, -s.count, s.site))
    shown = ", ".join(
        f"{s.site} ({s.op} ×{s.count})" if s.site else f"{s.op} ×{s.count}" for s in ranked[:limit]
    )
    if len(ranked) > limit:
        shown += f" and {len(ranked) - limit} more"
    return shown


def _costs_text(costs: Sequence[SyncCost], limit: int = 3) -> str:
    shown = ", ".join(
        (f"{c.site} ({c.op} ×{c.count}" if c.site else f"{c.op} (×{c.count}")
        + f", opens {format_ns(c.idle_ns)} idle)"
        for c in costs[:limit]
    )
    if len(costs) > limit:
        shown += f" and {len(costs) - limit} more"
    return shown


_BLOCKING_ADVICE: Final = (
    "copy from pinned memory with non_blocking=True (tensor.pin_memory(), "
    "DataLoader(pin_memory=True)), or keep the value on the device and read it once per log "
    "interval"
)


def _advice(bound: Bound, label: str, *, asynchronous: bool) -> str:
    from asynctrace.analysis.advice import advice_for

    got = advice_for(label, bound, asynchronous=asynchronous)
    return got[0] if got else ""


class _Syncs(msgspec.Struct, frozen=True):
    """The syncs of a run, as the findings name them."""

    #: the verdict's rate (:func:`~asynctrace.analysis.verdict.syncs_per_step`)
    per_step: float
    #: the run is one "step" (a whole trace without steps): counts are the trace's
    whole_trace: bool
    #: the trace's sites by cost (empty for a session)
    costs: list[SyncCost]
    sites: list[SyncSite]
    #: the share of the syncs' cost (a session: their wait) that blocking copies make
    blocking: float

    def named(self) -> str:
        return _costs_text(self.costs) if self.costs else _sites_text(self.sites)


def _syncs(
    bound: Bound | None,
    records: Sequence[StepRecord],
    sites: Sequence[SyncSite],
    whole_trace: bool,
) -> _Syncs:
    costs = list(bound.evidence.sync_sites) if bound is not None else []
    if costs:
        # the share of what the syncs cost (one definition: SyncCost.cost_ns), else of the wait
        total = sum(c.cost_ns for c in costs) or sum(c.wait_ns for c in costs)
        part = sum(
            (c.cost_ns if any(x.cost_ns for x in costs) else c.wait_ns)
            for c in costs
            if c.kind == "blocking-copy"
        )
    else:
        total = sum(s.wait_ns for s in sites) or sum(s.count for s in sites)
        part = sum(
            (s.wait_ns if any(x.wait_ns for x in sites) else s.count)
            for s in sites
            if _site_kind(s.op) == "blocking-copy"
        )
    return _Syncs(
        per_step=syncs_per_step(records),
        whole_trace=whole_trace,
        costs=costs,
        sites=list(sites),
        blocking=part / total if total > 0 else 0.0,
    )


def _verdict_extras(codes: Sequence[str], findings: Sequence[str], region: int) -> list[Finding]:
    """The verdict's trend findings, which cost no step time now."""
    advice = {
        "never-synchronized": "synchronize once per minibatch (read the loss with .item() once "
        "per step or per log interval) so that the queue and memory stay bounded",
        "memory-creep": "look for tensors kept across steps (a loss accumulated with its graph, "
        "lists of outputs): detach or .item() what you keep",
    }
    return [
        Finding(code=c, cost_ns=0, share=0.0, message=m, advice=advice[c])
        for c, m in zip(codes, findings, strict=False)
        if c in advice
    ]


def _warmup_finding(w: WarmUp, region: int) -> Finding:
    what = ", ".join(f"{i.name} ({i.kind}, {format_ns(i.dur_ns)})" for i in w.items[:3])
    steps = f" ({w.steps} leading step(s))" if w.steps else ""
    return Finding(
        code="warm-up",
        cost_ns=w.span_ns,
        share=_share(w.span_ns, w.span_ns + region),
        message=f"warm-up: {format_ns(w.span_ns)} of start-up before the steady state{steps}"
        + (f" — {what}" if what else "")
        + "; paid once and left out of the steady state's label",
        advice="one-off: leave it out of timings (skip the first steps); where it recurs, "
        "keep shapes static so that compilation and autotuning run once",
        evidence={"warmup_ns": w.span_ns, "warmup_steps": w.steps},
    )


def _sync_evidence(s: _Syncs, bound: Bound) -> dict[str, int | float | str]:
    e = bound.evidence
    ev: dict[str, int | float | str] = {
        "sync_idle_ns": bound.idle_ns_by_cause.sync,
        "sync_wait_ns": e.sync_wait_ns,
        "syncs_per_step": s.per_step,
    }
    if s.blocking:
        ev["blocking_copy_pct"] = round(100 * s.blocking, 1)
    named = s.named()
    if named:
        ev["sites"] = named
    return ev


#: a cause finding's code, message and advice
_Said = tuple[str, str, str]
#: what a cause finding is written from: the bound, the idle it costs and its share of the
#: region, the label when it is the cause the label names, the finding's evidence (filled in)
_Ctx = tuple[Bound, int, str, str, dict[str, int | float | str]]


def _host_said(c: _Ctx, *, asynchronous: bool) -> _Said:
    b, idle, pct, label, ev = c
    e = b.evidence
    if is_launch_overhead(e):
        code = "launch-overhead"
        message = (
            (f"launch-overhead ({label}): " if label else "launch-overhead: ")
            + f"the device waits {format_ns(idle)} ({pct}) for the host, "
            f"{format_ns(e.launch_gaps_ns)} of it in {e.launch_gaps} short gaps between kernels: "
            "the host cannot launch kernels as fast as the device runs them"
        )
    else:
        code = label or "host-work"
        frames = [f for f in e.host_frames if f.frame != "(no host frame)"][:3]
        named = ", ".join(
            f.frame + (f" ({f.site})" if f.site else "") + f" {format_ns(f.idle_ns)}"
            for f in frames
        )
        message = f"{code}: the device waits {format_ns(idle)} ({pct}) while the host works" + (
            f" — in {named}" if named else ""
        )
        if named:
            ev["host_frames"] = named
    if e.launch_gaps or e.host_work_gaps:
        ev.update(
            launch_gaps=e.launch_gaps,
            launch_idle_ns=e.launch_gaps_ns,
            host_work_gaps=e.host_work_gaps,
            host_work_idle_ns=e.host_work_ns,
        )
    if e.host_explained_pct is not None:
        ev["host_explained_pct"] = e.host_explained_pct
    return code, message, _advice(b, "host-bound", asynchronous=asynchronous)


def _sync_said(c: _Ctx, syncs: _Syncs, *, asynchronous: bool) -> _Said:
    b, idle, pct, label, ev = c
    blocking = syncs.blocking >= 0.5
    code = "blocking-copy" if blocking else (label or "over-synchronized")
    what = "blocking copies" if blocking else "syncs"
    named = syncs.named()
    rate = (
        f"{syncs.per_step:g} " + ("in the whole trace" if syncs.whole_trace else "per step")
        if syncs.per_step
        else ""
    )
    # the sites named are the bound's, over the run's region: a whole trace's count includes
    # the warm-up's syncs, which that region leaves out
    in_region = sum(x.count for x in syncs.costs)
    if rate and syncs.whole_trace and syncs.costs and in_region < syncs.per_step:
        rate += f", {in_region} of them after warm-up,"
    opened = b.idle_ns_by_cause.sync
    waited = (
        f" and hold the host {format_ns(idle - opened)} while the device waited for it"
        if idle > opened
        else ""
    )
    message = (
        f"{code}"
        + (f" ({label})" if label and label != code else "")
        + f": {what} cost {format_ns(idle)} ({pct}) — they open {format_ns(opened)} of "
        f"device idle{waited}" + (f"; {rate}" if rate else "") + (f" at {named}" if named else "")
    )
    if blocking:
        advice = f"copies that hold the host: {_BLOCKING_ADVICE}"
    else:
        advice = _advice(b, "sync-bound", asynchronous=asynchronous)
    ev.update(_sync_evidence(syncs, b))
    return code, message, advice


def _input_said(c: _Ctx, *, asynchronous: bool) -> _Said:
    b, idle, pct, label, ev = c
    code = label or "input-wait"
    ev["data_wait_ns"] = b.evidence.data_wait_ns
    return (
        code,
        f"{code}: the device waits {format_ns(idle)} ({pct}) for data",
        _advice(b, "input-bound", asynchronous=asynchronous),
    )


def _dependency_said(c: _Ctx, *, asynchronous: bool) -> _Said:
    b, idle, pct, label, _ev = c
    code = label or "dependency-wait"
    waited = ", ".join(
        f"stream {w.stream} ({short_name(w.name, 40)}, {format_ns(w.idle_ns)})"
        for w in b.evidence.waited_on[:3]
    )
    message = f"{code}: queued work waits {format_ns(idle)} ({pct}) on other work" + (
        f" — {waited}" if waited else ""
    )
    return code, message, _advice(b, "dependency-bound", asynchronous=asynchronous)


def _unattributed_said(c: _Ctx, clocks: ReportWarning | None, *, asynchronous: bool) -> _Said:
    b, idle, pct, label, _ev = c
    if clocks is not None:
        message = (
            f"clock-mismatch ({label}): " if label else "clock-mismatch: "
        ) + f"{format_ns(idle)} ({pct}) of idle cannot be attributed: {clocks.message}"
        return "clock-mismatch", message, _CLOCK_ADVICE
    code = label or "unattributed-idle"
    message = f"{code}: {format_ns(idle)} ({pct}) of idle has no launch to explain it"
    return code, message, _advice(b, "undetermined", asynchronous=asynchronous)


def _cause_finding(
    cause: str,
    idle: int,
    bound: Bound,
    *,
    label_cause: bool,
    syncs: _Syncs,
    clocks: ReportWarning | None,
    asynchronous: bool,
) -> Finding:
    """The finding of one idle cause, costing ``idle``; ``label_cause``: the cause the label
    names."""
    region = bound.region_ns
    pct = f"{100 * idle / region:.0f}%" if region > 0 else "-"
    ev: dict[str, int | float | str] = {"idle_ns": idle, "region_ns": region}
    c: _Ctx = (bound, idle, pct, bound.label if label_cause else "", ev)
    if cause == "host":
        said = _host_said(c, asynchronous=asynchronous)
    elif cause == "sync":
        said = _sync_said(c, syncs, asynchronous=asynchronous)
    elif cause == "input":
        said = _input_said(c, asynchronous=asynchronous)
    elif cause == "dependency":
        said = _dependency_said(c, asynchronous=asynchronous)
    else:
        said = _unattributed_said(c, clocks, asynchronous=asynchronous)
    code, message, advice = said
    return Finding(
        code=code,
        cost_ns=idle,
        share=_share(idle, region),
        message=message,
        advice=advice,
        evidence=ev,
    )


_CLOCK_ADVICE: Final = (
    "the host and device clocks disagree in this trace: re-record it with one profiler "
    "session over host and device (torch.profiler with CPU and CUDA activities, or nsys), and "
    "read device figures on the device's own clock until then"
)


def _device_finding(bound: Bound, *, asynchronous: bool) -> Finding:
    b = bound
    pct = f"{100 * b.busy_ns / b.region_ns:.0f}%" if b.region_ns > 0 else "-"
    ev: dict[str, int | float | str] = {
        "busy_ns": b.busy_ns,
        "region_ns": b.region_ns,
        "idle_ns": b.idle_ns,
    }
    top = b.evidence.top_kernels
    if top:
        ev["top_kernel"] = short_name(top[0].name, 80)
        ev["top_kernel_time_ns"] = top[0].total_ns
    return Finding(
        code="device-bound",
        cost_ns=b.busy_ns,
        share=_share(b.busy_ns, b.region_ns),
        message=f"device-bound: the device is busy {pct} of the steady state "
        f"({format_ns(b.busy_ns)} of {format_ns(b.region_ns)}); the host keeps it fed",
        advice=_advice(b, "device-bound", asynchronous=asynchronous),
        evidence=ev,
    )


def _sync_findings_unmeasured(s: _Syncs, *, on_cpu: bool) -> list[Finding]:
    """The syncs of a run whose device is synchronous: what they cost is unknown here (their
    wait, next to nothing); blocking copies are a finding where they would block an
    accelerator, the syncs where the verdict's rate is over its budget (the verdict's
    ``over-synchronized``: the syncs of every kind, named as the verdict names them)."""
    out: list[Finding] = []
    for kind in ("blocking-copy", "sync"):
        if kind == "sync":
            sites = s.sites if over_sync_budget(s.per_step) else []
        else:
            sites = [x for x in s.sites if _site_kind(x.op) == kind]
        if not sites:
            continue
        count = sum(x.count for x in sites)
        per_step = s.per_step
        wait = sum(x.wait_ns for x in sites)
        would = " (each would block the host on an accelerator)" if on_cpu else ""
        if kind == "blocking-copy":
            message = f"blocking-copy: copies to the host at {_sites_text(sites)}{would}"
            advice = _BLOCKING_ADVICE
        else:
            message = (
                f"over-synchronized: {per_step:g} syncs per step at {_sites_text(sites)}{would}"
            )
            advice = (
                "keep the loss on the device (accumulate it, call .item() once per log "
                "interval) and avoid boolean-mask indexing / nonzero() in the step"
            )
        out.append(
            Finding(
                code="blocking-copy" if kind == "blocking-copy" else "over-synchronized",
                cost_ns=wait,
                share=0.0,
                message=message,
                advice=advice,
                evidence={
                    "syncs": count,
                    "syncs_per_step": round(per_step, 2),
                    "sync_wait_ns": wait,
                },
            )
        )
    return out


def _host_finding(
    code: str,
    bound: Bound | None,
    figures: Mapping[str, FigureStats | None],
    syncs: _Syncs,
    *,
    steps: int,
    data_fraction: float,
) -> Finding:
    """The headline of a run on a synchronous device or without device activity: what the
    host spends its median step on; ``data_fraction``: the verdict's share of the steps' time
    waiting for data (:func:`~asynctrace.analysis.verdict.data_wait_fraction`), which decides
    the advice as it decides the verdict's ``input-bound``."""
    region = bound.region_ns if bound is not None else 0
    step_ns = _median(figures, "frontend_ns")
    data_ns = _median(figures, "data_wait_ns")
    wait_ns = _median(figures, "sync_wait_ns")
    compute_ns = max(0.0, step_ns - data_ns - wait_ns)
    ev: dict[str, int | float | str] = {"host_ns": region, "steps": steps}
    parts: list[str] = []
    if step_ns:
        ev.update(step_ns=int(step_ns), compute_ns=int(compute_ns))
        if data_ns:
            ev["data_wait_ns"] = int(data_ns)
        parts.append(f"{format_ns(step_ns)} a step: compute {format_ns(compute_ns)}")
    if data_fraction >= 0.01:
        ev["data_wait_pct"] = round(100 * data_fraction, 1)
        parts.append(f"data wait {100 * data_fraction:.0f}% of the steps' time")
    if step_ns and wait_ns:
        parts.append(f"sync wait {format_ns(wait_ns)}")
    if syncs.sites:
        ev["sites"] = _sites_text(syncs.sites)
        ev["syncs_per_step"] = syncs.per_step
        parts.append(f"{syncs.per_step:g} sync(s) per step at {_sites_text(syncs.sites)}")
    frames = (
        [f for f in bound.evidence.host_frames if f.frame != "(no host frame)"][:3] if bound else []
    )
    if frames:
        named = ", ".join(f.frame + (f" ({f.site})" if f.site else "") for f in frames)
        ev["host_frames"] = named
        parts.append(f"in {named}")
    detail = "; ".join(parts)
    if code == "no-device-activity":
        message = (
            f"no-device-activity: the trace records no device activity — the host ran "
            f"{format_ns(region)}"
            + (f" ({detail})" if detail else "")
            + "; nothing was queued to a device"
        )
    else:
        message = (
            "cpu-synchronous: the CPU runs every op synchronously, so the step is the host's "
            "own time" + (f" — {detail}" if detail else "")
        )
    advice = _host_advice(code, data_fraction=data_fraction, syncs=bool(syncs.sites))
    return Finding(
        code=code,
        cost_ns=region,
        share=1.0 if region > 0 else 0.0,
        message=message,
        advice=advice,
        evidence=ev,
    )


def _host_advice(code: str, *, data_fraction: float, syncs: bool) -> str:
    """The next step for a host-run headline: record the device's activity (no device
    activity), else wait less for data, remove the syncs before an accelerator, or speed up the
    host's own ops."""
    if code == "no-device-activity":
        return (
            "to see what a device waits on, profile with its activity recorded "
            "(torch.profiler activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]); on a "
            "CPU-only job, speed up the host's own ops (the profiler's top ops by self time)"
        )
    if is_input_bound(data_fraction):
        return (
            "the host waits for data: raise DataLoader(num_workers=...) and prefetch "
            "(prefetch_factor)"
        )
    if syncs:
        return (
            "before moving to an accelerator, remove the syncs listed: each would block "
            "the host there (keep values on the device, read them once per log interval)"
        )
    return (
        "profile the host's step (torch.profiler, py-spy) and speed up its top ops; "
        "on an accelerator the same loop may be bound differently"
    )


_NO_STEPS: Final = Finding(
    code="undetermined",
    cost_ns=0,
    share=0.0,
    message="undetermined: no steps, nothing to judge",
    advice="mark the steps (session.steps(loader), session.step() at the end of each "
    "iteration, @session.train_step or optimizer_steps=True)",
)
_EMPTY: Final = Finding(
    code="undetermined",
    cost_ns=0,
    share=0.0,
    message="undetermined: the region is empty, nothing to judge",
    advice="record a few whole steps (device activity included)",
)


def _ranked(findings: list[Finding]) -> list[Finding]:
    """Costliest first (stable: ties keep the order they were made in); warm-up never heads
    the list while a steady-state finding costs anything."""
    out = sorted(findings, key=lambda f: -f.cost_ns)
    if len(out) > 1 and out[0].code == "warm-up" and any(f.cost_ns > 0 for f in out[1:]):
        out[0], out[1] = out[1], out[0]
    return out


def _bound_findings(
    bound: Bound,
    syncs: _Syncs,
    clocks: ReportWarning | None,
    *,
    asynchronous: bool,
    sync_cost_ns: int | None,
) -> list[Finding]:
    """The findings of a measured bound: the device's where it is device-bound, and each idle
    cause's that the label names, that costs :data:`MIN_FINDING_SHARE` of the region, or (the
    unattributed idle) where the clocks disagree."""
    out: list[Finding] = []
    region = bound.region_ns
    by = bound.idle_ns_by_cause.as_dict()
    label_cause = None if bound.label == "device-bound" else bound.evidence.leading_cause or None
    if bound.label == "device-bound":
        out.append(_device_finding(bound, asynchronous=asynchronous))
    for cause in CAUSES:
        idle = by[cause]
        if cause == "sync" and sync_cost_ns is not None:
            idle = max(idle, sync_cost_ns)
        lead = cause == label_cause
        big = idle > 0 and idle >= MIN_FINDING_SHARE * region
        clock_here = cause == "unattributed" and clocks is not None
        if lead or big or clock_here:
            out.append(
                _cause_finding(
                    cause,
                    idle,
                    bound,
                    label_cause=lead,
                    syncs=syncs,
                    clocks=clocks,
                    asynchronous=asynchronous,
                )
            )
    return out


def diagnose(
    *,
    bound: Bound | None,
    asynchronous: bool,
    has_device_activity: bool,
    trace: bool,
    steps: int,
    figures: Mapping[str, FigureStats | None],
    sync_sites: Sequence[SyncSite] = (),
    warnings: Sequence[ReportWarning] = (),
    warmup: WarmUp | None = None,
    verdict_codes: Sequence[str] = (),
    verdict_findings: Sequence[str] = (),
    whole_trace: bool = False,
    sync_cost_ns: int | None = None,
    step_records: Sequence[StepRecord] = (),
) -> list[Finding]:
    """The ranked findings of one run (pure; the module docstring has the rules).

    ``trace``: the figures are a trace's (else a session's records or its live summary);
    ``has_device_activity``: the trace holds device activity (a session: the device is
    asynchronous); ``figures``: the per-step statistics (``Report.figures``,
    ``StepAccumulator.figures()``); ``sync_sites``: the syncs made inside steps;
    ``verdict_codes``/``verdict_findings``: the verdict's (its trend findings are kept);
    ``whole_trace``: a trace without steps, judged as one; ``sync_cost_ns``: what the syncs
    cost where a timeline measured it (:func:`sync_cost_fraction`), else the bound's sync
    idle; ``step_records``: the steps the verdict judged (``Report.steps``), whose syncs per
    step and data-wait share the findings say and judge by, as the verdict does.
    """
    syncs = _syncs(bound, step_records, sync_sites, whole_trace)
    data_fraction = data_wait_fraction(step_records)
    region = bound.region_ns if bound is not None else 0
    clocks = next((w for w in warnings if w.code == "clock-mismatch"), None)
    out: list[Finding] = []
    if not steps and not trace:
        out.append(_NO_STEPS)
    elif (trace and not has_device_activity) or not asynchronous:
        code = "no-device-activity" if trace and not has_device_activity else "cpu-synchronous"
        out.append(
            _host_finding(code, bound, figures, syncs, steps=steps, data_fraction=data_fraction)
        )
        out += _sync_findings_unmeasured(syncs, on_cpu=True)
    elif bound is None or bound.region_ns <= 0:
        out.append(_NO_STEPS if not steps else _EMPTY)
    else:
        out += _bound_findings(
            bound, syncs, clocks, asynchronous=asynchronous, sync_cost_ns=sync_cost_ns
        )
    if clocks is not None and not any(f.code == "clock-mismatch" for f in out):
        out.append(
            Finding(
                code="clock-mismatch",
                cost_ns=0,
                share=0.0,
                message=f"clock-mismatch: {clocks.message}",
                advice=_CLOCK_ADVICE,
            )
        )
    if warmup is not None and warmup.span_ns > 0:
        out.append(_warmup_finding(warmup, region))
    out += _verdict_extras(verdict_codes, verdict_findings, region)
    return _ranked(out)
