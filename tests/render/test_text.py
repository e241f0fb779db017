from __future__ import annotations

import io

from rich.console import Console

from asynctrace.analysis.ranks import compare_ranks
from asynctrace.analysis.report import analyze
from asynctrace.render.text import format_ns, render_ranks, render_report
from tests.analysis._traces import launches_trace, steps_trace


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, color_system=None), buf


def test_format_ns() -> None:
    assert format_ns(None) == "-"
    assert format_ns(999) == "999 ns"
    assert format_ns(1500) == "1.500 µs"
    assert format_ns(-2_500_000) == "-2.500 ms"
    assert format_ns(3_000_000_000) == "3.000 s"


def test_format_ns_never_prints_1000_of_a_unit() -> None:
    # a value just under a unit boundary rounds up to it: printed in the next unit, not as 1000
    assert format_ns(999.6) == "1.000 µs"
    assert format_ns(-999.6) == "-1.000 µs"
    assert format_ns(999_999.6) == "1.000 ms"
    assert format_ns(999_999_999.6) == "1.000 s"
    assert format_ns(999.4) == "999 ns"
    assert format_ns(999_999.4) == "999.999 µs"
    assert format_ns(5e12) == "5000.000 s"


def test_report_text_shows_the_figures() -> None:
    console, buf = _console()
    render_report(analyze(launches_trace()), console)
    out = buf.getvalue()
    assert "3 matched, 1 unmatched" in out
    assert "90 ns" in out  # p50 queue delay
    assert "1 call(s), 100 ns waiting" in out
    assert "cudaStreamSynchronize" in out
    assert "verdict:" in out


def test_steps_summary_and_all() -> None:
    console, buf = _console()
    render_report(analyze(steps_trace()), console, steps=True)
    out = buf.getvalue()
    assert "steps (2, from profiler)" in out
    assert "-500 ns" in out  # step 1 run-ahead
    assert "200 ns" in out


def test_ranks_table_flags_slowest() -> None:
    console, buf = _console()
    a = analyze(steps_trace())
    render_ranks(compare_ranks([a, a]), console)
    assert buf.getvalue().count("slowest") >= 1


def test_names_with_brackets_are_printed_literally() -> None:
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import RuntimeKind

    b = TraceBuilder("[odd].json")
    b.python_frame("we[bold]ird.py(3): f", 0, 100)
    b.runtime("cudaDeviceSynchronize", 10, 50, kind=RuntimeKind.SYNC)
    console, buf = _console()
    render_report(analyze(b.build()), console)
    out = buf.getvalue()
    assert "we[bold]ird.py:3" in out
    assert "[odd].json" in out


def test_bound_headline_and_warnings_lead_the_report() -> None:
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import RangeKind, RuntimeKind

    b = TraceBuilder("clock.json")
    for s in range(3):
        b.range(f"ProfilerStep#{s}", s * 2_000_000, 2_000_000, kind=RangeKind.STEP, step=s)
        b.runtime(
            "cudaLaunchKernel", s * 2_000_000, 10_000, kind=RuntimeKind.LAUNCH, correlation=s + 1
        )
        b.activity("k", 145_000_000 + s * 3_000_000, 1_000_000, correlation=s + 1)
    console, buf = _console()
    render_report(analyze(b.build()), console)
    out = buf.getvalue()
    lines = out.splitlines()
    assert lines[0].startswith("warning (clock-mismatch): the host and device clocks")
    assert any(line.startswith("bound: undetermined — run: device busy") for line in lines[:4])
    assert "next step:" in out
    assert "withheld: the clocks disagree" in out


def test_bound_headline_names_evidence_and_next_step() -> None:
    console, buf = _console()
    render_report(analyze(steps_trace()), console)
    out = buf.getvalue()
    head = out.splitlines()[1]
    assert head.startswith("bound: ")
    assert "device busy" in head
    assert "idle" in head
    assert "  next step: " in out
