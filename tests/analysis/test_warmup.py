"""Warm-up (analysis/warmup.py) and the steady state the bound label describes after it: on
hand-built traces whose answer is worked out below, and on the shared traces, read by hand."""

from __future__ import annotations

import pytest

from asynctrace.analysis.report import analyze
from asynctrace.analysis.steps import step_windows
from asynctrace.analysis.warmup import find_warmup
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace
from tests.analysis._flat import flat_steps

US = 1_000
MS = 1_000_000
LAUNCH = RuntimeKind.LAUNCH


def _compiled_first_step() -> Trace:
    """Three 10 ms steps; step 0 compiles for 8 ms, then launches its kernel; steps 1 and 2
    launch at once and keep the device busy 9 of their 10 ms."""
    b = TraceBuilder("compile.json")
    for k in range(3):
        b.range(f"ProfilerStep#{k}", k * 10 * MS, 10 * MS, kind=RangeKind.STEP, step=k)
    b.range("compile_fx.<locals>.fw_compiler_base", 100 * US, 8 * MS)
    b.runtime("cudaLaunchKernel", 8200 * US, 10 * US, kind=LAUNCH, correlation=1)
    b.activity("k0", 8300 * US, 1 * MS, correlation=1)
    for k in (1, 2):
        t = k * 10 * MS
        b.runtime("cudaLaunchKernel", t, 10 * US, kind=LAUNCH, correlation=k + 1)
        b.activity(f"k{k}", t + 500 * US, 9 * MS, correlation=k + 1)
    return b.build(device_name="Fake GPU")


def test_compilation_in_the_first_step_leaves_that_step_out_of_the_run() -> None:
    t = _compiled_first_step()
    w = find_warmup(t, step_windows(t))
    assert w is not None
    assert (w.end_ns, w.steps) == (8100 * US, 1)
    assert [(i.kind, i.name, i.dur_ns) for i in w.items] == [
        ("compile", "compile_fx.<locals>.fw_compiler_base", 8 * MS)
    ]
    r = analyze(t)
    assert r.warmup == w
    b = r.bound
    assert b is not None
    # step 0 keeps its own figures (host-bound: 9.3 of its 10.5 ms share idle) ...
    s0, s1, s2 = (s.bound for s in flat_steps(r))
    assert s0 is not None
    assert s1 is not None
    assert s2 is not None
    assert s0.label == "host-bound"
    # ... and the run is the steady steps': busy 18 of the 20 ms from step 1's host start
    # (its share begins there: the device idled from 9.3 ms, waiting on step 1)
    assert (s1.share_start_ns, b.region_ns, b.busy_ns) == (10 * MS, 20 * MS, 18 * MS)
    assert (b.busy_ns, b.idle_ns) == (s1.busy_ns + s2.busy_ns, s1.idle_ns + s2.idle_ns)
    assert b.label == "device-bound"  # 10% idle
    assert any("first 1 step(s) are left out" in n for n in b.evidence.notes)


def test_a_long_first_context_call_is_warm_up_and_a_short_one_is_not() -> None:
    b = TraceBuilder("context.json")
    b.runtime("cudaFree", 0, 300 * MS)  # the first call builds the context: 300 ms
    b.runtime("cudaMalloc", 300 * MS, 2 * MS)  # an allocation like any other
    b.runtime("cudaLaunchKernel", 302 * MS, 10 * US, kind=LAUNCH, correlation=1)
    b.activity("k", 303 * MS, 10 * MS, correlation=1)
    b.runtime("cudaDeviceSynchronize", 303 * MS, 11 * MS, kind=RuntimeKind.SYNC)
    t = b.build()
    w = find_warmup(t, step_windows(t))
    assert w is not None
    assert (w.end_ns, w.span_ns, w.steps) == (300 * MS, 300 * MS, 0)
    assert [(i.kind, i.name, i.count, i.dur_ns) for i in w.items] == [
        ("context", "cudaFree", 1, 300 * MS)
    ]
    # the whole trace is one step: the region begins where the warm-up ends, [300, 314) ms
    r = analyze(t)
    assert r.bound is not None
    assert r.bound.region_ns == 14 * MS
    assert r.bound.busy_ns == 10 * MS


def test_no_warm_up_where_the_trace_has_none() -> None:
    b = TraceBuilder("plain.json")
    b.runtime("cudaMalloc", 0, 2 * MS)
    b.range("Torch-Compiled Region: 0/0", 0, 5 * MS)  # running compiled code, not compiling
    b.runtime("cudaLaunchKernel", 2 * MS, 10 * US, kind=LAUNCH, correlation=1)
    b.activity("k", 3 * MS, 1 * MS, correlation=1)
    t = b.build()
    assert find_warmup(t, step_windows(t)) is None
    assert analyze(t).warmup is None


# The four whole-program nsys exports, read with nsys's own view of them: every event before the
# first kernel is start-up. (span = the first kernel's start, from the first host event; the
# top item: the longest runtime call by name there, or the host work in the NVTX range that
# holds the lead-in; the label: the steady state from the first kernel on.)
NSYS = [
    ("extrap_con_kernel.sqlite", 215_952_320, "context", "cudaStreamCreate", "sync-bound"),
    (
        "extrap_concurrent16_nvtx_streams.sqlite",
        485_428_045,
        "lead-in",
        "(host work in main->test_max_par->init_data)",
        "sync-bound",
    ),
    ("pipit_cloverleaf_cuda_nsys2024.sqlite", 268_935_100, "context", "cudaMalloc", "device-bound"),
    (
        "pipit_saxpy_mpi_cuda_nsys2022.sqlite",
        822_739_918,
        "lead-in",
        "(host work in MPI_Init)",
        "sync-bound",
    ),
]


@pytest.mark.real_traces
@pytest.mark.parametrize(("name", "span", "kind", "top", "label"), NSYS)
def test_nsys_lead_in_is_warm_up(name: str, span: int, kind: str, top: str, label: str) -> None:
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    r = analyze(load(shared_trace("nsys", name)))
    w = r.warmup
    assert w is not None
    assert (w.span_ns, w.steps) == (span, 0)
    assert (w.items[0].kind, w.items[0].name) == (kind, top)
    assert r.bound is not None
    assert r.bound.label == label  # it was host-bound: the start-up was most of its idle
    # the steady state: the region begins at the first kernel
    act = r.trace.activities if r.trace is not None else None
    assert act is not None
    assert r.bound.region_ns < r.steps[0].frontend_ns


@pytest.mark.real_traces
def test_alexnet_context_creation_and_warmup_iterations_are_warm_up() -> None:
    # Read by hand: the first .to("cuda") (aten::to → aten::empty_strided) sits 29.9 s in
    # cudaDeviceGetStreamPriorityRange, creating the context; cuDNN's first convolution holds a
    # 6.0 s first cudaFree; the harness names its iterations "[param|...|warmup|forward]", and
    # they end at 43,269.97 ms; 155 ms follow, most of their idle in cudaDeviceSynchronize
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    r = analyze(load(shared_trace("kineto", "hta_a100_alexnet_syncs.json.gz")))
    w = r.warmup
    assert w is not None
    assert (w.end_ns, w.steps) == (43_269_970_000, 0)
    top = w.items[0]
    assert (top.kind, top.name, top.count) == ("context", "cudaDeviceGetStreamPriorityRange", 1)
    assert top.dur_ns == 29_927_377_000
    assert ("context", "cudaFree") in {(i.kind, i.name) for i in w.items}
    assert "first-steps" in {i.kind for i in w.items}
    b = r.bound
    assert b is not None
    assert b.region_ns == 155_395_000
    assert b.label == "sync-bound"
    # nothing of the start-up is advice now
    assert not any("empty_strided" in a for a in b.advice)
    assert not any(f.frame == "aten::empty_strided" for f in b.evidence.host_frames)


@pytest.mark.real_traces
def test_triton_example_has_no_compilation_and_says_what_was_not_recorded() -> None:
    # Read by hand: ProfilerStep#1 lasts 13,336 ms, but every other event lies in its first
    # 1.6 ms (a TorchDynamo cache lookup, one run of the compiled region, its Triton kernel, a
    # sync) and the profiler's "Record Window End" is at 1.84 ms: the trace holds no
    # compilation, and the 13.3 s after it was not recorded
    from asynctrace.traces.load import load
    from tests.conftest import shared_trace

    r = analyze(load(shared_trace("kineto", "hta_triton_example.json.gz")))
    assert r.warmup is None
    b = r.bound
    assert b is not None
    top = b.evidence.host_frames[0]
    assert top.frame == "(nothing recorded: after the last host event)"
    assert 13_334 * MS < top.idle_ns < 13_335 * MS
    assert all(f.frame != "(no host frame)" or f.idle_ns < MS for f in b.evidence.host_frames)
