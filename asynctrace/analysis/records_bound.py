"""What bounds a live session, per step and for the run, from its step records
(:func:`bound_of_records`): the trace bound's label rule and thresholds
(:mod:`asynctrace.analysis.bound`), on per-step totals instead of a timeline of gaps, so its
idle figures are estimates."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis import _bound_rule as rule
from asynctrace.analysis._bound_model import CAUSES, Bound, BoundEvidence, IdleByCause, StepBound
from asynctrace.analysis.verdict import SATURATED_IN_FLIGHT
from asynctrace.records import StepRecord

__all__ = [
    "PHASE_DOMINANT_FRACTION",
    "RECORDS_BEHIND_FRACTION",
    "RecordsBound",
    "bound_columns_of_records",
    "bound_of_records",
]

I64 = npt.NDArray[np.int64]

#: records: run-ahead at a step's end above this share of the step: the device is behind
RECORDS_BEHIND_FRACTION = 0.05


class RecordsBound(msgspec.Struct, frozen=True, kw_only=True):
    run: Bound
    steps: list[StepBound]


def _int64(v: int) -> int:
    """A sum kept within int64 (the JSON form's integers): saturated, as no real run reaches it."""
    return max(min(v, 2**63 - 1), -(2**63))


class _RecordsSums(msgspec.Struct, frozen=True):
    """Sums over a session's step records, as Python ints (the sums of a hostile file's int64
    figures must not wrap or turn to floats); busy is the region less the idle."""

    steps: int
    #: steps in which the device was behind the host
    behind: int
    region: int
    idle: IdleByCause
    sync_wait: int
    data_wait: int


_I64_MAX = np.iinfo(np.int64).max


class _RecordsColumns(msgspec.Struct, frozen=True, eq=False):
    """The step records' figures as int64 columns, and each step's estimate (see
    bound_of_records): its wall time, its idle by cause (busy is the wall time less the idle),
    and whether the device was behind the host."""

    start: I64
    wall: I64
    sync_wait: I64
    data_wait: I64
    host: I64
    sync: I64
    input: I64
    behind: npt.NDArray[np.bool_]


def _exact_sum(v: I64) -> int:
    """The sum of int64 values as a Python int, exact however large (in two 32-bit halves,
    whose int64 sums cannot wrap below 2**31 values)."""
    if not len(v):
        return 0
    return (int((v >> 32).sum()) << 32) + int((v & 0xFFFFFFFF).sum())


def _minus(a: I64, b: I64) -> I64:
    """``a - b`` for ``a >= 0``, saturated at the int64 maximum (a hostile negative ``b``)."""
    over = (b < 0) & (a > _I64_MAX + np.minimum(b, 0))
    out: I64 = np.where(over, _I64_MAX, a - np.where(over, 0, b))
    return out


def _records_columns(steps: Sequence[StepRecord], asynchronous: bool) -> _RecordsColumns:
    """Each step record's idle by cause, of its wall time, and whether the device was behind
    (the estimate bound_of_records describes), as arrays: one pass over the records to read
    their figures, then array arithmetic."""
    n = len(steps)
    fig = np.array(
        [
            (
                st.start_ns,
                st.frontend_ns,
                st.data_wait_ns,
                st.sync_wait_ns,
                0 if st.device_ns is None else st.device_ns,
                st.device_ns is not None,
                0 if st.run_ahead_ns is None else st.run_ahead_ns,
                st.run_ahead_ns is not None,
                st.in_flight,
            )
            for st in steps
        ],
        dtype=np.int64,
    ).reshape(n, 9)
    start, fe, dw, sw, dev, has_dev, ra, has_ra, flight = fig.T
    wall = np.maximum(fe, 0)
    data = np.minimum(np.maximum(dw, 0), wall)
    sync = np.minimum(np.maximum(sw, 0), wall - data)
    zero = np.zeros(n, np.int64)
    if not asynchronous:
        # the host ran every op itself: "busy" is the host's own compute, idle its waits
        return _RecordsColumns(start, wall, sw, dw, zero, sync, data, np.zeros(n, bool))
    behind_ra = (has_ra != 0) & (ra > RECORDS_BEHIND_FRACTION * wall.astype(np.float64))
    late = behind_ra | (flight >= SATURATED_IN_FLIGHT)
    # the marker window's shortfall (frontend - device), 0 without a device figure
    shortfall = np.where(has_dev != 0, np.maximum(_minus(wall, dev), 0), 0)
    # kept pace: the device waited for the host; markers cannot see how long, so the idle is
    # at least what the host spent not issuing work (data, sync), the marker window's
    # shortfall, and never below the device-bound threshold
    floor = np.ceil(rule.DEVICE_BOUND_IDLE_FRACTION * wall.astype(np.float64)).astype(np.int64)
    idle = np.minimum(wall, np.maximum(np.maximum(shortfall, data + sync), floor))
    s_part = np.minimum(idle, sync)
    i_part = np.minimum(idle - s_part, data)
    # behind: the device still had this step's work queued when the host moved on: it sets
    # the pace, and the idle is the shortfall alone
    host = np.where(late, shortfall, idle - s_part - i_part)
    return _RecordsColumns(
        start,
        wall,
        sw,
        dw,
        host,
        np.where(late, 0, s_part),
        np.where(late, 0, i_part),
        late,
    )


def _estimated_evidence(
    region: int,
    busy_ns: int,
    idle: IdleByCause,
    lead: str,
    *,
    sync_wait_ns: int,
    data_wait_ns: int,
    notes: list[str] | None = None,
) -> BoundEvidence:
    """The evidence a session's step records give (a step's or the run's): no timeline, so
    the sync cost is the estimated sync idle (``idle.sync``), as the verdict and the diagnosis
    price syncs (:func:`asynctrace.analysis.diagnosis.sync_cost_fraction`)."""
    return BoundEvidence(
        busy_pct=rule.pct(busy_ns, region),
        idle_pct_by_cause=rule.pcts(idle, region),
        leading_cause=lead,
        host_work_ns=idle.host,
        sync_wait_ns=sync_wait_ns,
        sync_wait_pct=rule.pct(sync_wait_ns, region),
        sync_cost_pct=rule.pct(idle.sync, region),
        data_wait_ns=data_wait_ns,
        estimated=True,
        notes=notes if notes is not None else [],
    )


def _record_bounds(c: _RecordsColumns, *, asynchronous: bool) -> list[StepBound]:
    """Each step record's label and figures, from its columns."""
    idle_total = c.host + c.sync + c.input
    busy = c.wall - idle_total
    by = np.stack([c.host, c.sync, c.input])  # host, sync, input: the causes a record has
    labels, lead = rule.labels_of(c.wall, busy, by, asynchronous=asynchronous)
    # what busy and each cause are of the wall time, as the rule rounds them (Python's round)
    columns = (
        c.start.tolist(),
        c.wall.tolist(),
        busy.tolist(),
        c.host.tolist(),
        c.sync.tolist(),
        c.input.tolist(),
        c.sync_wait.tolist(),
        c.data_wait.tolist(),
        labels.tolist(),
        lead.tolist(),
    )
    out: list[StepBound] = []
    for start, wall, b, h, sy, inp, sw, dw, label, lc in zip(*columns, strict=True):
        idle = IdleByCause(host=h, sync=sy, input=inp)
        evidence = BoundEvidence(
            busy_pct=rule.pct(b, wall),
            idle_pct_by_cause={
                "host": rule.pct(h, wall),
                "sync": rule.pct(sy, wall),
                "input": rule.pct(inp, wall),
                "dependency": 0.0,
                "unattributed": 0.0,
            },
            leading_cause=CAUSES[lc],
            host_work_ns=h,
            sync_wait_ns=sw,
            sync_wait_pct=rule.pct(sw, wall),
            sync_cost_pct=rule.pct(sy, wall),
            data_wait_ns=dw,
            estimated=True,
        )
        out.append(
            StepBound(
                label=rule.LABELS[label],
                share_start_ns=start,
                share_end_ns=start + wall,
                region_ns=wall,
                busy_ns=b,
                idle_ns=h + sy + inp,
                idle_ns_by_cause=idle,
                evidence=evidence,
            )
        )
    return out


def _sum_records(
    steps: Sequence[StepRecord], asynchronous: bool, per_step: bool
) -> tuple[_RecordsSums, list[StepBound]]:
    """The sums over the step records and, with ``per_step``, each step's bound."""
    c = _records_columns(steps, asynchronous)
    total = IdleByCause(host=_exact_sum(c.host), sync=_exact_sum(c.sync), input=_exact_sum(c.input))
    sums = _RecordsSums(
        len(steps),
        int(np.count_nonzero(c.behind)),
        _exact_sum(c.wall),
        total,
        _exact_sum(c.sync_wait),
        _exact_sum(c.data_wait),
    )
    return sums, _record_bounds(c, asynchronous=asynchronous) if per_step else []


def _records_run(sums: _RecordsSums, *, asynchronous: bool) -> Bound:
    """The run's label and figures from the sums over its step records."""
    t = sums.idle
    region, busy_ns = _int64(sums.region), _int64(sums.region - t.total())
    idle = IdleByCause(host=_int64(t.host), sync=_int64(t.sync), input=_int64(t.input))
    label, lead = rule.label_of(region, busy_ns, idle, asynchronous=asynchronous)
    notes = [
        "estimated from per-step totals (a live session has no per-gap timeline): "
        f"the device was behind the host in {sums.behind} of {sums.steps} step(s)"
    ]
    if not asynchronous:
        notes.append("the CPU backend is synchronous: busy is the host's own compute")
    if not sums.steps:
        label = "undetermined"
        notes = ["no steps"]
    evidence = _estimated_evidence(
        region,
        busy_ns,
        idle,
        lead,
        sync_wait_ns=_int64(sums.sync_wait),
        data_wait_ns=_int64(sums.data_wait),
        notes=notes,
    )
    whole = rule.step_bound(label, 0, region, region, busy_ns, idle, evidence)  # (from 0: not kept)
    return rule.run_bound(whole, asynchronous=asynchronous)


def bound_of_records(
    steps: Sequence[StepRecord], *, asynchronous: bool, per_step: bool = True
) -> RecordsBound:
    """The label of a live session, per step and for the run, from its step records (pure).

    A session has per-step totals, not a timeline, so its idle figures are estimates
    (``evidence.estimated``):

    * the device is **behind** in a step when its run-ahead at the step's end exceeds
      :data:`RECORDS_BEHIND_FRACTION` of the step, or
      :data:`~asynctrace.analysis.verdict.SATURATED_IN_FLIGHT` steps were in flight at its
      start: the device had queued work across the step and sets the pace; idle is only the
      marker window's shortfall (``frontend − device``, usually 0) → device-bound;
    * otherwise the device **kept pace**, so it waited for the host. How long it was idle is
      not measurable from markers (their window includes that idle); the estimate is the
      largest of the window's shortfall, the host's data and sync waits, and the device-bound
      threshold, attributed to sync (up to the sync wait), input (up to the data wait), and
      host (the rest);
    * on the CPU backend (``asynchronous=False``) ops run synchronously: the label is about the
      host — its sync and data waits are "idle", the rest is its own compute.

    Thresholds, the label rule and advice are the trace analysis's. ``per_step=False``: the
    run's figures only (``steps`` empty), for a summary of a long run that needs no per-step
    objects.
    """
    sums, per = _sum_records(steps, asynchronous, per_step)
    run = _records_run(sums, asynchronous=asynchronous)
    if any(st.phases_ns is not None for st in steps):
        run, per = _with_phases(steps, run, per)
    return RecordsBound(run=run, steps=per)


def bound_columns_of_records(
    steps: Sequence[StepRecord], *, asynchronous: bool
) -> npt.NDArray[np.int64]:
    """Each step record's figures of :func:`bound_of_records` as an ``(n, 7)`` array: its
    region (wall time), busy, and idle by cause in :data:`CAUSES` order; for views that bin
    a long session's steps (no per-step objects: 10⁶ steps in about a second)."""
    c = _records_columns(steps, asynchronous)
    zero = np.zeros(len(steps), np.int64)
    busy = c.wall - (c.host + c.sync + c.input)
    return np.stack([c.wall, busy, c.host, c.sync, c.input, zero, zero], axis=1)


#: a phase dominates a step (and its evidence says so) above this share of its host time
PHASE_DOMINANT_FRACTION = 0.5


_PHASES = ("data", "forward", "backward", "optimizer", "other")


def _phase_evidence(evidence: BoundEvidence, totals: Sequence[int]) -> BoundEvidence:
    whole = sum(totals)
    if whole <= 0:
        return evidence
    pct = {name: 100.0 * v / whole for name, v in zip(_PHASES, totals, strict=True)}
    notes = list(evidence.notes)
    lead = max(_PHASES, key=lambda n: pct[n])
    if pct[lead] > 100.0 * PHASE_DOMINANT_FRACTION:
        notes.append(f"the {lead} phase dominates: {pct[lead]:.0f}% of the host's step time")
    return msgspec.structs.replace(evidence, phases_pct=pct, notes=notes)


def _with_phases(
    steps: Sequence[StepRecord], run: Bound, per: list[StepBound]
) -> tuple[Bound, list[StepBound]]:
    """The run's and each step's evidence with the share of each phase (records with
    ``phases_ns``), and a note where one phase dominates."""
    totals = [0, 0, 0, 0, 0]
    for i, st in enumerate(steps):
        ph = st.phases_ns
        if ph is None:
            continue
        values = (ph.data, ph.forward, ph.backward, ph.optimizer, ph.other)
        for k, v in enumerate(values):
            totals[k] += v
        if per:
            b = per[i]
            per[i] = msgspec.structs.replace(b, evidence=_phase_evidence(b.evidence, values))
    run = msgspec.structs.replace(run, evidence=_phase_evidence(run.evidence, totals))
    return run, per
