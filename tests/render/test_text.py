from __future__ import annotations

import io

from rich.console import Console

from asynctrace.analysis.ranks import compare_ranks
from asynctrace.analysis.report import analyze
from asynctrace.records import Records, SessionHeader, SessionSummary, StepRecord, SyncSite
from asynctrace.render.ranks import render_ranks
from asynctrace.render.text import render_report
from tests.analysis._traces import launches_trace, steps_trace


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, color_system=None), buf


def test_report_text_shows_the_figures() -> None:
    console, buf = _console()
    render_report(analyze(launches_trace()), console)
    out = buf.getvalue()
    assert "3 matched, 1 unmatched" in out
    assert "90 ns" in out  # p50 queue delay
    assert "1 call(s), 100 ns waiting" in out
    assert "cudaStreamSynchronize" in out
    # one headline, the diagnosis's: no verdict line says something else at the bottom
    assert "verdict:" not in out


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
    # the title, then the headline: the clocks, which leave the idle unattributed
    assert lines[0] == "clock.json (synthetic, unknown)"
    assert lines[1].startswith("clock-mismatch (undetermined): ")
    assert "next step: the host and device clocks disagree" in " ".join(out.split())
    assert any(line.startswith("warning (clock-mismatch): the host and device") for line in lines)
    assert any(line.startswith("bound: undetermined — run: device busy") for line in lines)
    assert "withheld: the clocks disagree" in out


def test_bound_headline_names_evidence_and_next_step() -> None:
    console, buf = _console()
    render_report(analyze(steps_trace()), console)
    out = buf.getvalue()
    lines = out.splitlines()
    # the headline, its next step and its evidence; then the bound's figures
    report = analyze(steps_trace())
    head = report.diagnosis[0]
    flat = " ".join(out.split())
    assert lines[1].startswith(head.message[:40])
    assert flat.index(head.message) < flat.index(f"next step: {head.advice}")
    assert flat.index(f"next step: {head.advice}") < flat.index("evidence: ")
    (bound,) = [line for line in lines if line.startswith("bound: ")]
    assert "device busy" in bound
    assert "idle" in bound


def _records(
    *, complete: bool = True, n_steps: int = 8, sites: int = 1, path: str = "a.records.jsonl"
) -> Records:
    header = SessionHeader(
        name="train",
        host="h",
        pid=1,
        rank=0,
        world_size=2,
        device_kind="fake",
        device_name="Fake GPU",
        asynchronous=True,
        started_unix_ns=0,
    )
    steps = [
        StepRecord(
            step=i,
            start_ns=i * 1000,
            frontend_ns=1000,
            device_ns=2000,
            sync_count=1,
            sync_wait_ns=300,
        )
        for i in range(n_steps)
    ]
    syncs = [
        SyncSite(
            site=f"train.py:{12 + k}", op="aten::item", count=n_steps, wait_ns=100, steps=n_steps
        )
        for k in range(sites)
    ]
    return Records(
        path=path,
        header=header,
        steps=steps,
        syncs=syncs,
        summary=SessionSummary(steps=n_steps, wall_ns=n_steps * 1000) if complete else None,
        complete=complete,
    )


def test_records_text_title_bound_figures_sites_verdict() -> None:
    console, buf = _console()
    render_report(analyze(_records()), console)
    out = buf.getvalue()
    lines = out.splitlines()
    assert lines[0] == "a.records.jsonl (fake, Fake GPU, rank 0): 8 step(s), 0.000 s"
    assert lines[1].startswith(analyze(_records()).diagnosis[0].code)
    # the bound lines in the layout a trace's take, the session as their scope
    (bound,) = [line for line in lines if line.startswith("bound: ")]
    assert "(estimated from step records) — session: device busy" in bound
    assert "per-step figures" in out
    assert "│ frontend " in out
    assert "1.000 µs" in out  # mean frontend
    assert "train.py:12" in out
    assert "aten::item" in out
    assert "verdict:" not in out
    # a trace's sections are not a session's
    for absent in ("activities:", "launch delays", "queue per stream", "syncs:"):
        assert absent not in out
    # the steps table only with --steps
    assert "steps (" not in out


def test_records_text_marks_a_killed_run() -> None:
    console, buf = _console()
    render_report(analyze(_records(complete=False, n_steps=1)), console)
    first = buf.getvalue().splitlines()[0]
    assert first.endswith(": 1 step(s) (incomplete: no summary line, the run was killed)")


def test_records_steps_table_shows_dashes_for_what_a_session_lacks() -> None:
    console, buf = _console()
    render_report(analyze(_records(n_steps=8)), console, steps=True)
    out = buf.getvalue()
    assert "steps (8, from session records)" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    step_rows = [r for r in rows if r.split("│")[1].strip().isdigit()]
    assert len(step_rows) == 8  # every step, not the first and last
    cells = [c.strip() for c in step_rows[0].split("│")[1:-1]]
    # step, frontend, device, gpu busy, gpu idle, syncs, sync wait, run-ahead, queue max, bound
    assert cells[:3] == ["0", "1.000 µs", "2.000 µs"]
    assert cells[3:5] == ["-", "-"]  # no measured device share
    assert cells[7:9] == ["-", "-"]  # no run-ahead recorded, no queue
    assert cells[9] == "-"  # a session's report holds the run's bound, not each step's


def test_sync_sites_beyond_top_are_counted_in_a_caption() -> None:
    console, buf = _console()
    render_report(analyze(_records(sites=4)), console, top_sites=2)
    out = buf.getvalue()
    (table,) = [t for t in out.split("sync sites")[1:]]
    assert "train.py:13" in table
    assert "train.py:14" not in table
    assert "2 more site(s) in the records file" in table


def test_a_trace_judged_as_one_step_shows_no_figures_table() -> None:
    # its steps table's one row holds the same figures
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import RuntimeKind

    b = TraceBuilder("whole.json")
    b.runtime("cudaDeviceSynchronize", 10, 50, kind=RuntimeKind.SYNC)
    console, buf = _console()
    render_report(analyze(b.build()), console)
    out = buf.getvalue()
    assert "per-step figures" not in out
    assert "steps (1, from " in out
    console, buf = _console()
    render_report(analyze(steps_trace()), console)
    assert "per-step figures" in buf.getvalue()


def test_a_traces_steps_table_shows_the_first_and_last_steps_unless_asked() -> None:
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import RangeKind

    b = TraceBuilder("eight.json")
    for s in range(8):
        b.range(f"ProfilerStep#{s}", s * 1000, 1000, kind=RangeKind.STEP, step=s)
    report = analyze(b.build())
    console, buf = _console()
    render_report(report, console)
    out = buf.getvalue()
    assert "steps (8, from profiler)" in out
    assert "first and last steps shown; --steps shows all" in out
    firsts = {ln.split("│")[1].strip() for ln in out.splitlines() if ln.startswith("│")}
    assert {"0", "1", "2", "5", "6", "7"} <= firsts
    assert not {"3", "4"} & firsts
    console, buf = _console()
    render_report(report, console, steps=True)
    assert "first and last steps shown" not in buf.getvalue()
