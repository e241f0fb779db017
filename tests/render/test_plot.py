"""Plots: they draw the analysis' figures, in PNG and SVG, with no global matplotlib state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="plots need the plot extra (matplotlib)")

from asynctrace.analysis.report import analyze
from asynctrace.records import read_records
from asynctrace.render.plot import (
    PlotError,
    figure_bytes,
    overview_figure,
    plot_records_overview,
    plot_step_bars,
    plot_timeline,
    records_timeline,
    save_figure,
)
from tests.export._records import make_steps, write_records_file
from tests.export.test_chrome import two_step_trace


def test_timeline_draws_every_launch_activity_and_sync_of_the_window() -> None:
    trace = two_step_trace()
    fig = plot_timeline(trace, steps=(0, 1))
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
    report = analyze(two_step_trace())
    fig = plot_step_bars(report)
    heights = [r.get_height() for r in fig.axes[0].patches]
    # host issuing (2 steps), sync wait (2), device busy (2), idle (2), in ms
    s = report.steps
    want = [(t.cpu_ns - t.sync_wait_ns) / 1e6 for t in s] + [t.sync_wait_ns / 1e6 for t in s]
    want += [t.gpu_busy_ns / 1e6 for t in s] + [t.gpu_idle_ns / 1e6 for t in s]
    assert heights == pytest.approx(want)


def test_png_and_svg(tmp_path: Path) -> None:
    fig = overview_figure(two_step_trace())
    png = save_figure(fig, tmp_path / "a.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    svg = save_figure(fig, tmp_path / "a.svg").read_text()
    assert "<svg" in svg
    with pytest.raises(PlotError, match=r"png or \.svg"):
        save_figure(fig, tmp_path / "a.pdf")
    assert figure_bytes(fig, "svg") == figure_bytes(fig, "svg")


def test_records_pictures(tmp_path: Path) -> None:
    steps = make_steps(6, frontend_ns=2_000_000, device_ns=1_500_000, run_ahead_ns=500_000,
                       data_wait_ns=250_000, sync_wait_ns=100_000, sync_count=1)  # fmt: skip
    rec = read_records(write_records_file(tmp_path / "r.records.jsonl", steps))
    fig = records_timeline(rec, steps=(0, 1))
    ax = fig.axes[0]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    # device span of step k ends at host end + run-ahead and lasts device_ns
    assert sorted(a.xy[0] for a in arrows) == pytest.approx([1.0, 3.0])
    save_figure(plot_records_overview(rec), tmp_path / "r.png")


def test_empty_window_is_an_error() -> None:
    with pytest.raises(PlotError, match="no step"):
        plot_timeline(two_step_trace(), steps=(5, 9))
