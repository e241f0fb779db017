"""asynctrace's own TensorBoard plugin: listed by a real tensorboard, its routes answer the
analysis's JSON, and its page renders in headless Chromium with the network cut off."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from asynctrace.analysis.diagnosis import Finding
from asynctrace.files.sources import source_kind
from asynctrace.render.diagnosis import diagnosis_view
from asynctrace.render.legend import legend
from asynctrace.tb_plugin._data import PLUGIN_SCHEMA_VERSION, PluginData
from tests.conftest import ROOT, SHARED_TRACES
from tests.tb_plugin._server import ENTRY_POINT, _get, _tensorboard

DEMO = ROOT / "traces" / "cpu-demo"
SMALL = "hta_2022_small_base.json.gz"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _records(logdir: Path) -> list[str]:
    return sorted(p.name for p in logdir.glob("*.records.jsonl"))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's logdir, a real GPU trace (where ../shared is), and two bad files."""
    d = tmp_path_factory.mktemp("tb") / "logdir"
    shutil.copytree(DEMO, d)
    small = SHARED_TRACES / "kineto" / SMALL
    if small.exists():
        (d / "hta-small").mkdir()
        shutil.copy(small, d / "hta-small" / SMALL)
        shutil.copy(SHARED_TRACES / "kineto" / "hta_sampled_rank0.json.gz", d / "hta-small")
    broken = d / "broken"
    broken.mkdir()
    good = next((DEMO / "demo-profiled").glob("*.pt.trace.json.gz")).read_bytes()
    (broken / "cut.pt.trace.json.gz").write_bytes(good[: len(good) // 2])
    (broken / "bad.records.jsonl").write_text('{"type": "header", "name": 1}\nnot json\n')
    return d


# ------------------------------------------------------------------ without a server


def test_sources_are_records_and_traces_not_derived_files() -> None:
    assert source_kind("a.records.jsonl") == "records"
    assert source_kind("w.123.pt.trace.json.gz") == "trace"
    assert source_kind("rank0.json.gz") == "trace"
    assert source_kind("x.sqlite") == "trace"
    derived = ("w.1.annotated.json.gz", "demo.summary.json", "events.out.tfevents.1", ".x.json.gz")
    for name in derived:
        assert source_kind(name) is None


def test_runs_are_folders_or_files_at_the_top(logdir: Path) -> None:
    listing = PluginData(logdir).runs()
    runs = {r.run: [s.path for s in r.sources] for r in listing.runs}
    for name in _records(logdir):
        assert runs[name] == [name]
    profiled = runs["demo-profiled"]
    assert len(profiled) == 1
    assert profiled[0].endswith(".pt.trace.json.gz")
    assert sorted(runs["broken"]) == ["broken/bad.records.jsonl", "broken/cut.pt.trace.json.gz"]
    # folders with only TensorBoard event files are not our runs
    assert "demo-synced" not in runs
    assert {e.kind for e in listing.legend} >= {"host", "sync", "busy", "queue", "idle:host"}


def _analyze(path: Path) -> Any:
    """The report of a file as the plugin makes it: one loader and one analysis for both
    kinds, the sync calls left out (the page lists the sites)."""
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source

    return analyze(load_source(path), keep_sync_calls=False)


def test_report_is_the_analysis_json_passed_through(logdir: Path) -> None:
    data = PluginData(logdir)
    rec = _records(logdir)[0]
    got = json.loads(data.report(rec))
    assert got["ok"]
    assert got["kind"] == "records"
    assert got["run"] == rec
    want = json.loads(_analyze(logdir / rec).to_json())
    assert want["schema_version"] == 4
    assert got["report"] == want
    assert [b["step"] for b in got["bars"]["bars"]] == [s["step"] for s in want["steps"]]
    assert got["bars"]["queue_max"] is None  # a trace's only
    assert got["windows"] == []  # no events: no step windows
    trace = next((logdir / "demo-profiled").glob("*.pt.trace.json.gz"))
    got = json.loads(data.report(trace.relative_to(logdir).as_posix()))
    want = json.loads(_analyze(trace).to_json())
    assert got["ok"]
    assert got["report"] == want
    assert [w["step"] for w in got["windows"]] == [s["step"] for s in want["steps"]]
    assert [w["name"] for w in got["windows"]] == [s["name"] for s in want["trace"]["steps"]]
    assert got["bars"]["queue_max"] == [s["queue_max"] for s in want["trace"]["steps"]]


def _ns_figures(report: dict[str, Any]) -> list[tuple[str, list[float]]]:
    """(label, [mean, median, p90]) of each duration figure the figures table shows, from the
    report's JSON."""
    from asynctrace.analysis.accumulate import STEP_FIGURES

    out = []
    for fig in STEP_FIGURES:
        f = report["figures"].get(fig.field)
        if fig.unit == "ns" and f is not None and f["mean"] != 0:
            out.append((fig.label, [f["mean"], f["median"], f["p90"]]))
    return out


def test_what_the_page_reads_comes_as_the_views_write_it(logdir: Path) -> None:
    """The diagnosis, bound, figures, sync sites and every duration a tooltip reads are sent
    formatted by the views every other output uses; the page formats nothing."""
    from asynctrace.records.units import format_ns
    from asynctrace.render.diagnosis import diagnosis_view
    from asynctrace.render.rows import bound_scope, shown_bound, shown_figure_rows
    from asynctrace.render.text import bound_text, site_rows

    data = PluginData(logdir)
    trace = next((logdir / "demo-profiled").glob("*.pt.trace.json.gz"))
    for path in (logdir / _records(logdir)[0], trace):
        rel = path.relative_to(logdir).as_posix()
        got = json.loads(data.report(rel))
        assert got["schema_version"] == 3
        report = _analyze(path)
        want = {
            "diagnosis": diagnosis_view(report.diagnosis),
            "bound_lines": (
                bound_text(bound, scope=bound_scope(report))
                if (bound := shown_bound(report)) is not None
                else []
            ),
            "figure_rows": [(r.label, r.mean, r.median, r.p90) for r in shown_figure_rows(report)],
            "sync_rows": site_rows(report),
        }
        assert {k: got[k] for k in want} == json.loads(msgspec.json.encode(want)), rel
        assert got["diagnosis"]["message"]
        # the durations read are format_ns of the report's own values
        shown = {row[0]: row[1:] for row in got["figure_rows"]}
        for label, values in _ns_figures(got["report"]):
            assert shown[label] == [format_ns(v) for v in values], (rel, label)
        bars, text = got["bars"], got["bar_text"]
        for side in ("host", "device"):
            assert text[side] == [[format_ns(p["dur_ns"]) for p in b[side]] for b in bars["bars"]]
        assert text["run_ahead"] == [format_ns(v) for v in bars["run_ahead_ns"]]
    win = json.loads(data.step_window(trace.relative_to(logdir).as_posix(), None))
    assert win["schema_version"] == 3
    assert win["host"]
    assert win["host_text"] == [format_ns(h["dur_ns"]) for h in win["host"]]
    assert win["device_text"] == [format_ns(a["dur_ns"]) for a in win["device"]]


def test_unreadable_files_say_why_and_nothing_else_breaks(logdir: Path) -> None:
    from asynctrace.errors import TraceFormatError
    from asynctrace.files.sources import load_source

    data = PluginData(logdir)
    for rel in ("broken/cut.pt.trace.json.gz", "broken/bad.records.jsonl"):
        with pytest.raises(TraceFormatError) as e:
            load_source(logdir / rel)
        got = json.loads(data.report(rel))
        assert got["ok"] is False
        assert got["error"] == str(e.value)
    # now known: the listing says so too
    errors = {s.path: s.error for r in data.runs().runs for s in r.sources}
    assert errors["broken/cut.pt.trace.json.gz"]
    assert errors[_records(logdir)[0]] is None
    for bad in ("../x.records.jsonl", "/etc/passwd", "demo-synced/events.out.tfevents.x", ""):
        assert json.loads(data.report(bad))["ok"] is False


def test_step_window_is_one_step_clipped_and_cached(logdir: Path) -> None:
    src = SHARED_TRACES / "kineto" / "hta_sampled_rank0.json.gz"
    if not src.exists():
        pytest.skip(f"real trace {src} not available")
    data = PluginData(logdir)
    rel = "hta-small/hta_sampled_rank0.json.gz"
    report = json.loads(data.report(rel))["report"]
    first, extra = report["steps"][0], report["trace"]["steps"][0]
    win = json.loads(data.step_window(rel, first["step"]))
    assert win["step"] == first["step"]
    assert win["name"] == extra["name"]
    assert win["start_ns"] <= first["start_ns"] == win["step_start_ns"]
    assert win["end_ns"] >= extra["end_ns"] == win["step_end_ns"]
    for a in win["device"]:
        assert a["start_ns"] < win["end_ns"]
        assert a["start_ns"] + a["dur_ns"] >= win["start_ns"]
    # every activity the report gave the step is in its window, and marked as the step's
    assert sum(a["in_step"] for a in win["device"]) == extra["activities"]
    starts = {a["start_ns"] for a in win["device"]}
    assert win["links"]
    assert all(lk["executed_ns"] in starts for lk in win["links"])
    assert {q["lane"] for q in win["queue"]} <= {ln["id"] for ln in win["lanes"]}
    loads = data.cache.loads
    # CPU time, not wall time: a loaded machine stretches the wall clock, not the work
    t = time.process_time()
    again = json.loads(data.step_window(rel, report["steps"][1]["step"]))
    assert data.cache.loads == loads  # nothing read or parsed again
    assert again["step"] == report["steps"][1]["step"]
    assert time.process_time() - t < 2.0
    capped = json.loads(data.step_window(rel, first["step"], max_events=5))
    assert capped["capped"]
    assert len(capped["device"]) == 5
    assert any("capped" in n for n in capped["notes"])
    assert json.loads(data.step_window(rel, None))["step"] == first["step"]
    assert "no step 1000000000" in json.loads(data.step_window(rel, 10**9))["error"]
    assert "not records" in json.loads(data.step_window(_records(logdir)[0], None))["error"]


def test_cache_is_bounded_and_keyed_by_mtime(tmp_path: Path) -> None:
    d = tmp_path / "logdir"
    shutil.copytree(DEMO, d)
    data = PluginData(d, cache_entries=1)
    a, b = _records(d)[:2]
    data.report(a)
    data.report(a)
    assert data.cache.loads == 1
    data.report(b)  # evicts a
    data.report(a)
    assert data.cache.loads == 3
    st = (d / a).stat()
    os.utime(d / a, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    data.report(a)
    assert data.cache.loads == 4


def test_cache_keeps_the_newest_file_within_its_byte_bound(logdir: Path) -> None:
    data = PluginData(logdir, cache_bytes=1)
    a, b = _records(logdir)[:2]
    data.report(a)
    data.report(a)  # the newest stays, however large
    assert data.cache.loads == 1
    data.report(b)
    data.report(a)
    assert data.cache.loads == 3


def test_inactive_without_records_or_traces(tmp_path: Path) -> None:
    assert PluginData(tmp_path / "missing").is_active() is False
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.out.tfevents.1").write_bytes(b"")
    (tmp_path / "run" / "w.1.annotated.json.gz").write_bytes(b"")
    assert PluginData(tmp_path).is_active() is False
    assert PluginData(None).runs().notes
    (tmp_path / "run" / "x.records.jsonl").write_text("")
    assert PluginData(tmp_path).is_active() is True


def test_compare_uses_the_analysis_compare_for_any_two_sources(logdir: Path) -> None:
    from asynctrace.analysis.compare import compare
    from asynctrace.render.compare import comparison_rows

    data = PluginData(logdir)
    a, b = _records(logdir)[:2]
    got = json.loads(data.compare(a, b))
    assert got["ok"]
    want = compare(_analyze(logdir / a), _analyze(logdir / b))
    assert got["comparison"] == json.loads(msgspec.json.encode(want))
    assert got["comparison"]["kind"] == "records"
    # the figure table as `asynctrace compare` prints it: the same rows, one function
    assert got["figure_rows"] == [list(r) for r in comparison_rows(want)]
    assert got["schema_version"] == PLUGIN_SCHEMA_VERSION == 3
    # a session's records beside a trace: the same step figures, compared
    trace = next((logdir / "demo-profiled").glob("*.pt.trace.json.gz")).relative_to(logdir)
    mixed = json.loads(data.compare(a, trace.as_posix()))
    assert mixed["ok"], mixed
    assert mixed["comparison"] == json.loads(
        msgspec.json.encode(compare(_analyze(logdir / a), _analyze(logdir / trace)))
    )
    assert mixed["comparison"]["kind"] == "mixed"
    assert mixed["verdict_line_a"]
    assert mixed["verdict_line_b"]
    assert mixed["figure_rows"] == [
        list(r) for r in comparison_rows(compare(_analyze(logdir / a), _analyze(logdir / trace)))
    ]


def test_step_bars_of_a_trace_split_its_device_idle_by_cause() -> None:
    from asynctrace.analysis.report import analyze
    from asynctrace.render.views import step_bars
    from tests.export.test_chrome import two_step_trace

    report = analyze(two_step_trace())
    bars = step_bars(report)
    # step 1: 1000 ns on the host, 500 of them waiting on a sync
    assert [(p.kind, p.dur_ns) for p in bars.bars[1].host] == [
        ("host", 500),
        ("data", 0),
        ("sync", 500),
    ]
    # step 0: the kernel's 300 ns busy, and the 700 ns the device waited on its host (schema
    # 4: the idle from step 1's host start to its kernel, 900 ns, is step 1's)
    b = report.step_bounds[0]
    assert (b.busy_ns, b.idle_ns_by_cause.host) == (300, 700)
    assert [(p.kind, p.dur_ns) for p in bars.bars[0].device] == [("busy", 300), ("idle:host", 700)]
    assert bars.run_ahead_ns == [s.run_ahead_ns for s in report.steps]
    assert report.trace is not None
    assert bars.queue_max == [t.queue_max for t in report.trace.steps]


def test_step_bars_of_a_long_run_are_every_kth_step(tmp_path: Path) -> None:
    from asynctrace.analysis.report import analyze
    from asynctrace.records import read_records
    from asynctrace.render.views import step_bars
    from tests.export._records import make_steps, write_records_file

    steps = [
        msgspec.structs.replace(s, frontend_ns=10 + s.step, device_ns=None if s.step % 2 else 7)
        for s in make_steps(10_001)
    ]
    report = analyze(read_records(write_records_file(tmp_path / "long.records.jsonl", steps)))
    bars = step_bars(report, max_steps=2000)
    assert bars.total_steps == 10_001
    assert bars.stride == 6
    assert [b.step for b in bars.bars] == list(range(0, 10_001, 6))
    assert bars.bars[1].host[0].dur_ns == 16  # a real step's figure, not an average
    # a session's device bar is its device time (its bounds are estimates, not a timeline)
    assert [(p.kind, p.dur_ns) for p in bars.bars[0].device] == [("busy", 7)]
    every = step_bars(report, max_steps=10_001)
    assert every.stride == 1
    assert every.bars[1].device == []  # step 1: no device time measured


def test_entry_point_and_package_data_are_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["tensorboard_plugins"]["asynctrace"] == ENTRY_POINT
    data = meta["tool"]["setuptools"]["package-data"]["asynctrace"]
    static = ROOT / "asynctrace"
    shipped = {p.name for pattern in data for p in static.glob(pattern)}
    assert {"index.js", "timeline.js", "style.css"} <= shipped
    from tensorboard.plugins import base_plugin

    module, _, attr = ENTRY_POINT.partition(":")
    import importlib

    loader = getattr(importlib.import_module(module), attr)
    assert issubclass(loader, base_plugin.TBLoader)


def test_importing_asynctrace_imports_no_tensorboard() -> None:
    code = (
        "import sys, asynctrace, asynctrace.tb_plugin, asynctrace.tb_plugin._data;"
        "print(sorted(m for m in ('tensorboard', 'werkzeug') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ a real tensorboard


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _tensorboard(logdir, tmp_path_factory.mktemp("tbserver")) as base:
        yield base


@pytest.mark.slow
def test_tensorboard_lists_the_plugin_and_its_routes_answer(server: str, logdir: Path) -> None:
    listing = _get(f"{server}/data/plugins_listing")["asynctrace"]
    assert listing["enabled"] is True
    assert listing["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": "/data/plugin/asynctrace/index.js",
    }
    plugin = f"{server}/data/plugin/asynctrace"
    runs = _get(f"{plugin}/runs")
    assert runs["logdir"] == str(logdir)
    assert runs == json.loads(msgspec.json.encode(PluginData(logdir).runs())) | {
        "runs": runs["runs"]
    }
    assert {r["run"] for r in runs["runs"]} >= {"demo-profiled", "broken", *_records(logdir)}
    data = PluginData(logdir)
    for rel in (_records(logdir)[0], "broken/cut.pt.trace.json.gz"):
        q = urllib.parse.urlencode({"path": rel})
        assert _get(f"{plugin}/report?{q}") == json.loads(data.report(rel))
    a, b = _records(logdir)[:2]
    q = urllib.parse.urlencode({"a": a, "b": b})
    assert _get(f"{plugin}/compare?{q}") == json.loads(data.compare(a, b))
    bad = _get(f"{plugin}/step_window?" + urllib.parse.urlencode({"path": "x", "step": "two"}))
    assert bad == {"ok": False, "error": "step='two': give an integer"}
    with urllib.request.urlopen(f"{plugin}/index.js", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/javascript")
        assert b"export async function render" in r.read()


def _chromium() -> str:
    exe = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
    if exe is None:
        pytest.skip("Chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return exe


@pytest.mark.slow
def test_page_renders_offline_in_headless_chromium(server: str, logdir: Path) -> None:
    exe = _chromium()
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is not installed"
    )
    # the timeline of a real GPU trace needs ../shared; everything else runs without it
    has_small = (logdir / "hta-small").exists()
    small = f"hta-small/{SMALL}"
    cpu_trace = next((logdir / "demo-profiled").glob("*.pt.trace.json.gz")).relative_to(logdir)
    problems: list[str] = []
    foreign: list[str] = []
    diagnosis = msgspec.to_builtins(diagnosis_view(_FINDINGS))

    def route(r: Any) -> None:
        url = urllib.parse.urlsplit(r.request.url)
        if url.hostname != "127.0.0.1":
            foreign.append(r.request.url)
            r.abort()
            return
        if url.path.endswith("/report") and urllib.parse.parse_qs(url.query)["path"] == [small]:
            # a diagnosis of more findings than a view lists, with durations where the unit
            # turns over: the page shows the view's text as it is
            response = r.fetch()
            body = response.json()
            body["diagnosis"] = diagnosis
            body["report"]["warnings"] = ["clock skew of 2 us between host and device"]
            r.fulfill(response=response, json=body)
            return
        r.continue_()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.route("**/*", route)
            page.goto(f"{server}/data/plugin_entry.html?name=asynctrace")
            page.wait_for_selector("main.at-root[data-ready='true']", timeout=60_000)
            # every run has its section
            listed = [r.run for r in PluginData(logdir).runs().runs]
            shown = page.locator("section.at-run").evaluate_all(
                "(ss) => ss.map((s) => s.dataset.run)"
            )
            assert shown == listed
            good = [*_records(logdir), cpu_trace.as_posix(), *([small] if has_small else [])]
            for rel in good:
                box = page.locator(f".at-source[data-path='{rel}']")
                assert box.get_attribute("data-status") == "ok", rel
                assert box.locator(".at-diagnosis b").first.inner_text()
                assert box.locator("svg.at-bars rect").count() > 0
                _check_shown_durations(box, json.loads(PluginData(logdir).report(rel)))
            for rel in ("broken/cut.pt.trace.json.gz", "broken/bad.records.jsonl"):
                box = page.locator(f".at-source[data-path='{rel}']")
                assert box.get_attribute("data-status") == "unreadable"
                assert "unreadable" in box.inner_text()
            # a CPU-only profile: the host lane shows the operators the host ran
            cpu = page.locator(f".at-source[data-path='{cpu_trace.as_posix()}']")
            cpu.locator("svg.at-timeline rect.host-call").first.wait_for(timeout=30_000)
            assert "no device activity" in cpu.locator(".at-notes").inner_text()
            # two runs side by side
            page.locator("select.at-pick-a").select_option(_records(logdir)[0])
            page.locator("select.at-pick-b").select_option(_records(logdir)[1])
            page.locator("button.at-compare-go").click()
            page.wait_for_selector(".at-compare-out[data-outcome]")
            assert page.locator(".at-compare-out .at-verdict").count() == 2
            shown = _cells(page.locator(".at-compare-out"), "at-compare-table")
            answer = json.loads(PluginData(logdir).compare(*_records(logdir)[:2]))
            assert shown == answer["figure_rows"]
            if has_small:
                first = json.loads(PluginData(logdir).step_window(small, None))
                _check_gpu_timeline(page, small, first)
        finally:
            browser.close()
    assert foreign == []
    assert problems == []
    if not has_small:
        pytest.skip(f"the GPU timeline part: {SHARED_TRACES / 'kineto' / SMALL} not available")


#: findings past what a view lists (six after the headline), costs where the unit turns over
_FINDINGS = [
    Finding(
        code="launch-overhead",
        cost_ns=999_600,
        share=0.75,
        message="launch-overhead (host-bound): the device waits for the host",
        advice="issue work sooner: a larger batch or CUDA graphs take launch overhead away",
        evidence={
            "idle_ns": 1_500_000,
            "wait_ns": 999_600,
            "gap_ns": 1000,
            "busy_pct": 12.5,
            "launch_gaps": 900,
        },
    ),
    *(
        Finding(code=f"other-{i}", cost_ns=1000 * i, share=0.01, message=f"other {i}", advice="")
        for i in range(8)
    ),
]


def _cells(box: Any, table: str) -> list[list[str]]:
    return box.locator(f"table.{table} tbody tr").evaluate_all(
        "(rs) => rs.map((r) => [...r.cells].map((c) => c.textContent))"
    )


def _check_shown_durations(box: Any, answer: dict[str, Any]) -> None:
    """Every duration the source's box shows is format_ns of the report's value: the
    per-step figures, the sync sites, the bound's lines, the bars' tooltips."""
    from asynctrace.records.units import format_ns

    report = answer["report"]
    rows = _cells(box, "at-figures")
    assert rows == [list(r) for r in answer["figure_rows"]]
    shown = {r[0]: r[1:] for r in rows}
    for label, values in _ns_figures(report):
        assert shown[label] == [format_ns(v) for v in values], label
    sites = report["trace"]["syncs"]["sites"] if report["trace"] else report["sync_sites"]
    waits = [s["total_ns"] if report["trace"] else s["wait_ns"] for s in sites]
    got = [r[3] for r in _cells(box, "at-syncs") if len(r) == 5]
    assert got == [format_ns(w) for w in waits]
    if answer["bound_lines"]:
        bound = box.locator(".at-bound p").all_inner_texts()
        assert bound == [line.strip() for line in answer["bound_lines"]]
    titles = box.locator("svg.at-bars rect title").all_text_contents()
    bars = answer["bars"]["bars"]
    labels = {e.kind: e.label for e in legend()}
    want = [
        f"step {b['step']}, {labels[p['kind']]}: {format_ns(p['dur_ns'])}"
        for b in bars
        for side in ("host", "device")
        for p in b[side]
        if p["dur_ns"]
    ]
    assert titles == want


def _check_gpu_timeline(page: Any, small: str, first: dict[str, Any]) -> None:
    """A real GPU trace's first step (``first``, its window): activities with their durations
    as format_ns writes them, links, queue depth; the diagnosis (the test's route's) and
    warnings (added to its report), zoom, another step."""
    from asynctrace.records.units import format_ns

    box = page.locator(f".at-source[data-path='{small}']")
    box.locator("svg.at-timeline rect.activity").first.wait_for(timeout=30_000)
    assert box.locator("svg.at-timeline rect.activity").count() > 1
    titles = set(box.locator("svg.at-timeline rect.activity title").all_text_contents())
    events = [*first["host"], *first["device"]]
    assert titles <= {f"{e['name']} ({e['kind']}): {format_ns(e['dur_ns'])}" for e in events}
    assert box.locator("svg.at-timeline line.at-link").count() > 0
    assert box.locator("svg.at-timeline polyline.at-queue").count() > 0
    assert box.locator(".at-bound b").inner_text()
    # the headline: its message, its next step above its figures, times with their units as
    # format_ns writes them; six other findings, then how many more
    d = box.locator(".at-diagnosis[data-code='launch-overhead']")
    text = d.inner_text()
    order = ("waits for the host", "issue work sooner", "1.50 ms")
    assert [text.index(x) for x in order] == sorted(text.index(x) for x in order)
    assert _cells(d, "at-small") == [
        ["idle", "1.50 ms"],
        ["wait", "1.00 ms"],
        ["gap", "1.00 µs"],
        ["busy", "12.5%"],
        ["launch gaps", "900"],
    ]
    items = d.locator("ol li").all_inner_texts()
    assert items[0] == "other-0 — other 0 (no step time)"
    assert items[1] == "other-1 — other 1 (1.00 µs, 1%)"
    assert items[6:] == ["… and 2 more in the report JSON"]
    assert "idle_ns" not in text
    assert "{" not in text
    assert "clock skew" in box.locator(".at-warnings").inner_text()
    assert box.locator(".at-syncs").count() == 1
    # zooming redraws the lanes
    svg = box.locator("svg.at-timeline")
    svg.hover()
    page.mouse.wheel(0, -400)
    assert box.locator("svg.at-timeline rect.activity").count() > 0
    # another step's window
    steps = box.locator("select.at-step-pick option")
    if steps.count() > 1:
        value = steps.nth(1).get_attribute("value")
        box.locator("select.at-step-pick").select_option(value)
        page.wait_for_selector(
            f".at-source[data-path='{small}'] .at-timeline-box[data-step='{value}']"
        )
