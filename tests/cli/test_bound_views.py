"""The bound label in the commands' views: ``plot --view bound`` for traces and records,
``report --html`` of a folder of ranks (each rank's label); every ``plot`` view of both kinds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asynctrace.cli import main

from .test_report import _write_records
from .test_user_errors import TINY

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_view_bound_of_a_trace_and_of_records(tmp_path: Path, suffix: str) -> None:
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(TINY))
    records = _write_records(tmp_path / "a.rank0.records.jsonl", 0, [1000, 3000, 2000])
    for src in (trace, records):
        out = tmp_path / f"{src.name}{suffix}"
        assert main(["plot", str(src), "-o", str(out), "--view", "bound"]) == 0
        data = out.read_bytes()
        assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data
    if suffix == ".svg":
        # the title names the run's label (records: estimated)
        assert "what bounds each step" in (tmp_path / f"{trace.name}.svg").read_text()
        assert "estimated from step records" in (tmp_path / f"{records.name}.svg").read_text()


def test_plot_draws_each_view_of_both_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(TINY))
    records = _write_records(tmp_path / "a.rank0.records.jsonl", 0, [1000, 3000, 2000])
    out = tmp_path / "p.png"
    for src in (trace, records):
        for view in ("overview", "timeline", "steps", "run-ahead"):
            assert main(["plot", str(src), "-o", str(out), "--view", view]) == 0, (src, view)
    # a window without steps is one line
    capsys.readouterr()
    assert main(["plot", str(records), "-o", str(out), "--steps", "7:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "no step in the chosen window" in err


def test_report_html_of_ranks_shows_each_ranks_label(tmp_path: Path) -> None:
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(TINY))
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path), "--html", str(out)]) == 0
    page = out.read_text()
    assert "Ranks and sessions (2)" in page
    assert page.count('<div class="bound">') == 2
    assert page.count('<td class="l">rank0.json</td><td class="l">trace</td>') == 1
    assert page.count('<td class="l">rank1.json</td><td class="l">trace</td>') == 1
    assert "<script" not in page.lower()
    from asynctrace.analysis.report import analyze
    from asynctrace.traces.load import load

    label = analyze(load(tmp_path / "rank0.json")).bound
    assert label is not None
    row = f'<td class="l">trace</td><td>{label.label}</td><td>{label.evidence.busy_pct:.1f}</td>'
    assert page.count(row) == 2
