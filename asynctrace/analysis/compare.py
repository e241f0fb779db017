"""Before/after: per-figure deltas between two runs, judged against step-to-step noise.

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

The run's outcome follows its **step time**: improvement, regression or same within noise; or,
when step time could not be judged, why not ("too few steps", "n/a").
Figures with a single value per run (a report's launch queue delay p50) get a delta and no test.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace.analysis.report import Report, VerdictInfo
from asynctrace.records import SessionHeader

__all__ = [
    "COMPARE_SCHEMA_VERSION",
    "Comparison",
    "FigureDelta",
    "capture_differences",
    "compare",
    "compare_values",
    "mann_whitney_p",
]

COMPARE_SCHEMA_VERSION = 2


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
    #: differ)
    notes: list[str] = msgspec.field(default_factory=list)


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
    alpha: float = 0.01,
    min_effect: float = 0.02,
    min_steps: int = 5,
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


def _build(
    a_name: str,
    b_name: str,
    kind: str,
    figures: list[FigureDelta],
    va: VerdictInfo,
    vb: VerdictInfo,
    *,
    alpha: float,
    min_effect: float,
    min_steps: int,
    notes: Sequence[str] = (),
) -> Comparison:
    fa, fb = set(va.findings), set(vb.findings)
    return Comparison(
        a=a_name,
        b=b_name,
        kind=kind,
        outcome=_outcome(figures),
        figures=figures,
        verdict_a=va,
        verdict_b=vb,
        verdict_changed=va.code != vb.code,
        findings_added=sorted(fb - fa),
        findings_removed=sorted(fa - fb),
        noise=_noise_text(alpha, min_effect, min_steps),
        alpha=alpha,
        min_effect=min_effect,
        min_steps=min_steps,
        notes=list(notes),
    )


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


def _trace_rows(r: Report, field: str) -> Sequence[object]:
    if r.trace is None:
        return ()
    return r.step_bounds if field in ("busy_ns", "idle_ns") else r.trace.steps


def _queue_p50_ms(r: Report) -> float | None:
    t = r.trace
    return t.launch.queue_delay_ns.p50 / 1e6 if t is not None and t.launch.matched else None


def compare(
    a: Report,
    b: Report,
    *,
    alpha: float = 0.01,
    min_effect: float = 0.02,
    min_steps: int = 5,
) -> Comparison:
    """Compare two runs (pure): any two reports, of sessions or traces. On the host, steps are
    back to back, so a step's time is its frontend time; both are listed because that may
    change. What one side does not measure per step (a trace's data wait and memory, a
    session's GPU busy time) is "n/a"."""
    cv = functools.partial(compare_values, alpha=alpha, min_effect=min_effect, min_steps=min_steps)
    figures = [
        cv(name, unit, _values(a.steps, f, s), _values(b.steps, f, s), better=better)
        for name, unit, f, s, better in _STEP_FIGURES
    ]
    figures[4:4] = [
        cv(
            name,
            unit,
            _values(_trace_rows(a, f), f, s),
            _values(_trace_rows(b, f), f, s),
            better=better,
        )
        for name, unit, f, s, better in _TRACE_FIGURES
    ]
    figures.append(_single("queue delay p50", "ms", _queue_p50_ms(a), _queue_p50_ms(b)))
    notes, figures = _capture_notes(a.source.session, b.source.session, figures)
    kinds = {"records" if r.trace is None else "trace" for r in (a, b)}
    return _build(
        a.source.path,
        b.source.path,
        kinds.pop() if len(kinds) == 1 else "mixed",
        figures,
        a.verdict,
        b.verdict,
        alpha=alpha,
        min_effect=min_effect,
        min_steps=min_steps,
        notes=notes,
    )


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
