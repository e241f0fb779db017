"""The HTML report: one self-contained file, strings escaped, and it renders in Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("matplotlib", reason="the HTML report's plots need matplotlib")

from asynctrace.analysis.report import VerdictInfo, analyze, summarize_records
from asynctrace.records import SyncSite, read_records
from asynctrace.render.html import records_html, report_html, write_html
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind
from tests.export._records import make_steps, write_records_file
from tests.export.test_chrome import two_step_trace

EVIL = '<script>alert("x")</script>&'


def _evil_trace():  # type: ignore[no-untyped-def]
    b = TraceBuilder(f"/tmp/{EVIL}.json")
    b.range("ProfilerStep#0", 0, 1000, kind=RangeKind.STEP, step=0)
    b.runtime(EVIL, 10, 5, kind=RuntimeKind.SYNC)
    return b.build(device_name=EVIL)


def _no_external_refs(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"""(?i)(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page
    assert "url(http" not in page


def test_report_page_is_self_contained_and_escaped(tmp_path: Path) -> None:
    trace = _evil_trace()
    page = report_html(analyze(trace), trace=trace)
    _no_external_refs(page)
    assert EVIL not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page
    # the per-step bound picture, then the overview (timeline, step bars, run-ahead)
    assert page.count("<svg") == 2


def test_report_page_tables_show_the_report_figures() -> None:
    trace = two_step_trace()
    report = analyze(trace)
    page = report_html(report, trace=trace)
    # step 1: host 1000 ns, sync wait 500 ns inside the step, run-ahead +300 ns
    assert "<td>1</td><td>0.001</td>" in page
    assert "<td>0.000</td>" in page
    assert "cudaStreamSynchronize" in page


def test_the_verdict_box_says_its_code_once(tmp_path: Path) -> None:
    trace = two_step_trace()
    message = "over-synchronized: 15 syncs per step at train.py:3 (aten::item ×15)"
    verdict = VerdictInfo(
        code="over-synchronized", message=message, findings=[message, "memory creep: +1 GiB"]
    )
    page = report_html(msgspec.structs.replace(analyze(trace), verdict=verdict), trace=trace)
    assert "<b>over-synchronized</b>: 15 syncs per step at train.py:3" in page
    assert "over-synchronized: over-synchronized" not in page
    assert "<br>· memory creep: +1 GiB" in page

    p = write_records_file(tmp_path / "a.records.jsonl", make_steps(8))
    rec = read_records(p)
    summary = msgspec.structs.replace(summarize_records(rec), verdict=verdict)
    assert "<b>over-synchronized</b>: 15 syncs" in records_html(summary, records=rec)


def test_records_page(tmp_path: Path) -> None:
    syncs = [SyncSite(site=f"{EVIL}.py:3", op="aten::item", count=4, wait_ns=2_000_000, steps=4)]
    p = write_records_file(tmp_path / "a.records.jsonl", make_steps(8), syncs=syncs)
    rec = read_records(p)
    page = records_html(summarize_records(rec), records=rec)
    _no_external_refs(page)
    assert EVIL not in page
    assert "aten::item" in page
    assert "<td>2.000</td>" in page  # the site's 2 ms wait


_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1200,2000",
]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return exe


def _screenshot(exe: str, page: Path, shot: Path, profile: Path) -> str:
    proc = subprocess.run(
        [exe, *_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def _console_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


@pytest.mark.slow
def test_headless_chromium_renders_without_console_errors(tmp_path: Path) -> None:
    exe = _chromium()
    # the check itself works: a page with a script error is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFn()</script></body></html>")
    assert _console_errors(_screenshot(exe, bad, tmp_path / "bad.png", tmp_path / "p0"))

    trace = two_step_trace()
    page = write_html(tmp_path / "report.html", report_html(analyze(trace), trace=trace))
    shot = tmp_path / "report.png"
    log = _screenshot(exe, page, shot, tmp_path / "p1")
    assert _console_errors(log) == []
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG")
    assert len(data) > 20_000  # a blank page is a few kB
