"""One self-contained HTML page per report: tables and plots inline, nothing fetched.

The page has no script, no external stylesheet, font or image: the plots are inline SVG drawn
by :mod:`asynctrace.render.plot`, the style is one ``<style>`` block. Every string that comes
from a trace or records file (names, paths, sites, verdict text) goes through
:func:`html.escape`, so a kernel called ``<script>`` shows as text. Layout only: the figures are
the Report's / records summary's.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctrace._output import write_atomically

if TYPE_CHECKING:
    from asynctrace.analysis.bound import Bound, ReportWarning
    from asynctrace.analysis.report import RecordsSummary, Report, VerdictInfo
    from asynctrace.records import Records
    from asynctrace.traces.model import Trace

__all__ = ["combined_html", "records_html", "report_html", "write_html"]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1150px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;
border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.verdict{padding:.6em 1em;border-left:4px solid #F28E2B;background:#fff8ef;margin:1em 0}
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


def _ms(ns: float | int | None) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f}"


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


def report_html(report: Report, *, trace: Trace | None = None, max_steps: int = 200) -> str:
    """The page for one trace's report; with ``trace``, the plots too."""
    return _page(
        f"asynctrace: {Path(report.trace.source).name}", _report_body(report, trace, max_steps)
    )


def _report_body(report: Report, trace: Trace | None, max_steps: int) -> str:
    t = report.trace
    parts = [
        f"<h1>asynctrace report: {_e(Path(t.source).name)}</h1>",
        f'<p class="meta">{_e(t.source)} · {_e(t.format)} · device {_e(t.device)}'
        + (f" · rank {_e(t.rank)}" if t.rank is not None else "")
        + f" · {t.events} events</p>",
        _bound_div(
            report.bound,
            report.warnings,
            scope="whole trace" if report.step_source in ("trace", "none") else "run",
        ),
        _verdict_div(report.verdict),
    ]
    if trace is not None and report.steps:
        from asynctrace.render.plot import overview_figure, plot_idle_by_cause

        parts.append("<h2>Pictures</h2>")
        if report.bound is not None and all(s.bound is not None for s in report.steps):
            parts.append(_svg(plot_idle_by_cause(report)))
        parts.append(_svg(overview_figure(trace, report)))
    steps = report.steps[:max_steps]
    parts += [
        f"<h2>Steps ({len(report.steps)}, from {_e(report.step_source)})</h2>",
        _table(
            [
                "step",
                "cpu ms",
                "device ms",
                "gpu busy ms",
                "gpu idle ms",
                "sync wait ms",
                "syncs",
                "run-ahead ms",
                "queue max",
                "in flight",
                "bound",
            ],
            (
                (
                    s.step,
                    _ms(s.cpu_ns),
                    _ms(s.device_ns),
                    _ms(s.gpu_busy_ns),
                    _ms(s.gpu_idle_ns),
                    _ms(s.sync_wait_ns),
                    s.sync_count,
                    _ms(s.run_ahead_ns),
                    s.queue_max,
                    s.in_flight_steps,
                    s.bound.label if s.bound is not None else "—",
                )
                for s in steps
            ),
        ),
    ]
    if len(report.steps) > max_steps:
        parts.append(f'<p class="meta">first {max_steps} steps shown</p>')
    a = report.activities
    lq = report.launch
    parts += [
        "<h2>Device activities and launches</h2>",
        _table(
            ["", "count"],
            [("total", a.total)]
            + [(f"kind {k}", v) for k, v in a.per_kind.items()]
            + [(f"stream {k}", v) for k, v in a.per_stream.items()]
            + [("launch matched", lq.matched), ("launch unmatched", lq.unmatched)],
        ),
        _table(
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
        _table(
            ["stream", "max", "mean", f"time at cap {report.queue_cap} ms", "in flight max"],
            (
                (k, q.max, f"{q.mean:.2f}", _ms(q.time_at_cap_ns), q.in_flight_max)
                for k, q in report.queue.items()
            ),
        ),
        f"<h2>Syncs ({report.syncs.count}, {_ms(report.syncs.total_ns)} ms)</h2>",
        _table(
            ["site", "op", "count", "total ms", "steps"],
            ((s.site or "—", s.op, s.count, _ms(s.total_ns), s.steps) for s in report.syncs.sites),
            left=2,
        ),
    ]
    return "".join(parts)


def records_html(summary: RecordsSummary, *, records: Records | None = None) -> str:
    """The page for one session's records summary; with ``records``, the plots too."""
    return _page(f"asynctrace: {Path(summary.source).name}", _records_body(summary, records))


def combined_html(
    *,
    reports: Sequence[tuple[Report, Trace | None]] = (),
    records: Sequence[tuple[RecordsSummary, Records | None]] = (),
    title: str = "asynctrace report",
) -> str:
    """One page with several traces' reports and sessions' summaries, one after the other."""
    bodies = [_report_body(r, t, 200) for r, t in reports]
    bodies += [_records_body(s, r) for s, r in records]
    if len(reports) + len(records) > 1:
        bodies.insert(0, _ranks_table([r for r, _ in reports], [s for s, _ in records]))
    return _page(title, "<hr>".join(bodies))


def _ranks_table(reports: Sequence[Report], summaries: Sequence[RecordsSummary]) -> str:
    """One row per trace and per session on the page: its rank, file and what bounds it."""

    def row(rank: int | None, source: str, kind: str, b: Bound | None, verdict: str) -> list[str]:
        if b is None:
            return [
                "?" if rank is None else str(rank),
                Path(source).name,
                kind,
                "—",
                "—",
                "—",
                verdict,
            ]
        est = " (estimated)" if b.evidence.estimated else ""
        return [
            "?" if rank is None else str(rank),
            Path(source).name,
            kind,
            b.label + est,
            f"{b.evidence.busy_pct:.1f}",
            b.evidence.leading_cause,
            verdict,
        ]

    rows = [row(r.trace.rank, r.trace.source, "trace", r.bound, r.verdict.code) for r in reports]
    rows += [row(s.rank, s.source, "session", s.bound, s.verdict.code) for s in summaries]
    return f"<h1>Ranks and sessions ({len(rows)})</h1>" + _table(
        ["rank", "file", "kind", "bound", "device busy %", "leading idle cause", "verdict"],
        rows,
        left=3,
    )


def _bound_div(bound: Bound | None, warnings: Sequence[ReportWarning], *, scope: str) -> str:
    """The box that leads the page: the consistency warnings (code and message), then what
    bounds the run — the label, device busy, idle by cause (ns and % of the region), the
    evidence line, the host frames with ``file:line``, the notes and the first next step.
    Every string is escaped: names and sites come from the file."""
    from asynctrace.analysis.bound import CAUSES
    from asynctrace.render.legend import IDLE_CAUSE_COLORS
    from asynctrace.render.text import evidence_parts, format_ns

    parts = [
        f'<p class="warn"><b>warning: {_e(w.code)}</b> — {_e(w.message)}</p>' for w in warnings
    ]
    if bound is None:
        return f'<div class="bound">{"".join(parts)}</div>' if parts else ""
    b, e = bound, bound.evidence
    est = " (estimated from step records)" if e.estimated else ""
    parts.append(
        f'<p class="label">bound: <b>{_e(b.label)}</b>{_e(est)} — {_e(scope)}: device busy '
        f"{_e(format_ns(b.busy_ns))} of {_e(format_ns(b.region_ns))} "
        f"({e.busy_pct:.1f}%), idle {_e(format_ns(b.idle_ns))}</p>"
    )
    by = b.idle_ns_by_cause.as_dict()
    rows = "".join(
        f'<tr><td class="l"><span class="swatch" style="background:{IDLE_CAUSE_COLORS[c]}">'
        f"</span>{_e(c)}</td><td>{by[c]}</td><td>{_e(format_ns(by[c]))}</td>"
        f"<td>{e.idle_pct_by_cause.get(c, 0.0):.1f}</td></tr>"
        for c in CAUSES
    )
    parts.append(
        '<table class="idle"><thead><tr><th class="l">device idle by cause</th><th>ns</th>'
        f"<th>time</th><th>% of {_e(scope)}</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    detail = evidence_parts(e)
    if detail:
        parts.append(f"<p>evidence: {_e('; '.join(detail))}</p>")
    frames = [f for f in e.host_frames if f.frame != "(no host frame)"][:5]
    if frames:
        items = "".join(
            f"<li><code>{_e(f.frame)}</code>"
            + (f" at <code>{_e(f.site)}</code>" if f.site else "")
            + f" — {_e(format_ns(f.idle_ns))} in {f.gaps} gap(s)</li>"
            for f in frames
        )
        parts.append(f"<p>host during {_e(e.leading_cause)} idle:</p><ul>{items}</ul>")
    parts += [f'<p class="meta">note: {_e(n)}</p>' for n in e.notes]
    if b.advice:
        parts.append(f"<p>next step: {_e(b.advice[0])}</p>")
    return f'<div class="bound">{"".join(parts)}</div>'


def _verdict_div(v: VerdictInfo) -> str:
    """The verdict box: the code in bold, said once (see ``verdict_line``), then the other
    findings."""
    from asynctrace.analysis.verdict import verdict_line

    rest = verdict_line(v.code, v.message)[len(v.code) :]
    others = "".join(f"<br>· {_e(f)}" for f in v.findings if f != v.message)
    return f'<div class="verdict"><b>{_e(v.code)}</b>{_e(rest)}{others}</div>'


def _records_body(summary: RecordsSummary, records: Records | None) -> str:
    parts = [
        f"<h1>asynctrace session: {_e(Path(summary.source).name)}</h1>",
        f'<p class="meta">{_e(summary.source)} · {_e(summary.device)} ({_e(summary.device_kind)})'
        + (f" · rank {_e(summary.rank)}" if summary.rank is not None else "")
        + f" · {summary.steps} steps" + ("" if summary.complete else " · incomplete file")
        + "</p>",
        _bound_div(summary.bound, (), scope="session"),
        _verdict_div(summary.verdict),
    ]  # fmt: skip
    if records is not None and records.steps:
        from asynctrace.render.plot import plot_records_overview, records_idle_by_cause

        parts += [
            "<h2>Pictures</h2>",
            _svg(records_idle_by_cause(records)),
            _svg(plot_records_overview(records)),
        ]

    def fmt(name: str, v: float) -> str:
        return f"{v / 1e6:.3f}" if name.endswith("_ns") else f"{v:.2f}"

    parts += [
        "<h2>Per-step figures</h2>",
        _table(
            ["figure", "steps", "mean", "median", "p90"],
            (
                (
                    name.removesuffix("_ns") + (" (ms)" if name.endswith("_ns") else ""),
                    f.n,
                    fmt(name, f.mean),
                    fmt(name, f.median),
                    fmt(name, f.p90),
                )
                for name, f in summary.figures.items()
            ),
        ),
        "<h2>Sync sites</h2>",
        _table(
            ["site", "op", "count", "wait ms", "steps"],
            ((s.site, s.op, s.count, _ms(s.wait_ns), s.steps) for s in summary.sync_sites),
            left=2,
        ),
    ]
    return "".join(parts)


def write_html(path: str | os.PathLike[str], page: str) -> Path:
    """Write the page (UTF-8) atomically; a file name that is not UTF-8 shows "?" for its odd
    bytes."""
    return write_atomically(path, page.encode("utf-8", "replace"))
