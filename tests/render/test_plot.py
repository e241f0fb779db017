"""Plots: they draw the analysis' figures, in PNG and SVG, with no global matplotlib state; one
set of pictures for traces and session records, drawn from the Analysis alone."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="plots need the plot extra (matplotlib)")

import asynctrace.analysis
from asynctrace.analysis.bound import CAUSES
from asynctrace.analysis.report import Analysis, analyze_detail
from asynctrace.records import read_records
from asynctrace.render.legend import IDLE_CAUSE_LABELS, LABELS
from asynctrace.render.plot import (
    PlotError,
    figure_bytes,
    overview_figure,
    plot_run_ahead,
    plot_step_bars,
    plot_timeline,
    save_figure,
)
from tests.conftest import ROOT
from tests.export._records import make_steps, write_records_file
from tests.export.test_chrome import two_step_trace


def _trace() -> Analysis:
    return analyze_detail(two_step_trace())


def _records(tmp_path: Path, n: int = 6) -> Analysis:
    steps = make_steps(n, frontend_ns=2_000_000, device_ns=1_500_000, run_ahead_ns=500_000,
                       data_wait_ns=250_000, sync_wait_ns=100_000, sync_count=1)  # fmt: skip
    return analyze_detail(read_records(write_records_file(tmp_path / "r.records.jsonl", steps)))


def test_timeline_draws_every_launch_activity_and_sync_of_the_window() -> None:
    fig = plot_timeline(_trace(), steps=(0, 1))
    ax = fig.axes[0]
    # broken_barh collections: host launches, host syncs, device activities
    bars = [c.get_paths() for c in ax.collections]
    widths = sorted(round(float(np.ptp(p.vertices[:, 0])), 6) for paths in bars for p in paths)
    # 2 launches of 0.05 µs, 1 sync of 0.7 µs, kernels of 0.3 and 0.4 µs (in ms)
    assert widths == [5e-05, 5e-05, 0.0003, 0.0004, 0.0007]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    assert len(arrows) == 2
    starts = sorted(a.xyann[0] for a in arrows)
    ends = sorted(a.xy[0] for a in arrows)
    assert starts == pytest.approx([150e-6, 1150e-6])  # launch call ends
    assert ends == pytest.approx([500e-6, 1900e-6])  # kernel starts


def test_step_bars_stack_to_the_reported_figures() -> None:
    analysis = _trace()
    fig = plot_step_bars(analysis)
    heights = [r.get_height() for r in fig.axes[0].patches]
    # host issuing (2 steps), sync wait (2), device busy (2), idle by cause (2 each cause
    # some step has), in ms; no data wait
    s, b = analysis.report.steps, analysis.report.step_bounds
    want = [(t.frontend_ns - t.sync_wait_ns) / 1e6 for t in s] + [t.sync_wait_ns / 1e6 for t in s]
    want += [t.busy_ns / 1e6 for t in b]
    causes = [c for c in CAUSES if any(getattr(t.idle_ns_by_cause, c) for t in b)]
    assert causes
    want += [getattr(t.idle_ns_by_cause, c) / 1e6 for c in causes for t in b]
    assert heights == pytest.approx(want)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == [LABELS["host"], LABELS["sync"], LABELS["busy"]] + [
        IDLE_CAUSE_LABELS[c] for c in causes
    ]
    assert "device window" in fig.axes[0].get_title()


def test_run_ahead_of_a_trace_has_its_queue_and_of_records_the_steps_in_flight(
    tmp_path: Path,
) -> None:
    analysis = _trace()
    assert analysis.report.trace is not None
    ax, ax2 = plot_run_ahead(analysis).axes
    line = ax.get_lines()[0]
    assert line.get_ydata().tolist() == pytest.approx(
        [s.run_ahead_ns / 1e6 for s in analysis.report.steps if s.run_ahead_ns is not None]
    )
    assert ax2.get_lines()[0].get_ydata().tolist() == [
        t.queue_max for t in analysis.report.trace.steps
    ]
    assert "queue depth" in ax.get_title()
    rec = _records(tmp_path)
    ax, ax2 = plot_run_ahead(rec).axes
    assert ax.get_lines()[0].get_ydata().tolist() == pytest.approx([0.5] * 6)
    assert ax2.get_lines()[0].get_ydata().tolist() == [s.in_flight for s in rec.report.steps]
    assert ax.get_title() == "run-ahead and steps in flight"


def test_png_and_svg(tmp_path: Path) -> None:
    fig = overview_figure(_trace())
    png = save_figure(fig, tmp_path / "a.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    svg = save_figure(fig, tmp_path / "a.svg").read_text()
    assert "<svg" in svg
    with pytest.raises(PlotError, match=r"png or \.svg"):
        save_figure(fig, tmp_path / "a.pdf")
    assert figure_bytes(fig, "svg") == figure_bytes(fig, "svg")


def test_records_pictures_are_the_timeline_step_bars_and_run_ahead(tmp_path: Path) -> None:
    analysis = _records(tmp_path)
    fig = plot_step_bars(analysis)
    heights = [r.get_height() for r in fig.axes[0].patches]
    # host issuing, data wait, sync wait (6 steps each), then the device time, in ms
    assert heights == pytest.approx([1.65] * 6 + [0.25] * 6 + [0.1] * 6 + [1.5] * 6)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    # the legend's words, as the plugin's
    assert labels == [LABELS["host"], LABELS["data"], LABELS["sync"], LABELS["busy"]]
    overview = overview_figure(analysis)
    titles = [ax.get_title() for ax in overview.axes if ax.get_title()]
    assert titles[1:] == [fig.axes[0].get_title(), "run-ahead and steps in flight"]
    save_figure(overview, tmp_path / "r.png")
    # the same timeline view, each step as whole spans from its record
    ax = plot_timeline(analysis, steps=(0, 1)).axes[0]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    # device span of step k ends at host end + run-ahead and lasts device_ns
    assert sorted(a.xy[0] for a in arrows) == pytest.approx([1.0, 3.0])


def test_empty_window_is_an_error() -> None:
    with pytest.raises(PlotError, match="no step"):
        plot_timeline(_trace(), steps=(5, 9))


def test_the_pictures_call_no_analysis_function() -> None:
    """render/plot.py and render/views.py draw the Analysis they are given: what they import
    from asynctrace.analysis is types and constants, never a function that analyses."""
    import importlib
    import inspect

    for rel in ("asynctrace/render/plot.py", "asynctrace/render/views.py"):
        tree = ast.parse((ROOT / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                asynctrace.analysis.__name__
            ):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    obj = getattr(module, alias.name)
                    assert not inspect.isfunction(obj), f"{rel} imports {alias.name}"
