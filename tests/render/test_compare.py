"""The comparison's figure table: one row function, the terminal's table is its rows."""

from __future__ import annotations

import io

from rich.console import Console

from asynctrace.analysis.compare import Comparison, compare
from asynctrace.analysis.report import analyze
from asynctrace.files.sources import load_source
from asynctrace.records.units import format_ns
from asynctrace.render.compare import comparison_rows, render_comparison
from tests.conftest import ROOT


def _demo_comparison() -> Comparison:
    a, b = sorted((ROOT / "traces" / "cpu-demo").glob("*.records.jsonl"))[:2]
    return compare(analyze(load_source(a)), analyze(load_source(b)))


def test_rows_are_the_comparisons_figures_as_printed() -> None:
    c = _demo_comparison()
    rows = comparison_rows(c)
    assert [r.judged for r in rows] == [f.change for f in c.figures]
    step = next(r for r, f in zip(rows, c.figures, strict=True) if f.figure == "step time")
    s = next(f for f in c.figures if f.figure == "step time")
    assert s.a_median is not None
    assert s.unit == "ms"
    assert (step.figure, step.a) == ("step time", format_ns(s.a_median * 1e6))
    for r, f in zip(rows, c.figures, strict=True):
        assert r.figure == f.figure or r.figure == f"{f.figure} ({f.unit})"
        assert (r.delta == "—") == (f.delta is None)
        assert (r.p == "—") == (f.p_value is None)


def test_the_terminal_table_is_the_rows() -> None:
    c = _demo_comparison()
    out = io.StringIO()
    render_comparison(c, Console(file=out, width=240, color_system=None))
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.getvalue().splitlines()]
    shown = [row for row in cells if len(row) == 6]
    assert shown == [list(r) for r in comparison_rows(c)]
