"""Figures on real GPU traces, each checked against an independent reading of the raw file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from asynctrace.analysis.report import Report, analyze
from asynctrace.errors import TraceFormatError
from asynctrace.traces.model import Trace
from tests.analysis._flat import flat_steps
from tests.analysis._reference import (
    reference_figures,
    reference_nsys_figures,
    reference_nsys_step_figures,
    reference_step_figures,
)
from tests.conftest import KINETO_DIR, NSYS_DIR, shared_trace

pytestmark = pytest.mark.real_traces

PINNED = [
    "hta_v100_ns_resolution_rank0.json.gz",
    "hta_a100_16ranks_rank0_graphlaunch.json.gz",
    "hta_a100_nccl_launchkernelexc.json.gz",
    "hta_sampled_rank0.json.gz",
    "hta_sampled_rank1.json.gz",
    "hta_a100_alexnet_syncs.json.gz",
    "hta_a100_event_sync.json.gz",
    "hta_mi250_hip.json.gz",
    "hta_2022_small_base.json.gz",
    "tracelens_b200_compile_culaunchkernelex.json.gz",
    "tracelens_h100_bert_small_with_stack.json.gz",
    "tracelens_mi300_sglang_decode_hipgraph.json.gz",
    "kineto_2021_resnet50_barelist.json.gz",
]


def _load(path: Path) -> Trace:
    # The format dispatcher (trace/load.py) is the entry point; until it lands, the format loaders.
    try:
        from asynctrace.traces.load import load
    except ImportError:
        if path.suffix == ".sqlite":
            from asynctrace.traces.nsys import load_nsys as load
        else:
            from asynctrace.traces.kineto import load_kineto as load
    return load(path)


def _report(name: str) -> Report:
    return analyze(_load(shared_trace("kineto", name)))


@pytest.mark.parametrize("name", PINNED)
def test_figures_match_independent_reading(name: str) -> None:
    report = _report(name)
    ref = reference_figures(shared_trace("kineto", name))
    assert report.trace.activities.per_stream == ref["per_stream"]
    assert report.trace.activities.per_kind == ref["per_kind"]
    assert report.trace.activities.total == ref["total"]
    assert (report.trace.launch.matched, report.trace.launch.unmatched) == (
        ref["matched"],
        ref["unmatched"],
    )
    assert report.trace.syncs.count == ref["syncs"]
    if ref["steps"]:
        assert report.trace.step_source == "profiler"
        assert len(report.steps) == ref["steps"]
    else:
        assert report.trace.step_source != "profiler"
    assert {k: q.max for k, q in report.trace.queue.items() if q.activities} == ref["queue_max"]
    assert report.trace.launch.queue_delay_ns.p50 == ref["queue_delay_p50"]
    if ref["sites"]:
        got: dict[str, int] = {}
        for s in report.trace.syncs.sites:
            if s.site:
                got[s.site] = got.get(s.site, 0) + s.count
        assert got == ref["sites"]


def _partition_holds(report: Report) -> None:
    """The steps' shares of the device timeline add up to the run's figures (definition
    changed in schema 2: gpu_busy_ns + gpu_idle_ns is the step's share, not device_ns)."""
    b = report.bound
    assert b is not None
    assert b.busy_ns + b.idle_ns == b.region_ns
    assert b.idle_ns_by_cause.total() == b.idle_ns
    assert sum(s.gpu_busy_ns for s in flat_steps(report)) == b.busy_ns
    assert sum(s.gpu_idle_ns for s in flat_steps(report)) == b.idle_ns
    for s in flat_steps(report):
        assert s.bound is not None
        assert s.gpu_busy_ns + s.gpu_idle_ns == s.bound.region_ns
    _kernels_are_the_runs(report)
    # a figure's total is its steps' sum, exactly
    front = report.figures.get("frontend_ns")
    assert (front.total if front else 0) == sum(s.frontend_ns for s in report.steps)
    _one_sync_cost(report)


def _one_sync_cost(report: Report) -> None:
    """What syncs cost, one figure: no share's above its idle (so never above 100%), the
    steps' add up to the run's and so do the sites' (to the rounding of the percentages: a
    hundredth of a percent of each)."""
    b = report.bound
    assert b is not None
    shares = [s.bound for s in flat_steps(report) if s.bound]
    for x in [b, *shares]:
        if x.region_ns:
            assert x.evidence.sync_cost_pct <= 100.0 * x.idle_ns / x.region_ns + 0.01
    run = b.evidence.sync_cost_pct * b.region_ns / 100
    half = 0.00005  # half a hundredth of a percent: the rounding of one percentage
    if shares:
        steps = sum(x.evidence.sync_cost_pct * x.region_ns / 100 for x in shares)
        assert abs(steps - run) <= half * (b.region_ns + sum(x.region_ns for x in shares)) + 1
    sites = b.evidence.sync_sites
    for c in sites:
        assert c.idle_ns <= c.cost_ns <= c.idle_ns + c.wait_ns
    if len(sites) < 10:  # every site listed (and no two sites' calls overlap on these traces)
        assert abs(sum(c.cost_ns for c in sites) - run) <= half * b.region_ns + 1


def _kernels_are_the_runs(report: Report) -> None:
    """The time per name covers the run's region: the names' busy times add up to the run's,
    and the evidence's top kernels are its five of most device time."""
    b = report.bound
    assert b is not None
    kernels = report.trace.kernels
    assert sum(k.busy_ns for k in kernels) == b.busy_ns
    top = sorted(kernels, key=lambda k: (-k.total_ns, k.name))[:5]
    assert [(k.name, k.count, k.total_ns) for k in b.evidence.top_kernels] == [
        (k.name, k.count, k.total_ns) for k in top
    ]


def _same_figures(report: Report, ref: dict[str, Any]) -> None:
    if "queue depth" in report.trace.withheld:
        # the clocks disagree: queue depth and launch delays compare them, and are withheld
        assert report.trace.queue == {}
        assert report.trace.launch.launch_to_start_ns.max == 0
        return
    assert msgspec.to_builtins(report.trace.launch.launch_to_start_ns) == ref["launch_to_start_ns"]
    assert msgspec.to_builtins(report.trace.launch.queue_delay_ns) == ref["queue_delay_ns"]
    got_queue = {k: msgspec.to_builtins(q) for k, q in report.trace.queue.items() if q.activities}
    assert got_queue.keys() == ref["queue"].keys()
    for key, q in ref["queue"].items():
        assert got_queue[key] == {**q, "mean": pytest.approx(q["mean"], rel=1e-12)}, key
    got_steps = [vars(s) for s in flat_steps(report)]
    want = ref["steps"]
    if any(w.code == "clock-mismatch" for w in report.warnings):
        # where the clocks disagree the report withholds what compares them
        assert all(s["run_ahead_ns"] is None and s["in_flight_steps"] == 0 for s in got_steps)
        want = [{**w, "run_ahead_ns": None, "in_flight_steps": 0} for w in want]
    assert [{k: s[k] for k in want[0]} for s in got_steps] == want


# Every trace with device work: profiler steps, annotation steps (sglang) and the whole trace.
STEP_FIGURES = [
    *PINNED,
    "hta_a100_event_sync_multistream.json.gz",
    "tracelens_mi300_vllm_graph_replay.json.gz",
    "kineto_synthetic_newest_schema.json",
]


@pytest.mark.parametrize("name", STEP_FIGURES)
def test_step_queue_and_delay_figures_match_independent_reading(name: str) -> None:
    # gpu_busy/idle, sync_wait, run_ahead, queue_max and in_flight per step; the queue's
    # time-weighted mean, time at the cap and in-flight maximum; launch-to-start percentiles;
    # graph launches (one call, many kernels) on the graphlaunch, hipgraph and vllm traces
    path = shared_trace("kineto", name)
    _same_figures(analyze(_load(path)), reference_step_figures(path))


@pytest.mark.parametrize("cap", [2, 64])
def test_time_at_a_low_cap_matches_independent_reading(cap: int) -> None:
    # the shipped traces seldom reach 1022: a low cap exercises time_at_cap_ns on every stream
    path = shared_trace("kineto", "hta_a100_16ranks_rank0_graphlaunch.json.gz")
    report = analyze(_load(path), queue_cap=cap)
    _same_figures(report, reference_step_figures(path, cap=cap))
    assert report.trace.queue["7"].time_at_cap_ns > 0


@pytest.mark.parametrize(
    "name",
    [
        "tracelens_h100_bert_small_with_stack.json.gz",
        "tracelens_mi300_sglang_decode_hipgraph.json.gz",
        "tracelens_mi300_vllm_graph_replay.json.gz",
        "tracelens_b200_compile_culaunchkernelex.json.gz",
        "hta_a100_alexnet_syncs.json.gz",
        "hta_a100_event_sync.json.gz",
        "hta_a100_16ranks_rank0_graphlaunch.json.gz",
    ],
)
def test_sync_calls_match_independent_reading(name: str) -> None:
    # each call's duration, op, innermost user frame and step; then the per-site aggregates;
    # Kineto's cuda_sync records of the same waits (alexnet: 41 for 21 calls) are not counted
    path = shared_trace("kineto", name)
    report = analyze(_load(path))
    figures = reference_step_figures(path)
    ref = figures["sync_calls"]
    assert report.trace.syncs.device_records == figures["device_sync_records"]
    assert [(c.dur_ns, c.op, c.site, c.step) for c in report.trace.syncs.calls] == ref
    sites: dict[tuple[str, str], tuple[int, int, set[int]]] = {}
    for dur, op, site, step in ref:
        count, total, steps = sites.get((site, op), (0, 0, set()))
        sites[(site, op)] = (count + 1, total + dur, steps | ({step} - {None}))
    assert sorted(
        (s.site, s.op, s.count, s.total_ns, s.steps) for s in report.trace.syncs.sites
    ) == (sorted((k[0], k[1], c, t, len(st)) for k, (c, t, st) in sites.items()))
    assert report.trace.syncs.total_ns == sum(d for d, *_ in ref)


def test_known_landmarks() -> None:
    # Figures a reader can check against PROVENANCE.md and the HTA test-suite descriptions.
    v100 = _report("hta_v100_ns_resolution_rank0.json.gz")
    assert v100.trace.queue["7"].max == 1022  # the launch queue is full: the CPU blocks
    assert v100.trace.queue["7"].time_at_cap_ns > 0
    assert len(v100.steps) == 5
    a100 = _report("hta_a100_16ranks_rank0_graphlaunch.json.gz")
    assert a100.source.rank == 0
    # 75 cudaStreamSynchronize + 1 cudaDeviceSynchronize, and (since blocking copies count as
    # syncs) the 75 cudaMemcpyAsync to or from pageable memory, which hold the host
    assert a100.trace.syncs.count == 76 + 75
    copies = [c.op for c in a100.trace.syncs.calls if c.kind == "blocking-copy"]
    # ... and each cudaStreamSynchronize waits inside a copy operator (aten::to / copy_)
    assert sorted(set(copies)) == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert (copies.count("cudaMemcpyAsync"), copies.count("cudaStreamSynchronize")) == (75, 75)
    bert = _report("tracelens_h100_bert_small_with_stack.json.gz")
    assert bert.trace.syncs.sites[0].site.endswith(".py:34") or any(
        s.site == "moca/library/profiling/profile.py:34" for s in bert.trace.syncs.sites
    )


@pytest.mark.parametrize(
    "path",
    sorted(p.name for p in KINETO_DIR.glob("*") if not p.name.startswith("NOT_"))
    if KINETO_DIR.exists()
    else [],
)
def test_every_kineto_trace_reports(path: str) -> None:
    report = _report(path)
    assert Report.from_json(report.to_json()) == report
    _partition_holds(report)
    for s in report.steps:
        assert 0 <= s.sync_wait_ns <= s.frontend_ns


@pytest.mark.parametrize(
    "path", sorted(p.name for p in NSYS_DIR.glob("*.sqlite")) if NSYS_DIR.exists() else []
)
def test_nsys_figures_match_independent_reading(path: str) -> None:
    file = shared_trace("nsys", path)
    report = analyze(_load(file))
    ref = reference_nsys_figures(file)
    assert report.trace.activities.per_stream == ref["per_stream"]
    assert report.trace.activities.total == ref["total"]
    assert (report.trace.launch.matched, report.trace.launch.unmatched) == (
        ref["matched"],
        ref["unmatched"],
    )
    assert report.trace.syncs.count == ref["syncs"]
    assert {k: q.max for k, q in report.trace.queue.items() if q.activities} == ref["queue_max"]
    assert report.trace.launch.queue_delay_ns.p50 == ref["queue_delay_p50"]
    _partition_holds(report)


@pytest.mark.parametrize(
    "path", sorted(p.name for p in NSYS_DIR.glob("*.sqlite")) if NSYS_DIR.exists() else []
)
def test_nsys_step_queue_and_delay_figures_match_independent_reading(path: str) -> None:
    file = shared_trace("nsys", path)
    report = analyze(_load(file))
    ref = reference_nsys_step_figures(file)
    assert report.trace.step_source == "trace"  # none of the exports has step ranges
    _same_figures(report, ref)
    # 2022 exports hold each call twice (bare and _vNNNN): each wait counted once
    assert report.trace.syncs.total_ns == ref["sync_total_ns"]


def test_cloverleaf_landmarks() -> None:
    # 1,312 kernels each followed by cudaDeviceSynchronize, plus 279 blocking cudaMemcpy
    r = analyze(_load(shared_trace("nsys", "pipit_cloverleaf_cuda_nsys2024.sqlite")))
    assert r.trace.activities.per_kind["kernel"] == 1312
    assert r.trace.syncs.count == 1312 + 279
    assert r.trace.queue["7"].time_at_cap_ns == 0


def test_execution_trace_is_refused() -> None:
    with pytest.raises(TraceFormatError):
        _load(shared_trace("kineto", "NOT_KINETO_execution_trace.json.gz"))


@pytest.mark.parametrize(
    "name", ["hta_a100_nccl_launchkernelexc.json.gz", "hta_sampled_rank0.json.gz"]
)
def test_optimizer_steps_without_profiler_steps(name: str, tmp_path: Path) -> None:
    # a profile taken without a schedule has no ProfilerStep#N: torch's Optimizer.step#…
    # annotations end the steps (nested optimizers, Shampoo inside EMA, end one step)
    import gzip
    import json

    with gzip.open(shared_trace("kineto", name), "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    path = tmp_path / name.replace(".gz", "")
    path.write_text(json.dumps(doc))
    report = analyze(_load(path))
    assert report.trace.step_source == "optimizer"
    assert len(report.steps) == len(analyze(_load(shared_trace("kineto", name))).steps)
    _same_figures(report, reference_step_figures(path))
