"""Every view shows the same headline first — ``diagnosis[0]``, its message, then its next
step, then its evidence — under its title, written by one implementation."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import msgspec
from rich.console import Console

from asynctrace.analysis.report import Report, analyze_detail
from asynctrace.export.tensorboard import summary_markdown
from asynctrace.files.sources import load_source
from asynctrace.records import SyncSite
from asynctrace.render.diagnosis import diagnosis_text, evidence_items
from asynctrace.render.html import report_html
from asynctrace.render.text import print_summary, render_report
from tests.analysis._traces import steps_trace
from tests.export._records import make_steps, write_records_file


def _records(tmp_path: Path) -> Report:
    # 8 steps, two .item() a step at train.py:12: a sync-heavy session
    steps = make_steps(8, sync_count=2, sync_wait_ns=600_000)
    syncs = [SyncSite(site="train.py:12", op="aten::item", count=16, wait_ns=4_800_000, steps=8)]
    path = write_records_file(
        tmp_path / "a.records.jsonl", steps, syncs=syncs, sync_detection="cuda"
    )
    return analyze_detail(load_source(path)).report


def _flat(text: str) -> str:
    return " ".join(text.split())


def _text(report: Report) -> list[str]:
    buf = io.StringIO()
    render_report(report, Console(file=buf, width=400, color_system=None))
    return buf.getvalue().splitlines()


def test_the_text_report_leads_with_the_headline(tmp_path: Path) -> None:
    for report in (analyze_detail(steps_trace()).report, _records(tmp_path)):
        head = report.diagnosis[0]
        lines = _text(report)
        # line 0 is the title (the file); then the headline, its next step, its evidence
        assert lines[1] == head.message
        assert lines[2] == f"  next step: {head.advice}"
        assert lines[3].startswith("  evidence: ")
        # the same lines the one implementation writes
        assert lines[1 : 1 + len(diagnosis_text(report.diagnosis))] == diagnosis_text(
            report.diagnosis
        )


def test_the_exit_summary_leads_with_the_headline(tmp_path: Path) -> None:
    from asynctrace import trace
    from asynctrace.capture.devices import FakeClock, FakeDevice

    clock = FakeClock(1_000_000)
    with trace(
        "s", dir=tmp_path, device=FakeDevice(clock), print_summary=False, tensorboard=False
    ) as s:
        for _ in range(10):
            clock.advance(1_000_000)
            s.step()
    summary = s.summary()
    buf = io.StringIO()
    print_summary(summary, file=buf)
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("): 10 step(s), 10.0 ms")
    head = summary.diagnosis[0]
    assert _flat(" ".join(lines[1:4])).startswith(_flat(head.message))
    assert "verdict:" not in buf.getvalue()


def test_the_tensorboard_text_leads_with_the_headline(tmp_path: Path) -> None:
    report = _records(tmp_path)
    head = report.diagnosis[0]
    lines = summary_markdown(report).splitlines()
    # line 0 names the session; the headline comes first after it, its code in bold
    assert lines[1] == ""
    assert lines[2] == f"**{head.code}**{head.message[len(head.code) :]}".replace("_", "\\_")
    assert lines[3].startswith("- next step: ")
    assert lines[4].startswith("- evidence: ")


def test_the_html_page_leads_with_the_headline_advice_above_the_figures(tmp_path: Path) -> None:
    for analysis in (analyze_detail(steps_trace()), analyze_detail(load_source(_path(tmp_path)))):
        head = analysis.report.diagnosis[0]
        page = report_html(analysis)
        body = page[page.index("<body>") :]
        # the first box of the page is the diagnosis
        first = re.search(r'<div class="(\w+)">', body)
        assert first is not None
        assert first.group(1) == "diagnosis"
        box = body[first.start() : body.index("</div>", first.start())]
        assert box.startswith(f'<div class="diagnosis"><p class="label"><b>{head.code}</b>')
        assert box.index("next step:") < box.index('<table class="evidence">')
        # readable evidence: names without their unit, times with it, no raw dicts
        for name, value in evidence_items(head.evidence):
            assert f'<td class="l">{name}</td><td>{value}</td>' in box
        assert "_ns" not in box
        assert "{" not in box


def _path(tmp_path: Path) -> Path:
    steps = make_steps(8, sync_count=2, sync_wait_ns=600_000)
    return write_records_file(tmp_path / "b.records.jsonl", steps, sync_detection="cuda")


def test_the_plugins_report_carries_the_same_headline(tmp_path: Path) -> None:
    from asynctrace.tb_plugin._data import PluginData

    _path(tmp_path)
    got = json.loads(PluginData(tmp_path).report("b.records.jsonl"))
    want = analyze_detail(load_source(tmp_path / "b.records.jsonl")).report
    assert got["report"]["diagnosis"][0] == msgspec.to_builtins(want.diagnosis[0])


def test_evidence_reads_with_units() -> None:
    items = dict(
        evidence_items({"region_ns": 4_430_000, "busy_pct": 7.25, "launch_gaps": 3, "x": "y"})
    )
    assert items == {"region": "4.43 ms", "busy": "7.25%", "launch gaps": "3", "x": "y"}
