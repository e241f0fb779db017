"""What bounds each step, as the views show it: the per-step bars (the data drawn, not pixels)
of traces and records alike, from the Analysis; the HTML report's bound box and its escaping,
the ranks table."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="the pictures need matplotlib")

from asynctrace.analysis.bound import (
    CAUSES,
    Bound,
    BoundEvidence,
    HostFrame,
    IdleByCause,
    ReportWarning,
)
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.records_bound import bound_of_records
from asynctrace.analysis.report import Analysis, analyze_detail
from asynctrace.records import read_records
from asynctrace.render.html import combined_html, report_html
from asynctrace.render.legend import COLORS, IDLE_CAUSE_COLORS
from asynctrace.render.plot import idle_bar_segments, plot_idle_by_cause
from asynctrace.traces.load import load
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file
from tests.export.test_chrome import two_step_trace

EVIL = '<script>alert("x")</script>&'


def _bar_heights_ns(fig) -> list[float]:  # type: ignore[no-untyped-def]
    return [r.get_height() * 1e6 for r in fig.axes[0].patches]


def test_the_bars_add_up_to_each_steps_share_and_the_plot_draws_them() -> None:
    analysis = analyze_detail(two_step_trace())
    report = analysis.report
    segments = idle_bar_segments(analysis.bounds)
    assert [g.kind for g in segments] == ["busy", *(f"idle:{c}" for c in CAUSES)]
    assert [g.color for g in segments] == [COLORS["busy"], *IDLE_CAUSE_COLORS.values()]
    total = np.sum([g.values_ns for g in segments], axis=0)
    shares = [b.share_end_ns - b.share_start_ns for b in report.step_bounds]
    # schema 4: the gap [800, 1900) before step 1's first kernel is split at step 1's host
    # start (1000): step 0 owns [0, 1000), step 1 [1000, 2300)
    assert total.tolist() == shares == [1000, 1300]
    # step 0: busy 300 (kernel k0), idle 700 ns of host gaps; step 1: busy 400, idle 900
    assert segments[0].values_ns.tolist() == [300, 400]
    assert segments[1].values_ns.tolist() == [700, 900]

    fig = plot_idle_by_cause(analysis)
    drawn = [v for g in segments if g.values_ns.any() for v in g.values_ns.tolist()]
    assert _bar_heights_ns(fig) == pytest.approx(drawn)
    title = fig.axes[0].get_title()
    assert f"run: {report.bound.label if report.bound else ''}" in title
    assert "two_steps.json" in title


@pytest.mark.real_traces
@pytest.mark.parametrize(
    "name",
    ["hta_v100_ns_resolution_rank0.json.gz", "tracelens_b200_compile_culaunchkernelex.json.gz"],
)
def test_real_trace_bars_partition_the_run(name: str) -> None:
    analysis = analyze_detail(load(shared_trace("kineto", name)))
    report = analysis.report
    assert report.bound is not None
    segments = idle_bar_segments(analysis.bounds)
    total = np.sum([g.values_ns for g in segments], axis=0)
    assert total.tolist() == [b.region_ns for b in report.step_bounds]
    # the steps' shares partition the run: the bars add up to its busy and idle by cause
    assert segments[0].values_ns.sum() == report.bound.busy_ns
    for g, c in zip(segments[1:], CAUSES, strict=True):
        assert g.values_ns.sum() == getattr(report.bound.idle_ns_by_cause, c)


def test_records_bars_are_the_estimated_step_bounds(tmp_path: Path) -> None:
    steps = make_steps(6, frontend_ns=2_000_000, device_ns=1_200_000, run_ahead_ns=0,
                       data_wait_ns=250_000, sync_wait_ns=500_000, sync_count=1)  # fmt: skip
    rec = read_records(write_records_file(tmp_path / "r.records.jsonl", steps))
    rb = bound_of_records(rec.steps, asynchronous=rec.header.asynchronous)
    analysis = analyze_detail(rec)
    series = analysis.bounds
    assert series.estimated
    assert series.label == rb.run.label
    segments = idle_bar_segments(series)
    assert np.sum([g.values_ns for g in segments], axis=0).tolist() == [
        b.region_ns for b in rb.steps
    ]
    assert segments[2].values_ns.tolist() == [b.idle_ns_by_cause.sync for b in rb.steps]
    fig = plot_idle_by_cause(analysis)
    assert "session: " + rb.run.label + " (estimated" in fig.axes[0].get_title()


def test_a_long_run_is_drawn_as_bin_means(tmp_path: Path) -> None:
    n = 5000
    steps = make_steps(n, frontend_ns=2_000_000, device_ns=1_500_000, run_ahead_ns=0)
    # every 7th step waits on a sync: a bin's mean must carry it
    steps = [
        msgspec.structs.replace(s, sync_wait_ns=700_000, sync_count=1) if s.step % 7 == 0 else s
        for s in steps
    ]
    rec = read_records(write_records_file(tmp_path / "long.records.jsonl", steps))
    rb = bound_of_records(rec.steps, asynchronous=True)
    analysis = analyze_detail(rec)
    series = analysis.bounds
    assert series.downsampled
    assert (series.bins, series.bin_steps) == (1667, 3)
    segments = idle_bar_segments(series)
    means = np.sum([g.values_ns for g in segments], axis=0)
    shares = np.array([b.region_ns for b in rb.steps], float)
    counts = np.diff(np.r_[np.arange(0, n, 3), n])
    # a bin's parts add up to its mean share; weighted by the bin's steps, to the run's
    assert np.allclose(means * counts, np.add.reduceat(shares, np.arange(0, n, 3)))
    assert (segments[2].values_ns * counts).sum() == pytest.approx(rb.run.idle_ns_by_cause.sync)
    fig = plot_idle_by_cause(analysis)
    assert "downsampled: 5,000 steps in 1,667 bins of 3" in fig.axes[0].get_title()


def _box(page: str) -> str:
    m = re.search(r'<div class="bound">(.*?)</div>', page, re.S)
    assert m is not None, "no bound box"
    return m.group(1)


def _diagnosis_box(page: str) -> str:
    m = re.search(r'<div class="diagnosis">(.*?)</div>', page, re.S)
    assert m is not None, "no diagnosis box"
    return m.group(1)


@pytest.mark.real_traces
def test_html_box_v100_is_device_bound() -> None:
    from asynctrace.analysis.report import analyze_detail

    a = analyze_detail(load(shared_trace("kineto", "hta_v100_ns_resolution_rank0.json.gz")))
    page = report_html(a)
    box = _box(page)
    assert box.startswith('<p class="label">bound: <b>device-bound</b> — run: device busy ')
    assert "(97.7%)" in box
    assert "<td>5.58 ms</td><td>1.1%</td>" in box  # host idle, with its unit, and its share
    assert "evidence: host idle: 158 launch gaps" in box
    # the next step is the diagnosis's, whose box leads the page
    assert "next step: the device is busy 98% of the time" in _diagnosis_box(page)
    assert page.index('class="diagnosis"') < page.index('class="bound"')
    # the steps table gives each step's own label
    report = a.report
    assert len(report.step_bounds) == len(report.steps)
    for s, b in zip(report.steps, report.step_bounds, strict=True):
        assert f"<td>{s.in_flight}</td><td>{b.label}</td></tr>" in page


@pytest.mark.real_traces
def test_html_box_b200_is_host_bound_with_its_host_frames() -> None:
    from asynctrace.analysis.report import analyze_detail

    trace = load(shared_trace("kineto", "tracelens_b200_compile_culaunchkernelex.json.gz"))
    page = report_html(analyze_detail(trace))
    box = _box(page)
    assert "bound: <b>host-bound</b> — whole trace: device busy" in box
    assert "<td>75.7 ms</td><td>86.6%</td>" in box
    assert "513 host-work gaps" in box
    # schema 4: measured frames (the time in each, not one sample per gap)
    frame = "<code>__torch_function__</code> at <code>vllm/model_executor/parameter.py:122</code>"
    assert frame in box
    # the diagnosis leads, its next step above its figures; no verdict box says otherwise
    diag = _diagnosis_box(page)
    assert diag.startswith('<p class="label"><b>host-bound</b>: ')
    assert diag.index("next step: host work: ") < diag.index('<table class="evidence">')
    assert page.index('class="diagnosis"') < page.index('class="bound"')
    assert 'class="verdict"' not in page
    assert "what bounds each step — whole trace: host-bound" in page


def test_html_box_escapes_what_comes_from_the_file_and_leads_with_the_warnings() -> None:
    from asynctrace.analysis.report import analyze_detail

    a = analyze_detail(two_step_trace())
    evidence = BoundEvidence(
        busy_pct=10.0,
        idle_pct_by_cause={"host": 90.0},
        leading_cause="host",
        host_frames=[HostFrame(frame=EVIL, site=f"{EVIL}.py:3", idle_ns=5, gaps=1)],
        notes=[EVIL],
    )
    bound = Bound(
        label="host-bound",
        region_ns=100,
        busy_ns=10,
        idle_ns=90,
        idle_ns_by_cause=IdleByCause(host=90),
        evidence=evidence,
        advice=[f"move {EVIL} out of the step", "second advice"],
    )
    warnings = [ReportWarning(code="missing-activity", message=f"{EVIL} waits")]
    finding = Finding(
        code="host-bound",
        cost_ns=90,
        share=0.9,
        message=f"host-bound: {EVIL}",
        advice=f"move {EVIL} out of the step",
        evidence={"frame": EVIL, "idle_ns": 90},
    )
    report = msgspec.structs.replace(a.report, bound=bound, warnings=warnings, diagnosis=[finding])
    page = report_html(Analysis(report=report, trace=a.trace))
    assert "<script" not in page.lower()
    assert EVIL not in page
    box = _box(page)
    esc = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;"
    assert box.startswith(f'<p class="warn"><b>warning: missing-activity</b> — {esc} waits</p>')
    assert box.index("warning") < box.index("bound: <b>host-bound</b>")
    assert f"<code>{esc}</code> at <code>{esc}.py:3</code>" in box
    diag = _diagnosis_box(page)
    assert f"next step: move {esc} out of the step" in diag
    assert f'<td class="l">frame</td><td>{esc}</td>' in diag
    assert '<td class="l">idle</td><td>90 ns</td>' in diag  # the unit in the value
    assert "second advice" not in page  # the diagnosis's one next step


def test_records_box_says_estimated(tmp_path: Path) -> None:
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.files.sources import load_source

    p = write_records_file(tmp_path / "a.records.jsonl", make_steps(8))
    a = analyze_detail(load_source(p))
    bound = a.report.bound
    assert bound is not None
    page = report_html(a)
    box = _box(page)
    assert f"bound: <b>{bound.label}</b> (estimated from step records) — session" in box
    assert "note: estimated from per-step totals" in box
    assert "what bounds each step — session: " in page


def test_ranks_table_shows_each_ranks_label(tmp_path: Path) -> None:
    from asynctrace.analysis.report import analyze_detail

    a = analyze_detail(two_step_trace())
    r = a.report
    b = msgspec.structs.replace(
        r,
        source=msgspec.structs.replace(r.source, path=f"{EVIL}rank1.json", rank=1),
        bound=msgspec.structs.replace(r.bound, label="sync-bound") if r.bound else None,
    )
    page = combined_html([a, Analysis(report=b, trace=a.trace)])
    assert "Ranks and sessions (2)" in page
    assert f"<td>{r.bound.label if r.bound else ''}</td>" in page
    assert "<td>sync-bound</td>" in page
    assert EVIL not in page
    single = combined_html([a])
    assert "Ranks and sessions" not in single
