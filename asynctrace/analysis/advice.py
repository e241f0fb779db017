"""One concrete next step for a bound label, naming what its evidence names (the kernels that
fill the busy time, the host frames, the sync sites, the streams waited on)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from asynctrace.analysis._bound_model import LAUNCH_GAP_NS, Bound, BoundEvidence, KernelTime
from asynctrace.records.units import format_ns

__all__ = ["advice_for", "is_launch_overhead", "short_name"]


def short_name(name: str, limit: int = 60) -> str:
    """A kernel's name without its argument list and leading ``void``, cut to ``limit``."""
    head = name.split("(", 1)[0].removeprefix("void ").strip() or name
    return head if len(head) <= limit else head[: limit - 1] + "…"


_COMM_KERNEL = re.compile(
    r"nccl|rccl|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|"
    r"alltoall|sendrecv|broadcast",
    re.I,
)


_COPY_KERNEL = re.compile(r"memcpy|memset", re.I)


_MATMUL_KERNEL = re.compile(
    r"gemm|cutlass|cublas|conv|xmma|wgrad|dgrad|fprop|matmul|mma|implicit", re.I
)


_ELEMENTWISE_KERNEL = re.compile(
    r"elementwise|vectorized|unrolled|reduce_kernel|softmax|norm|bn_|activation|fill|copy_kernel",
    re.I,
)


def _kernel_advice(top: Sequence[KernelTime], busy_ns: int) -> str:
    """The next step that fits the kernels that fill the busy time: communication, copies,
    matrix products or elementwise work (the largest of them among the top kernels); tensor
    cores and fusion only where those kernels dominate."""
    by = {"comm": 0, "copy": 0, "matmul": 0, "elementwise": 0}
    for k in top:
        for kind, pattern in (
            ("comm", _COMM_KERNEL),
            ("copy", _COPY_KERNEL),
            ("matmul", _MATMUL_KERNEL),
            ("elementwise", _ELEMENTWISE_KERNEL),
        ):
            if pattern.search(k.name):
                by[kind] += k.total_ns
                break
    kind, ns = max(by.items(), key=lambda kv: kv[1])
    share = f"{100 * ns / busy_ns:.0f}%" if busy_ns > 0 else ""
    if ns == 0 or (busy_ns > 0 and ns < 0.3 * busy_ns):
        return "speed up its top kernels (profile them: Nsight Compute, the kernels' shapes)"
    if kind == "comm":
        return (
            f"communication kernels (NCCL) take {share} of the busy time: overlap them with "
            "compute (DDP bucketing, async collectives), communicate less often or less data"
        )
    if kind == "copy":
        return (
            f"copies take {share} of the busy time: keep data on the device, batch small "
            "copies into one, copy from pinned memory"
        )
    if kind == "matmul":
        return (
            f"matrix products and convolutions take {share} of the busy time: run them on "
            "tensor cores (bf16/fp16 autocast, TF32), with shapes in multiples of 8 "
            "(channels_last for convolutions)"
        )
    return (
        f"elementwise and reduction kernels take {share} of the busy time: fuse them "
        "(torch.compile), avoid materializing intermediates"
    )


def _device_advice(b: Bound) -> str:
    e = b.evidence
    kernels = ", ".join(
        f"{short_name(k.name)} ({format_ns(k.total_ns)}, ×{k.count})" for k in e.top_kernels[:3]
    )
    fit = _kernel_advice(e.top_kernels, b.busy_ns)
    return (
        f"the device is busy {e.busy_pct:.0f}% of the time: {fit}"
        + (f" — {kernels}" if kernels else "")
        + "; the host is not the limit"
    )


def is_launch_overhead(e: BoundEvidence) -> bool:
    """Whether a run's host idle is launch overhead: its gaps between kernels shorter than
    :data:`LAUNCH_GAP_NS` leave the device idle at least as long as the host's work does (by
    their time: short gaps that idle nothing are none). The advice and the diagnosis's
    ``launch-overhead`` both ask this."""
    return e.launch_gaps_ns > 0 and e.launch_gaps_ns >= e.host_work_ns


def _host_advice(b: Bound) -> str:
    e = b.evidence
    if is_launch_overhead(e):
        return (
            f"launch overhead: {e.launch_gaps} gaps under {LAUNCH_GAP_NS // 1000} µs "
            f"between kernels ({format_ns(e.launch_gaps_ns)} idle) — capture the step in a "
            'CUDA graph (torch.compile(mode="reduce-overhead"), torch.cuda.graphs), launch '
            "fewer, larger kernels (fusion, torch.compile), or run larger batches"
        )
    frames = ", ".join(
        f"{f.frame}" + (f" ({f.site})" if f.site else "") + f" {format_ns(f.idle_ns)}"
        for f in e.host_frames[:3]
    )
    return (
        f"host work: the device waits {format_ns(e.host_work_ns)} in "
        f"{e.host_work_gaps} gaps while the host computes"
        + (f" — in {frames}" if frames else "")
        + ": move that work out of the step, overlap it with device work, or make it "
        "cheaper"
    )


def _sync_advice(b: Bound) -> str:
    sites = ", ".join(
        (f"{s.site} ({s.op} ×{s.count}" if s.site else f"{s.op} (×{s.count}")
        + f", opens {format_ns(s.idle_ns)} of idle)"
        for s in b.evidence.sync_sites[:3]
    )
    return (
        "syncs stall the pipeline"
        + (f" at {sites}" if sites else "")
        + ": keep the loss on the device (accumulate it, call .item() once per log "
        "interval), copy with non_blocking=True from pinned memory, and avoid "
        "boolean-mask indexing / nonzero() in the step"
    )


def _input_advice(b: Bound) -> str:
    return (
        f"the device waits {format_ns(b.idle_ns_by_cause.input)} for data: raise "
        "DataLoader(num_workers=...), set pin_memory=True, prefetch (prefetch_factor, "
        "copy the next batch to the device with non_blocking=True while this one runs)"
    )


def _dependency_advice(b: Bound) -> str:
    waited = ", ".join(
        f"stream {w.stream} ({short_name(w.name)}, {format_ns(w.idle_ns)})"
        for w in b.evidence.waited_on[:3]
    )
    return (
        "queued work waited on other work"
        + (f": {waited}" if waited else "")
        + " — overlap communication with computation (bucketing, async collectives), "
        "check event waits between streams, and the launch latency of graph replays"
    )


def _undetermined_advice(b: Bound) -> str:
    return (
        f"{format_ns(b.idle_ns_by_cause.unattributed)} of idle has no launch to explain it "
        "(activity missing, unlinked launches or clocks that disagree): re-record with "
        "the device activity of every stream (and graph replays) traced"
    )


#: the advice of each label (an asynchronous device whose clocks agree)
_ADVICE = {
    "device-bound": _device_advice,
    "host-bound": _host_advice,
    "sync-bound": _sync_advice,
    "input-bound": _input_advice,
    "dependency-bound": _dependency_advice,
}


def advice_for(
    label: str, b: Bound | None = None, *, asynchronous: bool = True, clocks_disagree: bool = False
) -> list[str]:
    """One concrete next step for a label, naming what the evidence names (``clocks_disagree``:
    the trace's host and device clocks disagree, and the idle causes are withheld)."""
    if b is None:
        return []
    e = b.evidence
    if clocks_disagree and label == "undetermined":
        first = (
            f"the host and device clocks disagree: the device is busy {e.busy_pct:.0f}% of its "
            f"own span, and the {format_ns(b.idle_ns)} idle cannot be tied to what the host did — "
            "re-record with host and device on one clock (one profiler session on one machine; "
            "an export that converts device timestamps to the host clock)"
        )
    elif label == "device-bound" and not asynchronous:
        # the host ran every op itself: no device, no GPU advice
        first = (
            f"the host's own compute fills {e.busy_pct:.0f}% of the step: profile the step "
            "(torch.profiler, py-spy) and speed up its top ops"
        )
    else:
        first = _ADVICE.get(label, _undetermined_advice)(b)
    out = [first]
    if not asynchronous:
        out.append(
            "the CPU backend is synchronous: this label is about the host (there is no queue "
            "to run ahead); on an accelerator the same loop may be bound differently"
        )
    return out
