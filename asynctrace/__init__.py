"""asynctrace: make PyTorch's asynchrony visible and checkable.

Capture (``trace``, ``Benchmark``, ``range``, ``expect_syncs``) needs torch and is imported on first
use; analysis (``load_source``, ``analyze``) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asynctrace.errors import (
    AsyncTraceError,
    AsyncTraceWarning,
    CaptureError,
    OptionError,
    TraceFormatError,
    UnexpectedSyncError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from asynctrace.analysis.report import Analysis, Report, analyze, analyze_detail
    from asynctrace.capture.benchmark import Benchmark
    from asynctrace.capture.options import TraceOptions
    from asynctrace.capture.profiler import Profile
    from asynctrace.capture.ranges import range
    from asynctrace.capture.sinks import BaseSink, SessionEnd, Sink
    from asynctrace.capture.syncs import expect_syncs
    from asynctrace.files.many import analyze_many
    from asynctrace.files.regression import assert_no_regression
    from asynctrace.files.sources import find_sources, load_source
    from asynctrace.traces.load import load
    from asynctrace.tracing import Session, current_session, trace

__all__ = [
    "Analysis",
    "AsyncTraceError",
    "AsyncTraceWarning",
    "BaseSink",
    "Benchmark",
    "CaptureError",
    "OptionError",
    "Profile",
    "Report",
    "Session",
    "SessionEnd",
    "Sink",
    "TraceFormatError",
    "TraceOptions",
    "UnexpectedSyncError",
    "__version__",
    "analyze",
    "analyze_detail",
    "analyze_many",
    "assert_no_regression",
    "current_session",
    "expect_syncs",
    "find_sources",
    "load",
    "load_source",
    "range",
    "trace",
]

# Lazy so that ``import asynctrace`` stays cheap and torch-free until capture is used.
_LAZY: dict[str, str] = {
    "Benchmark": "asynctrace.capture.benchmark",
    "Profile": "asynctrace.capture.profiler",
    "current_session": "asynctrace.tracing",
    "range": "asynctrace.capture.ranges",
    "Session": "asynctrace.tracing",
    "trace": "asynctrace.tracing",
    "TraceOptions": "asynctrace.capture.options",
    "BaseSink": "asynctrace.capture.sinks",
    "SessionEnd": "asynctrace.capture.sinks",
    "Sink": "asynctrace.capture.sinks",
    "expect_syncs": "asynctrace.capture.syncs",
    "load": "asynctrace.traces.load",
    "Report": "asynctrace.analysis.report",
    "analyze": "asynctrace.analysis.report",
    "analyze_detail": "asynctrace.analysis.report",
    "Analysis": "asynctrace.analysis.report",
    "load_source": "asynctrace.files.sources",
    "find_sources": "asynctrace.files.sources",
    "analyze_many": "asynctrace.files.many",
    "assert_no_regression": "asynctrace.files.regression",
}


# the names that run torch code: where torch is absent, one error says so with the install line
_NEEDS_TORCH = frozenset(
    {"Benchmark", "Session", "current_session", "expect_syncs", "range", "trace"}
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asynctrace' has no attribute {name!r}")
    if name in _NEEDS_TORCH:
        from asynctrace._extras import require_torch

        require_torch()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
