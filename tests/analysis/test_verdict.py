"""The verdict: hand-built step records with known answers, and a scripted fake device."""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec
import numpy as np
import pytest
import torch

import asynctrace
from asynctrace.analysis.report import Report
from asynctrace.analysis.verdict import (
    MEM_CREEP_MIN_BYTES,
    TREND_Z,
    Verdict,
    judge_step,
    judge_steps,
    trend,
    verdict_line,
)
from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.records import StepRecord, SyncSite

MS = 1_000_000


def steps(
    n: int,
    *,
    frontend_ns: int = 10 * MS,
    data_wait_ns: Callable[[int], int] = lambda i: 0,
    in_flight: Callable[[int], int] = lambda i: 0,
    run_ahead_ns: Callable[[int], int | None] = lambda i: MS // 10,
    sync_count: Callable[[int], int] = lambda i: 1,
    mem: Callable[[int], int | None] = lambda i: None,
) -> list[StepRecord]:
    return [
        StepRecord(
            step=i,
            start_ns=i * frontend_ns,
            frontend_ns=frontend_ns,
            data_wait_ns=data_wait_ns(i),
            device_ns=frontend_ns,
            run_ahead_ns=run_ahead_ns(i),
            in_flight=in_flight(i),
            sync_count=sync_count(i),
            mem_allocated_bytes=mem(i),
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------ the trend test


def test_trend_of_a_straight_line() -> None:
    t = trend([float(i) for i in range(10)])
    # every pair increases: S = C(10, 2); var = n(n-1)(2n+5)/18 = 125 with no ties
    assert t.s == 45
    assert t.z == pytest.approx(44 / math.sqrt(125))
    assert t.slope == 1.0
    assert t.growth == 9.0
    assert t.increasing


def test_trend_ties_and_flat() -> None:
    assert trend([3.0] * 12).z == 0.0
    t = trend([0.0, 0.0, 1.0, 1.0])
    # S = 4 concordant pairs; ties: two groups of 2 -> var = (4*3*13 - 2*2*1*9)/18 = 6.667
    assert t.s == 4
    assert t.z == pytest.approx(3 / math.sqrt((4 * 3 * 13 - 2 * 2 * 1 * 9) / 18))


def test_theil_sen_shrugs_off_one_outlier() -> None:
    rng = np.random.default_rng(0)
    values = list(rng.normal(100.0, 1.0, size=40))
    values[20] = 10_000.0
    t = trend(values)
    i, j = np.triu_indices(len(values), k=1)
    v = np.array(values)
    assert t.slope == pytest.approx(float(np.median((v[j] - v[i]) / (j - i))))
    assert abs(t.slope) < 0.2
    assert not t.increasing


# ------------------------------------------------------------------------------ verdicts


def test_synchronized_loop_is_not_flagged() -> None:
    rng = np.random.default_rng(1)
    noise = rng.integers(0, MS // 20, size=64)
    v = judge_steps(steps(64, run_ahead_ns=lambda i: int(noise[i])), asynchronous=True)
    assert (v.code, v.message) == ("synchronized", "synchronized once per step (bounded queue)")
    assert v.findings == ("synchronized once per step (bounded queue)",)
    assert v.syncs_per_step == 1.0


def test_bounded_without_any_seen_sync_says_so() -> None:
    v = judge_steps(steps(20, sync_count=lambda i: 0), asynchronous=True)
    assert v.code == "synchronized"
    assert v.message.startswith("bounded queue:")


def test_runaway_queue() -> None:
    v = judge_steps(
        steps(
            30,
            in_flight=lambda i: i // 3,
            run_ahead_ns=lambda i: 2 * MS * i,
            sync_count=lambda i: 0,
        ),
        asynchronous=True,
    )
    assert v.code == "never-synchronized"
    assert v.message.startswith(
        "never synchronized: in-flight steps, run-ahead and memory grow — sync once per minibatch"
    )
    assert "in flight 0 → 9 steps, run-ahead 0 ns → 58.0 ms over the last 30 steps" in v.message
    assert v.run_ahead_slope_ns == 2 * MS


def test_a_full_queue_is_runaway_even_when_flat() -> None:
    v = judge_steps(steps(20, in_flight=lambda i: 3, sync_count=lambda i: 0), asynchronous=True)
    assert v.code == "never-synchronized"


def test_one_late_spike_is_not_a_trend() -> None:
    v = judge_steps(
        steps(40, run_ahead_ns=lambda i: 50 * MS if i == 39 else MS // 10), asynchronous=True
    )
    assert v.code == "synchronized"


def test_over_synchronized_names_the_sites() -> None:
    sites = [
        SyncSite(site="train.py:12", op="aten::_local_scalar_dense", count=100, steps=100),
        SyncSite(site="train.py:30", op="Tensor.__repr__", count=100, steps=100),
        SyncSite(site="train.py:31", op="aten::nonzero", count=100, steps=100),
        SyncSite(site="train.py:40", op="aten::equal", count=2, steps=2),
    ]
    v = judge_steps(steps(100, sync_count=lambda i: 3), asynchronous=True, sync_sites=sites)
    assert v.code == "over-synchronized"
    assert v.message == (
        "over-synchronized: 3 syncs per step at train.py:12 (aten::_local_scalar_dense ×100), "
        "train.py:30 (Tensor.__repr__ ×100), train.py:31 (aten::nonzero ×100) and 1 more"
    )
    assert judge_steps(
        steps(100, sync_count=lambda i: 3), asynchronous=True, max_syncs_per_step=3
    ).code == ("synchronized")


def test_a_rare_extra_sync_is_not_over_synchronization() -> None:
    # a print every 10 steps on top of one loss.item(): the median step has one sync
    v = judge_steps(steps(50, sync_count=lambda i: 2 if i % 10 == 0 else 1), asynchronous=True)
    assert v.code == "synchronized"


def test_input_bound() -> None:
    v = judge_steps(steps(20, data_wait_ns=lambda i: 3 * MS), asynchronous=True)
    assert (v.code, v.message) == ("input-bound", "input-bound: waiting for data 30% of the step")
    assert v.data_wait_fraction == pytest.approx(0.3)
    assert judge_steps(steps(20, data_wait_ns=lambda i: MS), asynchronous=True).code == (
        "synchronized"
    )


def test_memory_creep_and_flat_memory() -> None:
    base = 1 << 30
    v = judge_steps(steps(64, mem=lambda i: base + i * (2 << 20)), asynchronous=True)
    assert v.code == "memory-creep"
    assert v.message == (
        "memory creep: allocated memory grows step over step "
        "(+126.0 MiB over the last 64 steps, 2.0 MiB/step)"
    )
    rng = np.random.default_rng(2)
    jitter = rng.integers(-(1 << 20), 1 << 20, size=64)
    assert judge_steps(steps(64, mem=lambda i: base + int(jitter[i])), asynchronous=True).code == (
        "synchronized"
    )
    # a significant but tiny trend (a few KiB over the window) is not creep
    tiny = judge_steps(steps(64, mem=lambda i: base + 64 * i), asynchronous=True)
    assert tiny.code == "synchronized"
    assert MEM_CREEP_MIN_BYTES > 64 * 63


def test_findings_list_every_problem_headline_first() -> None:
    v = judge_steps(
        steps(
            40,
            data_wait_ns=lambda i: 5 * MS,
            sync_count=lambda i: 4,
            mem=lambda i: i * (4 << 20),
        ),
        asynchronous=True,
    )
    assert v.codes == ("over-synchronized", "input-bound", "memory-creep")
    assert v.code == "over-synchronized"
    assert v.findings[0] == v.message
    assert len(v.findings) == 3


def test_cpu_is_synchronous_but_still_reports_what_the_figures_show() -> None:
    cpu_note = (
        "the CPU backend executes synchronously: device time equals frontend time, "
        "nothing runs ahead"
    )
    v = judge_steps(steps(20, run_ahead_ns=lambda i: 0), asynchronous=False)
    assert (v.code, v.findings) == ("cpu-synchronous", (cpu_note,))
    sites = [SyncSite(site="t.py:3", op="aten::_local_scalar_dense", count=40, steps=20)]
    v = judge_steps(steps(20, sync_count=lambda i: 2), asynchronous=False, sync_sites=sites)
    assert v.code == "over-synchronized"
    assert v.message == (
        "over-synchronized: 2 syncs per step at t.py:3 (aten::_local_scalar_dense ×40) "
        "(each would block the host on an accelerator)"
    )
    assert v.findings[-1] == cpu_note


def test_too_few_steps() -> None:
    v = judge_steps(steps(3), asynchronous=True)
    assert v.code == "too-few-steps"
    # no step at all is nothing to judge, on any backend (it read "cpu-synchronous" on CPU)
    for asynchronous in (True, False):
        v = judge_steps([], asynchronous=asynchronous)
        assert (v.code, v.message, v.codes) == (
            "no-steps",
            "no steps: nothing to judge",
            ("no-steps",),
        )


def test_window_is_the_last_steps() -> None:
    # a full queue long ago, empty for the last 64 steps
    early = steps(134, in_flight=lambda i: 5 if i < 70 else 0)
    assert judge_steps(early, asynchronous=True).code == "synchronized"
    assert judge_steps(early, asynchronous=True, window=134).code == "never-synchronized"
    with pytest.raises(ValueError, match="window"):
        judge_steps(early, asynchronous=True, window=2)


def test_judge_step_and_json_form() -> None:
    rec = StepRecord(step=0, start_ns=0, frontend_ns=10, data_wait_ns=5, sync_count=2)
    assert judge_step(rec) == ("over-synchronized", "input-bound")
    assert judge_step(rec, max_syncs_per_step=2, input_bound_fraction=0.6) == ()
    v = judge_steps(steps(10), asynchronous=True)
    d = msgspec.json.decode(msgspec.json.encode(v.to_dict()))
    assert d["code"] == "synchronized"
    assert Verdict(**{**d, "findings": tuple(d["findings"]), "codes": tuple(d["codes"])}) == v
    assert TREND_Z == 2.576


# ------------------------------------------------------------------ a session on a fake device


class _Queue:
    """A device that needs ``device_ns`` per step: host launches, device works through them."""

    def __init__(self, clock: FakeClock, device_ns: int) -> None:
        self.clock = clock
        self.device_ns = device_ns
        self.busy_until = 0
        self.allocated = 1 << 30

    def launch(self) -> None:
        self.busy_until = max(self.busy_until, self.clock.now_ns) + self.device_ns

    def executes(self, index: int, recorded_ns: int) -> int:
        # a marker runs after the work queued before it
        return max(recorded_ns, self.busy_until)

    def synchronize(self) -> None:
        self.clock.now_ns = max(self.clock.now_ns, self.busy_until)

    def memory(self) -> tuple[int, int]:
        # what was queued and not executed holds its buffers
        backlog = max(0, self.busy_until - self.clock.now_ns) // self.device_ns
        return self.allocated + backlog * (8 << 20), 2 << 30


def _run(synchronized: bool, n: int = 40) -> Report:
    clock = FakeClock()
    q = _Queue(clock, device_ns=3 * MS)
    device = FakeDevice(clock, q.executes, memory=q.memory)
    loss = torch.ones(1)
    session = asynctrace.trace(
        device=device, write=False, print_summary=False, nvtx=False, detect_syncs="lint"
    )
    with session:
        for _ in range(n):
            q.launch()
            clock.advance(MS)  # the host issues a step's work in 1 ms
            if synchronized:
                loss.item()  # the sync: blocks until the device is done
                q.synchronize()
            session.step()
    return session.summary()


def test_fake_device_never_synchronized_runs_away() -> None:
    report = _run(synchronized=False)
    assert report.verdict.code == "never-synchronized"
    assert report.figures["in_flight"].p90 >= 5
    assert any(f.startswith("memory creep") for f in report.verdict.findings)


def test_fake_device_synchronized_once_per_step() -> None:
    report = _run(synchronized=True)
    assert report.verdict.code == "synchronized"
    assert report.verdict.message == "synchronized once per step (bounded queue)"
    assert report.figures["in_flight"].p90 == 0
    assert [s.count for s in report.sync_sites] == [40]


@pytest.mark.parametrize(
    "values",
    [[3], [4, 1], [5, 1, 3], [2, 9, 4, 7], [0.5, -1.25, 3.0, 1e300, 7.5], [1e300, 1e300], [-3, 2]],
)
def test_median_is_statistics_median(values: list[float]) -> None:
    # the one median (statistics is not imported: ~3 ms of start-up) gives the same value and
    # type as statistics.median, ints included
    import statistics

    from asynctrace.analysis._quantiles import median

    got, want = median(iter(values)), statistics.median(values)
    assert got == want
    assert type(got) is type(want)


@pytest.mark.parametrize(
    ("code", "message", "line"),
    [
        (
            "over-synchronized",
            "over-synchronized: 2 syncs per step at a.py:3",
            "over-synchronized: 2 syncs per step at a.py:3",
        ),
        (
            "memory-creep",
            "memory creep: allocated memory grows",
            "memory-creep: allocated memory grows",
        ),
        (
            "never-synchronized",
            "never synchronized: in flight 1 → 9",
            "never-synchronized: in flight 1 → 9",
        ),
        (
            "synchronized",
            "synchronized once per step (bounded queue)",
            "synchronized once per step (bounded queue)",
        ),
        (
            "cpu-synchronous",
            "the CPU backend executes synchronously",
            "cpu-synchronous: the CPU backend executes synchronously",
        ),
    ],
)
def test_verdict_line_says_the_code_once(code: str, message: str, line: str) -> None:
    assert verdict_line(code, message) == line


def test_every_verdict_line_says_its_code_once() -> None:
    # one case per headline judge_steps can give
    cases = {
        "never-synchronized": steps(20, in_flight=lambda i: 3, sync_count=lambda i: 0),
        "over-synchronized": steps(20, sync_count=lambda i: 3),
        "input-bound": steps(20, data_wait_ns=lambda i: 3 * MS),
        "memory-creep": steps(64, mem=lambda i: (1 << 30) + i * (2 << 20)),
        "synchronized": steps(20),
        "too-few-steps": steps(3, sync_count=lambda i: 0),
    }
    for code, records in cases.items():
        v = judge_steps(records, asynchronous=True)
        assert v.code == code
        line = verdict_line(v.code, v.message)
        assert line.startswith(code), line
        assert sum(line.count(form) for form in {code, code.replace("-", " ")}) == 1, line
    v = judge_steps(steps(20), asynchronous=False)
    assert verdict_line(v.code, v.message).startswith("cpu-synchronous: the CPU backend")
    v = judge_steps(steps(3), asynchronous=True)
    assert verdict_line(v.code, v.message) == (
        "too-few-steps: 3, fewer than the 8 a trend needs (runaway queue, memory creep); "
        "the bound label needs none"
    )
