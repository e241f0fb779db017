"""The diagnosis: hand-built traces and scripted sessions whose answer is worked out by hand,
and shared traces read independently of the analysis."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import msgspec
import numpy as np
import pytest

from asynctrace.analysis._bound_model import Bound
from asynctrace.analysis.diagnosis import BOUND_CODES, FINDING_CODES, diagnose
from asynctrace.analysis.report import Report, analyze
from asynctrace.analysis.warmup import warmup_of_steps
from asynctrace.files.sources import load_source
from asynctrace.records import Records, SessionHeader, SessionSummary, StepRecord, SyncSite
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind
from tests.conftest import shared_trace

US = 1_000
MS = 1_000_000


def _codes(report: Report) -> list[str]:
    return [f.code for f in report.diagnosis]


def _launch_overhead_trace() -> TraceBuilder:
    """Three steps of 40 kernels of 10 µs, each launched 15 µs after the last one started: the
    device idles 5 µs between kernels, in gaps far under the 50 µs of a launch gap."""
    b = TraceBuilder("launchy.json")
    corr = 0
    for step in range(3):
        t0 = step * 40 * 15 * US  # back to back
        b.range(f"ProfilerStep#{step}", t0, 40 * 15 * US, kind=RangeKind.STEP, step=step)
        for k in range(40):
            corr += 1
            launch = t0 + k * 15 * US
            b.runtime("cudaLaunchKernel", launch, 3 * US, kind=RuntimeKind.LAUNCH, correlation=corr)
            b.activity("vectorized_elementwise_kernel", launch + 5 * US, 10 * US, correlation=corr)
    return b


def test_many_short_host_gaps_are_launch_overhead() -> None:
    report = analyze(_launch_overhead_trace().build())
    assert report.bound is not None
    assert report.bound.label == "host-bound"
    head = report.diagnosis[0]
    # 39 gaps of 5 µs a step (plus each step's lead-in), all shorter than a launch gap
    assert head.code == "launch-overhead"
    assert head.message.startswith("launch-overhead (host-bound): ")
    assert "CUDA graph" in head.advice
    assert "larger batches" in head.advice
    assert "move that work out of the step" not in head.advice
    assert head.evidence["launch_gaps"] == report.bound.evidence.launch_gaps >= 3 * 39
    assert head.cost_ns == report.bound.idle_ns_by_cause.host


def _busy_through_sync_trace() -> TraceBuilder:
    """One kernel of 9 ms per 10 ms step; the host syncs at once and waits 8.9 ms of it: the
    device is busy through the sync, which opens only the 1 ms gap to the next step's kernel
    — launched right after the sync returns, so that gap is the sync's."""
    b = TraceBuilder("busy.json")
    for step in range(4):
        t0 = step * 10 * MS
        b.range(f"ProfilerStep#{step}", t0, 10 * MS, kind=RangeKind.STEP, step=step)
        b.runtime("cudaLaunchKernel", t0, 20 * US, kind=RuntimeKind.LAUNCH, correlation=step + 1)
        b.activity("ampere_sgemm_128x64_nn", t0 + 50 * US, 9 * MS, correlation=step + 1)
        b.runtime("cudaDeviceSynchronize", t0 + 100 * US, 8_950 * US, kind=RuntimeKind.SYNC)
    return b


def test_a_sync_the_device_is_busy_through_is_not_a_problem_while_the_device_is_the_limit() -> None:
    report = analyze(_busy_through_sync_trace().build())
    b = report.bound
    assert b is not None
    assert b.label == "device-bound"
    assert _codes(report)[0] == "device-bound"
    # the host waits 8.95 ms a step in the sync (89% of the step), the device busy throughout:
    # that wait costs nothing; what the syncs open is the device idle after them
    assert b.evidence.sync_wait_ns == 4 * 8_950 * US
    assert "over-synchronized" not in _codes(report)
    # the verdict judges the syncs by the same cost: no second headline saying otherwise
    assert report.verdict.code != "over-synchronized"
    # GEMM kernels fill the busy time: tensor cores are the advice that fits
    assert "tensor cores" in report.diagnosis[0].advice


def test_syncs_that_open_idle_cost_that_idle_and_lead() -> None:
    """One 1 ms kernel per 10 ms step, then the host syncs and waits 1 ms, then computes 8 ms
    on the host: the device idles 9 ms a step; the gap begins while the host is in the sync."""
    b = TraceBuilder("syncy.json")
    for step in range(4):
        t0 = step * 10 * MS
        b.range(f"ProfilerStep#{step}", t0, 10 * MS, kind=RangeKind.STEP, step=step)
        b.runtime("cudaLaunchKernel", t0, 10 * US, kind=RuntimeKind.LAUNCH, correlation=step + 1)
        b.activity("k", t0 + 20 * US, 1 * MS, correlation=step + 1)
        b.runtime("aten::item", t0 + 30 * US, 1 * MS, kind=RuntimeKind.SYNC)
        b.python_frame("train.py(7): step", t0 + 25 * US, 1_100 * US)
    report = analyze(b.build())
    bound = report.bound
    assert bound is not None
    assert bound.label == "sync-bound"
    head = report.diagnosis[0]
    assert head.code == bound.label
    assert head.cost_ns >= bound.idle_ns_by_cause.sync
    assert "train.py:7" in head.message
    assert report.verdict.code == "over-synchronized" or report.verdict.codes[0] != "cheap-syncs"


def test_a_trace_without_device_activity_is_no_device_activity() -> None:
    path = shared_trace("kineto", "hta_cpu_only_rank34.json.gz")
    # read on its own: no event of the trace is device work (kernel, copy, set)
    with gzip.open(path) as f:
        raw = json.loads(f.read())
    cats = {e.get("cat", "") for e in raw["traceEvents"]}
    assert not cats & {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
    report = analyze(load_source(path))
    head = report.diagnosis[0]
    # it reads "host-bound … device waits 210 ms" no more: there is no device to wait
    assert head.code == "no-device-activity"
    assert "device waits" not in head.message
    assert not any(f.code in ("device-bound", "host-bound") for f in report.diagnosis)


def _cpu_session(tmp_path: Path, *, items: int) -> tuple[Report, object]:
    torch = pytest.importorskip("torch")
    from asynctrace import trace

    x = torch.randn(16, 8)
    w = torch.randn(8, 1, requires_grad=True)
    with trace("cpu", dir=tmp_path, device="cpu", detect_syncs="lint", print_summary=False) as s:
        for _ in range(6):
            loss = (x @ w).square().mean()
            loss.backward()
            for _ in range(items):
                loss.item()  # would block the host on an accelerator
            s.step()
    assert s.records_path is not None
    return analyze(load_source(s.records_path)), s.summary()


def test_a_cpu_session_is_cpu_synchronous_with_its_syncs_named(tmp_path: Path) -> None:
    report, summary = _cpu_session(tmp_path, items=2)
    head = report.diagnosis[0]
    assert head.code == "cpu-synchronous"
    assert "test_diagnosis.py:" in head.message  # the .item() call's line
    assert "aten::_local_scalar_dense" in head.message
    # never device-bound, never GPU advice
    assert report.bound is not None
    assert report.bound.label != "device-bound"
    for f in report.diagnosis:
        assert f.code != "device-bound"
        assert "tensor cores" not in f.advice
        assert "CUDA graph" not in f.advice
    # two syncs a step: over the budget, a finding below the headline
    (over,) = [f for f in report.diagnosis if f.code == "over-synchronized"]
    assert "2 syncs per step" in over.message
    assert "would block the host on an accelerator" in over.message
    # the live summary says the same thing, from the same function
    assert [f.code for f in summary.diagnosis] == _codes(report)  # type: ignore[attr-defined]


def _records(frontend_ns: list[int], *, asynchronous: bool = True) -> Records:
    header = SessionHeader(
        name="w",
        host="h",
        pid=1,
        device_kind="fake",
        device_name="Fake GPU",
        asynchronous=asynchronous,
        started_unix_ns=0,
        sync_detection="cuda",
    )
    steps, t = [], 0
    for i, f in enumerate(frontend_ns):
        steps.append(StepRecord(step=i, start_ns=t, frontend_ns=f, device_ns=f, sync_count=1))
        t += f
    return Records(
        path="w.records.jsonl",
        header=header,
        steps=steps,
        syncs=[SyncSite(site="t.py:3", op="aten::item", count=len(steps), steps=len(steps))],
        summary=SessionSummary(steps=len(steps), wall_ns=t),
        complete=True,
    )


def test_a_sessions_slow_leading_steps_are_warm_up_outside_the_steady_state() -> None:
    # two slow steps (compile, autotune), then 10 steps of 1 ms
    slow = [40 * MS, 9 * MS] + [1 * MS] * 10
    report = analyze(_records(slow))
    w = report.warmup
    assert w is not None
    assert (w.steps, w.span_ns, w.end_ns) == (2, 49 * MS, 49 * MS)
    # the bound is the steady state's: 10 steps of 1 ms
    assert report.bound is not None
    assert report.bound.region_ns == 10 * MS
    # warm-up costs more than all the steady state, but is paid once: not the headline
    codes = _codes(report)
    assert codes[0] != "warm-up"
    assert "warm-up" in codes
    (f,) = [f for f in report.diagnosis if f.code == "warm-up"]
    assert f.cost_ns == 49 * MS
    assert "paid once" in f.message
    # no warm-up where the first step is not that slow
    assert analyze(_records([2 * MS] + [1 * MS] * 10)).warmup is None
    assert warmup_of_steps([], median_ns=1.0) is None


def test_the_headline_is_the_bound_label_on_every_shared_trace() -> None:
    """Wherever the headline is a bound label it is ``bound.label``, and no finding costs more
    than one above it (warm-up aside)."""
    kineto = shared_trace("kineto", "hta_cpu_only_rank34.json.gz").parent
    nsys = shared_trace("nsys", "pipit_cloverleaf_cuda_nsys2024.sqlite").parent
    paths = [*sorted(kineto.glob("*.json*")), *sorted(nsys.glob("*.sqlite"))]
    seen = 0
    for path in paths:
        if "NOT_KINETO" in path.name:
            continue
        report = analyze(load_source(path))
        d = report.diagnosis
        assert d, path.name
        assert all(f.code in FINDING_CODES for f in d), path.name
        if d[0].code in BOUND_CODES:
            assert report.bound is not None, path.name
            assert d[0].code == report.bound.label, path.name
        costs = [f.cost_ns for f in d if f.code != "warm-up"]
        assert costs == sorted(costs, reverse=True), path.name
        seen += 1
    assert seen >= 20


def _nsys_sync_idle(path: Path) -> tuple[int, int]:
    """(idle opened by syncs, host wait in syncs) of a whole-program nsys export, read from
    its tables with numpy: the device's busy union (kernels, copies, sets); a gap begins at the
    end of a busy run and is the syncs' when a synchronizing runtime call holds the host then."""
    con = sqlite3.connect(path)
    spans = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        spans += con.execute(f"SELECT start, end FROM {table}").fetchall()
    rt = con.execute(
        "SELECT r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON r.nameId = s.id WHERE s.value LIKE 'cudaDeviceSynchronize%' "
        "OR s.value LIKE 'cudaMemcpy\\_v%' ESCAPE '\\' OR s.value = 'cudaMemcpy'"
    ).fetchall()
    # the whole trace's end: its last host or device event
    (last,) = con.execute("SELECT max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    con.close()
    a = np.array(sorted(spans), np.int64)
    # busy runs: merge overlapping activities
    ends = np.maximum.accumulate(a[:, 1])
    new = np.r_[True, a[1:, 0] > ends[:-1]]
    run_start = a[new, 0]
    run_end = np.r_[ends[np.flatnonzero(new)[1:] - 1], ends[-1]]
    # the gaps between busy runs, and the final one, after the last activity
    g0 = np.r_[run_end[:-1], run_end[-1]]
    g1 = np.r_[run_start[1:], max(int(last), int(run_end[-1]))]
    s = np.array(rt, np.int64)
    s = s[np.argsort(s[:, 0])]
    # the sync holding the host at each gap's start
    j = np.searchsorted(s[:, 0], g0, side="right") - 1
    held = (j >= 0) & (s[np.maximum(j, 0), 1] > g0)
    return int((g1 - g0)[held].sum()), int((s[:, 1] - s[:, 0]).sum())


@pytest.mark.real_traces
def test_cloverleaf_syncs_cost_the_idle_they_open_not_the_hosts_wait() -> None:
    path = shared_trace("nsys", "pipit_cloverleaf_cuda_nsys2024.sqlite")
    opened, waited = _nsys_sync_idle(path)
    # read independently: the host waits ~319 ms in 1,591 syncs, the device is busy through
    # most of it; the gaps the syncs open add up to ~45 ms (7 ms of it after the last kernel)
    assert waited > 300 * MS
    assert 40 * MS < opened < 50 * MS
    report = analyze(load_source(path))
    (sync,) = [f for f in report.diagnosis if f.code in ("over-synchronized", "sync-bound")]
    # the finding's cost is that idle (and the little wait while the device waited for the
    # host), never the 319 ms of waiting
    assert abs(sync.cost_ns - opened) < 0.02 * opened + 1 * MS
    assert sync.evidence["sync_wait_ns"] > 300 * MS
    # ranked by cost; the verdict says the same as the diagnosis: ~45 ms of the steady state's
    # ~349 ms (its first 269 ms are start-up, the warm-up finding: cudaMalloc's context), 13%
    assert report.warmup is not None
    steady = report.bound.region_ns
    assert abs(steady - 349 * MS) < 1 * MS
    assert report.verdict.code == "over-synchronized"
    assert f"costing {sync.cost_ns / steady:.0%}" in report.verdict.message
    assert "costing 13%" in report.verdict.message


def test_a_schema_3_report_reads_back_with_its_diagnosis() -> None:
    report = analyze(_launch_overhead_trace().build())
    obj = msgspec.json.decode(report.to_json())
    obj["schema_version"] = 3
    del obj["diagnosis"]
    del obj["warmup"]
    del obj["verdict"]["codes"]
    old = Report.from_json(msgspec.json.encode(obj))
    assert old.schema_version == 4
    assert [f.code for f in old.diagnosis] == _codes(report)
    assert old.diagnosis[0] == report.diagnosis[0]


def test_diagnose_works_from_the_pieces_alone() -> None:
    # a live session's pieces: no bound yet (no steps) → one "no steps" finding
    (f,) = diagnose(
        bound=None, asynchronous=True, has_device_activity=True, trace=False, steps=0, figures={}
    )
    assert f.code == "undetermined"
    assert "no steps" in f.message


def test_device_advice_fits_the_kernels() -> None:
    def trace(kernel: str) -> Report:
        b = TraceBuilder("k.json")
        b.range("ProfilerStep#0", 0, 10 * MS, kind=RangeKind.STEP, step=0)
        b.runtime("cudaLaunchKernel", 0, 10 * US, kind=RuntimeKind.LAUNCH, correlation=1)
        b.activity(kernel, 20 * US, 9_900 * US, correlation=1)
        return analyze(b.build())

    nccl = trace("ncclDevKernel_AllReduce_Sum_f32_RING_LL").diagnosis[0]
    assert nccl.code == "device-bound"
    assert "communication" in nccl.advice
    assert "tensor cores" not in nccl.advice
    gemm = trace("sm90_xmma_gemm_bf16bf16_bf16f32").diagnosis[0]
    assert "tensor cores" in gemm.advice
    other = trace("my_custom_kernel").diagnosis[0]
    assert "tensor cores" not in other.advice
    assert "fuse" not in other.advice


def _cpu_records(steps: list[StepRecord], syncs: list[SyncSite]) -> Records:
    header = SessionHeader(
        name="c",
        host="h",
        pid=1,
        device_kind="cpu",
        device_name="CPU",
        asynchronous=False,
        started_unix_ns=0,
        sync_detection="lint",
    )
    wall = sum(s.frontend_ns for s in steps)
    return Records(
        path="c.records.jsonl",
        header=header,
        steps=steps,
        syncs=syncs,
        summary=SessionSummary(steps=len(steps), wall_ns=wall),
        complete=True,
    )


def test_one_step_of_many_syncs_is_not_over_synchronized_by_verdict_or_diagnosis() -> None:
    # 20 CPU steps of 10 ms; step 5 alone makes 10 syncs: the median step makes none, so the
    # rate is 0 and neither the verdict nor the diagnosis calls the run over-synchronized
    steps = [
        StepRecord(step=i, start_ns=i * 10 * MS, frontend_ns=10 * MS, sync_count=10 * (i == 5))
        for i in range(20)
    ]
    site = SyncSite(site="t.py:9", op="aten::_local_scalar_dense", count=10, steps=1)
    report = analyze(_cpu_records(steps, [site]))
    assert "over-synchronized" not in report.verdict.codes
    assert "over-synchronized" not in _codes(report)
    assert report.diagnosis[0].code == "cpu-synchronous"
    assert report.diagnosis[0].evidence["syncs_per_step"] == 0.0


def test_two_syncs_in_every_step_are_over_synchronized_by_both() -> None:
    steps = [
        StepRecord(step=i, start_ns=i * 10 * MS, frontend_ns=10 * MS, sync_count=2)
        for i in range(20)
    ]
    site = SyncSite(site="t.py:9", op="aten::_local_scalar_dense", count=40, steps=20)
    report = analyze(_cpu_records(steps, [site]))
    assert "over-synchronized" in report.verdict.codes
    (over,) = [f for f in report.diagnosis if f.code == "over-synchronized"]
    assert "2 syncs per step" in over.message
    assert over.evidence["syncs_per_step"] == 2.0


def test_a_cpu_run_waiting_for_data_in_few_steps_is_input_bound_by_both() -> None:
    # 7 of 20 steps of 10 ms wait 9 ms for data: 63 ms of 200 (31.5%), over the 20% the
    # verdict's input-bound needs, though the median step waits nothing; the headline's advice
    # is the loader's, by the same share
    steps = [
        StepRecord(step=i, start_ns=i * 10 * MS, frontend_ns=10 * MS, data_wait_ns=9 * MS * (i < 7))
        for i in range(20)
    ]
    report = analyze(_cpu_records(steps, []))
    assert "input-bound" in report.verdict.codes
    assert "32%" in report.verdict.findings[report.verdict.codes.index("input-bound")]
    head = report.diagnosis[0]
    assert head.code == "cpu-synchronous"
    assert "waits for data" in head.advice
    assert head.evidence["data_wait_pct"] == 31.5


def test_the_advice_and_the_diagnosis_ask_one_launch_overhead_question() -> None:
    from asynctrace.analysis._bound_model import BoundEvidence, IdleByCause
    from asynctrace.analysis.advice import advice_for

    def bound(gaps: int, gaps_ns: int, work_ns: int) -> Bound:
        e = BoundEvidence(
            busy_pct=50.0,
            idle_pct_by_cause={"host": 50.0},
            leading_cause="host",
            launch_gaps=gaps,
            launch_gaps_ns=gaps_ns,
            host_work_gaps=1,
            host_work_ns=work_ns,
        )
        return Bound(
            label="host-bound",
            region_ns=100,
            busy_ns=50,
            idle_ns=50,
            idle_ns_by_cause=IdleByCause(host=50),
            evidence=e,
        )

    # by time: three short gaps idling 30 ns of 50 are launch overhead; three that idle
    # nothing are not, though they were counted
    for b, want in ((bound(3, 30, 20), True), (bound(3, 0, 0), False)):
        (f,) = [
            x
            for x in diagnose(
                bound=b,
                asynchronous=True,
                has_device_activity=True,
                trace=True,
                steps=1,
                figures={},
            )
            if x.cost_ns
        ]
        assert (f.code == "launch-overhead") is want
        assert advice_for("host-bound", b)[0].startswith("launch overhead") is want


def test_a_whole_trace_says_how_many_of_its_syncs_the_sites_named_cover() -> None:
    """A whole trace's sync count includes its warm-up's; the sites the headline names are the
    bound's, over the region after warm-up: the headline says how many of them that is (the
    alexnet trace: 37 calls, 3 of them after its warm-up, all at cudaDeviceSynchronize)."""
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source
    from tests.conftest import shared_trace

    r = analyze(load_source(shared_trace("kineto", "hta_a100_alexnet_syncs.json.gz")))
    head = r.diagnosis[0]
    assert r.warmup is not None
    assert head.code == "sync-bound"
    assert r.bound is not None
    named = sum(c.count for c in r.bound.evidence.sync_sites)
    assert named == 3
    assert (
        f"37 in the whole trace, {named} of them after warm-up, at cudaDeviceSynchronize (×3,"
        in head.message
    )
