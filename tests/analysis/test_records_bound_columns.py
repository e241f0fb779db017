"""bound_of_records over the steps' columns: the same figures as the rule in its docstring,
computed by hand for a few steps, for the per-step objects, the columns the views bin, and the
run's sums."""

from __future__ import annotations

import numpy as np

from asynctrace.analysis.records_bound import bound_columns_of_records, bound_of_records
from asynctrace.records import StepRecord

MS = 1_000_000
I64_MAX = 2**63 - 1

STEPS = [
    # kept pace: idle = max(shortfall 4, data + sync 1.5, floor 1.5) = 4 ms: sync 1, input
    # 0.5, host 2.5 → host-bound
    StepRecord(
        step=0,
        start_ns=0,
        frontend_ns=10 * MS,
        device_ns=6 * MS,
        sync_wait_ns=MS,
        data_wait_ns=MS // 2,
    ),
    # behind (run-ahead 1 ms > 5% of 10 ms): idle is the shortfall alone, 0.5 ms host
    StepRecord(step=1, start_ns=10 * MS, frontend_ns=10 * MS, device_ns=9_500_000, run_ahead_ns=MS),
    # two steps in flight, no device figure: behind, no idle → device-bound
    StepRecord(step=2, start_ns=20 * MS, frontend_ns=10 * MS, in_flight=2, sync_wait_ns=3 * MS),
    # kept pace with nothing recorded: the device-bound threshold, 15% of 10 ms, as host idle
    StepRecord(step=3, start_ns=30 * MS, frontend_ns=10 * MS),
    # a hostile step: no wall time (undetermined), a device time that would wrap
    StepRecord(
        step=4, start_ns=40 * MS, frontend_ns=-5, device_ns=-(2**63), run_ahead_ns=1, in_flight=3
    ),
]
# (label, host, sync, input) by hand
EXPECTED = [
    ("host-bound", 2_500_000, MS, MS // 2),
    ("device-bound", 500_000, 0, 0),
    ("device-bound", 0, 0, 0),
    ("host-bound", 1_500_000, 0, 0),  # exactly 15%: not below the threshold
    ("undetermined", I64_MAX, 0, 0),
]


def test_each_step_as_computed_by_hand() -> None:
    rb = bound_of_records(STEPS, asynchronous=True)
    got = [
        (b.label, b.idle_ns_by_cause.host, b.idle_ns_by_cause.sync, b.idle_ns_by_cause.input)
        for b in rb.steps
    ]
    assert got == EXPECTED
    first = rb.steps[0]
    assert (first.region_ns, first.busy_ns, first.idle_ns) == (10 * MS, 6 * MS, 4 * MS)
    assert (first.share_start_ns, first.share_end_ns) == (0, 10 * MS)
    assert first.evidence.idle_pct_by_cause == {
        "host": 25.0,
        "sync": 10.0,
        "input": 5.0,
        "dependency": 0.0,
        "unattributed": 0.0,
    }
    assert (first.evidence.busy_pct, first.evidence.sync_wait_pct) == (60.0, 10.0)
    assert first.evidence.leading_cause == "host"
    assert rb.steps[2].evidence.sync_wait_ns == 3 * MS  # as recorded, though not idle


def test_the_columns_are_the_objects_figures() -> None:
    cols = bound_columns_of_records(STEPS, asynchronous=True)
    rb = bound_of_records(STEPS, asynchronous=True)
    want = np.array(
        [
            (
                b.region_ns,
                b.busy_ns,
                b.idle_ns_by_cause.host,
                b.idle_ns_by_cause.sync,
                b.idle_ns_by_cause.input,
                0,
                0,
            )
            for b in rb.steps
        ],
        dtype=np.int64,
    )
    assert cols.tolist() == want.tolist()


def test_the_run_sums_are_exact_python_ints() -> None:
    rb = bound_of_records(STEPS, asynchronous=True, per_step=False)
    assert rb.steps == []
    run = rb.run
    # the hostile step's idle saturates the sum at the int64 maximum, never wraps
    assert run.idle_ns_by_cause.host == I64_MAX
    assert run.region_ns == 40 * MS
    assert run.idle_ns_by_cause.sync == MS
    assert run.idle_ns_by_cause.input == MS // 2
    assert run.evidence.sync_wait_ns == MS + 3 * MS
    assert "behind the host in 3 of 5 step(s)" in run.evidence.notes[0]


def test_on_the_cpu_backend_idle_is_the_host_s_waits() -> None:
    rb = bound_of_records(
        [
            StepRecord(
                step=0, start_ns=0, frontend_ns=10 * MS, sync_wait_ns=3 * MS, data_wait_ns=2 * MS
            )
        ],
        asynchronous=False,
    )
    (b,) = rb.steps
    assert (b.label, b.busy_ns) == ("sync-bound", 5 * MS)
    assert (b.idle_ns_by_cause.sync, b.idle_ns_by_cause.input, b.idle_ns_by_cause.host) == (
        3 * MS,
        2 * MS,
        0,
    )
