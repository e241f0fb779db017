"""What ``asynctrace demo`` writes besides its records and TensorBoard runs: the annotated
profiler trace, the plots and the HTML report (:func:`write_views`), the notes that say what
they show, and the list of every file written (:class:`Artifact`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynctrace._commands._demo_loops import _LOOP_NAMES, DEMO_PROFILE, LoopResult
from asynctrace.analysis.report import Analysis, Report, analyze_detail
from asynctrace.files.sources import load_source
from asynctrace.records.names import ANNOTATED_SUFFIX
from asynctrace.records.units import format_ns

__all__ = ["Artifact", "clear_previous", "write_views"]

_PLOTS = "plots"


@dataclass(frozen=True)
class Artifact:
    """One file or folder the demo wrote, and how to look at it."""

    #: "records", "tensorboard", "profiler trace", "annotated trace", "plot", "html", "summary"
    kind: str
    path: str
    what: str
    view: str


def clear_previous(out: Path) -> list[Path]:
    """Remove what an earlier demo wrote in ``out`` (only the demo's own file names), so that
    TensorBoard and the HTML report show this run alone; returns the files removed."""
    patterns = [f"{name}.*.records.jsonl" for name in _LOOP_NAMES]
    for name in _LOOP_NAMES:
        patterns += [
            f"{name}/events.out.tfevents.*",
            f"{name}/*/events.out.tfevents.*",
            f"{name}/*.pt.trace.json.gz",
            f"{name}/*{ANNOTATED_SUFFIX}",
        ]
    patterns += [f"{_PLOTS}/{name}.png" for name in ("timeline", *_LOOP_NAMES[:2])]
    patterns += ["report.html", "demo.summary.json"]
    removed: list[Path] = []
    for pattern in patterns:
        for path in sorted(out.glob(pattern)):
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def write_views(
    out: Path, *, loops: list[LoopResult], profiled: LoopResult | None
) -> tuple[list[Artifact], list[str]]:
    """Plots, the HTML report and (when deep mode did not) the annotated trace, from what the
    loops wrote; returns every artifact with how to view it, and notes on what the pictures
    show for this run's data."""
    from asynctrace.render import plot

    notes: list[str] = []
    # matplotlib is the `plot` extra: without it everything but the pictures is still written
    pictures = plot.available()
    if not pictures:
        notes.append(
            "No plots, and no pictures in the HTML report: matplotlib is not installed "
            "(pip install 'asynctrace[plot]', or pip install matplotlib, then run the demo again)."
        )
    arts = _session_artifacts(out, [*loops, *([profiled] if profiled is not None else [])])
    # each file analysed once: the pictures, the notes and the HTML report draw from it
    runs = [
        (lp, analyze_detail(load_source(lp.records_path)))
        for lp in loops
        if lp.records_path is not None
    ]
    traced: list[Analysis] = []
    if profiled is not None and profiled.profiler_traces:
        analysis, trace_arts = _trace_views(out, profiled, pictures=pictures)
        traced.append(analysis)
        arts += trace_arts
        notes += _trace_notes(analysis.report, pictures=pictures)
    if pictures:
        arts += _records_plots(out, runs)
    notes += _records_notes(
        [(lp, a.report) for lp, a in runs],
        traced[0].report if traced else None,
        pictures=pictures,
    )
    arts.append(_html_report(out, [*traced, *(a for _, a in runs)]))
    return arts, notes


def _session_artifacts(out: Path, loops: list[LoopResult]) -> list[Artifact]:
    """Each session's records, then each one's TensorBoard run."""
    arts = [
        Artifact(
            "records",
            lp.records_path,
            f"session records of {lp.name} (JSON lines, one record per step)",
            f"asynctrace report {lp.records_path}",
        )
        for lp in loops
        if lp.records_path is not None
    ]
    view = (
        f"tensorboard --logdir {out}  (then http://localhost:6006: SCALARS, TEXT, and "
        "ASYNCTRACE, our plugin, which works offline)"
    )
    what = "per-step asynctrace/ scalars and a text summary"
    arts += [
        Artifact("tensorboard", lp.tensorboard_dir, what, view)
        for lp in loops
        if lp.tensorboard_dir
    ]
    return arts


def _trace_views(
    out: Path, profiled: LoopResult, *, pictures: bool
) -> tuple[Analysis, list[Artifact]]:
    """The profiled loop's trace: its analysis (made once), the trace and its annotated copy
    (written here when deep mode did not), and its timeline picture."""
    from asynctrace.export.chrome import annotate_file
    from asynctrace.records.names import annotated_path
    from asynctrace.render import plot

    trace_path = Path(profiled.profiler_traces[0])
    p = DEMO_PROFILE
    arts = [
        Artifact(
            "profiler trace",
            str(trace_path),
            f"torch.profiler trace of {profiled.name}'s steps {p.wait + p.warmup}-"
            f"{p.wait + p.warmup + p.active - 1} (TensorBoard profiler layout)",
            f"tensorboard --logdir {out}  (ASYNCTRACE tab: its step timeline, offline; the "
            "deprecated torch-tb-profiler's PYTORCH_PROFILER tab needs the internet)",
        )
    ]
    analysis = analyze_detail(load_source(trace_path))
    if profiled.annotated_traces:
        annotated = Path(profiled.annotated_traces[0])
    else:
        annotated = annotate_file(trace_path, annotated_path(trace_path), analysis)
    what = "the profiler trace plus the asynctrace overlay process"
    view = "https://ui.perfetto.dev → Open trace file (or chrome://tracing → Load)"
    arts.append(Artifact("annotated trace", str(annotated), what, view))
    if pictures:
        png = plot.save_figure(plot.plot_timeline(analysis), _plots(out) / "timeline.png")
        what = "frontend (host) vs backend (device) timeline of the profiled steps"
        arts.append(Artifact("plot", str(png), what, "any image viewer"))
    return analysis, arts


def _plots(out: Path) -> Path:
    plots = out / _PLOTS
    plots.mkdir(exist_ok=True)
    return plots


def _records_plots(out: Path, runs: list[tuple[LoopResult, Analysis]]) -> list[Artifact]:
    """Each loop's overview picture, with its syncs marked."""
    from asynctrace.render import plot

    arts = []
    for lp, analysis in runs:
        if not analysis.report.steps:
            continue
        fig = plot.overview_figure(analysis)
        _mark_syncs(fig, analysis.report, lp, color=plot.COLORS["sync"])
        png = plot.save_figure(fig, _plots(out) / f"{lp.name}.png")
        what = f"{lp.name}: timeline of 8 steps, per-step bars, run-ahead and in flight"
        arts.append(Artifact("plot", str(png), what, "any image viewer"))
    return arts


def _html_report(out: Path, analyses: list[Analysis]) -> Artifact:
    """One self-contained page of every run analysed (its pictures where matplotlib is)."""
    from asynctrace.render.html import combined_html, write_html

    page = combined_html(analyses, title="asynctrace demo")
    html_path = write_html(out / "report.html", page)
    what = "self-contained HTML report of the profiled trace and both loops' records"
    return Artifact(
        "html", str(html_path), what, f"open {html_path.resolve().as_uri()} in a browser"
    )


def _mark_syncs(fig: Any, report: Report, lp: LoopResult, *, color: str) -> None:
    """Mark each counted sync on the overview's timeline (its first axis, the first 8 steps):
    the plots draw sync *waits*, and the lint (a synchronous backend) measures none, so without
    this the once-per-minibatch loop's picture would look like the loop that never syncs."""
    steps = report.steps
    if not lp.sync_sites or not steps or not fig.axes:
        return
    top = lp.sync_sites[0]
    where = (
        Path(str(top["site"]).rpartition(":")[0]).name + ":" + str(top["site"]).rpartition(":")[2]
    )
    how = "sync lint: would block on an accelerator" if lp.sync_detection == "lint" else "sync"
    ax = fig.axes[0]
    t0 = steps[0].start_ns
    # where inside a step it happened is not recorded: drawn at the step's end, as the plots
    # draw sync waits
    xs = [(st.start_ns + st.frontend_ns - t0) / 1e6 for st in steps[:8] if st.sync_count]
    if not xs:
        return
    # a thick tick across the host lane (host bar: y 0.7-1.3) at each step's end
    marker = ax.vlines(xs, 0.62, 1.38, colors=color, linewidths=3, zorder=5)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend is not None else []
    labels = [t.get_text() for t in legend.get_texts()] if legend is not None else []
    ax.legend(
        handles=[*handles, marker],
        labels=[*labels, f"sync at {where} ({top['op']}; {how})"],
        loc="upper right",
        fontsize=7,
        ncols=3,
    )


def _trace_notes(report: Report, *, pictures: bool = True) -> list[str]:
    """What the trace's pictures show when it has no device activity (a CPU run)."""
    figures = report.trace
    if figures is None or figures.activities.total:
        return []
    syncs = "" if figures.syncs.count else ", sync markers"
    annotated = (
        "timeline.png therefore shows the operators on the host lane and marks the device "
        "lane 'no device activity recorded'; the annotated trace's"
        if pictures
        else "The annotated trace's"
    )
    return [
        "The profiled trace has no device activity: the CPU backend ran every operator on the "
        f"host. {annotated} asynctrace process has only "
        f"the 'steps: queued on host' lane (no device lane, flow arrows{syncs}, queue-depth or "
        "run-ahead counters: there is nothing on a device to draw), and the HTML report's "
        "device columns are 0 or '—'."
    ]


def _records_notes(
    records: list[tuple[LoopResult, Report]],
    profiled: Report | None,
    *,
    pictures: bool = True,
) -> list[str]:
    """What the loops' pictures show on a synchronous backend, and what the profiler cost:
    the median host time of the profiled steps (``profiled``, the report of their trace)
    against the unsynchronized loop's (the last of ``records``), each as ``asynctrace report``
    prints it."""
    notes: list[str] = []
    steps = [st for _, report in records for st in report.steps]
    if (
        pictures
        and steps
        and all(
            st.run_ahead_ns == 0 and st.in_flight == 0 and st.device_ns == st.frontend_ns
            for st in steps
        )
    ):
        notes.append(
            "In both loops' plots the device bar equals the host bar and run-ahead and in flight "
            "are flat at 0: on a synchronous backend the session records device time = frontend "
            "time and nothing ahead or in flight."
        )
    prof = profiled.figures.get("frontend_ns") if profiled is not None else None
    plain = records[-1][1].figures.get("frontend_ns") if records else None
    if prof is not None and plain is not None:
        # said as measured: on a noisy machine the profiled steps may not be the slower
        cost = (
            "include its overhead"
            if prof.median > plain.median
            else "would include its overhead, though this run's noise hid it"
        )
        notes.append(
            f"The profiled steps (median {format_ns(prof.median)} of host time; "
            f"{format_ns(plain.median)} in {records[-1][0].name}) ran under torch.profiler and "
            f"{cost}: deep mode runs as a separate session so that the two loops' figures carry "
            "none of it."
        )
    return notes
