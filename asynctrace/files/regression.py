"""Reports from files, for comparing two runs: ``asynctrace compare`` and
:func:`assert_no_regression` (a test's check against a baseline file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from asynctrace.analysis.defaults import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, DEFAULT_MIN_STEPS
from asynctrace.errors import TraceFormatError

if TYPE_CHECKING:
    from asynctrace.analysis.compare import Comparison
    from asynctrace.analysis.report import Report

__all__ = ["assert_no_regression", "check_comparable", "kind_of", "load_report", "saved_report"]


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceFormatError(str(path), "no such file")
    if path.is_dir():
        raise TraceFormatError(
            str(path), "is a folder: compare two files (records, traces or saved reports)"
        )
    if not path.is_file():
        # reading a FIFO blocks forever, a device never ends: refuse before opening
        raise TraceFormatError(str(path), "not a regular file (a FIFO, socket or device)")


def saved_report(path: Path) -> bool:
    """Whether the file is a report ``asynctrace report --json`` wrote (not a trace)."""
    if path.suffix != ".json":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
    except OSError as e:
        raise TraceFormatError(str(path), f"cannot read the file: {e.strerror or e}") from None
    return head.startswith(b"{") and b'"schema_version"' in head and b'"traceEvents"' not in head


def load_report(path: str | os.PathLike[str]) -> Report:
    """The report of a file: a saved report read back, else the analysis of what the loader
    read (a trace or a session's records). Raises :class:`TraceFormatError` for anything
    unreadable."""
    from asynctrace.analysis.report import Report, analyze
    from asynctrace.files.sources import load_source

    p = Path(path)
    _check_file(p)
    if saved_report(p):
        try:
            return Report.from_json(p.read_bytes())
        except OSError as e:
            raise TraceFormatError(str(p), f"cannot read the file: {e.strerror or e}") from None
        except TraceFormatError as e:
            raise TraceFormatError(str(p), e.reason) from None
    return analyze(load_source(p))


def kind_of(r: Report) -> str:
    return "records" if r.trace is None else "trace"


def check_comparable(a: Report, b: Report, *, b_name: str) -> None:
    """Refuse two reports of different kinds, in one line."""
    ka, kb = kind_of(a), kind_of(b)
    if ka != kb:
        # a session's steps are its own boundaries, a trace's the profiler's: their times are
        # not the same measurement
        raise TraceFormatError(
            b_name,
            f"cannot compare {ka} with {kb}: give two records files or two traces/reports "
            "(a saved report compares with its own kind)",
        )


def assert_no_regression(
    baseline: str | os.PathLike[str] | Report,
    current: str | os.PathLike[str] | Report,
    *,
    min_effect: float = DEFAULT_MIN_EFFECT,
    alpha: float = DEFAULT_ALPHA,
    min_steps: int = DEFAULT_MIN_STEPS,
) -> Comparison:
    """Raise :class:`AssertionError` when ``current`` is a regression against ``baseline``
    (each a saved report, a trace, a records file or a :class:`Report`): its step time is up
    significantly and by at least ``min_effect``, or, with fewer than ``min_steps`` steady steps
    on a side, up by at least ``min_effect`` alone. The message is the comparison's Markdown
    summary. Returns the comparison otherwise."""
    from asynctrace.analysis.compare import compare
    from asynctrace.analysis.report import Report
    from asynctrace.render.compare import markdown

    a = baseline if isinstance(baseline, Report) else load_report(baseline)
    b = current if isinstance(current, Report) else load_report(current)
    check_comparable(a, b, b_name=b.source.path)
    c = compare(a, b, alpha=alpha, min_effect=min_effect, min_steps=min_steps)
    if c.gate.judged_by == "not judged":
        raise TraceFormatError(b.source.path, c.gate.message)
    if c.gate.regression:
        raise AssertionError(markdown(c))
    return c
