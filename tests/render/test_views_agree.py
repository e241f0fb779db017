"""The text report, the HTML page and the TensorBoard text show the same things, decided once
(:mod:`asynctrace.render.rows`): whether the bound is shown and its shares, the figures the
analysis withholds, the per-step figures and each step's row."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

pytest.importorskip("matplotlib", reason="the HTML report's plots need matplotlib")

from asynctrace.analysis.report import Analysis, analyze_detail
from asynctrace.export.tensorboard import summary_markdown
from asynctrace.files.sources import load_source
from asynctrace.render.html import report_html
from asynctrace.render.rows import bound_view, figure_rows, shown_bound, step_row
from asynctrace.render.text import render_report
from asynctrace.traces.load import load
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file


def _text(analysis: Analysis, *, steps: bool = False) -> str:
    out = io.StringIO()
    render_report(analysis.report, Console(file=out, width=400, color_system=None), steps=steps)
    return out.getvalue()


def _records(tmp_path: Path, *, asynchronous: bool) -> Analysis:
    p = write_records_file(
        tmp_path / "a.records.jsonl", make_steps(8, sync_wait_ns=0), asynchronous=asynchronous
    )
    return analyze_detail(load_source(p))


def test_a_synchronous_session_shows_no_bound_in_any_view(tmp_path: Path) -> None:
    a = _records(tmp_path, asynchronous=False)
    assert a.report.bound is not None  # the analysis judged it; no view shows it
    assert shown_bound(a.report) is None
    assert "bound:" not in _text(a)
    assert "bound:" not in summary_markdown(a.report)
    page = report_html(a)
    assert "bound: <b>" not in page
    assert "what bounds each step" not in page  # nor its picture


def test_an_asynchronous_session_shows_the_same_bound_everywhere(tmp_path: Path) -> None:
    a = _records(tmp_path, asynchronous=True)
    b = shown_bound(a.report)
    assert b is not None
    v = bound_view(b, scope="session")
    # the evidence's share, one decimal, in every view
    assert v.busy_share == f"{b.evidence.busy_pct:.1f}%"
    head = f"device busy {v.busy} of {v.region} ({v.busy_share})"
    assert head in _text(a)
    assert head in summary_markdown(a.report)
    assert head in report_html(a)


def test_figures_and_steps_are_the_same_rows_in_text_and_html(tmp_path: Path) -> None:
    a = _records(tmp_path, asynchronous=True)
    text, page = _text(a, steps=True), report_html(a)
    rows = figure_rows(a.report.figures)
    assert [r.label for r in rows][:2] == ["frontend", "device"]
    for r in rows:
        assert f'<td class="l">{r.label}</td><td>{r.steps}</td><td>{r.mean}</td>' in page
        assert re.search(rf"{r.label}\s+│\s+{re.escape(r.mean)}\s+│", text)
    for i in range(len(a.report.steps)):
        row = step_row(a.report, i)
        assert f'<td class="l">{row.step}</td><td>{row.frontend}</td>' in page


@pytest.mark.real_traces
def test_withheld_clock_figures_are_withheld_in_text_and_html() -> None:
    a = analyze_detail(load(shared_trace("kineto", "tracelens_mi300_vllm_graph_replay.json.gz")))
    assert a.report.trace is not None
    assert "launch delays" in a.report.trace.withheld
    text, page = _text(a), report_html(a)
    assert "withheld: the clocks disagree" in text
    assert "queue per stream: withheld" in text
    assert "launch delays withheld" in page
    assert "queue depth withheld" in page
    assert "<th>p50 ms</th>" not in page  # no table of placeholder zeros
    assert step_row(a.report, 0).queue_max == "-"


@pytest.mark.real_traces
def test_a_step_without_device_start_has_its_share_in_text_and_html() -> None:
    a = analyze_detail(load(shared_trace("kineto", "hta_large_integer_edge.json.gz")))
    assert a.report.trace is not None
    assert a.report.trace.steps[0].device_start_ns is None
    row = step_row(a.report, 0)
    assert row.gpu_busy != "-"
    assert row.bound == a.report.step_bounds[0].label
    text, page = _text(a), report_html(a)
    assert f"<td>{row.gpu_busy}</td><td>{row.gpu_idle}</td>" in page
    assert re.search(rf"│\s+{re.escape(row.gpu_busy)}\s+│\s+{re.escape(row.gpu_idle)}\s+│", text)
