"""Input checks: where the trace itself says its figures cannot be trusted.

A pure function over the trace and its launch links (:func:`check_trust`), run before the
analyses; what it finds becomes a ``warnings`` entry of its own code, and the figures it makes
wrong are withheld (docs/reliability.md lists each case):

* ``negative-duration``: device activities the loader read with a negative duration (kept at
  their start with no length): where they are :data:`UNTRUSTED_ACTIVITY_FRACTION` or more of
  the activities, the device's busy time is unknown, so the bound label is withheld;
* ``implausible-duration``: a device activity longer than :data:`IMPLAUSIBLE_SPAN_FACTOR`
  times the host's whole span (and than :data:`IMPLAUSIBLE_MIN_NS`): the label and the
  figures that compare the clocks (run-ahead, in flight) are withheld;
* ``shared-correlation``: distinct launch calls of one process share a correlation id, so which
  launched an activity of that id cannot be told: those activities are left unmatched (no
  step, no queue delay, the idle they end unattributed) rather than all given to the first.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis._bound_model import Bound, ReportWarning, StepBound
from asynctrace.analysis.launches import LAUNCHING_KINDS, LaunchLinks
from asynctrace.analysis.steps import host_span
from asynctrace.traces.model import RuntimeKind, Trace

__all__ = [
    "IMPLAUSIBLE_MIN_NS",
    "IMPLAUSIBLE_SPAN_FACTOR",
    "UNTRUSTED_ACTIVITY_FRACTION",
    "Trust",
    "check_trust",
]

#: negative durations on this share of the activities or more: the busy time is unknown
UNTRUSTED_ACTIVITY_FRACTION = 0.01
#: an activity longer than this many times the host's span ...
IMPLAUSIBLE_SPAN_FACTOR = 10
#: ... and longer than this (a short trace's long kernel is plausible) cannot be real
IMPLAUSIBLE_MIN_NS = 60 * 1_000_000_000

_NEGATIVE = "activity_negative_duration_clamped"


class Trust(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """What the checks found, and what the analyses must withhold."""

    warnings: list[ReportWarning]
    #: the launch links to analyse with (ambiguous activities unmatched)
    links: LaunchLinks
    #: why the bound label is withheld; None where it is not
    label_withheld: str | None = None
    #: the clocks' comparison (run-ahead, in flight) is withheld
    run_ahead_withheld: bool = False

    def bound(self, run: Bound) -> Bound:
        """The run's bound, its label withheld where it must be."""
        if self.label_withheld is None:
            return run
        evidence = msgspec.structs.replace(
            run.evidence, notes=[*run.evidence.notes, self.label_withheld]
        )
        return msgspec.structs.replace(
            run, label="undetermined", evidence=evidence, advice=[self.label_withheld]
        )

    def step_bounds(self, steps: list[StepBound]) -> list[StepBound]:
        if self.label_withheld is None:
            return steps
        return [msgspec.structs.replace(s, label="undetermined") for s in steps]


def check_trust(trace: Trace, links: LaunchLinks) -> Trust:
    """The input checks of the module docstring (pure)."""
    warnings: list[ReportWarning] = []
    reasons: list[str] = []
    n_act = len(trace.activities)
    negative = int(trace.skipped.get(_NEGATIVE, 0))
    if negative:
        share = negative / max(n_act, 1)
        withheld = share >= UNTRUSTED_ACTIVITY_FRACTION
        warnings.append(
            ReportWarning(
                code="negative-duration",
                message=(
                    f"{negative} of {n_act} device activities have a negative duration (read as "
                    "0 at their start): the device's busy time is unknown for them"
                    + ("; the bound label is withheld" if withheld else "")
                ),
            )
        )
        if withheld:
            reasons.append(
                f"bound label withheld: {negative} of {n_act} device activities have a negative "
                "duration, so the device's busy and idle time are unknown"
            )
    run_ahead = False
    long = _implausible(trace)
    if long is not None:
        count, longest = long
        warnings.append(
            ReportWarning(
                code="implausible-duration",
                message=(
                    f"{count} device activit{'y lasts' if count == 1 else 'ies last'} longer "
                    f"than {IMPLAUSIBLE_SPAN_FACTOR}× the host's whole span (longest "
                    f"{longest:.3g} ns): a corrupt duration; the bound label, run-ahead and "
                    "in-flight figures are withheld"
                ),
            )
        )
        reasons.append(
            f"bound label withheld: a device activity lasts {longest:.3g} ns, longer than "
            f"{IMPLAUSIBLE_SPAN_FACTOR}× the host's whole span (a corrupt duration)"
        )
        run_ahead = True
    links, shared = _unshared(trace, links)
    if shared is not None:
        warnings.append(shared)
    return Trust(
        warnings=warnings,
        links=links,
        label_withheld="; ".join(reasons) if reasons else None,
        run_ahead_withheld=run_ahead,
    )


def _implausible(trace: Trace) -> tuple[int, int] | None:
    """(how many, the longest) device activities too long to be real, or None."""
    act = trace.activities
    # most traces stop here: no activity longer than the shortest limit
    if not len(act) or int(act.dur_ns.max()) <= IMPLAUSIBLE_MIN_NS:
        return None
    # the host's span; a trace of device activity alone spans them, and none is then longer
    # than the limit (a factor of at least 1)
    span = host_span(trace)
    if span is None:
        return None
    limit = max(IMPLAUSIBLE_SPAN_FACTOR * (span[1] - span[0]), IMPLAUSIBLE_MIN_NS)
    long = act.dur_ns > limit
    if not long.any():
        return None
    return int(np.count_nonzero(long)), int(act.dur_ns[long].max())


def _unshared(trace: Trace, links: LaunchLinks) -> tuple[LaunchLinks, ReportWarning | None]:
    """The links with the activities of a correlation id that several distinct launch calls of
    one process share left unmatched, and a warning naming the largest such group. Calls that
    overlap on one thread are one call written twice (some exports nest them); a graph launch
    is one call for all its kernels."""
    rt = trace.runtime
    launching = np.zeros(256, dtype=bool)
    launching[[int(k) for k in LAUNCHING_KINDS if k != RuntimeKind.GRAPH_LAUNCH]] = True
    rows = np.flatnonzero(launching[rt.kind] & (rt.correlation >= 0))
    if len(rows) < 2:
        return links, None
    ids = rt.correlation[rows]
    top = int(ids.max())
    if top < 8 * len(ids):
        repeated = bool((np.bincount(ids, minlength=top + 1) > 1).any())
    else:
        s = np.sort(ids)
        repeated = bool((s[1:] == s[:-1]).any())
    if not repeated:
        return links, None  # no id on two calls: the usual case
    pid, tid, corr = rt.pid[rows], rt.tid[rows], rt.correlation[rows]
    start, end = rt.start_ns[rows], rt.start_ns[rows] + rt.dur_ns[rows]
    order = np.lexsort((start, tid, corr, pid))
    p, t, c, s, e = pid[order], tid[order], corr[order], start[order], end[order]
    same_key = (p[1:] == p[:-1]) & (c[1:] == c[:-1])
    if not same_key.any():
        return links, None
    # a second call of the key: not nested in (overlapping) the previous one on its thread
    distinct = same_key & ~((t[1:] == t[:-1]) & (s[1:] < e[:-1]))
    if not distinct.any():
        return links, None
    bad_rows = np.unique(np.r_[order[1:][distinct], order[:-1][distinct]])
    bad_keys = np.unique(np.stack([pid[bad_rows], corr[bad_rows]], axis=1), axis=0)
    li = links.launch_index
    hit = li >= 0
    safe = np.where(hit, li, 0)
    a_key = np.stack([rt.pid[safe], rt.correlation[safe]], axis=1)
    ambiguous = hit & _rows_in(a_key, bad_keys)
    n_calls = len(bad_rows)
    counts: dict[tuple[int, int], int] = {}
    for r in bad_rows.tolist():
        k = (int(rt.pid[rows[r]]), int(rt.correlation[rows[r]]))
        counts[k] = counts.get(k, 0) + 1
    (worst_pid, worst_corr), worst = max(counts.items(), key=lambda kv: (kv[1], -kv[0][1]))
    warning = ReportWarning(
        code="shared-correlation",
        message=(
            f"{n_calls} distinct launch calls share {len(counts)} correlation id(s) within "
            f"their process (most: {worst} calls of id {worst_corr} in process {worst_pid}): "
            f"which launched each of their {int(np.count_nonzero(ambiguous))} activities "
            "cannot be told, so they are left unmatched (no step, no queue delay, the idle "
            "they end unattributed)"
        ),
    )
    if not ambiguous.any():
        return links, warning
    return (
        LaunchLinks(
            np.where(ambiguous, -1, li).astype(np.int64),
            np.where(ambiguous, 0, links.launch_start_ns).astype(np.int64),
            np.where(ambiguous, 0, links.launch_end_ns).astype(np.int64),
        ),
        warning,
    )


def _rows_in(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Per row of ``a`` (n, 2): whether it is a row of ``b`` (m, 2)."""
    both = np.concatenate([a, b])
    _u, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    out: npt.NDArray[np.bool_] = np.isin(inv[: len(a)], inv[len(a) :])
    return out
