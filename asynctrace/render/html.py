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
        _verdict_div(report.verdict),
    ]
    if trace is not None and report.steps:
        from asynctrace.render.plot import overview_figure

        parts += ["<h2>Pictures</h2>", _svg(overview_figure(trace, report))]
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
    return _page(title, "<hr>".join(bodies))


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
        _verdict_div(summary.verdict),
    ]  # fmt: skip
    if records is not None and records.steps:
        from asynctrace.render.plot import plot_records_overview

        parts += ["<h2>Pictures</h2>", _svg(plot_records_overview(records))]

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
