"""Figures on real GPU traces, each checked against an independent reading of the raw file."""

from __future__ import annotations

from pathlib import Path

import pytest

from asynctrace.analysis.report import Report, analyze
from asynctrace.errors import TraceFormatError
from asynctrace.traces.model import Trace
from tests.analysis._reference import reference_figures, reference_nsys_figures
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
    assert report.activities.per_stream == ref["per_stream"]
    assert report.activities.per_kind == ref["per_kind"]
    assert report.activities.total == ref["total"]
    assert (report.launch.matched, report.launch.unmatched) == (ref["matched"], ref["unmatched"])
    assert report.syncs.count == ref["syncs"]
    if ref["steps"]:
        assert report.step_source == "profiler"
        assert len(report.steps) == ref["steps"]
    else:
        assert report.step_source != "profiler"
    assert {k: q.max for k, q in report.queue.items() if q.activities} == ref["queue_max"]
    assert report.launch.queue_delay_ns.p50 == ref["queue_delay_p50"]
    if ref["sites"]:
        got: dict[str, int] = {}
        for s in report.syncs.sites:
            if s.site:
                got[s.site] = got.get(s.site, 0) + s.count
        assert got == ref["sites"]


def test_known_landmarks() -> None:
    # Figures a reader can check against PROVENANCE.md and the HTA test-suite descriptions.
    v100 = _report("hta_v100_ns_resolution_rank0.json.gz")
    assert v100.queue["7"].max == 1022  # the launch queue is full: the CPU blocks
    assert v100.queue["7"].time_at_cap_ns > 0
    assert len(v100.steps) == 5
    a100 = _report("hta_a100_16ranks_rank0_graphlaunch.json.gz")
    assert a100.trace.rank == 0
    assert a100.syncs.count == 76  # 75 cudaStreamSynchronize + 1 cudaDeviceSynchronize
    bert = _report("tracelens_h100_bert_small_with_stack.json.gz")
    assert bert.syncs.sites[0].site.endswith(".py:34") or any(
        s.site == "moca/library/profiling/profile.py:34" for s in bert.syncs.sites
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
    for s in report.steps:
        assert s.gpu_busy_ns + s.gpu_idle_ns == s.device_ns
        assert 0 <= s.sync_wait_ns <= s.cpu_ns


@pytest.mark.parametrize(
    "path", sorted(p.name for p in NSYS_DIR.glob("*.sqlite")) if NSYS_DIR.exists() else []
)
def test_nsys_figures_match_independent_reading(path: str) -> None:
    file = shared_trace("nsys", path)
    report = analyze(_load(file))
    ref = reference_nsys_figures(file)
    assert report.activities.per_stream == ref["per_stream"]
    assert report.activities.total == ref["total"]
    assert (report.launch.matched, report.launch.unmatched) == (ref["matched"], ref["unmatched"])
    assert report.syncs.count == ref["syncs"]
    assert {k: q.max for k, q in report.queue.items() if q.activities} == ref["queue_max"]
    assert report.launch.queue_delay_ns.p50 == ref["queue_delay_p50"]
    for s in report.steps:
        assert s.gpu_busy_ns + s.gpu_idle_ns == s.device_ns


def test_cloverleaf_landmarks() -> None:
    # 1,312 kernels each followed by cudaDeviceSynchronize, plus 279 blocking cudaMemcpy
    r = analyze(_load(shared_trace("nsys", "pipit_cloverleaf_cuda_nsys2024.sqlite")))
    assert r.activities.per_kind["kernel"] == 1312
    assert r.syncs.count == 1312 + 279
    assert r.queue["7"].time_at_cap_ns == 0


def test_execution_trace_is_refused() -> None:
    with pytest.raises(TraceFormatError):
        _load(shared_trace("kineto", "NOT_KINETO_execution_trace.json.gz"))
