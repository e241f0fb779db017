"""One self-contained HTML page per run: tables and plots inline, nothing fetched.

One view for both kinds of run: :func:`report_html` takes the
:class:`~asynctrace.analysis.report.Analysis` of a trace or of a session's records and draws
what every report has (the diagnosis, the bound box, the per-step figures, the steps, the
pictures), and the trace-only sections (activities, launches, queues, each sync site) where the
report has a trace part. :func:`combined_html` puts several runs on one page, led by the ranks
table.

The page has no script, no external stylesheet, font or image: the plots are inline SVG drawn
by :mod:`asynctrace.render.plot` from the analysis, the style is one ``<style>`` block. Every
string that comes from a trace or records file (names, paths, sites, verdict text) goes through
:func:`html.escape`, so a kernel called ``<script>`` shows as text. Layout only: every figure is
the analysis's; nothing here computes one.
"""

from __future__ import annotations

import functools
import html
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctrace.records.units import format_column
from asynctrace.render import rows as _rows
from asynctrace.render.output import write_atomically

if TYPE_CHECKING:
    from asynctrace.analysis.diagnosis import Finding
    from asynctrace.analysis.ranks import CrossRank, RankComparison
    from asynctrace.analysis.report import Analysis, Report

__all__ = ["combined_html", "report_html", "write_html"]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1150px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;
border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.diagnosis{padding:.6em 1em;border-left:4px solid #F28E2B;background:#fff8ef;margin:1em 0}
.diagnosis p{margin:.3em 0}.diagnosis .label{font-size:1.15em}
.bound{padding:.6em 1em;border-left:4px solid #4E79A7;background:#f3f7fb;margin:1em 0}
.bound p{margin:.3em 0}.bound .label{font-size:1.15em}.bound table{margin:.3em 0}
.warn{padding:.3em .6em;border-left:4px solid #E15759;background:#fdeeee;margin:.3em 0}
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
.meta{color:#666}.plot svg{max-width:100%;height:auto}
code{font-size:12px;background:#f6f6f6;padding:0 3px}
"""

_PROLOG = re.compile(rb"^.*?(?=<svg)", re.S)


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


#: a table cell in ms ("—" where there is no figure)
_ms = functools.partial(format_column, unit="ms", missing="—")


def _table(head: Sequence[str], rows: Iterable[Sequence[object]], *, left: int = 1) -> str:
    th = "".join(
        f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    body = []
    for r in rows:
        tds = "".join(
            f'<td class="l">{_e(v)}</td>' if i < left else f"<td>{_e(v)}</td>"
            for i, v in enumerate(r)
        )
        body.append(f"<tr>{tds}</tr>")
    if not body:
        # a header over nothing reads like a rendering failure
        body.append(f'<tr><td class="l" colspan="{len(head)}">none</td></tr>')
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _svg(fig: Any) -> str:
    from asynctrace.render.plot import figure_bytes

    data = _PROLOG.sub(b"", figure_bytes(fig, "svg"), count=1)
    return f'<div class="plot">{data.decode("utf-8")}</div>'


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>{body}"
        '<p class="meta">written by asynctrace; self-contained: no scripts, nothing loaded '
        "from the network</p></body></html>\n"
    )


def report_html(analysis: Analysis, *, max_steps: int = 200) -> str:
    """The page for one run (a trace or a session's records): its tables and, where
    matplotlib is installed, its pictures."""
    name = Path(analysis.report.source.path).name
    return _page(f"asynctrace: {name}", _run_body(analysis, max_steps))


def combined_html(
    analyses: Sequence[Analysis],
    *,
    ranks: RankComparison | None = None,
    cross: CrossRank | None = None,
    title: str = "asynctrace report",
    max_steps: int = 200,
) -> str:
    """One page with several runs (traces and sessions' records alike), one after the other;
    with more than one, led by the ranks table, then ``ranks`` (the per-rank comparison) and
    ``cross`` (the cross-rank figures) where given."""
    lead = []
    if len(analyses) > 1:
        lead.append(_ranks_table([a.report for a in analyses]))
    if ranks is not None:
        lead.append(_rank_comparison(ranks, max_steps=max_steps))
    if cross is not None:
        lead.append(_cross_rank(cross))
    bodies = [_run_body(a, max_steps) for a in analyses]
    if lead:
        bodies.insert(0, "".join(lead))
    return _page(title, "<hr>".join(bodies))


def _run_body(analysis: Analysis, max_steps: int) -> str:
    r = analysis.report
    s = r.source
    session = s.session
    name = Path(s.path).name
    meta = [_e(s.path), _e(s.format), f"device {_e(s.device)}"]
    if session is not None:
        meta[-1] += f" ({_e(session.device_kind)})"
    if s.rank is not None:
        meta.append(f"rank {_e(s.rank)}")
    meta.append(f"{len(r.steps)} steps")
    if r.trace is not None:
        meta.append(f"{s.events} events")
    if not s.complete:
        meta.append("incomplete file")
    parts = [
        f"<h1>asynctrace {'session' if r.trace is None else 'report'}: {_e(name)}</h1>",
        f'<p class="meta">{" · ".join(meta)}</p>',
        _diagnosis_div(r.diagnosis),
        _bound_div(r),
        _pictures(analysis),
        _figures_table(r),
        _steps_table(r, max_steps),
    ]
    if r.trace is not None:
        parts.append(_trace_tables(r))
    parts.append(_syncs_table(r))
    return "".join(parts)


def _pictures(analysis: Analysis) -> str:
    """What bounds each step, then the overview (a trace's timeline, the step bars, the
    run-ahead), drawn by :mod:`asynctrace.render.plot` from the analysis."""
    from asynctrace.render import plot

    if not analysis.report.steps:
        return ""
    if not plot.available():
        return (
            '<h2>Pictures</h2><p class="meta">no pictures: matplotlib is not installed '
            "(pip install 'asynctrace[plot]')</p>"
        )
    parts = ["<h2>Pictures</h2>"]
    if _rows.shown_bound(analysis.report) is not None and analysis.bounds.bins:
        parts.append(_svg(plot.plot_idle_by_cause(analysis)))
    parts.append(_svg(plot.overview_figure(analysis)))
    return "".join(parts)


def _figures_table(r: Report) -> str:
    """The report's one summary (:func:`~asynctrace.render.rows.shown_figure_rows`): each
    figure's mean, median and p90 over the steps with it."""
    rows = _rows.shown_figure_rows(r)
    if not rows:
        return ""
    return "<h2>Per-step figures</h2>" + _table(
        ["figure", "steps", "mean", "median", "p90"],
        ((f.label, f.steps, f.mean, f.median, f.p90) for f in rows),
    )


#: the steps table's header, a column per field of :class:`~asynctrace.render.rows.StepRow`
_STEP_HEAD = {
    "step": "step",
    "frontend": "frontend",
    "data_wait": "data wait",
    "device": "device",
    "gpu_busy": "gpu busy",
    "gpu_idle": "gpu idle",
    "sync_wait": "sync wait",
    "syncs": "syncs",
    "run_ahead": "run-ahead",
    "queue_max": "queue max",
    "in_flight": "in flight",
    "bound": "bound",
}


def _steps_table(r: Report, max_steps: int) -> str:
    """The first ``max_steps`` steps (:func:`~asynctrace.render.rows.step_row`): the step
    record's figures, the step's share of the device timeline and its label where the
    analysis gave it one, and a trace's queue maximum."""
    fields = [f for f in _rows.StepRow._fields if r.trace is not None or f != "queue_max"]
    rows = [
        [getattr(_rows.step_row(r, i), f) for f in fields]
        for i in range(min(len(r.steps), max_steps))
    ]
    source = r.trace.step_source if r.trace is not None else "the session's records"
    out = f"<h2>Steps ({len(r.steps)}, from {_e(source)})</h2>"
    out += _table([_STEP_HEAD[f] for f in fields], rows)
    if len(r.steps) > max_steps:
        out += f'<p class="meta">first {max_steps} steps shown</p>'
    return out


def _trace_tables(r: Report) -> str:
    """What only a trace has: its device activities and launches, and each stream's queue
    (the launch delays and the queues where the analysis did not withhold them)."""
    t = r.trace
    if t is None:
        return ""
    a, lq = t.activities, t.launch
    clocks = '<p class="meta">{} withheld: the host and device clocks disagree</p>'
    return "".join(
        [
            "<h2>Device activities and launches</h2>",
            _table(
                ["", "count"],
                [("total", a.total)]
                + [(f"kind {k}", v) for k, v in a.per_kind.items()]
                + [(f"stream {k}", v) for k, v in a.per_stream.items()]
                + [("launch matched", lq.matched), ("launch unmatched", lq.unmatched)],
            ),
            clocks.format("launch delays")
            if _rows.withheld(r, "launch delays")
            else _table(
                ["delay", "p50 ms", "p90 ms", "p99 ms", "max ms"],
                [
                    (name, _ms(p.p50), _ms(p.p90), _ms(p.p99), _ms(p.max))
                    for name, p in (
                        ("queue delay", lq.queue_delay_ns),
                        ("launch to start", lq.launch_to_start_ns),
                    )
                ],
            ),
            "<h2>Queue depth per stream</h2>",
            clocks.format("queue depth")
            if _rows.withheld(r, "queue depth")
            else _table(
                ["stream", "max", "mean", f"time at cap {t.queue_cap} ms", "in flight max"],
                (
                    (k, q.max, f"{q.mean:.2f}", _ms(q.time_at_cap_ns), q.in_flight_max)
                    for k, q in t.queue.items()
                ),
            ),
        ]
    )


def _syncs_table(r: Report) -> str:
    """A trace's syncs, every call counted by site; a session's sync sites (the syncs it
    recorded inside steps)."""
    head = ["site", "op", "count", "wait ms", "steps"]
    if r.trace is None:
        rows = [(s.site, s.op, s.count, _ms(s.wait_ns), s.steps) for s in r.sync_sites]
        return "<h2>Sync sites</h2>" + _table(head, rows, left=2)
    y = r.trace.syncs
    rows = [(s.site or "—", s.op, s.count, _ms(s.total_ns), s.steps) for s in y.sites]
    heading = f"<h2>Syncs ({y.count}, {_ms(y.total_ns)} ms)</h2>"
    return heading + _table(["site", "op", "count", "total ms", "steps"], rows, left=2)


def _rank(rank: int | None) -> str:
    return "?" if rank is None else str(rank)


def _ranks_table(reports: Sequence[Report]) -> str:
    """One row per run on the page (a trace or a session): its rank, file, kind and what
    bounds it."""
    rows = []
    for r in reports:
        b = r.bound
        row = [_rank(r.source.rank), Path(r.source.path).name]
        row.append("trace" if r.trace is not None else "session")
        if b is None:
            row += ["—", "—", "—"]
        else:
            est = " (estimated)" if b.evidence.estimated else ""
            row += [b.label + est, f"{b.evidence.busy_pct:.1f}", b.evidence.leading_cause]
        rows.append([*row, r.diagnosis[0].code if r.diagnosis else "—"])
    return f"<h1>Ranks and sessions ({len(rows)})</h1>" + _table(
        ["rank", "file", "kind", "bound", "device busy %", "leading idle cause", "headline"],
        rows,
        left=3,
    )


def _rank_comparison(c: RankComparison, *, max_steps: int) -> str:
    """The per-rank means (the slowest rank flagged) and the per-step skew across ranks
    (:mod:`asynctrace.render.ranks`' rows, as the text report)."""
    from asynctrace.render.ranks import RANK_HEAD, SKEW_HEAD, rank_rows, skew_rows

    out = f"<h2>Ranks compared ({len(c.ranks)})</h2>" + _table(RANK_HEAD, rank_rows(c), left=2)
    if not c.step_skew:
        return out
    out += "<h2>Per-step skew across ranks</h2>"
    out += _table(SKEW_HEAD, skew_rows(c.step_skew[:max_steps]))
    if len(c.step_skew) > max_steps:
        out += f'<p class="meta">first {max_steps} steps shown</p>'
    return out


def _cross_rank(x: CrossRank) -> str:
    """The cross-rank figures (:func:`~asynctrace.render.ranks.cross_rank_rows`): the slowest
    rank, the skew percentiles, the ranks slowest most often, and how the bound labels
    split."""
    from asynctrace.render.ranks import cross_rank_rows

    rows = cross_rank_rows(x)
    return f"<h2>Across ranks ({x.ranks})</h2>" + _table(["figure", "value"], rows, left=2)


def _bound_div(r: Report) -> str:
    """The box under the diagnosis: the consistency warnings (code and message), then the
    bound's figures where every view shows them (:func:`~asynctrace.render.rows.bound_view`)
    — the label, device busy, idle by cause (time and share of the region), the evidence line,
    the host frames with ``file:line`` and the notes (the next step is the diagnosis's). Every
    string is escaped: names and sites come from the file."""
    from asynctrace.records.units import format_ns
    from asynctrace.render.legend import IDLE_CAUSE_COLORS

    parts = [
        f'<p class="warn"><b>warning: {_e(w.code)}</b> — {_e(w.message)}</p>' for w in r.warnings
    ]
    bound = _rows.shown_bound(r)
    if bound is None:
        return f'<div class="bound">{"".join(parts)}</div>' if parts else ""
    v = _rows.bound_view(bound, scope=_rows.bound_scope(r))
    parts.append(
        f'<p class="label">bound: <b>{_e(v.label)}</b>{_e(v.estimated)} — {_e(v.scope)}: '
        f"device busy {_e(v.busy)} of {_e(v.region)} ({_e(v.busy_share)}), idle {_e(v.idle)}</p>"
    )
    rows = "".join(
        f'<tr><td class="l"><span class="swatch" style="background:{IDLE_CAUSE_COLORS[c.cause]}">'
        f"</span>{_e(c.cause)}</td><td>{_e(c.time)}</td><td>{_e(c.share)}</td></tr>"
        for c in v.idle_by_cause
    )
    parts.append(
        '<table class="idle"><thead><tr><th class="l">device idle by cause</th>'
        f"<th>time</th><th>share of {_e(v.scope)}</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    if v.evidence:
        parts.append(f"<p>evidence: {_e('; '.join(v.evidence))}</p>")
    frames = v.host_frames[:5]
    if frames:
        items = "".join(
            f"<li><code>{_e(f.frame)}</code>"
            + (f" at <code>{_e(f.site)}</code>" if f.site else "")
            + f" — {_e(format_ns(f.idle_ns))} in {f.gaps} gap(s)</li>"
            for f in frames
        )
        parts.append(f"<p>host during {_e(v.leading_cause)} idle:</p><ul>{items}</ul>")
    parts += [f'<p class="meta">note: {_e(n)}</p>' for n in v.notes]
    return f'<div class="bound">{"".join(parts)}</div>'


def _diagnosis_div(diagnosis: Sequence[Finding]) -> str:
    """The box that leads the page (:func:`~asynctrace.render.diagnosis.diagnosis_view`, as
    every view): the headline with its code in bold, its next step, its evidence as a table of
    readable figures, then the other findings ranked with what each costs."""
    from asynctrace.render.diagnosis import diagnosis_view

    v = diagnosis_view(diagnosis)
    if not v.message:
        return ""
    rest = v.message[len(v.code) :] if v.message.startswith(v.code) else ": " + v.message
    parts = [f'<p class="label"><b>{_e(v.code)}</b>{_e(rest)}</p>']
    if v.advice:
        parts.append(f"<p>next step: {_e(v.advice)}</p>")
    if v.evidence:
        parts.append(
            '<table class="evidence"><tbody>'
            + "".join(f'<tr><td class="l">{_e(k)}</td><td>{_e(x)}</td></tr>' for k, x in v.evidence)
            + "</tbody></table>"
        )
    if v.rest:
        items = "".join(
            f'<li><b>{_e(code)}</b> — {_e(msg)} <span class="meta">({_e(cost)})</span></li>'
            for code, msg, cost in v.rest
        )
        more = f"<li>… and {v.more} more in the report JSON</li>" if v.more else ""
        parts.append(f"<p>then, ranked by what each costs:</p><ol>{items}{more}</ol>")
    return f'<div class="diagnosis">{"".join(parts)}</div>'


def write_html(path: str | os.PathLike[str], page: str) -> Path:
    """Write the page (UTF-8) atomically; a file name that is not UTF-8 shows "?" for its odd
    bytes."""
    return write_atomically(path, page.encode("utf-8", "replace"))
