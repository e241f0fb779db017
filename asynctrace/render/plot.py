"""Pictures of asynchrony, drawn from data with matplotlib (PNG or SVG).

Every picture draws one :class:`~asynctrace.analysis.report.Analysis` (``analyze_detail`` of a
trace or of a session's records), the same code for both kinds:

* **timeline** (traces) — the book's frontend/backend picture: a host lane and a device lane on
  one time axis, an arrow from each launch to its execution, sync stalls marked, for a window
  of steps;
* **steps** — per step, two stacked bars: the host (issuing work, data wait, sync wait) and the
  device (a trace's share of the device timeline, busy then idle by cause, else the device time);
* **run-ahead** — run-ahead per step, with a trace's queue depth or a session's steps in flight;
* **bound** — per step, one stacked bar of its share of the device timeline: busy, then idle by
  cause (host, sync, input, dependency, unattributed), titled with the run's bound label.

A long run is drawn from its binned series (``analysis.series``, ``analysis.bounds``): per bin
the median as a line and min to max as a band, and the title says so. Figures are built with
``matplotlib.figure.Figure`` directly: no pyplot, no global backend change, nothing left open.
Layout only: every number drawn is a figure the analysis computed.
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

from asynctrace.errors import AsyncTraceError
from asynctrace.render.legend import COLORS, IDLE_CAUSE_COLORS, IDLE_CAUSE_LABELS, LABELS
from asynctrace.render.output import write_atomically

if TYPE_CHECKING:
    from asynctrace.analysis.report import Analysis, TraceDetail
    from asynctrace.analysis.series import BoundSeries, Envelope, StepSeries

__all__ = [
    "COLORS",
    "BarSegment",
    "PlotError",
    "available",
    "figure_bytes",
    "idle_bar_segments",
    "overview_figure",
    "plot_idle_by_cause",
    "plot_run_ahead",
    "plot_step_bars",
    "plot_timeline",
    "save_figure",
]

# COLORS (one colour per kind of time) lives in asynctrace.render.legend, shared with the
# TensorBoard plugin's page; re-exported here
_MAX_ARROWS = 80
_MAX_BARS = 4000
#: steps the timeline draws when no window is chosen
_DEFAULT_WINDOW = 3
#: a session's steps are drawn as whole spans: more fit in one picture
_DEFAULT_RECORD_WINDOW = 8


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


def _axes(ax: Any) -> tuple[Any, Any]:
    """The axes to draw on (a new 10×3 figure's when ``ax`` is None) and the figure to return."""
    if ax is None:
        fig = _figure(10, 3)
        return fig, fig.add_subplot()
    return ax.figure, ax


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


def _run_name(analysis: Analysis) -> str:
    """The run a title names: the session's name, else the file's."""
    src = analysis.report.source
    return src.session.name if src.session is not None else Path(src.path).name


def _title(ax: Any, text: str, *, fontsize: float) -> None:
    # a title quotes a file or session name: drawn as written ("a$x$b" is no math), and a name
    # that is not UTF-8 (surrogate escapes from the file system) with "?" for those bytes
    ax.set_title(text.encode("utf-8", "replace").decode(), fontsize=fontsize, parse_math=False)


def _note(ax: Any, text: str, *, y: float = 0.5, on_data_y: bool = False) -> None:
    """A grey line of text centred across the axes, at ``y`` (a fraction of the axes' height,
    or where ``on_data_y``, a data value): what an empty part of a picture means."""
    transform = ax.get_yaxis_transform() if on_data_y else ax.transAxes
    ax.text(
        0.5, y, text, transform=transform, ha="center", va="center", fontsize=8, color="#666666"
    )


def _no_steps(analysis: Analysis) -> PlotError:
    return PlotError(f"{analysis.report.source.path}: the report has no steps to draw")


# ------------------------------------------------------------------ timeline


@dataclass(frozen=True)
class _Lanes:
    """What the timeline draws, in ms from the window start."""

    host: list[tuple[float, float, str]]  # (start, width, kind) kind: "launch" / "sync" / "op"
    device: list[tuple[float, float]]
    arrows: list[tuple[float, float]]  # (host x, device x)
    steps: list[tuple[float, float, str]]  # host spans of steps (start, width, label)
    t0_ns: int


def _window(analysis: Analysis, steps: tuple[int, int] | None, *, first: int) -> list[int]:
    """The indices of the steps the timeline draws: those numbered in ``steps`` (inclusive),
    else the first ``first``."""
    numbers = [s.step for s in analysis.report.steps]
    if not numbers:
        raise _no_steps(analysis)
    if steps is None:
        return list(range(min(len(numbers), first)))
    chosen = [i for i, k in enumerate(numbers) if steps[0] <= k <= steps[1]]
    if not chosen:
        raise PlotError(
            f"no step in the chosen window {steps[0]}:{steps[1]}: the steps are "
            f"{min(numbers)} to {max(numbers)}"
        )
    return chosen


def _host_calls(detail: TraceDetail, w0: int, w1: int, launched: Any) -> list[Any]:
    """The host lane's bars in [w0, w1): the launch calls of ``launched`` activities and every
    sync; where nothing was launched (a CPU-only trace), the operators the host ran."""
    from asynctrace.analysis.steps import SYNC_KINDS
    from asynctrace.traces.model import RangeKind

    ms = 1e-6
    trace, links = detail.trace, detail.links
    rt = trace.runtime
    host: list[tuple[float, float, str]] = []
    for i in np.unique(links.launch_index[launched]).tolist()[:_MAX_BARS]:
        host.append(((rt.start_ns[i] - w0) * ms, rt.dur_ns[i] * ms, "launch"))
    is_sync = np.isin(rt.kind, np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8))
    s_idx = np.flatnonzero(is_sync & (rt.start_ns < w1) & (rt.start_ns + rt.dur_ns > w0))
    for i in s_idx.tolist()[:_MAX_BARS]:
        host.append(((rt.start_ns[i] - w0) * ms, rt.dur_ns[i] * ms, "sync"))
    if not len(launched):
        # Nothing was launched to a device in the window (a CPU-only trace): the host ran the
        # operators itself, so draw those rather than leave the host lane empty.
        hr = trace.ranges
        o_idx = np.flatnonzero(
            (hr.kind == int(RangeKind.OP)) & (hr.start_ns < w1) & (hr.start_ns + hr.dur_ns > w0)
        )
        for i in o_idx.tolist()[:_MAX_BARS]:
            host.append(((hr.start_ns[i] - w0) * ms, hr.dur_ns[i] * ms, "op"))
    return host


def _trace_lanes(analysis: Analysis, detail: TraceDetail, steps: tuple[int, int] | None) -> _Lanes:
    report = analysis.report
    assert report.trace is not None
    chosen = _window(analysis, steps, first=_DEFAULT_WINDOW)
    w0 = min(report.steps[i].start_ns for i in chosen)
    w1 = max(report.trace.steps[i].end_ns for i in chosen)
    ms = 1e-6
    act, links = detail.trace.activities, detail.links
    matched = np.flatnonzero(links.matched)
    launch = links.launch_start_ns[matched]
    sel = matched[(launch >= w0) & (launch < w1)]
    device = [((act.start_ns[i] - w0) * ms, act.dur_ns[i] * ms) for i in sel.tolist()[:_MAX_BARS]]
    step_arrows = sel[:: max(1, len(sel) // _MAX_ARROWS)][:_MAX_ARROWS]
    arrows = [
        ((links.launch_end_ns[i] - w0) * ms, (act.start_ns[i] - w0) * ms)
        for i in step_arrows.tolist()
    ]
    spans = [
        ((s.start_ns - w0) * ms, s.frontend_ns * ms, f"step {s.step}")
        for s in (report.steps[i] for i in chosen)
    ]
    return _Lanes(_host_calls(detail, w0, w1, sel), device, arrows, spans, w0)


def _record_lanes(analysis: Analysis, steps: tuple[int, int] | None) -> _Lanes:
    """Host and device lanes from a session's step records, each step as whole spans: its
    device span ends at host end + run-ahead and lasts ``device_ns`` (the session's figures);
    a step without device figures gets none."""
    report = analysis.report
    chosen = [report.steps[i] for i in _window(analysis, steps, first=_DEFAULT_RECORD_WINDOW)]
    t0 = chosen[0].start_ns
    ms = 1e-6
    host: list[tuple[float, float, str]] = []
    device: list[tuple[float, float]] = []
    arrows: list[tuple[float, float]] = []
    spans: list[tuple[float, float, str]] = []
    for s in chosen:
        x = (s.start_ns - t0) * ms
        issue = s.issuing_ns
        if s.data_wait_ns:
            # session.steps() measures the wait for the batch at the start of the step
            host.append((x, s.data_wait_ns * ms, "data"))
        host.append((x + s.data_wait_ns * ms, issue * ms, "launch"))
        if s.sync_wait_ns:
            # where inside the step the waits fell is not recorded: drawn at the step's end
            host.append((x + (s.frontend_ns - s.sync_wait_ns) * ms, s.sync_wait_ns * ms, "sync"))
        spans.append((x, s.frontend_ns * ms, f"step {s.step}"))
        if s.device_ns is not None and s.run_ahead_ns is not None:
            d_start = s.start_ns + s.frontend_ns + s.run_ahead_ns - s.device_ns
            device.append(((d_start - t0) * ms, s.device_ns * ms))
            arrows.append((x, (d_start - t0) * ms))
    return _Lanes(host, device, arrows, spans, t0)


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
        _note(ax, "no device activity recorded in this window", y=dev_y, on_data_y=True)
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
    _title(ax, title, fontsize=10)
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
    analysis: Analysis, *, steps: tuple[int, int] | None = None, ax: Any = None
) -> Any:
    """Host and device lanes of the steps ``steps`` (inclusive): a trace's events (default the
    first three steps), or a session's steps as whole spans from their records (default the
    first eight)."""
    detail = analysis.trace
    lanes = (
        _record_lanes(analysis, steps) if detail is None else _trace_lanes(analysis, detail, steps)
    )
    fig, ax = _axes(ax)
    _draw_lanes(ax, lanes, title=f"frontend (host) vs backend (device): {_run_name(analysis)}")
    return fig


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


def _series(analysis: Analysis) -> StepSeries:
    if not analysis.series.steps:
        raise _no_steps(analysis)
    return analysis.series


def _binned_note(series: StepSeries) -> str:
    """What a downsampled picture says of itself, in its title."""
    return (
        f"; downsampled: {series.steps:,} steps in {series.bins:,} bins of "
        f"{series.bin_steps:,} (line: median of a bin, band: its min to max)"
    )


def _band(ax: Any, x: Any, env: Envelope, *, color: str, label: str) -> None:
    """A binned figure (ns) in ms: its median as a line, min to max as a band."""
    ax.fill_between(x, env.lo / 1e6, env.hi / 1e6, color=color, alpha=0.25, lw=0, step="mid")
    ax.plot(x, env.median / 1e6, color=color, lw=0.9, label=label, drawstyle="steps-mid")


def _device_window(analysis: Analysis) -> BoundSeries | None:
    """A trace's per-step shares of the device timeline, where drawn step by step (the busy
    and idle parts of its device bar); None for estimated (records) or binned figures."""
    b = analysis.bounds
    exact = not b.estimated and not b.downsampled and b.bins == analysis.series.bins
    return b if exact and b.bins else None


def _draw_step_bars(ax: Any, analysis: Analysis, series: StepSeries) -> str:
    """One step a bin: the step's own figures as bars; the title."""
    f = series.figures
    x = np.arange(series.bins, dtype=float)
    host = [(LABELS["host"], COLORS["host"], f["issuing_ns"].median / 1e6)]
    if np.nansum(f["data_wait_ns"].median) > 0:
        host.append((LABELS["data"], COLORS["data"], f["data_wait_ns"].median / 1e6))
    host.append((LABELS["sync"], COLORS["sync"], f["sync_wait_ns"].median / 1e6))
    _stacked(ax, x - 0.2, 0.38, host)
    window = _device_window(analysis)
    if window is not None:
        # busy, then idle by cause: the bound picture's parts, as the plugin's bars
        parts = [g for g in idle_bar_segments(window) if bool(np.any(g.values_ns))]
        _stacked(ax, x + 0.2, 0.38, [(g.label, g.color, g.values_ns / 1e6) for g in parts])
        return "per step: host time (left bar) and device window (right bar)"
    if f["device_ns"].count.any():
        device_ms = np.nan_to_num(f["device_ns"].median) / 1e6
        _stacked(ax, x + 0.2, 0.38, [(LABELS["busy"], COLORS["busy"], device_ms)])
    return "per step: host (left bar) and device (right bar)"


def plot_step_bars(analysis: Analysis, *, ax: Any = None) -> Any:
    """Per step: host bar (issuing, data wait where any, sync wait) and device bar (a trace's
    share of the device timeline, busy then idle by cause; a session's device time), in ms;
    labelled with :data:`~asynctrace.render.legend.LABELS` as every view.

    A run of more steps than :data:`~asynctrace.analysis.series.MAX_BINS` is drawn from its
    binned series: per bin of steps, the median as a line and min to max as a band, and the
    title says so."""
    ser = _series(analysis)
    fig, ax = _axes(ax)
    if not ser.downsampled:
        title = _draw_step_bars(ax, analysis, ser)
    else:
        f = ser.figures
        x = np.arange(ser.bins, dtype=float)
        # the same parts as the bars: issuing, the waits, the device time
        _band(ax, x, f["issuing_ns"], color=COLORS["host"], label=LABELS["host"])
        _band(ax, x, f["sync_wait_ns"], color=COLORS["sync"], label=LABELS["sync"])
        _band(ax, x, f["data_wait_ns"], color=COLORS["data"], label=LABELS["data"])
        if f["device_ns"].count.any():
            _band(ax, x, f["device_ns"], color=COLORS["busy"], label=LABELS["busy"])
        title = "per step: host and device time" + _binned_note(ser)
    _step_axis(ax, ser.first_step.tolist())
    ax.set_ylabel("ms")
    ax.set_title(title, fontsize=10 if not ser.downsampled else 8)
    ax.legend(fontsize=7, ncols=4, loc="upper right")
    return fig


# ------------------------------------------------------------------ run-ahead


@dataclass(frozen=True)
class _Counts:
    """The run-ahead picture's second axis: a count per bin."""

    values: npt.NDArray[np.float64]
    label: str
    axis: str
    title: str


def _counts(analysis: Analysis, series: StepSeries) -> _Counts:
    """A trace's highest queue depth per step (per bin: the highest of its steps), else a
    session's steps in flight (per bin: the most)."""
    figures = analysis.report.trace
    if figures is not None and len(figures.steps) == series.steps:
        q = np.array([t.queue_max for t in figures.steps], dtype=np.float64)
        if series.downsampled:
            q = np.maximum.reduceat(q, np.arange(0, series.steps, series.bin_steps))
        return _Counts(
            q,
            "queue max",
            "queue depth (max in step)",
            "device completion − host end of step, and queue depth",
        )
    env = series.figures["in_flight"]
    if series.downsampled:
        return _Counts(env.hi, "in flight (most in a bin)", "steps in flight", "")
    return _Counts(env.median, "in flight", "steps in flight", "")


def plot_run_ahead(analysis: Analysis, *, ax: Any = None) -> Any:
    """Run-ahead (ms) per step, and on a second axis a trace's highest queue depth in the step
    or a session's steps in flight (a long run binned as in :func:`plot_step_bars`)."""
    ser = _series(analysis)
    fig, ax = _axes(ax)
    env = ser.figures["run_ahead_ns"]
    x = np.arange(ser.bins)
    color = COLORS["run_ahead"]
    if not ser.downsampled:
        ax.plot(x, env.median / 1e6, marker="o", ms=3, color=color, label=LABELS["run_ahead"])
    else:
        _band(ax, x, env, color=color, label=LABELS["run_ahead"])
    ax.axhline(0, color="#999999", lw=0.6)
    ax.set_ylabel("run-ahead (ms)")
    if not env.count.any():
        # nothing to draw is not the same as zero: say why the line is missing
        _note(ax, "run-ahead not measured: no step has device activity", y=0.75)
    counts = _counts(analysis, ser)
    ax2 = ax.twinx()
    ax2.step(
        x,
        counts.values,
        where="mid",
        color=COLORS["queue"],
        label=counts.label,
        **_one_point(len(x)),
    )
    ax2.set_ylabel(counts.axis)
    _counts_axis(ax2, [int(v) for v in np.nan_to_num(counts.values)])
    _step_axis(ax, ser.first_step.tolist())
    title = counts.title or "run-ahead and steps in flight"
    if ser.downsampled:
        title += _binned_note(ser)
    ax.set_title(title, fontsize=10 if not ser.downsampled else 8)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    return fig


def overview_figure(analysis: Analysis, *, steps: tuple[int, int] | None = None) -> Any:
    """The three pictures of a run stacked in one figure: the timeline (of ``steps``), the step
    bars and the run-ahead."""
    fig = _figure(11, 9)
    a, b, c = fig.subplots(3, 1)
    plot_timeline(analysis, steps=steps, ax=a)
    plot_step_bars(analysis, ax=b)
    plot_run_ahead(analysis, ax=c)
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
        _note(ax, "no step owns any of the device timeline")
    _step_axis(ax, series.first_step.tolist())
    ax.set_ylabel("ms")
    est = " (estimated from step records)" if series.estimated else ""
    title = f"what bounds each step — {scope}: {series.label}{est}: {name}"
    if series.downsampled:
        title += (
            f"; downsampled: {series.steps:,} steps in {series.bins:,} bins of "
            f"{series.bin_steps:,} (a bin's mean step)"
        )
    _title(ax, title, fontsize=10 if not series.downsampled else 8)
    if segments:
        ax.legend(fontsize=7, ncols=3, loc="upper right")


def plot_idle_by_cause(analysis: Analysis, *, ax: Any = None) -> Any:
    """Per step, its share of the device timeline as one stacked bar (ms): busy, then idle by
    cause; titled with the run's label (a session's: estimated from its step records). A long
    run is drawn in bins of its mean step (``analysis.bounds``)."""
    report = analysis.report
    if not report.steps:
        raise _no_steps(analysis)
    from asynctrace.render.rows import bound_scope

    scope = bound_scope(report)
    fig, ax = _axes(ax)
    _draw_bound(ax, analysis.bounds, scope=scope, name=_run_name(analysis))
    return fig
