"""The views of a before/after :class:`~asynctrace.analysis.compare.Comparison`: the terminal
text (the headline change and what explains it first, then the figure table) and a compact
Markdown summary for a pull-request comment. They compute nothing: every figure is the
comparison's. The figure table's rows (:func:`comparison_rows`) are the terminal's and the
TensorBoard page's."""

from __future__ import annotations

from typing import NamedTuple

from rich.console import Console
from rich.table import Table
from rich.text import Text

from asynctrace.analysis.compare import Comparison, Explanation, FigureDelta, Gate
from asynctrace.records.units import UNITS, format_ns
from asynctrace.render.printable import printable

__all__ = [
    "ComparisonRow",
    "comparison_rows",
    "explained_line",
    "gate_line",
    "headline",
    "markdown",
    "outcome_line",
    "render_comparison",
]

#: explaining items shown in the markdown table and the text's kernel list
_SHOWN = 5


def _signed_ns(ns: float) -> str:
    return ("+" if ns > 0 else "−" if ns < 0 else "±") + format_ns(abs(ns))


def _short(name: str, limit: int = 70) -> str:
    """A kernel's name cut to ``limit`` characters (C++ names run to hundreds)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _step(c: Comparison) -> FigureDelta:
    return next(f for f in c.figures if f.figure == "step time")


def outcome_line(c: Comparison) -> str:
    """``B is: ...``: the judgement of the step time, or why it was not judged."""
    if c.outcome in ("improvement", "regression", "same"):
        return f"B is: {c.outcome} (step time)"
    step = _step(c)
    if c.outcome == "not comparable":
        why = "step times not comparable: the runs were captured with different settings (note)"
    elif c.outcome == "too few steps":
        why = (
            f"too few steps ({step.a_n} and {step.b_n}; the noise test needs "
            f"{c.min_steps} on each side)"
        )
    else:
        why = "no step time on one side"
    return f"B is: not judged: {why}"


def headline(c: Comparison) -> str:
    """The step-time change in one line: medians, delta and the judgement."""
    s = _step(c)
    if s.a_median is None or s.b_median is None or s.delta is None:
        return outcome_line(c)
    pct = "" if s.delta_pct is None else f" ({s.delta_pct:+.1f}%)"
    a, b = _num(s.a_median, s.unit), _num(s.b_median, s.unit)
    return (
        f"step time {a} -> {b}, {_num(s.delta, s.unit, sign=True)}{pct} "
        f"(median over {s.a_n} and {s.b_n} steps); {outcome_line(c)}"
    )


def explained_line(e: Explanation) -> str:
    """Which few parts explain most of the step's change, and how much of it they cover."""
    if e.covered_pct is None or not e.top:
        return "explained by: no change of the step's time to explain"
    parts = []
    for item in e.top:
        detail = f" [{item.detail}]" if item.detail else ""
        parts.append(
            f"{_item(item.what, item.name)} {_signed_ns(item.delta_ns_per_step)}/step "
            f"({item.share_pct:.0f}%){detail}"
        )
    against = "".join(
        f"; against it: {_item(i.what, i.name)} {_signed_ns(i.delta_ns_per_step)}/step"
        for i in e.against
    )
    return (
        f"explained by: {'; '.join(parts)} — {e.covered_pct:.0f}% of the step's "
        f"{_signed_ns(e.step.delta_ns_per_step)}/step{against} (steady steps: {e.a_steps} and "
        f"{e.b_steps})"
    )


def _item(what: str, name: str) -> str:
    return f"kernel {_short(name)}" if what == "kernel" else name


def gate_line(g: Gate) -> str:
    return f"gate (--fail-on regression): {'FAIL' if g.regression else 'pass'}: {g.message}"


class ComparisonRow(NamedTuple):
    """One figure of a comparison as printed: its label (with its unit unless a duration),
    both medians, the change with its percentage, the noise test's p and the judgement."""

    figure: str
    a: str
    b: str
    delta: str
    p: str
    judged: str


def comparison_rows(c: Comparison) -> list[ComparisonRow]:
    """The figure table's rows, in the comparison's order; ``—`` where a side has no value."""
    return [
        ComparisonRow(
            # a duration's value says its unit
            figure=f.figure if f.unit in _DURATION else f"{f.figure} ({f.unit})",
            a=_num(f.a_median, f.unit),
            b=_num(f.b_median, f.unit),
            delta="—" if f.delta is None else _num(f.delta, f.unit, sign=True) + _pct(f.delta_pct),
            p="—" if f.p_value is None else f"{f.p_value:.3g}",
            judged=f.change,
        )
        for f in c.figures
    ]


def render_comparison(c: Comparison, console: Console, *, gate: bool = False) -> None:
    """The comparison as terminal text: what changed and why first, then every figure."""
    p = printable  # names and paths come from files: control characters shown escaped
    e = c.explain
    console.print(p(headline(c)), markup=False)
    console.print(p(explained_line(e)), markup=False)
    if gate:
        console.print(p(gate_line(c.gate)), markup=False)
    table = Table(title=f"A: {p(c.a)}\nB: {p(c.b)}", title_justify="left")
    for col in ("figure", "A median", "B median", "delta", "p", "judged"):
        table.add_column(col, justify="left" if col in ("figure", "judged") else "right")
    style = {"improvement": "green", "regression": "red", "changed": "yellow"}
    for r in comparison_rows(c):
        table.add_row(
            p(r.figure), r.a, r.b, r.delta, r.p, Text(r.judged, style=style.get(r.judged, ""))
        )
    console.print(table)
    _print_explain(e, console)
    va, vb = c.verdict_a, c.verdict_b
    if c.verdict_changed:
        console.print(f"verdict changed: {p(va.code)} -> {p(vb.code)}", markup=False)
    else:
        console.print(f"verdict unchanged: {p(va.code)}", markup=False)
    for x in c.findings_added:
        console.print(f"  + {p(x)}", markup=False)
    for x in c.findings_removed:
        console.print(f"  - {p(x)}", markup=False)
    console.print(p(outcome_line(c)), markup=False)
    al = c.steps
    if al.by == "step number" and al.paired_median_delta_ms is not None:
        console.print(
            f"steps matched by number ({al.a_steps}): median change per step "
            f"{_num(al.paired_median_delta_ms, 'ms', sign=True)}, B slower in "
            f"{al.paired_slower_pct:.0f}% of them",
            markup=False,
        )
    for note in [*c.notes, *e.notes]:
        console.print(f"note: {p(note)}", markup=False)
    console.print(f"noise: {p(c.noise)}", markup=False)


def _print_explain(e: Explanation, console: Console) -> None:
    p = printable
    console.print(
        f"per steady step: busy {format_ns(e.busy.a_ns_per_step)} -> "
        f"{format_ns(e.busy.b_ns_per_step)} ({_signed_ns(e.busy.delta_ns_per_step)}), idle "
        f"{format_ns(e.idle.a_ns_per_step)} -> {format_ns(e.idle.b_ns_per_step)} "
        f"({_signed_ns(e.idle.delta_ns_per_step)})",
        markup=False,
    )
    moved = [f"{c} {_signed_ns(v.delta_ns_per_step)}" for c, v in e.idle_by_cause.items()]
    console.print(f"  idle by cause: {', '.join(moved)}", markup=False)
    changed = [k for k in e.kernels if k.delta_ns_per_step != 0][:_SHOWN]
    for k in changed:
        console.print(
            f"  {k.kind} {p(_short(k.name))}: {format_ns(k.a_ns_per_step)} -> "
            f"{format_ns(k.b_ns_per_step)} ({_signed_ns(k.delta_ns_per_step)}/step)",
            markup=False,
        )
    for kind, what in (("op", "host op"), ("frame", "host frame")):
        for h in [h for h in e.host if h.kind == kind and h.delta_ns_per_step != 0][:3]:
            where = f" ({h.site})" if h.site else ""
            during = " during idle" if kind == "frame" else ""
            console.print(
                f"  {what} {p(_short(h.frame))}{p(where)}{during}: {format_ns(h.a_ns_per_step)}"
                f" -> {format_ns(h.b_ns_per_step)} ({_signed_ns(h.delta_ns_per_step)}/step)",
                markup=False,
            )
    ss = e.sync_sites
    for what, rows in (("added", ss.added), ("removed", ss.removed), ("changed", ss.changed)):
        for s in rows:
            console.print(
                f"  sync {what}: {p(s.op)} at {p(s.site)}: {s.a_count_per_step:.3g} -> "
                f"{s.b_count_per_step:.3g} per step, cost {_signed_ns(s.delta_cost_ns_per_step)}"
                "/step",
                markup=False,
            )
    b = e.bound
    if b.a is not None or b.b is not None:
        console.print(
            f"  headline: A {p(b.a.code if b.a else '—')} -> B {p(b.b.code if b.b else '—')}",
            markup=False,
        )
    for code in b.appeared:
        console.print(f"  finding appeared: {p(code)}", markup=False)
    for code in b.vanished:
        console.print(f"  finding vanished: {p(code)}", markup=False)


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return printable(text).replace("|", "\\|").replace("`", "'")


def markdown(c: Comparison, *, gate: bool = True) -> str:
    """A compact summary for a pull-request comment: the headline change, the parts that
    explain it, the gate's result."""
    e = c.explain
    out = ["### asynctrace compare", ""]
    if gate:
        icon = "❌" if c.gate.regression else "✅"
        out.append(f"**{icon} {'regression' if c.gate.regression else 'no regression'}** — "
                   f"{_md(c.gate.message)}")  # fmt: skip
        out.append("")
    out.append(f"- {_md(headline(c))}")
    out.append(f"- {_md(explained_line(e))}")
    if e.top:
        out += ["", "| part | change per step | share of the change |", "|---|---:|---:|"]
        for item in e.top:
            name = f"kernel `{_md(_short(item.name))}`" if item.what == "kernel" else _md(item.name)
            if item.detail:
                name += f" ({_md(item.detail)})"
            out.append(f"| {name} | {_signed_ns(item.delta_ns_per_step)} | {item.share_pct:.0f}% |")
    added = e.sync_sites.added
    if added:
        out.append("")
        out += [f"- sync added: `{_md(s.op)}` at `{_md(s.site)}`" for s in added[:_SHOWN]]
    b = e.bound
    if b.a is not None or b.b is not None:
        out.append(f"- headline finding: {b.a.code if b.a else '—'} → {b.b.code if b.b else '—'}")
    for note in [*c.notes, *e.notes]:
        out.append(f"- note: {_md(note)}")
    out += ["", f"<sub>A: `{_md(c.a)}` · B: `{_md(c.b)}` · {_md(c.noise)}</sub>", ""]
    return "\n".join(out)


#: the units of a duration a comparison's figures come in, and their length in ns
_DURATION = dict(UNITS)


def _num(v: float | None, unit: str, *, sign: bool = False) -> str:
    """A figure of the comparison in ``unit``: a duration as :func:`format_ns` writes it
    (``+`` or ``−`` before a change), any other number to four significant digits."""
    if v is None:
        return "—"
    if unit in _DURATION:
        ns = v * _DURATION[unit]
        return _signed_ns(ns) if sign else format_ns(ns)
    return f"{v:+.4g}" if sign else f"{v:.4g}"


def _pct(p: float | None) -> str:
    return "" if p is None else f" ({p:+.1f}%)"
