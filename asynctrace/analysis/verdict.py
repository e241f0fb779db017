"""The per-minibatch synchronization verdict, from a run's step records (pure; no torch).

The book's advice is to synchronize once per minibatch. :func:`judge_steps` says whether a run
did, from the figures a capture session records per step (:class:`~asynctrace.records.StepRecord`):

``never-synchronized``
    The queue runs away: over the window, in-flight steps or run-ahead grow (a significant
    Mann–Kendall trend whose Theil–Sen growth over the window is at least one step of in-flight
    work, or one median step of run-ahead), or in-flight steps sit at
    :data:`SATURATED_IN_FLIGHT` or more (the launch queue is full and the host is throttled).
``over-synchronized``
    The median step has more than ``max_syncs_per_step`` syncs **and** they cost at least
    :data:`SYNC_COST_FRACTION` of the step (``sync_cost_fraction``: the device idle they open
    plus their wait while the device waited for the host — the diagnosis's cost of a sync,
    :func:`asynctrace.analysis.diagnosis.sync_cost_fraction`; never the wait while the device
    stays busy). Cheaper
    syncs stay a finding, ``cheap-syncs`` (the book's one sync per minibatch), not the headline.
    Where the cost is unknown (the CPU lint, whose syncs would block on an accelerator) the count
    alone decides, as before.
``input-bound``
    Over the window, waiting for data takes at least :data:`INPUT_BOUND_FRACTION` of the steps'
    frontend time.
``memory-creep``
    Allocated memory at step end has a significant increasing trend growing at least
    :data:`MEM_CREEP_MIN_BYTES` and :data:`MEM_CREEP_MIN_FRACTION` of its median over the window.
``synchronized``
    None of the above on an asynchronous device: the queue stays bounded.
``cpu-synchronous``
    The device runs synchronously (CPU): nothing can run ahead. Over-sync (from the lint),
    input-bound and memory creep are still reported and take the headline when present.
``too-few-steps``
    Fewer than :data:`MIN_TREND_STEPS` steps and nothing else found: the *trend* findings
    (runaway queue, memory creep) cannot be judged. It says nothing about what bounds the run:
    the bound label (``asynctrace.analysis.bound``) needs no trend and is given for one step.
``whole-trace``
    With ``whole_trace=True`` (a trace without steps, judged as one "whole trace"): no trend,
    and counts are the trace's, never a rate per step.
``no-steps``
    No step at all: nothing to judge (a session whose steps were never marked, an empty trace).

Trends are judged on the last ``window`` steps (default :data:`WINDOW_STEPS`) by the
Mann–Kendall test (tie-corrected variance, continuity correction) at ``|Z| >=``
:data:`TREND_Z` (two-sided p < 0.01), with the Theil–Sen slope (median of pairwise slopes) for
how much — never by one sample, so one slow step or one allocator spike does not flip a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from asynctrace.analysis._quantiles import median as _median
from asynctrace.records import StepRecord, SyncSite
from asynctrace.records.units import format_ns

__all__ = [
    "INPUT_BOUND_FRACTION",
    "MAX_SYNCS_PER_STEP",
    "MEM_CREEP_MIN_BYTES",
    "MEM_CREEP_MIN_FRACTION",
    "MIN_TREND_STEPS",
    "SATURATED_IN_FLIGHT",
    "SYNC_COST_FRACTION",
    "TREND_Z",
    "WINDOW_STEPS",
    "Trend",
    "Verdict",
    "data_wait_fraction",
    "is_input_bound",
    "judge_step",
    "judge_steps",
    "over_sync_budget",
    "syncs_per_step",
    "trend",
    "verdict_line",
]

#: steps (the most recent) a verdict looks at
WINDOW_STEPS = 64
#: fewest steps (with the figure present) for a trend test
MIN_TREND_STEPS = 8
#: Mann–Kendall |Z| for a significant trend: two-sided p < 0.01
TREND_Z = 2.576
#: the book's budget: one sync per minibatch
MAX_SYNCS_PER_STEP = 1
#: data wait / frontend time at or above which a run is input-bound
INPUT_BOUND_FRACTION = 0.20
#: median in-flight steps at or above which the queue is full
SATURATED_IN_FLIGHT = 2
#: growth of allocated memory over the window below which a trend is not called creep
MEM_CREEP_MIN_BYTES = 1 << 20
MEM_CREEP_MIN_FRACTION = 0.01
#: syncs costing less than this share of the step are cheap (the bound analysis's constant)
SYNC_COST_FRACTION = 0.05

_CODES = (
    "never-synchronized",
    "over-synchronized",
    "input-bound",
    "memory-creep",
    "cheap-syncs",
)


def syncs_per_step(steps: Sequence[StepRecord], *, window: int = WINDOW_STEPS) -> float:
    """A run's syncs per step, the one rate the verdict and the diagnosis say: the median of
    ``sync_count`` over its last ``window`` steps (0.0 without steps). A whole trace judged as
    one step has the trace's count."""
    recent = steps[-window:]
    return float(_median(s.sync_count for s in recent)) if recent else 0.0


def over_sync_budget(rate: float, max_syncs_per_step: int = MAX_SYNCS_PER_STEP) -> bool:
    """Whether ``rate`` (:func:`syncs_per_step`) is over the budget of one sync per minibatch."""
    return rate > max_syncs_per_step


def data_wait_fraction(steps: Sequence[StepRecord], *, window: int = WINDOW_STEPS) -> float:
    """The share of a run's step time spent waiting for data, the one the verdict and the
    diagnosis judge by: the data wait over the frontend time, both summed over its last
    ``window`` steps (0..1; 0.0 without frontend time). A sum, not a median: 7 steps of 20
    that wait 9 ms of 10 wait 32% of the run, though the median step waits nothing."""
    recent = steps[-window:]
    frontend = sum(s.frontend_ns for s in recent)
    return min(1.0, sum(s.data_wait_ns for s in recent) / frontend) if frontend else 0.0


def is_input_bound(fraction: float, input_bound_fraction: float = INPUT_BOUND_FRACTION) -> bool:
    """Whether a data-wait share (:func:`data_wait_fraction`) makes the run input-bound."""
    return fraction > 0 and fraction >= input_bound_fraction


class Trend(msgspec.Struct, frozen=True):
    """A Mann–Kendall test and Theil–Sen slope of a series against its index."""

    n: int
    #: Mann–Kendall statistic and its normal score (continuity-corrected, tie-corrected)
    s: int
    z: float
    #: Theil–Sen slope: median of pairwise slopes, per step
    slope: float

    @property
    def increasing(self) -> bool:
        return self.z >= TREND_Z and self.slope > 0

    @property
    def growth(self) -> float:
        """Growth over the series by the robust slope: slope × (n − 1)."""
        return self.slope * (self.n - 1)


def trend(values: Sequence[float]) -> Trend:
    """Mann–Kendall + Theil–Sen for ``values`` at equally spaced steps (O(n²); n is a window)."""
    xs = [float(v) for v in values]
    n = len(xs)
    s = 0
    slopes: list[float] = []
    for i in range(n):
        vi = xs[i]
        for j in range(i + 1, n):
            d = xs[j] - vi
            s += (d > 0) - (d < 0)
            slopes.append(d / (j - i))
    counts: dict[float, int] = {}
    for v in xs:
        counts[v] = counts.get(v, 0) + 1
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in counts.values())) / 18
    # continuity correction: S moves in steps of 2, so shrink it by 1 toward 0
    z = 0.0 if var <= 0 or s == 0 else (s - 1 if s > 0 else s + 1) / math.sqrt(var)
    return Trend(n=n, s=s, z=z, slope=_median(slopes) if slopes else 0.0)


class Verdict(msgspec.Struct, frozen=True):
    #: "synchronized", "never-synchronized", "over-synchronized", "input-bound",
    #: "memory-creep", "cheap-syncs", "cpu-synchronous", "too-few-steps", "whole-trace",
    #: "no-steps"
    code: str
    message: str
    #: every finding, the headline first (a run can be input-bound and creeping at once)
    findings: tuple[str, ...] = ()
    #: the codes of every finding, in the same order
    codes: tuple[str, ...] = ()
    #: steps judged (the window)
    steps: int = 0
    #: median syncs per step in the window
    syncs_per_step: float = 0.0
    #: data wait / frontend time over the window
    data_wait_fraction: float = 0.0
    #: Theil–Sen slopes per step over the window (None where the figure is missing)
    in_flight_slope: float | None = None
    run_ahead_slope_ns: float | None = None
    mem_slope_bytes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = msgspec.structs.asdict(self)
        d["findings"] = list(self.findings)
        d["codes"] = list(self.codes)
        return d


def verdict_line(code: str, message: str) -> str:
    """``code: message``, saying the code once.

    Most messages open with their code, as written or with spaces for its hyphens
    (``"memory creep: ..."``); that opening is dropped, so a line reads
    ``memory-creep: allocated memory grows ...``, not the code twice.
    """
    for opening in (code, code.replace("-", " ")):
        if message.startswith(opening):
            return code + message[len(opening) :]
    return f"{code}: {message}"


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _fmt_sites(sites: Sequence[SyncSite], limit: int = 3) -> str:
    if not sites:
        return "unrecorded sites"
    ranked = sorted(sites, key=lambda s: (-s.count, s.site))
    shown = ", ".join(f"{s.site} ({s.op} ×{s.count})" for s in ranked[:limit])
    if len(ranked) > limit:
        shown += f" and {len(ranked) - limit} more"
    return shown


def judge_step(
    step: StepRecord,
    *,
    max_syncs_per_step: int = MAX_SYNCS_PER_STEP,
    input_bound_fraction: float = INPUT_BOUND_FRACTION,
) -> tuple[str, ...]:
    """The codes one step earns on its own: "over-synchronized", "input-bound", or none.

    Growth (runaway queue, memory creep) needs many steps: see :func:`judge_steps`.
    """
    codes: list[str] = []
    if over_sync_budget(step.sync_count, max_syncs_per_step):
        codes.append("over-synchronized")
    if is_input_bound(data_wait_fraction((step,)), input_bound_fraction):
        codes.append("input-bound")
    return tuple(codes)


def judge_steps(
    steps: Sequence[StepRecord],
    *,
    asynchronous: bool,
    sync_sites: Sequence[SyncSite] = (),
    window: int = WINDOW_STEPS,
    max_syncs_per_step: int = MAX_SYNCS_PER_STEP,
    input_bound_fraction: float = INPUT_BOUND_FRACTION,
    sync_cost_fraction: float | None = None,
    whole_trace: bool = False,
) -> Verdict:
    """Judge a run from its step records (pure); thresholds are the module's constants.

    ``sync_cost_fraction``: what the syncs cost as a share of the step (None: unknown, the
    count alone decides). ``whole_trace``: the one "step" is a whole trace without steps.
    """
    if window < MIN_TREND_STEPS:
        raise ValueError(f"window must be at least {MIN_TREND_STEPS} steps, got {window}")
    recent = list(steps[-window:])
    n = len(recent)
    if not n:
        # before the backend's own code: a CPU run without steps is not "cpu-synchronous"
        return _NO_STEPS
    found: dict[str, str] = {}

    rate = syncs_per_step(recent)
    data_fraction = data_wait_fraction(recent)

    in_flight: Trend | None = None
    run_ahead: Trend | None = None
    if asynchronous and n >= MIN_TREND_STEPS and not whole_trace:
        in_flight, run_ahead, runaway = _runaway_queue(recent)
        if runaway is not None:
            found["never-synchronized"] = runaway

    if over_sync_budget(rate, max_syncs_per_step):
        code, finding = _too_many_syncs(
            rate,
            sync_sites,
            asynchronous=asynchronous,
            sync_cost_fraction=sync_cost_fraction,
            whole_trace=whole_trace,
        )
        found[code] = finding

    if is_input_bound(data_fraction, input_bound_fraction):
        found["input-bound"] = f"input-bound: waiting for data {data_fraction:.0%} of the step"

    mem_trend, creep = _memory_creep(recent)
    if creep is not None:
        found["memory-creep"] = creep

    codes = [c for c in _CODES if c in found]
    findings = [found[c] for c in codes]
    _add_headline(
        codes,
        findings,
        asynchronous=asynchronous,
        whole_trace=whole_trace,
        steps=n,
        syncs_per_step=rate,
    )
    return Verdict(
        code=codes[0],
        message=findings[0],
        findings=tuple(findings),
        codes=tuple(codes),
        steps=n,
        syncs_per_step=rate,
        data_wait_fraction=data_fraction,
        in_flight_slope=in_flight.slope if in_flight is not None else None,
        run_ahead_slope_ns=run_ahead.slope if run_ahead is not None else None,
        mem_slope_bytes=mem_trend.slope if mem_trend is not None else None,
    )


_NO_STEPS = Verdict(
    code="no-steps",
    message="no steps: nothing to judge",
    findings=("no steps: nothing to judge",),
    codes=("no-steps",),
    steps=0,
    syncs_per_step=0.0,
    data_wait_fraction=0.0,
    in_flight_slope=None,
    run_ahead_slope_ns=None,
    mem_slope_bytes=None,
)


def _runaway_queue(recent: Sequence[StepRecord]) -> tuple[Trend, Trend | None, str | None]:
    """The in-flight and run-ahead trends of at least :data:`MIN_TREND_STEPS` steps of an
    asynchronous device, and the ``never-synchronized`` finding where the queue runs away."""
    n = len(recent)
    in_flight = trend([float(s.in_flight) for s in recent])
    ra = [float(s.run_ahead_ns) for s in recent if s.run_ahead_ns is not None]
    run_ahead = trend(ra) if len(ra) >= MIN_TREND_STEPS else None
    step_ns = _median(s.frontend_ns for s in recent)
    in_flight_median = _median(s.in_flight for s in recent)
    grows_in_flight = in_flight.increasing and in_flight.growth >= 1
    grows_run_ahead = run_ahead is not None and run_ahead.increasing and run_ahead.growth >= step_ns
    if not (grows_in_flight or grows_run_ahead or in_flight_median >= SATURATED_IN_FLIGHT):
        return in_flight, run_ahead, None
    first, last = recent[0], recent[-1]
    detail = f"in flight {first.in_flight} → {last.in_flight} steps"
    if first.run_ahead_ns is not None and last.run_ahead_ns is not None:
        detail += f", run-ahead {format_ns(first.run_ahead_ns)} → {format_ns(last.run_ahead_ns)}"
    return (
        in_flight,
        run_ahead,
        "never synchronized: in-flight steps, run-ahead and memory grow — "
        f"sync once per minibatch ({detail} over the last {n} steps)",
    )


def _too_many_syncs(
    syncs_per_step: float,
    sync_sites: Sequence[SyncSite],
    *,
    asynchronous: bool,
    sync_cost_fraction: float | None,
    whole_trace: bool,
) -> tuple[str, str]:
    """(code, finding) of more syncs per step than the budget: ``over-synchronized`` where they
    cost at least :data:`SYNC_COST_FRACTION` of the step or their cost is unknown, else
    ``cheap-syncs``."""
    would = "" if asynchronous else " (each would block the host on an accelerator)"
    rate = "in the whole trace" if whole_trace else "per step"
    unit = "the trace" if whole_trace else "the step"
    if sync_cost_fraction is None or sync_cost_fraction >= SYNC_COST_FRACTION:
        cost = "" if sync_cost_fraction is None else f", costing {sync_cost_fraction:.0%} of {unit}"
        return (
            "over-synchronized",
            f"over-synchronized: {syncs_per_step:g} syncs {rate} at "
            f"{_fmt_sites(sync_sites)}{would}{cost}",
        )
    return (
        "cheap-syncs",
        f"cheap syncs: {syncs_per_step:g} syncs {rate} at {_fmt_sites(sync_sites)} "
        f"cost little ({sync_cost_fraction:.1%} of {unit}, under "
        f"{SYNC_COST_FRACTION:.0%}); the book's advice is still one per minibatch",
    )


def _memory_creep(recent: Sequence[StepRecord]) -> tuple[Trend | None, str | None]:
    """The trend of allocated memory (None with fewer than :data:`MIN_TREND_STEPS` values),
    and the ``memory-creep`` finding where it grows by enough."""
    mem = [float(s.mem_allocated_bytes) for s in recent if s.mem_allocated_bytes is not None]
    mem_trend = trend(mem) if len(mem) >= MIN_TREND_STEPS else None
    if (
        mem_trend is None
        or not mem_trend.increasing
        or mem_trend.growth < max(MEM_CREEP_MIN_BYTES, MEM_CREEP_MIN_FRACTION * _median(mem))
    ):
        return mem_trend, None
    return mem_trend, (
        "memory creep: allocated memory grows step over step "
        f"(+{_fmt_bytes(mem_trend.growth)} over the last {len(mem)} steps, "
        f"{_fmt_bytes(mem_trend.slope)}/step)"
    )


def _add_headline(
    codes: list[str],
    findings: list[str],
    *,
    asynchronous: bool,
    whole_trace: bool,
    steps: int,
    syncs_per_step: float,
) -> None:
    """Append the code that says what the findings cannot: the device runs synchronously
    (always said on CPU), or, with nothing found but cheap syncs, why nothing was (a whole
    trace, too few steps for a trend) or that the queue stays bounded."""
    if not asynchronous:
        codes.append("cpu-synchronous")
        findings.append(
            "the CPU backend executes synchronously: device time equals frontend time, "
            "nothing runs ahead"
        )
    elif codes and codes != ["cheap-syncs"]:
        return
    elif whole_trace:
        codes.append("whole-trace")
        findings.append(
            "whole trace, no steps: no per-step rates or trends (runaway queue, memory "
            "creep) to judge; the bound label says what limits it"
        )
    elif steps < MIN_TREND_STEPS:
        codes.append("too-few-steps")
        findings.append(
            f"too few steps: {steps}, fewer than the {MIN_TREND_STEPS} a trend needs (runaway "
            "queue, memory creep); the bound label needs none"
        )
    elif codes:
        pass  # cheap syncs: the queue is bounded by them, and the finding says so
    elif syncs_per_step >= 1:
        codes.append("synchronized")
        findings.append("synchronized once per step (bounded queue)")
    else:
        codes.append("synchronized")
        findings.append(
            "bounded queue: in-flight steps and run-ahead stay flat, though no sync was "
            "seen (sync detection off, or something else bounds the queue)"
        )
