"""The HTML report: one view for traces and sessions' records, one self-contained file,
strings escaped, and it renders in Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("matplotlib", reason="the HTML report's plots need matplotlib")

from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.ranks import compare_ranks, cross_rank
from asynctrace.analysis.report import Analysis, analyze_detail
from asynctrace.files.sources import load_source
from asynctrace.records import SyncSite
from asynctrace.render.html import combined_html, report_html, write_html
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace
from tests.export._records import make_steps, write_records_file
from tests.export.test_chrome import two_step_trace

EVIL = '<script>alert("x")</script>&'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;"
#: markup that survives as a file name (no "/")
EVIL_NAME = '<img src=x onerror="alert(1)">&'
KINDS = ["trace", "records"]


def _evil_trace() -> Trace:
    b = TraceBuilder(f"/tmp/{EVIL}.json")
    b.range("ProfilerStep#0", 0, 1000, kind=RangeKind.STEP, step=0)
    b.runtime(EVIL, 10, 5, kind=RuntimeKind.SYNC)
    return b.build(device_name=EVIL)


def _records(tmp_path: Path, n: int = 8, *, syncs: list[SyncSite] | None = None) -> Analysis:
    p = write_records_file(tmp_path / "a.records.jsonl", make_steps(n), syncs=syncs or [])
    return analyze_detail(load_source(p))


def _evil_run(kind: str, tmp_path: Path) -> Analysis:
    """A run whose names come from the file and hold markup: the trace's path, device and
    sync call; the session's sync site."""
    if kind == "trace":
        return analyze_detail(_evil_trace())
    syncs = [SyncSite(site=f"{EVIL}.py:3", op="aten::item", count=4, wait_ns=2_000_000, steps=4)]
    return _records(tmp_path, syncs=syncs)


def _no_external_refs(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"""(?i)(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page
    assert "url(http" not in page


def _sections(page: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", page)


@pytest.mark.parametrize("kind", KINDS)
def test_the_page_is_self_contained_and_escaped(kind: str, tmp_path: Path) -> None:
    page = report_html(_evil_run(kind, tmp_path))
    _no_external_refs(page)
    assert EVIL not in page
    assert ESCAPED in page
    # the per-step bound picture, then the overview (a trace's timeline, step bars, run-ahead);
    # this trace has no device activity, so no bound and no bound picture (as in every view)
    assert page.count("<svg") == (1 if kind == "trace" else 2)
    if kind == "records":
        # the session's sync site, and its 2 ms wait
        assert f'<td class="l">{ESCAPED}.py:3</td><td class="l">aten::item</td>' in page
        assert "<td>4</td><td>2.000</td><td>4</td>" in page


def test_the_trace_page_tables_show_the_report_figures() -> None:
    page = report_html(analyze_detail(two_step_trace()))
    # step 1: host 1000 ns, sync wait 500 ns inside the step (one sync), queue max 1, the
    # step's own bound label last (schema 4: host-bound — it owns the idle from its host start
    # to its kernel, which the device waited on it for)
    # (the text report's figures: every duration as format_ns prints it)
    assert (
        '<tr><td class="l">1</td><td>1.00 µs</td><td>0 ns</td><td>400 ns</td><td>400 ns</td>'
        "<td>900 ns</td><td>500 ns</td><td>1</td><td>300 ns</td><td>1</td><td>0</td>"
        "<td>host-bound</td></tr>"
    ) in page
    assert "<h2>Steps (2, from profiler)</h2>" in page
    # the sync, with its whole 700 ns (the steps count only what fell inside them)
    assert "<h2>Syncs (1, 0.001 ms)</h2>" in page
    assert '<td class="l">cudaStreamSynchronize</td><td>1</td><td>0.001</td><td>1</td>' in page
    assert '<td class="l">launch matched</td><td>2</td>' in page


def test_the_records_page_shows_what_the_trace_page_shows(tmp_path: Path) -> None:
    a = _records(tmp_path)
    page = report_html(a)
    # the same layout: the diagnosis, the bound box, pictures, figures and steps
    assert page.index('class="diagnosis"') < page.index('class="bound"')
    assert _sections(page) == [
        "Pictures",
        "Per-step figures",
        "Steps (8, from the session&#x27;s records)",
        "Sync sites",
    ]
    # the summary (median 2 ms frontend, 3 ms device); the run's bound, not each step's
    # (the per-step figures with the text report's labels and units)
    assert '<td class="l">frontend</td><td>8</td><td>2.00 ms</td>' in page
    assert '<td class="l">device</td><td>8</td><td>3.00 ms</td>' in page
    assert '<td class="l">mem allocated</td><td>8</td><td>64.0 MiB</td>' in page
    assert '<tr><td class="l">0</td><td>2.00 ms</td><td>0 ns</td><td>3.00 ms</td>' in page
    assert page.count("<td>1</td><td>-</td></tr>") == 8
    assert "<h1>asynctrace session: a.records.jsonl</h1>" in page
    assert "records · device fake device (fake) · 8 steps</p>" in page


def test_trace_only_sections_only_for_a_trace(tmp_path: Path) -> None:
    trace = _sections(report_html(analyze_detail(two_step_trace())))
    records = _sections(report_html(_records(tmp_path)))
    only = ["Device activities and launches", "Queue depth per stream"]
    assert all(s in trace for s in only)
    assert not any(s in records for s in only)
    # the figures table is both kinds' one summary
    assert "Per-step figures" in trace
    assert "Per-step figures" in records


@pytest.mark.parametrize("kind", KINDS)
def test_the_diagnosis_box_says_its_code_once(kind: str, tmp_path: Path) -> None:
    message = "over-synchronized: 15 syncs per step at train.py:3 (aten::item ×15)"
    diagnosis = [
        Finding(code="over-synchronized", cost_ns=5, share=0.5, message=message, advice="a"),
        Finding(
            code="memory-creep", cost_ns=0, share=0.0, message="memory creep: +1 GiB", advice="b"
        ),
    ]
    a = analyze_detail(two_step_trace()) if kind == "trace" else _records(tmp_path)
    a = Analysis(report=msgspec.structs.replace(a.report, diagnosis=diagnosis), trace=a.trace)
    page = report_html(a)
    assert "<b>over-synchronized</b>: 15 syncs per step at train.py:3" in page
    assert "over-synchronized: over-synchronized" not in page
    assert "<li><b>memory-creep</b> — memory creep: +1 GiB" in page


def test_without_matplotlib_the_page_says_why_it_has_no_pictures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asynctrace.render import plot

    monkeypatch.setattr(plot, "available", lambda: False)
    page = report_html(_records(tmp_path))
    assert "<svg" not in page
    assert "no pictures: matplotlib is not installed" in page
    assert "Per-step figures" in page


def test_a_run_without_steps_has_no_pictures(tmp_path: Path) -> None:
    page = report_html(_records(tmp_path, 0))
    assert "<svg" not in page
    assert "Pictures" not in page
    assert "<h2>Steps (0, from the session&#x27;s records)</h2>" in page


def test_the_page_of_several_runs_leads_with_the_ranks(tmp_path: Path) -> None:
    t = analyze_detail(two_step_trace())
    rec = _records(tmp_path)
    evil = msgspec.structs.replace(
        t.report,
        source=msgspec.structs.replace(t.report.source, path=f"/tmp/{EVIL_NAME}rank1.json", rank=1),
    )
    t1 = Analysis(report=evil, trace=t.trace)
    reports = [t.report, t1.report, rec.report]
    page = combined_html(
        [t, t1, rec], ranks=compare_ranks(reports), cross=cross_rank(reports), title="job"
    )
    _no_external_refs(page)
    assert EVIL_NAME not in page
    assert "<title>job</title>" in page
    lead = page[: page.index("<hr>")]
    assert "<h1>Ranks and sessions (3)</h1>" in lead
    assert '<td class="l">trace</td>' in lead
    assert '<td class="l">session</td>' in lead
    assert "(estimated)" in lead  # the session's bound
    assert "<h2>Ranks compared (3)</h2>" in lead
    assert "<h2>Across ranks (3)</h2>" in lead
    assert "<h2>Per-step skew across ranks</h2>" in lead
    esc = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;rank1.json"
    assert f'<td class="l">1</td><td class="l">{esc}</td><td class="l">trace</td>' in lead
    assert f"rank 1 ({esc}): host-bound" not in lead  # the majority's label: not an outlier
    # the session is the slowest (2 ms a step); it has no measured device busy time
    # (the text report's rows: durations as format_ns writes them)
    assert "<td>-</td><td>0 ns</td><td>0</td><td>device-bound</td><td>slowest</td>" in lead
    assert 'slowest rank (mean frontend)</td><td class="l">a.records.jsonl</td>' in lead
    # then each run's own page, in the order given
    assert page.count('<div class="bound">') == 3
    assert page.index("asynctrace report: two_steps.json") < page.index("asynctrace session")
    # one run: no ranks table, and no comparison unless given
    single = combined_html([t])
    assert "Ranks and sessions" not in single
    assert "<hr>" not in single


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

    # a trace and a session on one page
    runs = [analyze_detail(two_step_trace()), _records(tmp_path)]
    page = write_html(tmp_path / "report.html", combined_html(runs))
    shot = tmp_path / "report.png"
    log = _screenshot(exe, page, shot, tmp_path / "p1")
    assert _console_errors(log) == []
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG")
    assert len(data) > 20_000  # a blank page is a few kB
