"""Pictures of asynchrony, drawn from data with matplotlib (PNG or SVG).

Three pictures, from a trace's :class:`~asynctrace.analysis.report.Report` or from a session's
:class:`~asynctrace.records.Records`:

* **timeline** — the book's frontend/backend picture: a host lane and a device lane on one time
  axis, an arrow from each launch to its execution, sync stalls marked, for a window of steps;
* **steps** — per step, two stacked bars: the host (issuing work, sync wait, data wait) and the
  device (busy, idle);
* **run-ahead** — run-ahead per step, with queue depth (trace) or in-flight steps (records);
* **bound** — per step, one stacked bar of its share of the device timeline: busy, then idle by
  cause (host, sync, input, dependency, unattributed), titled with the run's bound label.

Figures are built with ``matplotlib.figure.Figure`` directly: no pyplot, no global backend
change, nothing left open. Layout only: every number drawn is a figure the analysis computed.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from asynctrace._output import write_atomically
from asynctrace.errors import AsyncTraceError
from asynctrace.render.legend import COLORS, IDLE_CAUSE_COLORS, IDLE_CAUSE_LABELS, LABELS

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report
    from asynctrace.analysis.series import BoundSeries, Envelope, StepSeries
    from asynctrace.records import Records
    from asynctrace.traces.model import Trace

__all__ = [
    "COLORS",
    "BarSegment",
    "PlotError",
    "available",
    "figure_bytes",
    "idle_bar_segments",
    "overview_figure",
    "plot_idle_by_cause",
    "plot_records_overview",
    "plot_run_ahead",
    "plot_step_bars",
    "plot_timeline",
    "records_idle_by_cause",
    "records_run_ahead",
    "records_step_bars",
    "records_timeline",
    "save_figure",
]

# COLORS (one colour per kind of time) lives in asynctrace.render.legend, shared with the
# TensorBoard plugin's page; re-exported here
_MAX_ARROWS = 80
_MAX_BARS = 4000


def available() -> bool:
    """Whether matplotlib, which every plot needs, can be imported (it is the ``plot`` extra)."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # blocked in sys.modules, or a broken install
        return False


class PlotError(AsyncTraceError):
    """A picture cannot be drawn (matplotlib missing, unknown format, nothing to draw)."""


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError(
            "plots need matplotlib: pip install 'asynctrace[plot]' (or pip install matplotlib)"
        ) from None
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """The figure rendered as ``"png"`` or ``"svg"``."""
    if fmt not in ("png", "svg"):
        raise PlotError(f"format {fmt!r}: use png or svg")
    import matplotlib

    buf = io.BytesIO()
    # no date and a fixed id salt keep SVG output byte-identical between runs; rc_context
    # restores matplotlib's settings afterwards
    metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": "asynctrace"}
    with matplotlib.rc_context({"svg.hashsalt": "asynctrace"}):
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


def save_figure(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Write the figure; the format comes from the suffix (.png or .svg)."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise PlotError(f"{p}: write .png or .svg")
    return write_atomically(p, figure_bytes(fig, fmt))


# ------------------------------------------------------------------ timeline


@dataclass(frozen=True)
class _Lanes:
    """What the timeline draws, in ms from the window start."""

    host: list[tuple[float, float, str]]  # (start, width, kind) kind: "launch" / "sync"
    device: list[tuple[float, float]]
    arrows: list[tuple[float, float]]  # (host x, device x)
    steps: list[tuple[float, float, str]]  # host spans of steps (start, width, label)
    t0_ns: int


def _window(report: Report, steps: tuple[int, int] | None) -> tuple[int, int, list[Any]]:
    """Host start and host end of the chosen steps, and the steps."""
    chosen = list(report.steps)
    if not chosen:
        raise PlotError("the report has no steps to draw")
    if steps is not None:
        chosen = [s for s in chosen if steps[0] <= s.step <= steps[1]]
        if not chosen:
            raise PlotError(_no_step_in(steps, [s.step for s in report.steps]))
    elif len(chosen) > 3:
        chosen = chosen[:3]
    return min(s.start_ns for s in chosen), max(s.end_ns for s in chosen), chosen


def _no_step_in(steps: tuple[int, int], have: Sequence[int]) -> str:
    return (
        f"no step in the chosen window {steps[0]}:{steps[1]}: the steps are "
        f"{min(have)} to {max(have)}"
    )


def _trace_lanes(trace: Trace, report: Report, steps: tuple[int, int] | None) -> _Lanes:
    from asynctrace.analysis.launches import link_launches
    from asynctrace.analysis.steps import SYNC_KINDS

    w0, w1, chosen = _window(report, steps)
    ms = 1e-6
    act = trace.activities
    links = link_launches(trace)
    matched = np.flatnonzero(links.matched)
    launch = links.launch_start_ns[matched]
    sel = matched[(launch >= w0) & (launch < w1)]
    rt = trace.runtime
    host: list[tuple[float, float, str]] = []
    launch_rows = np.unique(links.launch_index[sel])
    for i in launch_rows.tolist()[:_MAX_BARS]:
        host.append(((rt.start_ns[i] - w0) * ms, rt.dur_ns[i] * ms, "launch"))
    is_sync = np.isin(rt.kind, np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8))
    s_idx = np.flatnonzero(is_sync & (rt.start_ns < w1) & (rt.start_ns + rt.dur_ns > w0))
    for i in s_idx.tolist()[:_MAX_BARS]:
        host.append(((rt.start_ns[i] - w0) * ms, rt.dur_ns[i] * ms, "sync"))
    if not len(sel):
        # Nothing was launched to a device in the window (a CPU-only trace): the host ran the
        # operators itself, so draw those rather than leave the host lane empty.
        from asynctrace.traces.model import RangeKind

        hr = trace.ranges
        o_idx = np.flatnonzero(
            (hr.kind == int(RangeKind.OP)) & (hr.start_ns < w1) & (hr.start_ns + hr.dur_ns > w0)
        )
        for i in o_idx.tolist()[:_MAX_BARS]:
            host.append(((hr.start_ns[i] - w0) * ms, hr.dur_ns[i] * ms, "op"))
    device = [((act.start_ns[i] - w0) * ms, act.dur_ns[i] * ms) for i in sel.tolist()[:_MAX_BARS]]
    step_arrows = sel[:: max(1, len(sel) // _MAX_ARROWS)][:_MAX_ARROWS]
    arrows = [
        ((links.launch_end_ns[i] - w0) * ms, (act.start_ns[i] - w0) * ms)
        for i in step_arrows.tolist()
    ]
    spans = [((s.start_ns - w0) * ms, s.cpu_ns * ms, f"step {s.step}") for s in chosen]
    return _Lanes(host, device, arrows, spans, w0)


def _draw_lanes(ax: Any, lanes: _Lanes, *, title: str) -> None:
    from matplotlib.patches import Patch

    host_y, dev_y, h = 1.0, 0.0, 0.6
    extent = max((x + w for x, w, _ in lanes.steps), default=0.0) - min(
        (x for x, _, _ in lanes.steps), default=0.0
    )
    for x, wdt, label in lanes.steps:
        ax.axvspan(x, x + wdt, color="#000000", alpha=0.04 if label[-1] in "02468" else 0.09)
        # a label wider than its step would print over the next step's label: only steps wide
        # enough to hold theirs are labelled (the shading still shows every step)
        if wdt >= extent / 14:
            ax.text(x, 1.45, label, fontsize=8, va="bottom", ha="left", clip_on=True)
    for kind in ("data", "op", "launch", "sync"):
        bars = [(x, wd) for x, wd, k in lanes.host if k == kind]
        if bars:
            # the edge in the face colour keeps sub-pixel bars visible without widening them
            c = COLORS[kind]
            ax.broken_barh(bars, (host_y - h / 2, h), facecolors=c, edgecolors=c, linewidth=0.5)
    if lanes.device:
        c = COLORS["busy"]
        ax.broken_barh(lanes.device, (dev_y - h / 2, h), facecolors=c, edgecolors=c, linewidth=0.5)
    else:
        # an empty lane would read as "the device was idle"; say that nothing was recorded
        ax.text(
            0.5,
            dev_y,
            "no device activity recorded in this window",
            transform=ax.get_yaxis_transform(),
            ha="center",
            va="center",
            fontsize=8,
            color="#666666",
        )
    for hx, dx in lanes.arrows:
        ax.annotate(
            "",
            xy=(dx, dev_y + h / 2),
            xytext=(hx, host_y - h / 2),
            arrowprops={"arrowstyle": "->", "color": COLORS["arrow"], "lw": 0.6, "alpha": 0.6},
        )
    ax.set_yticks([dev_y, host_y], ["device", "host"])
    ax.set_ylim(-0.6, 1.8)
    ax.set_xlabel("time (ms from the window's start)")
    # the title quotes a file or session name: drawn as written ("a$x$b" is no math), and a
    # name that is not UTF-8 (surrogate escapes from the file system) with "?" for those bytes
    ax.set_title(title.encode("utf-8", "replace").decode(), fontsize=10, parse_math=False)
    has_data = any(k == "data" for _, _, k in lanes.host)
    has_op = any(k == "op" for _, _, k in lanes.host)
    ax.legend(
        handles=[
            *([Patch(color=COLORS["data"], label=LABELS["data"])] if has_data else []),
            *([Patch(color=COLORS["op"], label=LABELS["op"])] if has_op else []),
            Patch(color=COLORS["launch"], label=LABELS["launch"]),
            Patch(color=COLORS["sync"], label=LABELS["sync"]),
            Patch(color=COLORS["busy"], label=LABELS["busy"]),
        ],
        loc="upper right",
        fontsize=7,
        ncols=4,
    )


def plot_timeline(
    trace: Trace,
    report: Report | None = None,
    *,
    steps: tuple[int, int] | None = None,
    ax: Any = None,
) -> Any:
    """Host and device lanes of steps ``steps`` (inclusive; default the first three)."""
    from asynctrace.analysis.report import analyze

    report = report if report is not None else analyze(trace)
    lanes = _trace_lanes(trace, report, steps)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    _draw_lanes(ax, lanes, title=f"frontend (host) vs backend (device): {Path(trace.source).name}")
    return fig if fig is not None else ax.figure


# ------------------------------------------------------------------ per-step bars


def _stacked(
    ax: Any,
    x: Any,
    width: float,
    parts: Sequence[tuple[str, str, Sequence[float] | npt.NDArray[np.float64]]],
) -> None:
    bottom = np.zeros(len(x))
    for label, color, values in parts:
        v = np.asarray(values, dtype=float)
        bars = ax.bar(x, v, width, bottom=bottom, color=color, label=label)
        if bottom.any():
            # A bar's base is a sticky edge for autoscaling; a stacked part's base sits at the
            # top of the stack and would stop the top margin there, clipping the tallest bar.
            for r in bars:
                r.sticky_edges.y.clear()
        bottom += v


def plot_step_bars(report: Report, *, ax: Any = None) -> Any:
    """Per step: host bar (issuing, sync wait) and device bar (busy, idle), in ms."""
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    s = report.steps
    if not s:
        raise PlotError("the report has no steps to draw")
    x = np.arange(len(s), dtype=float)
    _stacked(
        ax,
        x - 0.2,
        0.38,
        [
            ("host: issuing", COLORS["host"], [(t.cpu_ns - t.sync_wait_ns) / 1e6 for t in s]),
            ("host: sync wait", COLORS["sync"], [t.sync_wait_ns / 1e6 for t in s]),
        ],
    )
    _stacked(
        ax,
        x + 0.2,
        0.38,
        [
            ("device: busy", COLORS["busy"], [t.gpu_busy_ns / 1e6 for t in s]),
            ("device: idle", COLORS["idle"], [t.gpu_idle_ns / 1e6 for t in s]),
        ],
    )
    _step_axis(ax, [t.step for t in s])
    ax.set_ylabel("ms")
    ax.set_title("per step: host time (left bar) and device window (right bar)", fontsize=10)
    ax.legend(fontsize=7, ncols=4, loc="upper right")
    return fig if fig is not None else ax.figure


def _one_point(n: int) -> dict[str, Any]:
    # a step line through a single step has no length and draws nothing: mark the point
    return {"marker": "_", "ms": 14, "mew": 1.5} if n == 1 else {}


def _counts_axis(ax: Any, values: Sequence[int]) -> None:
    # from 0, with headroom: a flat line at the data's maximum would sit on the frame
    ax.set_ylim(0, max(1, *values) * 1.15)


def _step_axis(ax: Any, numbers: Sequence[int]) -> None:
    n = len(numbers)
    # fewer ticks where the step numbers are long (a 10^6-step run): labels must not overlap
    widest = max((len(str(k)) for k in numbers[:: max(1, n // 50)]), default=1)
    stride = max(1, n // max(2, min(20, 100 // (widest + 3))))
    ticks = list(range(0, n, stride))
    ax.set_xticks(ticks, [str(numbers[i]) for i in ticks])
    ax.set_xlabel("step")


def plot_run_ahead(report: Report, *, ax: Any = None) -> Any:
    """Run-ahead (ms) per step, and the step's highest queue depth on a second axis."""
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    s = report.steps
    if not s:
        raise PlotError("the report has no steps to draw")
    x = np.arange(len(s))
    ra = [np.nan if t.run_ahead_ns is None else t.run_ahead_ns / 1e6 for t in s]
    ax.plot(x, ra, marker="o", ms=3, color=COLORS["run_ahead"], label="run-ahead (ms)")
    ax.axhline(0, color="#999999", lw=0.6)
    ax.set_ylabel("run-ahead (ms)")
    if all(t.run_ahead_ns is None for t in s):
        # nothing to draw is not the same as zero: say why the line is missing
        ax.text(
            0.5,
            0.75,
            "run-ahead not measured: no step has device activity",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#666666",
        )
    ax2 = ax.twinx()
    ax2.step(
        x,
        [t.queue_max for t in s],
        where="mid",
        color=COLORS["queue"],
        label="queue max",
        **_one_point(len(s)),
    )
    ax2.set_ylabel("queue depth (max in step)")
    _counts_axis(ax2, [t.queue_max for t in s])
    _step_axis(ax, [t.step for t in s])
    ax.set_title("device completion − host end of step, and queue depth", fontsize=10)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    return fig if fig is not None else ax.figure


def overview_figure(
    trace: Trace, report: Report | None = None, *, steps: tuple[int, int] | None = None
) -> Any:
    """The three pictures of a trace stacked in one figure."""
    from asynctrace.analysis.report import analyze

    report = report if report is not None else analyze(trace)
    fig = _figure(11, 9)
    a, b, c = fig.subplots(3, 1)
    plot_timeline(trace, report, steps=steps, ax=a)
    plot_step_bars(report, ax=b)
    plot_run_ahead(report, ax=c)
    return fig


# ------------------------------------------------------------------ what bounds each step

#: above this many bars the bound picture is drawn as stacked steps (one polygon a part)
_MAX_BOUND_BARS = 400


@dataclass(frozen=True)
class BarSegment:
    """One part of the bound picture's stacked bars: its kind (``"busy"`` or
    ``"idle:<cause>"``), legend label, colour and value per bar (ns)."""

    kind: str
    label: str
    color: str
    values_ns: npt.NDArray[np.float64]


def idle_bar_segments(series: BoundSeries) -> list[BarSegment]:
    """The parts of each bar of the bound picture, bottom to top: device busy, then idle by
    cause in :data:`~asynctrace.analysis.bound.CAUSES` order. They add up, bar by bar, to the
    step's share of the device timeline (a bin's mean share where downsampled). Layout only:
    the values are the series' own."""
    from asynctrace.analysis.bound import CAUSES

    out = [BarSegment("busy", LABELS["busy"], COLORS["busy"], series.busy_ns)]
    out += [
        BarSegment(f"idle:{c}", IDLE_CAUSE_LABELS[c], IDLE_CAUSE_COLORS[c], series.idle_ns[c])
        for c in CAUSES
    ]
    return out


def _draw_bound(ax: Any, series: BoundSeries, *, scope: str, name: str) -> None:
    x = np.arange(series.bins, dtype=float)
    segments = [g for g in idle_bar_segments(series) if bool(np.any(g.values_ns))]
    if series.bins <= _MAX_BOUND_BARS:
        _stacked(ax, x, 0.8, [(g.label, g.color, g.values_ns / 1e6) for g in segments])
    elif segments:
        # a bar a bin would be thousands of patches: the same stack as filled steps
        ax.stackplot(
            x,
            *[g.values_ns / 1e6 for g in segments],
            labels=[g.label for g in segments],
            colors=[g.color for g in segments],
            step="mid",
            lw=0,
        )
    if not segments:
        ax.text(
            0.5,
            0.5,
            "no step owns any of the device timeline",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#666666",
        )
    _step_axis(ax, series.first_step.tolist())
    ax.set_ylabel("ms")
    est = " (estimated from step records)" if series.estimated else ""
    title = f"what bounds each step — {scope}: {series.label}{est}: {name}"
    if series.downsampled:
        title += (
            f"; downsampled: {series.steps:,} steps in {series.bins:,} bins of "
            f"{series.bin_steps:,} (a bin's mean step)"
        )
    # a file or session name: drawn as written (no math), odd bytes as "?"
    ax.set_title(
        title.encode("utf-8", "replace").decode(),
        fontsize=10 if not series.downsampled else 8,
        parse_math=False,
    )
    if segments:
        ax.legend(fontsize=7, ncols=3, loc="upper right")


def _report_bound_series(report: Report, max_bins: int | None) -> BoundSeries:
    from asynctrace.analysis.series import MAX_BINS, bound_series

    s = report.steps
    if not s:
        raise PlotError("the report has no steps to draw")
    if report.bound is None or any(t.bound is None for t in s):
        raise PlotError("the report has no bound figures (schema 1): analyse the trace again")
    return bound_series(
        [t.bound for t in s if t.bound is not None],
        [t.step for t in s],
        label=report.bound.label,
        max_bins=MAX_BINS if max_bins is None else max_bins,
    )


def plot_idle_by_cause(report: Report, *, ax: Any = None, series: BoundSeries | None = None) -> Any:
    """Per step, its share of the device timeline as one stacked bar (ms): busy, then idle by
    cause; titled with the run's label. ``series`` defaults to the report's steps'
    bounds (downsampled past :data:`~asynctrace.analysis.series.MAX_BINS` steps)."""
    ser = series if series is not None else _report_bound_series(report, None)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    whole = report.step_source in ("trace", "none")
    _draw_bound(
        ax, ser, scope="whole trace" if whole else "run", name=Path(report.trace.source).name
    )
    return fig if fig is not None else ax.figure


def records_idle_by_cause(
    records: Records, *, ax: Any = None, series: BoundSeries | None = None
) -> Any:
    """:func:`plot_idle_by_cause` of a session's records: each step's estimated bound
    (``series``: :func:`~asynctrace.analysis.series.records_bound_series` of the records
    unless given), downsampled as :func:`records_step_bars` is."""
    from asynctrace.analysis.series import records_bound_series

    if not records.steps:
        raise PlotError("the records have no steps to draw")
    ser = series if series is not None else records_bound_series(records)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    _draw_bound(ax, ser, scope="session", name=records.header.name)
    return fig if fig is not None else ax.figure


# ------------------------------------------------------------------ records


def records_timeline(
    records: Records, *, steps: tuple[int, int] | None = None, ax: Any = None
) -> Any:
    """Host and device lanes from a session's per-step records (steps as whole spans).

    A step's device span ends at host end + run-ahead and lasts ``device_ns`` (the session's
    figures); steps without device figures get no device span.
    """
    chosen = list(records.steps)
    if not chosen:
        raise PlotError("the records have no steps to draw")
    if steps is not None:
        chosen = [s for s in chosen if steps[0] <= s.step <= steps[1]]
        if not chosen:
            raise PlotError(_no_step_in(steps, [s.step for s in records.steps]))
    elif len(chosen) > 8:
        chosen = chosen[:8]
    t0 = chosen[0].start_ns
    ms = 1e-6
    host: list[tuple[float, float, str]] = []
    device: list[tuple[float, float]] = []
    arrows: list[tuple[float, float]] = []
    spans: list[tuple[float, float, str]] = []
    for s in chosen:
        x = (s.start_ns - t0) * ms
        issue = s.frontend_ns - s.sync_wait_ns - s.data_wait_ns
        if s.data_wait_ns:
            # session.steps() measures the wait for the batch at the start of the step
            host.append((x, s.data_wait_ns * ms, "data"))
        host.append((x + s.data_wait_ns * ms, issue * ms, "launch"))
        if s.sync_wait_ns:
            # where inside the step the waits fell is not recorded: drawn at the step's end
            host.append((x + (s.frontend_ns - s.sync_wait_ns) * ms, s.sync_wait_ns * ms, "sync"))
        spans.append((x, s.frontend_ns * ms, f"step {s.step}"))
        if s.device_ns is not None and s.run_ahead_ns is not None:
            d_end = s.start_ns + s.frontend_ns + s.run_ahead_ns
            d_start = d_end - s.device_ns
            device.append(((d_start - t0) * ms, s.device_ns * ms))
            arrows.append((x, (d_start - t0) * ms))
    lanes = _Lanes(host, device, arrows, spans, t0)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    _draw_lanes(ax, lanes, title=f"frontend (host) vs backend (device): {records.header.name}")
    return fig if fig is not None else ax.figure


def _series(records: Records, series: StepSeries | None) -> StepSeries:
    from asynctrace.analysis.series import records_series

    if not records.steps:
        raise PlotError("the records have no steps to draw")
    return series if series is not None else records_series(records)


def _binned_note(series: StepSeries) -> str:
    """What a downsampled picture says of itself, in its title."""
    return (
        f"; downsampled: {series.steps:,} steps in {series.bins:,} bins of "
        f"{series.bin_steps:,} (line: median of a bin, band: its min to max)"
    )


def _band(ax: Any, x: Any, env: Envelope, *, color: str, label: str, scale: float) -> None:
    ax.fill_between(x, env.lo * scale, env.hi * scale, color=color, alpha=0.25, lw=0, step="mid")
    ax.plot(x, env.median * scale, color=color, lw=0.9, label=label, drawstyle="steps-mid")


def records_step_bars(records: Records, *, ax: Any = None, series: StepSeries | None = None) -> Any:
    """Per step: host bar (issuing, data wait, sync wait) and device bar (device time), in ms.

    A run of more steps than :data:`~asynctrace.analysis.series.MAX_BINS` is drawn from its
    downsampled series (``series``, :func:`~asynctrace.analysis.series.records_series` of the
    records unless given): per bin of steps, the median as a line and min to max as a band,
    and the title says so.
    """
    ser = _series(records, series)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    f = ser.figures
    x = np.arange(ser.bins, dtype=float)
    has_device = bool(f["device_ns"].count.any())
    title = "per step: host (left bar) and device (right bar)"
    if not ser.downsampled:
        # one step a bin: the median is the step's value
        _stacked(
            ax,
            x - 0.2,
            0.38,
            [
                ("host: issuing", COLORS["host"], f["issuing_ns"].median / 1e6),
                ("host: data wait", COLORS["data"], f["data_wait_ns"].median / 1e6),
                ("host: sync wait", COLORS["sync"], f["sync_wait_ns"].median / 1e6),
            ],
        )
        if has_device:
            device = np.nan_to_num(f["device_ns"].median) / 1e6
            _stacked(ax, x + 0.2, 0.38, [("device", COLORS["busy"], device)])
    else:
        _band(ax, x, f["frontend_ns"], color=COLORS["host"], label="host", scale=1e-6)
        _band(ax, x, f["sync_wait_ns"], color=COLORS["sync"], label="host: sync wait", scale=1e-6)
        _band(ax, x, f["data_wait_ns"], color=COLORS["data"], label="host: data wait", scale=1e-6)
        if has_device:
            _band(ax, x, f["device_ns"], color=COLORS["busy"], label="device", scale=1e-6)
        title = "per step: host and device time" + _binned_note(ser)
    _step_axis(ax, ser.first_step.tolist())
    ax.set_ylabel("ms")
    ax.set_title(title, fontsize=10 if not ser.downsampled else 8)
    ax.legend(fontsize=7, ncols=4, loc="upper right")
    return fig if fig is not None else ax.figure


def records_run_ahead(records: Records, *, ax: Any = None, series: StepSeries | None = None) -> Any:
    """Run-ahead (ms) per step, and steps in flight on a second axis (a long run downsampled
    as in :func:`records_step_bars`; in flight: the most in a bin)."""
    ser = _series(records, series)
    fig = None
    if ax is None:
        fig = _figure(10, 3)
        ax = fig.add_subplot()
    f = ser.figures
    x = np.arange(ser.bins)
    title = "run-ahead and steps in flight"
    if not ser.downsampled:
        ra = f["run_ahead_ns"].median / 1e6
        ax.plot(x, ra, marker="o", ms=3, color=COLORS["run_ahead"], label="run-ahead (ms)")
        in_flight = f["in_flight"].median
        flight_label = "in flight"
    else:
        _band(
            ax, x, f["run_ahead_ns"], color=COLORS["run_ahead"], label="run-ahead (ms)", scale=1e-6
        )
        in_flight = f["in_flight"].hi
        flight_label = "in flight (most in a bin)"
        title += _binned_note(ser)
    ax.axhline(0, color="#999999", lw=0.6)
    ax.set_ylabel("run-ahead (ms)")
    ax2 = ax.twinx()
    ax2.step(
        x,
        in_flight,
        where="mid",
        color=COLORS["queue"],
        label=flight_label,
        **_one_point(len(x)),
    )
    ax2.set_ylabel("steps in flight")
    _counts_axis(ax2, [int(v) for v in np.nan_to_num(in_flight)])
    _step_axis(ax, ser.first_step.tolist())
    ax.set_title(title, fontsize=10 if not ser.downsampled else 8)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    return fig if fig is not None else ax.figure


def plot_records_overview(records: Records, *, steps: tuple[int, int] | None = None) -> Any:
    """The three pictures of a session's records stacked in one figure."""
    fig = _figure(11, 9)
    a, b, c = fig.subplots(3, 1)
    records_timeline(records, steps=steps, ax=a)
    series = _series(records, None)
    records_step_bars(records, ax=b, series=series)
    records_run_ahead(records, ax=c, series=series)
    return fig
