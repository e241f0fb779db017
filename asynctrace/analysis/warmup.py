"""Warm-up: the start-up work before a trace's or a session's steady state (pure).

:func:`find_warmup` reads a trace's own events for work that happens once, at start-up, and
says where the steady state begins (docs/how-it-works.md, "Warm-up", is the definition):

* **context** — CUDA/HIP context creation and first allocations: the first call of each
  :data:`CONTEXT_CALLS` name that lasts at least :data:`CONTEXT_MIN_NS` (the context is built
  inside whichever runtime call comes first: ``cudaDeviceGetStreamPriorityRange``,
  ``cudaFree(0)``, the first ``cudaMalloc`` ...);
* **compile** — torch.compile / Inductor / Triton compilation: host ranges and Python frames
  whose names are compilation phases (:data:`COMPILE_PATTERN`; running compiled code —
  ``Torch-Compiled Region``, ``CompiledFunction``, a ``triton_*`` kernel — is not compilation);
* **autotune** — cuDNN algorithm search and Inductor/Triton autotuning (:data:`AUTOTUNE_PATTERN`);
* **first-steps** — iterations the program itself marks as warm-up (a range whose name holds
  the word ``warmup``, as benchmark harnesses write);
* **lead-in** — in a whole-program nsys export, everything before the device's first activity
  (runtime calls there are listed by name).

The steady state begins where the last of them ends (``WarmUp.end_ns``). With steps, the leading
steps whose host window begins before that are warm-up steps (``WarmUp.steps``), left out of the
run's label; the bound analysis does the leaving out.

A session's records have no such events: :func:`warmup_of_steps` takes its slow leading steps
(each over :data:`WARMUP_STEP_FACTOR` median steps, at most :data:`WARMUP_MAX_STEPS`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from asynctrace.analysis._bound_model import WarmUp, WarmUpItem
from asynctrace.analysis.kernels import labelled_device
from asynctrace.analysis.steps import StepWindow, host_span
from asynctrace.analysis.timeline import unique_inverse
from asynctrace.records import StepRecord
from asynctrace.traces.model import RangeKind, Trace

__all__ = [
    "AUTOTUNE_PATTERN",
    "COMPILE_PATTERN",
    "CONTEXT_CALLS",
    "CONTEXT_MIN_NS",
    "WARMUP_MAX_STEPS",
    "WARMUP_RANGE_PATTERN",
    "WARMUP_STEP_FACTOR",
    "find_warmup",
    "warmup_of_steps",
]

#: a session's leading step is warm-up when it takes more than this many median steps ...
WARMUP_STEP_FACTOR: Final = 3.0
#: ... among at most this many leading steps (and never half the steps or more)
WARMUP_MAX_STEPS: Final = 8

#: runtime/driver calls inside which a context is created or first memory is set up
CONTEXT_CALLS = frozenset(
    {
        "cuInit",
        "cuCtxCreate",
        "cuCtxCreate_v2",
        "cuDevicePrimaryCtxRetain",
        "cudaSetDevice",
        "cudaGetDeviceCount",
        "cudaDeviceGetStreamPriorityRange",
        "cudaFree",
        "cudaMalloc",
        "cudaMallocHost",
        "cudaHostAlloc",
        "cudaStreamCreate",
        "cudaStreamCreateWithFlags",
        "cudaStreamCreateWithPriority",
        "cudaEventCreate",
        "cudaEventCreateWithFlags",
        "hipInit",
        "hipSetDevice",
        "hipFree",
        "hipMalloc",
        "hipHostMalloc",
        "hipStreamCreate",
        "hipStreamCreateWithFlags",
        "hipStreamCreateWithPriority",
        "hipDeviceGetStreamPriorityRange",
    }
)
#: a first call shorter than this is an ordinary call (a window recorded mid-run sees the
#: allocator's first cudaMalloc of the window, not the context's)
CONTEXT_MIN_NS = 10_000_000
#: compilation phases, as record_function ranges (torch's dynamo_timed names), Python frames
#: (file and function) and runtime calls
COMPILE_PATTERN = re.compile(
    r"^_compile\.|^compile_fx|^OutputGraph\.call_user_compiler|^create_aot_dispatcher_function|"
    r"^PyCodeCache\.load|^async_compile|^inductor_compile|^TorchDynamo Compile|"
    r"_dynamo/convert_frame\.py\(\d+\): (_compile|compile_inner)$|"
    r"_inductor/compile_fx\.py\(\d+\): |_dynamo/output_graph\.py\(\d+\): call_user_compiler$|"
    r"triton/compiler/compiler\.py\(\d+\): compile$|_inductor/codecache\.py\(\d+\): load"
)
#: algorithm search: cuDNN's and MIOpen's Find, Inductor's autotuning of Triton configs
AUTOTUNE_PATTERN = re.compile(
    r"^cudnnFind|^cudnnGet\w*Algorithm|^miopenFind|benchmark_all_configs|autotune_to_one_config|"
    r"_inductor/select_algorithm\.py\(\d+\): (autotune|benchmark)"
)
#: a range the program names as warm-up ("[...|warmup|forward]", "warmup_iter", "warm-up")
WARMUP_RANGE_PATTERN = re.compile(r"(?<![a-z])warm[-_ ]?up(?![a-z])", re.IGNORECASE)

I64 = npt.NDArray[np.int64]


def _match(strings: Sequence[str], pattern: re.Pattern[str]) -> npt.NDArray[np.bool_]:
    """For every string id, whether the pattern matches it (one pass over the strings)."""
    return np.array([bool(pattern.search(s)) for s in strings] or [False], bool)


def _items(
    kind: str, names: npt.NDArray[np.int32], dur: I64, strings: Sequence[str]
) -> list[WarmUpItem]:
    """One item per name: its calls and their summed time."""
    if not len(names):
        return []
    uniq, inv = unique_inverse(names)
    total = np.bincount(inv, weights=dur).astype(np.int64)
    count = np.bincount(inv)
    return [
        WarmUpItem(kind=kind, name=strings[int(n)], count=int(c), dur_ns=int(d))
        for n, c, d in zip(uniq.tolist(), count.tolist(), total.tolist(), strict=True)
    ]


def _first_device_start(trace: Trace) -> int | None:
    """Start of the first activity of the device the analysis labels (the one with most
    activities)."""
    act = trace.activities
    if not len(act):
        return None
    return int(act.start_ns[labelled_device(trace)].min())


def find_warmup(trace: Trace, windows: Sequence[StepWindow] = ()) -> WarmUp | None:
    """The trace's warm-up (module docstring), or None where it has none.

    ``windows``: the trace's steps (:func:`~asynctrace.analysis.steps.step_windows`); the
    leading ones whose host window begins before the warm-up ends are ``WarmUp.steps``."""
    span = host_span(trace)
    if span is None:
        return None
    strings = trace.strings
    rt, r, py = trace.runtime, trace.ranges, trace.python_frames
    items: list[WarmUpItem] = []
    ends: list[int] = []

    # context: the first call of each context name, where it is long
    if len(rt):
        ctx_name = np.array([s in CONTEXT_CALLS for s in strings] or [False], bool)
        # the first call of each name: the table is sorted by start
        names, inv = unique_inverse(rt.name)
        first = np.full(len(names), len(rt), np.intp)
        np.minimum.at(first, inv, np.arange(len(rt)))
        first = first[ctx_name[rt.name[first]] & (rt.dur_ns[first] >= CONTEXT_MIN_NS)]
        if len(first):
            items += _items("context", rt.name[first], rt.dur_ns[first], strings)
            ends.append(int((rt.start_ns[first] + rt.dur_ns[first]).max()))

    # compilation and autotuning: host ranges, Python frames and runtime calls by name
    host_r = r.kind != RangeKind.GPU_ANNOTATION if len(r) else np.zeros(0, bool)
    for kind, pattern in (("compile", COMPILE_PATTERN), ("autotune", AUTOTUNE_PATTERN)):
        named = _match(strings, pattern)
        for start, dur, name, on in (
            (r.start_ns, r.dur_ns, r.name, host_r),
            (py.start_ns, py.dur_ns, py.name, None),
            (rt.start_ns, rt.dur_ns, rt.name, None),
        ):
            if not len(start):
                continue
            hit = named[name] if on is None else named[name] & on
            if hit.any():
                items += _items(kind, name[hit], _outermost(start[hit], dur[hit]), strings)
                ends.append(int((start[hit] + dur[hit]).max()))

    # iterations the program marks as warm-up
    if len(r):
        marked = _match(strings, WARMUP_RANGE_PATTERN)[r.name] & host_r & (r.kind != RangeKind.STEP)
        if marked.any():
            s, d = r.start_ns[marked], r.dur_ns[marked]
            items += _items("first-steps", r.name[marked], _outermost(s, d), strings)
            ends.append(int((s + d).max()))

    # a whole program's lead-in: everything before the device's first activity; its runtime
    # calls by name (context ones as context), the rest named after the range it lay in
    first_dev = _first_device_start(trace)
    whole = not windows or windows[0].source == "trace"
    if trace.format == "nsys" and whole and first_dev is not None and first_dev > span[0]:
        items = [i for i in items if i.kind != "context"]
        inside = (rt.start_ns >= span[0]) & (rt.start_ns + rt.dur_ns <= first_dev)
        ctx = np.array([s in CONTEXT_CALLS for s in strings] or [False], bool)[rt.name]
        items += _items("context", rt.name[inside & ctx], rt.dur_ns[inside & ctx], strings)
        items += _items("lead-in", rt.name[inside & ~ctx], rt.dur_ns[inside & ~ctx], strings)
        rest = first_dev - span[0] - int(rt.dur_ns[inside].sum())
        if rest > 0:
            items.append(
                WarmUpItem(
                    kind="lead-in",
                    name=_lead_in_range(trace, span[0], first_dev),
                    count=1,
                    dur_ns=rest,
                )
            )
        ends.append(first_dev)

    if not ends:
        return None
    end = max(ends)
    steps = sum(1 for w in windows if w.source != "trace" and w.start_ns < end)
    items.sort(key=lambda i: (-i.dur_ns, i.kind, i.name))
    return WarmUp(end_ns=end, span_ns=max(end - span[0], 0), steps=steps, items=items)


def _outermost(start: I64, dur: I64) -> I64:
    """Each interval's time, nested ones counted once: an interval inside an earlier one
    (a compile phase inside a compile phase) counts 0."""
    end = start + dur
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    inside = np.r_[False, e[1:] <= reach[:-1]]
    # partly overlapping ones count their part past what came before
    prev = np.r_[s[0], reach[:-1]]
    own = np.where(inside, 0, e - np.maximum(s, prev))
    out = np.empty_like(own)
    out[order] = own
    return out.astype(np.int64)


def _lead_in_range(trace: Trace, t0: int, t1: int) -> str:
    """What the lead-in's host work outside runtime calls is named after: the innermost host
    range covering most of ``[t0, t1)``, else "(other host work)"."""
    r = trace.ranges
    on = (r.kind != RangeKind.GPU_ANNOTATION) & (r.kind != RangeKind.STEP) if len(r) else None
    if on is None or not on.any():
        return "(other host work)"
    s, e = r.start_ns[on], r.start_ns[on] + r.dur_ns[on]
    overlap = np.minimum(e, t1) - np.maximum(s, t0)
    if overlap.max() <= 0:
        return "(other host work)"
    # the innermost (shortest) of those covering nearly as much as the most
    near = np.flatnonzero(overlap >= 0.9 * overlap.max())
    best = int(near[np.argmin((e - s)[near])])
    return f"(host work in {trace.name_of(int(r.name[on][best]))})"


def warmup_of_steps(steps: Sequence[StepRecord], *, median_ns: float) -> WarmUp | None:
    """A session's warm-up: its leading steps, each taking more than
    :data:`WARMUP_STEP_FACTOR` × ``median_ns`` (the median step), at most
    :data:`WARMUP_MAX_STEPS` of them and fewer than half the steps; None where the first step
    is not that slow. ``steps`` are the session's first steps, in order."""
    n = len(steps)
    if n < 2 or median_ns <= 0:
        return None
    k = 0
    limit = min(WARMUP_MAX_STEPS, (n - 1) // 2)
    while k < limit and steps[k].frontend_ns > WARMUP_STEP_FACTOR * median_ns:
        k += 1
    if k == 0:
        return None
    span = sum(max(0, s.frontend_ns) for s in steps[:k])
    first = steps[0].step
    name = f"step {first}" if k == 1 else f"steps {first}–{steps[k - 1].step}"
    return WarmUp(
        end_ns=steps[k].start_ns,
        span_ns=span,
        steps=k,
        items=[WarmUpItem(kind="first-steps", name=name, count=k, dur_ns=span)],
    )
