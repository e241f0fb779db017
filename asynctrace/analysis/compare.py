"""Before/after: per-figure deltas between two runs, judged against step-to-step noise, and
what explains the change.

Two reports (of sessions' records, traces, or one of each) are compared figure by figure on
their per-step values. For each figure:

* ``a_median`` / ``b_median``: the median over steps (nearest-rank free: numpy's median);
* ``delta`` = b − a of the medians, ``delta_pct`` relative to a;
* **noise**: a two-sided Mann–Whitney U test on the two sets of per-step values (normal
  approximation with tie correction and continuity correction; no distribution assumed, robust
  to outlier steps). A figure **changed** when ``p < alpha`` (default 0.01) *and* the medians
  differ by at least ``min_effect`` (default 2 %) of a's median — a tiny shift that many steps
  make significant is still "same". With fewer than ``min_steps`` (default 5) steps on a side
  the figure is "too few steps" and never judged.
* lower is better for every time, count and memory figure; run-ahead has no better direction
  (more overlap, or a fuller queue) and is only reported as changed or not.

**Steps.** Each side's warm-up steps (``Report.warmup.steps``) are left out of every per-step
figure, those the report holds (a live summary longer than its window holds its last steps only).
Where both sides number their steps (a session's steps, a trace's ``ProfilerStep#N``), the
figures are taken over the step numbers both have (:class:`StepAlignment`), and the paired
per-step change of step time is given beside the test.

The run's outcome follows its **step time**: improvement, regression or same within noise; or,
when step time could not be judged, why not ("too few steps", "n/a", "not comparable").
Figures with a single value per run (a report's launch queue delay p50) get a delta and no test.

**Explain** (:class:`Explanation`): what changed, per steady step — device time per activity
name, idle per cause, host frames, sync sites, the diagnosis' headline. On a trace the step's
share of the device timeline is busy + idle, and busy is the sum of the names' ``busy_ns``
(:mod:`asynctrace.analysis.kernels`), so the kernel changes and the idle-cause changes add up to
the change of the step's share exactly: ``top`` names the few that cover most of it.

**Gate** (:class:`Gate`): whether B is a regression, for ``--fail-on regression``: by the noise
test where both sides have ``min_steps`` steady steps, else by the effect size alone (step time
up by at least ``min_effect``), said so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace.analysis._bound_model import CAUSES
from asynctrace.analysis.defaults import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, DEFAULT_MIN_STEPS
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.records_bound import bound_of_records
from asynctrace.analysis.report import Report, VerdictInfo, warmup_steps
from asynctrace.records import SessionHeader, StepRecord

__all__ = [
    "COMPARE_SCHEMA_VERSION",
    "BoundChange",
    "Comparison",
    "ExplainItem",
    "Explanation",
    "FigureDelta",
    "Gate",
    "HostDelta",
    "KernelDelta",
    "PerStep",
    "StepAlignment",
    "SyncSiteChanges",
    "SyncSiteDelta",
    "capture_differences",
    "compare",
    "compare_values",
    "explain",
    "mann_whitney_p",
]

#: 3: ``steps`` (alignment, warm-up left out), ``explain`` and ``gate``
COMPARE_SCHEMA_VERSION = 3


class FigureDelta(msgspec.Struct, frozen=True, kw_only=True):
    figure: str
    unit: str
    a_n: int
    b_n: int
    a_median: float | None
    b_median: float | None
    delta: float | None
    delta_pct: float | None
    #: two-sided Mann–Whitney U p-value; None when not tested
    p_value: float | None
    #: "improvement", "regression", "changed" (no better direction), "same",
    #: "too few steps", "n/a" (missing on a side), "single value", "not comparable"
    #: (measured differently on the two sides: sync figures of different detectors, time
    #: figures of sessions whose costly capture settings differ)
    change: str
    #: "lower", or None where neither direction is better
    better: str | None


class PerStep(msgspec.Struct, frozen=True, kw_only=True):
    """One figure per steady step on each side: its totals over those steps and their mean."""

    a_total_ns: int
    b_total_ns: int
    a_ns_per_step: float
    b_ns_per_step: float
    delta_ns_per_step: float


class KernelDelta(msgspec.Struct, frozen=True, kw_only=True):
    """One activity name's device time (its share of the busy time) per steady step."""

    name: str
    #: "kernel", "memcpy" or "memset"
    kind: str
    a_ns_per_step: float
    b_ns_per_step: float
    delta_ns_per_step: float
    #: its busy time over each side's steady steps (what the per-step figures divide)
    a_busy_ns: int
    b_busy_ns: int
    a_count: int
    b_count: int


class HostDelta(msgspec.Struct, frozen=True, kw_only=True):
    """Host time of an operator, or of a frame while the device idled, per step on each side."""

    #: "op": a top-level operator's host time on the launching thread
    #: (``Report.trace.host_ops``); "frame": a host frame that ran while the device was idle
    #: (the bound's evidence: the frames at the longest gaps of the leading idle cause)
    kind: str
    frame: str
    #: "file.py:123" for a frame where the trace had Python frames, else ""
    site: str
    a_ns_per_step: float
    b_ns_per_step: float
    delta_ns_per_step: float


class SyncSiteDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A sync site on each side: calls per step, and cost per step (``SyncCost.cost_ns`` per
    steady step where the trace measured it; the host wait per step otherwise)."""

    site: str
    op: str
    a_count: int
    b_count: int
    a_count_per_step: float
    b_count_per_step: float
    a_cost_ns_per_step: float
    b_cost_ns_per_step: float
    delta_cost_ns_per_step: float


class SyncSiteChanges(msgspec.Struct, frozen=True, kw_only=True):
    #: in B only
    added: list[SyncSiteDelta] = msgspec.field(default_factory=list)
    #: in A only
    removed: list[SyncSiteDelta] = msgspec.field(default_factory=list)
    #: on both sides, with other counts or a cost that moved by at least ``min_effect``
    changed: list[SyncSiteDelta] = msgspec.field(default_factory=list)


class BoundChange(msgspec.Struct, frozen=True, kw_only=True):
    """Each side's headline finding (``diagnosis[0]``) and bound label, and the findings (by
    code) that appeared in B or vanished from it."""

    a: Finding | None
    b: Finding | None
    a_label: str | None
    b_label: str | None
    appeared: list[str] = msgspec.field(default_factory=list)
    vanished: list[str] = msgspec.field(default_factory=list)


class ExplainItem(msgspec.Struct, frozen=True, kw_only=True):
    """One part of the step's change: a name's device time or an idle cause."""

    #: "kernel" (any activity name: kernels, copies, memsets), "idle" (a cause), "device"
    #: (a session's device time, which has no names)
    what: str
    name: str
    delta_ns_per_step: float
    #: its share of the change of the step (%), signed: a part against the change is negative
    share_pct: float
    #: where it comes from, when known: the sync site or host frame that changed most
    detail: str = ""


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """What the step's change is made of, per steady step (the module docstring)."""

    #: steady steps on each side that the per-step figures divide by
    a_steps: int
    b_steps: int
    #: the step's share of the device timeline (a trace) or its wall time (a session)
    step: PerStep
    busy: PerStep
    idle: PerStep
    #: every activity name of either side, largest change first
    kernels: list[KernelDelta] = msgspec.field(default_factory=list)
    #: cause → its idle per step (host, sync, input, dependency, unattributed)
    idle_by_cause: dict[str, PerStep] = msgspec.field(default_factory=dict)
    host: list[HostDelta] = msgspec.field(default_factory=list)
    sync_sites: SyncSiteChanges = msgspec.field(default_factory=SyncSiteChanges)
    bound: BoundChange
    #: the few parts that cover most of the step's change, largest first
    top: list[ExplainItem] = msgspec.field(default_factory=list)
    #: the share (%) of the step's change that ``top`` covers; None when the step did not change.
    #: Over 100 % where other parts went the other way: ``against`` names the largest
    covered_pct: float | None = None
    against: list[ExplainItem] = msgspec.field(default_factory=list)
    #: what the explanation could not use
    notes: list[str] = msgspec.field(default_factory=list)


class StepAlignment(msgspec.Struct, frozen=True, kw_only=True):
    """Which steps the per-step figures were taken over."""

    #: "step number" (both sides number their steps) or "none" (each side's steady steps)
    by: str
    #: warm-up steps left out on each side (``Report.warmup.steps``)
    a_warmup: int
    b_warmup: int
    #: steps compared on each side (after warm-up; with "step number", the common ones)
    a_steps: int
    b_steps: int
    #: steady steps whose number the other side lacks (left out with "step number")
    a_only: int = 0
    b_only: int = 0
    #: with "step number": the median over common steps of B's step time − A's, ms, and the
    #: share of them where B was slower
    paired_median_delta_ms: float | None = None
    paired_slower_pct: float | None = None
    #: both sides number their steps but share no number (captures of different steps): each
    #: side's steady steps were compared
    no_common: bool = False


class Gate(msgspec.Struct, frozen=True, kw_only=True):
    """Whether B is a regression: what ``--fail-on regression`` exits 1 on."""

    regression: bool
    #: "noise test", "effect size" (too few steps for the test: step time up by at least
    #: ``min_effect``) or "not judged" (no comparable step time)
    judged_by: str
    message: str


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = COMPARE_SCHEMA_VERSION
    a: str
    b: str
    #: what was compared: "records" (two sessions), "trace" (two traces) or "mixed"
    kind: str
    #: judged on step time: "improvement", "regression" or "same" (within noise); or why it was
    #: not judged: "too few steps" (fewer than ``min_steps`` on a side), "n/a" (no steps),
    #: "not comparable" (the sessions were captured with settings that cost time differently)
    outcome: str
    figures: list[FigureDelta]
    verdict_a: VerdictInfo
    verdict_b: VerdictInfo
    verdict_changed: bool
    findings_added: list[str]
    findings_removed: list[str]
    #: how noise was judged, in words
    noise: str
    alpha: float
    min_effect: float
    min_steps: int
    #: what limits the comparison (sessions whose sync detectors or costly capture settings
    #: differ, warm-up left out)
    notes: list[str] = msgspec.field(default_factory=list)
    steps: StepAlignment
    explain: Explanation
    gate: Gate


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann–Whitney U test (normal approximation, tie and continuity
    corrected; 1.0 when every value is equal)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([x, y])
    n = n1 + n2
    order = np.argsort(both, kind="stable")
    sorted_vals = both[order]
    ranks = np.empty(n, dtype=float)
    # average ranks over ties
    _, first, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    tie = float((counts.astype(float) ** 3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def compare_values(
    figure: str,
    unit: str,
    a: Sequence[float],
    b: Sequence[float],
    *,
    better: str | None = "lower",
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    min_steps: int = DEFAULT_MIN_STEPS,
) -> FigureDelta:
    """One figure's delta and judgement from its per-step values on each side."""
    if not a or not b:
        return FigureDelta(
            figure=figure,
            unit=unit,
            a_n=len(a),
            b_n=len(b),
            a_median=float(np.median(a)) if a else None,
            b_median=float(np.median(b)) if b else None,
            delta=None,
            delta_pct=None,
            p_value=None,
            change="n/a",
            better=better,
        )
    am, bm = float(np.median(a)), float(np.median(b))
    delta = bm - am
    pct = (delta / abs(am) * 100.0) if am != 0 else None
    p: float | None = None
    if len(a) < min_steps or len(b) < min_steps:
        change = "too few steps"
    else:
        p = mann_whitney_p(a, b)
        big = abs(delta) >= min_effect * abs(am) if am != 0 else delta != 0
        if p >= alpha or not big:
            change = "same"
        elif better is None:
            change = "changed"
        else:
            change = "improvement" if delta < 0 else "regression"
    return FigureDelta(
        figure=figure,
        unit=unit,
        a_n=len(a),
        b_n=len(b),
        a_median=am,
        b_median=bm,
        delta=delta,
        delta_pct=pct,
        p_value=p,
        change=change,
        better=better,
    )


def _single(figure: str, unit: str, a: float | None, b: float | None) -> FigureDelta:
    if a is None or b is None:
        return FigureDelta(
            figure=figure, unit=unit, a_n=0 if a is None else 1, b_n=0 if b is None else 1,
            a_median=a, b_median=b, delta=None, delta_pct=None, p_value=None, change="n/a",
            better="lower",
        )  # fmt: skip
    return FigureDelta(
        figure=figure,
        unit=unit,
        a_n=1,
        b_n=1,
        a_median=a,
        b_median=b,
        delta=b - a,
        delta_pct=(b - a) / abs(a) * 100.0 if a else None,
        p_value=None,
        change="single value",
        better="lower",
    )


def _noise_text(alpha: float, min_effect: float, min_steps: int) -> str:
    return (
        f"two-sided Mann-Whitney U test on per-step values (p < {alpha:g}) and a median "
        f"shift of at least {min_effect:.0%}; fewer than {min_steps} steps on a side is not judged"
    )


def _outcome(figures: Sequence[FigureDelta]) -> str:
    # a step time that was not tested is not "same": 3 steps against 3 steps that ran 80 %
    # faster must not read as no change
    return next(f for f in figures if f.figure == "step time").change


#: (figure, unit, StepRecord field, scale, better)
_STEP_FIGURES: tuple[tuple[str, str, str, float, str | None], ...] = (
    ("step time", "ms", "frontend_ns", 1e-6, "lower"),
    ("frontend", "ms", "frontend_ns", 1e-6, "lower"),
    ("device", "ms", "device_ns", 1e-6, "lower"),
    ("data wait", "ms", "data_wait_ns", 1e-6, "lower"),
    ("run-ahead", "ms", "run_ahead_ns", 1e-6, None),
    ("syncs per step", "count", "sync_count", 1.0, "lower"),
    ("sync wait", "ms", "sync_wait_ns", 1e-6, "lower"),
    ("in flight", "steps", "in_flight", 1.0, None),
    ("memory allocated", "MiB", "mem_allocated_bytes", 1.0 / (1 << 20), "lower"),
    ("memory reserved", "MiB", "mem_reserved_bytes", 1.0 / (1 << 20), "lower"),
)
#: (figure, unit, field of the trace's per-step extras or step bounds, scale, better): what
#: only a trace measures per step ("n/a" where a side is a session)
_TRACE_FIGURES: tuple[tuple[str, str, str, float, str | None], ...] = (
    ("gpu busy", "ms", "busy_ns", 1e-6, "lower"),
    ("gpu idle", "ms", "idle_ns", 1e-6, "lower"),
    ("queue max", "ops", "queue_max", 1.0, None),
)


def _values(rows: Sequence[object], field: str, scale: float) -> list[float]:
    out = []
    for r in rows:
        v = getattr(r, field)
        if v is not None:
            out.append(v * scale)
    return out


def _queue_p50_ms(r: Report) -> float | None:
    t = r.trace
    return t.launch.queue_delay_ns.p50 / 1e6 if t is not None and t.launch.matched else None


def _numbered(r: Report) -> bool:
    """Whether the step numbers are the run's own (a session's steps, ``ProfilerStep#N``), so
    that step N of one run is step N of the other."""
    return r.trace is None or r.trace.step_source == "profiler"


class _Side(msgspec.Struct, frozen=True, kw_only=True):
    """The indices of a report's steps that the per-step figures take."""

    warmup: int
    index: list[int]


def _align(a: Report, b: Report) -> tuple[_Side, _Side, StepAlignment]:
    wa, wb = warmup_steps(a), warmup_steps(b)
    ia, ib = list(range(wa, len(a.steps))), list(range(wb, len(b.steps)))
    if not (_numbered(a) and _numbered(b)):
        return (
            _Side(warmup=wa, index=ia),
            _Side(warmup=wb, index=ib),
            StepAlignment(by="none", a_warmup=wa, b_warmup=wb, a_steps=len(ia), b_steps=len(ib)),
        )
    na = {a.steps[i].step: i for i in ia}
    nb = {b.steps[i].step: i for i in ib}
    common = sorted(na.keys() & nb.keys())
    if not common:
        # two captures of different steps (a profiler schedule started elsewhere): nothing to
        # pair, so each side's steady steps, as for unnumbered steps
        return (
            _Side(warmup=wa, index=ia),
            _Side(warmup=wb, index=ib),
            StepAlignment(
                by="none", a_warmup=wa, b_warmup=wb, a_steps=len(ia), b_steps=len(ib),
                no_common=bool(ia and ib),
            ),
        )  # fmt: skip
    ca, cb = [na[n] for n in common], [nb[n] for n in common]
    paired = [b.steps[j].frontend_ns - a.steps[i].frontend_ns for i, j in zip(ca, cb, strict=True)]
    return (
        _Side(warmup=wa, index=ca),
        _Side(warmup=wb, index=cb),
        StepAlignment(
            by="step number",
            a_warmup=wa,
            b_warmup=wb,
            a_steps=len(ca),
            b_steps=len(cb),
            a_only=len(ia) - len(ca),
            b_only=len(ib) - len(cb),
            paired_median_delta_ms=float(np.median(paired)) / 1e6 if paired else None,
            paired_slower_pct=(
                100.0 * sum(d > 0 for d in paired) / len(paired) if paired else None
            ),
        ),
    )


def _pick(rows: Sequence[object], index: Sequence[int]) -> list[object]:
    return [rows[i] for i in index if i < len(rows)]


def _trace_rows(r: Report, field: str, side: _Side) -> list[object]:
    if r.trace is None:
        return []
    rows: Sequence[object] = r.step_bounds if field in ("busy_ns", "idle_ns") else r.trace.steps
    return _pick(rows, side.index)


def compare(
    a: Report,
    b: Report,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    min_steps: int = DEFAULT_MIN_STEPS,
) -> Comparison:
    """Compare two runs (pure): any two reports, of sessions or traces. On the host, steps are
    back to back, so a step's time is its frontend time; both are listed because that may
    change. What one side does not measure per step (a trace's data wait and memory, a
    session's GPU busy time) is "n/a". Warm-up steps are left out; steps are matched by number
    where both sides number them (module docstring)."""
    sa, sb, alignment = _align(a, b)
    steps_a, steps_b = _pick(a.steps, sa.index), _pick(b.steps, sb.index)
    cv = functools.partial(compare_values, alpha=alpha, min_effect=min_effect, min_steps=min_steps)
    figures = [
        cv(name, unit, _values(steps_a, f, s), _values(steps_b, f, s), better=better)
        for name, unit, f, s, better in _STEP_FIGURES
    ]
    figures[4:4] = [
        cv(
            name,
            unit,
            _values(_trace_rows(a, f, sa), f, s),
            _values(_trace_rows(b, f, sb), f, s),
            better=better,
        )
        for name, unit, f, s, better in _TRACE_FIGURES
    ]
    figures.append(_single("queue delay p50", "ms", _queue_p50_ms(a), _queue_p50_ms(b)))
    notes, figures = _capture_notes(a.source.session, b.source.session, figures)
    notes = [*_alignment_notes(alignment), *notes]
    kinds = {"records" if r.trace is None else "trace" for r in (a, b)}
    fa, fb = set(a.verdict.findings), set(b.verdict.findings)
    outcome = _outcome(figures)
    step = next(f for f in figures if f.figure == "step time")
    return Comparison(
        a=a.source.path,
        b=b.source.path,
        kind=kinds.pop() if len(kinds) == 1 else "mixed",
        outcome=outcome,
        figures=figures,
        verdict_a=a.verdict,
        verdict_b=b.verdict,
        verdict_changed=a.verdict.code != b.verdict.code,
        findings_added=sorted(fb - fa),
        findings_removed=sorted(fa - fb),
        noise=_noise_text(alpha, min_effect, min_steps),
        alpha=alpha,
        min_effect=min_effect,
        min_steps=min_steps,
        notes=notes,
        steps=alignment,
        explain=explain(a, b, min_effect=min_effect),
        gate=_gate(step, min_effect=min_effect, min_steps=min_steps),
    )


def _alignment_notes(al: StepAlignment) -> list[str]:
    out = []
    if al.a_warmup or al.b_warmup:
        out.append(
            f"warm-up left out: {al.a_warmup} step(s) of A, {al.b_warmup} of B (outside the "
            "steady state)"
        )
    if al.no_common:
        out.append(
            "the two sides number their steps but share no step number: each side's steady "
            "steps are compared, not step by step"
        )
    if al.a_only or al.b_only:
        out.append(
            f"steps matched by number: {al.a_only} step(s) only in A and {al.b_only} only in B "
            "left out"
        )
    return out


def _gate(step: FigureDelta, *, min_effect: float, min_steps: int) -> Gate:
    pct = "" if step.delta_pct is None else f" ({step.delta_pct:+.1f}%)"
    if step.change in ("improvement", "regression", "same"):
        bad = step.change == "regression"
        how = {
            "regression": f"significant (p = {step.p_value:.3g}) and at least {min_effect:.0%}",
            "improvement": f"an improvement (p = {step.p_value:.3g})",
            "same": f"the same within noise (p = {step.p_value:.3g}, min effect {min_effect:.0%})",
        }[step.change]
        return Gate(
            regression=bad,
            judged_by="noise test",
            message=f"{'regression' if bad else 'no regression'}: step time{pct}, {how}",
        )
    if step.change == "too few steps" and step.delta is not None and step.a_median is not None:
        bad = (
            step.delta > 0 and step.delta >= min_effect * abs(step.a_median)
            if step.a_median
            else step.delta > 0
        )
        return Gate(
            regression=bad,
            judged_by="effect size",
            message=(
                f"{'regression' if bad else 'no regression'}: step time{pct or ' unchanged'}, "
                f"judged on the effect size alone (min {min_effect:.0%}): {step.a_n} and "
                f"{step.b_n} steps, the noise test needs {min_steps} on each side"
            ),
        )
    why = (
        "the step times are not comparable (capture settings differ)"
        if step.change == "not comparable"
        else "no step time on one side"
    )
    return Gate(regression=False, judged_by="not judged", message=f"not judged: {why}")


# --- explain ----------------------------------------------------------------------------------


def _per_step(a_total: int, b_total: int, na: int, nb: int) -> PerStep:
    ap, bp = a_total / max(na, 1), b_total / max(nb, 1)
    return PerStep(
        a_total_ns=a_total,
        b_total_ns=b_total,
        a_ns_per_step=ap,
        b_ns_per_step=bp,
        delta_ns_per_step=bp - ap,
    )


class _Parts(msgspec.Struct, frozen=True, kw_only=True):
    """One side's steady-state totals: its step share, busy, idle per cause, steps."""

    steps: int
    region_ns: int
    busy_ns: int
    idle: dict[str, int]
    #: whether the busy time is split by activity name (a trace whose report has the table)
    named: bool


def _parts(r: Report) -> _Parts:
    w = warmup_steps(r)
    if r.trace is not None and r.step_bounds:
        shares = r.step_bounds[w:]
        idle = {c: sum(getattr(s.idle_ns_by_cause, c) for s in shares) for c in CAUSES}
        return _Parts(
            steps=len(shares),
            region_ns=sum(s.region_ns for s in shares),
            busy_ns=sum(s.busy_ns for s in shares),
            idle=idle,
            named=_named(r),
        )
    steps: list[StepRecord] = list(r.steps[w:])
    if r.trace is None and steps:
        run = bound_of_records(steps, asynchronous=r.source.asynchronous, per_step=False).run
        return _Parts(
            steps=len(steps),
            region_ns=run.region_ns,
            busy_ns=run.busy_ns,
            idle=run.idle_ns_by_cause.as_dict(),
            named=False,
        )
    b = r.bound
    return _Parts(
        steps=max(len(steps), 1),
        region_ns=b.region_ns if b is not None else 0,
        busy_ns=b.busy_ns if b is not None else 0,
        idle=b.idle_ns_by_cause.as_dict() if b is not None else dict.fromkeys(CAUSES, 0),
        named=_named(r),
    )


def _named(r: Report) -> bool:
    """Whether the report splits its busy time by name (a trace without device activity has
    nothing to split)."""
    t = r.trace
    return t is not None and (bool(t.kernels) or t.activities.total == 0)


def _kernel_deltas(a: Report, b: Report, na: int, nb: int) -> list[KernelDelta]:
    ka = {k.name: k for k in a.trace.kernels} if a.trace is not None else {}
    kb = {k.name: k for k in b.trace.kernels} if b.trace is not None else {}
    out = []
    for name in ka.keys() | kb.keys():
        x, y = ka.get(name), kb.get(name)
        ab, bb = (x.busy_ns if x else 0), (y.busy_ns if y else 0)
        ap, bp = ab / max(na, 1), bb / max(nb, 1)
        out.append(
            KernelDelta(
                name=name,
                kind=(x or y).kind,  # type: ignore[union-attr]
                a_ns_per_step=ap,
                b_ns_per_step=bp,
                delta_ns_per_step=bp - ap,
                a_busy_ns=ab,
                b_busy_ns=bb,
                a_count=x.count if x else 0,
                b_count=y.count if y else 0,
            )
        )
    out.sort(key=lambda k: (-abs(k.delta_ns_per_step), -max(k.a_busy_ns, k.b_busy_ns), k.name))
    return out


def _host_deltas(a: Report, b: Report, na: int, nb: int) -> list[HostDelta]:
    def frames(r: Report) -> dict[tuple[str, str], int]:
        if r.bound is None:
            return {}
        return {(f.frame, f.site): f.idle_ns for f in r.bound.evidence.host_frames}

    def ops(r: Report) -> dict[tuple[str, str], int]:
        return {(o.name, ""): o.total_ns for o in r.trace.host_ops} if r.trace else {}

    out = []
    for kind, table, top in (("op", ops, _TOP_HOST), ("frame", frames, _TOP_FRAMES)):
        ta, tb = table(a), table(b)
        rows = []
        for key in ta.keys() | tb.keys():
            ap, bp = ta.get(key, 0) / max(na, 1), tb.get(key, 0) / max(nb, 1)
            rows.append(
                HostDelta(
                    kind=kind,
                    frame=key[0],
                    site=key[1],
                    a_ns_per_step=ap,
                    b_ns_per_step=bp,
                    delta_ns_per_step=bp - ap,
                )
            )
        rows.sort(key=lambda h: (-abs(h.delta_ns_per_step), h.frame, h.site))
        out += rows[:top]
    return out


_TOP_FRAMES = 5
_TOP_HOST = 10


def _sync_table(r: Report) -> dict[tuple[str, str], tuple[int, float]]:
    """(site, op) → (calls, cost ns per step): where the bound measured the site, its cost
    (``SyncCost.cost_ns``, over the run's region: per steady step), else its host wait (over
    every step, as the calls are counted)."""
    cost = {}
    if r.bound is not None:
        cost = {(c.site or c.op, c.op): c.cost_ns for c in r.bound.evidence.sync_sites}
    every = max(len(r.steps), 1)
    steady = max(len(r.steps) - warmup_steps(r), 1)
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for s in r.sync_sites:
        key = (s.site, s.op)
        n, c = out.get(key, (0, 0.0))
        per_step = cost[key] / steady if key in cost else s.wait_ns / every
        out[key] = (n + s.count, c + per_step)
    return out


def _sync_changes(a: Report, b: Report, *, min_effect: float) -> SyncSiteChanges:
    # sync sites are counted over all steps of a side (warm-up included): per all its steps
    ta, tb = _sync_table(a), _sync_table(b)
    na, nb = max(len(a.steps), 1), max(len(b.steps), 1)
    added, removed, changed = [], [], []
    for key in sorted(ta.keys() | tb.keys()):
        (ca, xa), (cb, xb) = ta.get(key, (0, 0.0)), tb.get(key, (0, 0.0))
        d = SyncSiteDelta(
            site=key[0],
            op=key[1],
            a_count=ca,
            b_count=cb,
            a_count_per_step=ca / na,
            b_count_per_step=cb / nb,
            a_cost_ns_per_step=xa,
            b_cost_ns_per_step=xb,
            delta_cost_ns_per_step=xb - xa,
        )
        if key not in ta:
            added.append(d)
        elif key not in tb:
            removed.append(d)
        elif d.a_count_per_step != d.b_count_per_step or (
            d.delta_cost_ns_per_step != 0
            and abs(d.delta_cost_ns_per_step) >= min_effect * d.a_cost_ns_per_step
        ):
            changed.append(d)

    def by_size(x: SyncSiteDelta) -> tuple[float, str, str]:
        return (-abs(x.delta_cost_ns_per_step), x.site, x.op)

    return SyncSiteChanges(
        added=sorted(added, key=by_size),
        removed=sorted(removed, key=by_size),
        changed=sorted(changed, key=by_size),
    )


def _bound_change(a: Report, b: Report) -> BoundChange:
    ca = {f.code for f in a.diagnosis}
    cb = {f.code for f in b.diagnosis}
    return BoundChange(
        a=a.diagnosis[0] if a.diagnosis else None,
        b=b.diagnosis[0] if b.diagnosis else None,
        a_label=a.bound.label if a.bound is not None else None,
        b_label=b.bound.label if b.bound is not None else None,
        appeared=sorted(cb - ca),
        vanished=sorted(ca - cb),
    )


#: ``top`` stops once it covers this share of the step's change, or at this many items
_COVER = 0.8
_TOP_ITEMS = 3


def _top(
    items: list[ExplainItem], change: float
) -> tuple[list[ExplainItem], float | None, list[ExplainItem]]:
    """The few parts, in the direction of the change, that cover most of it; and the largest
    part against it, where the top parts cover more than all of it."""
    if change == 0:
        return [], None, []
    with_change = sorted(
        (i for i in items if i.delta_ns_per_step * change > 0),
        key=lambda i: -abs(i.delta_ns_per_step),
    )
    top: list[ExplainItem] = []
    covered = 0.0
    for item in with_change[:_TOP_ITEMS]:
        top.append(item)
        covered += item.delta_ns_per_step
        if covered / change >= _COVER:
            break
    against = sorted(
        (i for i in items if i.delta_ns_per_step * change < 0),
        key=lambda i: -abs(i.delta_ns_per_step),
    )[:1]
    pct = 100.0 * covered / change
    return top, pct, against if pct > 100.0 else []


def explain(a: Report, b: Report, *, min_effect: float = DEFAULT_MIN_EFFECT) -> Explanation:
    """What the change from A to B is made of, per steady step (pure; module docstring)."""
    pa, pb = _parts(a), _parts(b)
    na, nb = pa.steps, pb.steps
    kernels = _kernel_deltas(a, b, na, nb) if pa.named and pb.named else []
    idle = {c: _per_step(pa.idle[c], pb.idle[c], na, nb) for c in CAUSES}
    host = _host_deltas(a, b, na, nb)
    syncs = _sync_changes(a, b, min_effect=min_effect)
    step = _per_step(pa.region_ns, pb.region_ns, na, nb)
    notes = []
    unnamed = [(side, r) for side, r, p in (("A", a, pa), ("B", b, pb)) if not p.named]
    if unnamed:
        who = "neither side has" if len(unnamed) == 2 else f"{unnamed[0][0]} has no"
        why = sorted(
            {
                "a session's records carry no kernel names"
                if r.trace is None
                else "a report saved before it carried them has none (save it again)"
                for _, r in unnamed
            }
        )
        notes.append(f"{who} device time per kernel name: {'; '.join(why)}")
    if a.trace is None or b.trace is None:
        notes.append(
            "a session's idle by cause is estimated from its per-step totals; it has no host frames"
        )
    items: list[ExplainItem] = []
    if kernels:
        items += [
            ExplainItem(what="kernel", name=k.name, delta_ns_per_step=k.delta_ns_per_step,
                        share_pct=0.0)
            for k in kernels
        ]  # fmt: skip
    else:
        busy = _per_step(pa.busy_ns, pb.busy_ns, na, nb)
        items.append(
            ExplainItem(what="device", name="device busy", delta_ns_per_step=
                        busy.delta_ns_per_step, share_pct=0.0)
        )  # fmt: skip
    for c in CAUSES:
        items.append(
            ExplainItem(
                what="idle",
                name=f"{c} idle",
                delta_ns_per_step=idle[c].delta_ns_per_step,
                share_pct=0.0,
                detail=_cause_detail(c, syncs, host),
            )
        )
    change = step.delta_ns_per_step
    items = [
        msgspec.structs.replace(i, share_pct=100.0 * i.delta_ns_per_step / change if change else 0)
        for i in items
    ]
    top, covered, against = _top(items, change)
    return Explanation(
        a_steps=na,
        b_steps=nb,
        step=step,
        busy=_per_step(pa.busy_ns, pb.busy_ns, na, nb),
        idle=_per_step(sum(pa.idle.values()), sum(pb.idle.values()), na, nb),
        kernels=kernels,
        idle_by_cause=idle,
        host=host,
        sync_sites=syncs,
        bound=_bound_change(a, b),
        top=top,
        covered_pct=covered,
        against=against,
        notes=[n for n in notes if n],
    )


def _cause_detail(cause: str, syncs: SyncSiteChanges, host: list[HostDelta]) -> str:
    if cause == "sync":
        moved = [*syncs.added, *syncs.removed, *syncs.changed]
        if moved:
            s = max(moved, key=lambda x: abs(x.delta_cost_ns_per_step))
            how = "added" if s in syncs.added else "removed" if s in syncs.removed else "changed"
            return f"{s.op} at {s.site} {how}" if s.site != s.op else f"{s.op} {how}"
    frames = [h for h in host if h.kind == "frame" and h.delta_ns_per_step]
    if cause == "host" and frames:
        h = frames[0]
        return f"{h.frame} ({h.site})" if h.site else h.frame
    return ""


def _capture_notes(
    a: SessionHeader | None, b: SessionHeader | None, figures: list[FigureDelta]
) -> tuple[list[str], list[FigureDelta]]:
    """What limits a comparison of two sessions, and their figures marked "not comparable"
    where it does."""
    notes: list[str] = []
    if a is None or b is None:
        return notes, figures
    da, db = a.sync_detection, b.sync_detection
    if da is not None and db is not None and da != db:
        # `asynctrace check` (lint) against `asynctrace run` (auto: nothing on CPU) would read
        # as every sync removed
        notes.append(
            f"sync detection differs (A: {da}, B: {db}): their sync counts and waits are not "
            "comparable, nor a verdict that rests on them"
        )
        figures = _not_comparable(figures, _SYNC_FIGURES)
    differ = capture_differences(a, b)
    if differ:
        # the lint alone makes a step 2–5× slower on CPU: "−59 %" between a linted, profiled
        # run and a bare one is the capture's cost, not the user's change
        notes.append(
            f"capture settings that cost time differ ({'; '.join(differ)}): step times are "
            "not comparable; compare runs captured the same way"
        )
        figures = _not_comparable(figures, _TIME_FIGURES)
    return notes, figures


def _not_comparable(figures: list[FigureDelta], names: Sequence[str]) -> list[FigureDelta]:
    return [
        msgspec.structs.replace(f, change="not comparable") if f.figure in names else f
        for f in figures
    ]


_SYNC_FIGURES = ("syncs per step", "sync wait")
#: the figures a capture setting's own cost lands in
_TIME_FIGURES = ("step time", "frontend", "device", "data wait", "sync wait", "run-ahead")
#: (header field, what it is): the capture settings that cost host time
_COSTLY_SETTINGS = (
    ("sync_detection", "sync detector"),
    ("profile", "deep mode"),
    ("tensorboard", "TensorBoard"),
    ("live", "live line"),
)


def capture_differences(a: SessionHeader, b: SessionHeader) -> list[str]:
    """The capture settings that cost time and differ between two sessions (their headers),
    as ``"deep mode: A on, B off"``; a setting either file does not record is not judged."""
    out = []
    for attr, what in _COSTLY_SETTINGS:
        va, vb = getattr(a, attr), getattr(b, attr)
        if va is None or vb is None or va == vb:
            continue
        if isinstance(va, bool):
            out.append(f"{what}: A {'on' if va else 'off'}, B {'on' if vb else 'off'}")
        else:
            out.append(f"{what}: A {va}, B {vb}")
    return out
