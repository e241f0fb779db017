"""A report's steps as one flat object each, in the independent reading's names: the step
record, the trace's per-step extras and the step's bound side by side, for comparing with
``_reference`` (which reads the raw trace with none of our code)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec

from asynctrace.analysis.report import Report
from asynctrace.analysis.steps import StepSplit


def flat_split(split: StepSplit) -> list[SimpleNamespace]:
    return [_flat(s, x, None) for s, x in zip(split.steps, split.extras, strict=True)]


def flat_steps(report: Report) -> list[SimpleNamespace]:
    assert report.trace is not None
    bounds: list[Any] = report.step_bounds or [None] * len(report.steps)
    return [
        _flat(s, x, b) for s, x, b in zip(report.steps, report.trace.steps, bounds, strict=True)
    ]


def _flat(s: Any, x: Any, b: Any) -> SimpleNamespace:
    d = {**msgspec.to_builtins(s), **msgspec.to_builtins(x)}
    d.pop("type", None)
    d["cpu_ns"] = d.pop("frontend_ns")
    d["in_flight_steps"] = d.pop("in_flight")
    # a step without device activity: the reading says a device window of 0
    d["device_ns"] = d["device_ns"] if d["device_ns"] is not None else 0
    if b is not None:
        d["gpu_busy_ns"], d["gpu_idle_ns"] = b.busy_ns, b.idle_ns
    d["bound"] = b
    return SimpleNamespace(**d)
