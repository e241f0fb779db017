"""The plugin on hostile logdirs (docs/reliability.md): links out of the logdir, names that are
not UTF-8, names too long, folder trees deeper than Python's recursion limit; and a step
window's cost and cap. Each checked on :class:`PluginData` and, where an HTTP error was seen
before, through a real ``tensorboard``."""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asynctrace.tb_plugin._data import PluginData
from tests.conftest import ROOT, SHARED_TRACES
from tests.tb_plugin._server import _get, _tensorboard

DEMO = ROOT / "traces" / "cpu-demo"
TRACE = next((DEMO / "demo-profiled").glob("*.pt.trace.json.gz"))
RECORDS = sorted(DEMO.glob("*.records.jsonl"))[0]
SECRET = b"top secret: the first bytes of a file outside the logdir\n"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logdir with one good run and every hostile entry, and a folder outside it."""
    base = tmp_path_factory.mktemp("hostile")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.json.gz").write_bytes(SECRET)
    shutil.copy(TRACE, outside / "linked.pt.trace.json.gz")
    d = base / "logdir"
    (d / "good").mkdir(parents=True)
    shutil.copy(TRACE, d / "good" / "rank0.pt.trace.json.gz")
    shutil.copy(RECORDS, d / "good" / RECORDS.name)
    # links out of the logdir: to a file (the secret), to a folder of traces
    (d / "good" / "passwd.json.gz").symlink_to(outside / "secret.json.gz")
    (d / "elsewhere").symlink_to(outside, target_is_directory=True)
    # a link inside the logdir to a file inside it: served like the file
    (d / "good" / "alias.pt.trace.json.gz").symlink_to(d / "good" / "rank0.pt.trace.json.gz")
    # a name that is not UTF-8, a file and a folder
    odd = os.path.join(os.fsencode(d), b"good", b"rank1-\xff.pt.trace.json.gz")
    shutil.copy(TRACE, os.fsdecode(odd))
    odd_dir = os.path.join(os.fsencode(d), b"run-\xfe")
    os.mkdir(odd_dir)
    shutil.copy(RECORDS, os.fsdecode(os.path.join(odd_dir, b"x.records.jsonl")))
    # 1,100 folders deep, a records file at the bottom
    deep = d / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1100):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(RECORDS, "rb") as src:
            out = os.open("bottom.records.jsonl", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(out, src.read())
            os.close(out)
    finally:
        os.close(fd)
    return d


def _ok(answer: bytes) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(answer)
    return got


def test_links_out_of_the_logdir_are_refused_and_never_read(hostile: Path) -> None:
    data = PluginData(hostile)
    for rel in ("good/passwd.json.gz", "elsewhere/linked.pt.trace.json.gz"):
        for answer in (data.report(rel), data.step_window(rel, None)):
            assert SECRET[:10] not in answer
            got = _ok(answer)
            assert got["ok"] is False
            assert "outside the logdir" in got["error"], got
        got = _ok(data.compare(rel, "good/rank0.pt.trace.json.gz"))
        assert got["ok"] is False
        assert "outside the logdir" in got["error"]
    assert data.cache.loads == 0  # nothing opened
    listing = data.runs()
    paths = {s.path for r in listing.runs for s in r.sources}
    assert "good/passwd.json.gz" not in paths
    assert not any(p.startswith("elsewhere/") for p in paths)
    assert "not listed: good/passwd.json.gz: a link to outside the logdir" in listing.notes
    # a link that stays inside is an ordinary source
    assert "good/alias.pt.trace.json.gz" in paths
    assert _ok(data.report("good/alias.pt.trace.json.gz"))["ok"]


def test_a_logdir_that_is_itself_a_link_serves_what_is_inside(
    hostile: Path, tmp_path: Path
) -> None:
    link = tmp_path / "logdir-link"
    link.symlink_to(hostile, target_is_directory=True)
    data = PluginData(link)
    assert _ok(data.report("good/rank0.pt.trace.json.gz"))["ok"]
    assert not _ok(data.report("good/passwd.json.gz"))["ok"]


def test_names_that_are_not_utf8_are_left_out_and_said_escaped(hostile: Path) -> None:
    data = PluginData(hostile)
    listing = _ok(data.runs_json())  # was: UnicodeEncodeError (HTTP 500)
    runs = {r["run"]: sorted(s["path"] for s in r["sources"]) for r in listing["runs"]}
    assert runs["good"] == [
        "good/alias.pt.trace.json.gz",
        f"good/{RECORDS.name}",
        "good/rank0.pt.trace.json.gz",
    ]
    odd = "not listed: good/rank1-\\xff.pt.trace.json.gz: the name is not UTF-8"
    assert odd in listing["notes"]
    assert "not listed: run-\\xfe/: not UTF-8" in listing["notes"]


def test_a_name_too_long_is_a_json_error(hostile: Path) -> None:
    data = PluginData(hostile)
    rel = "good/" + "x" * 300 + ".pt.trace.json.gz"
    for answer in (data.report(rel), data.step_window(rel, 0)):
        got = _ok(answer)
        assert got["ok"] is False
        assert "not a records file or trace" in got["error"]


def test_a_tree_deeper_than_the_recursion_limit_is_listed(hostile: Path) -> None:
    data = PluginData(hostile)
    listing = data.runs()  # was: RecursionError in os.walk
    deep = [s.path for r in listing.runs for s in r.sources if s.path.startswith("deep/")]
    assert deep == ["deep/" + "d/" * 1100 + "bottom.records.jsonl"]
    assert _ok(data.report(deep[0]))["ok"]


def test_max_events_beyond_the_maximum_is_refused(hostile: Path) -> None:
    from asynctrace.render.views import MAX_EVENTS

    data = PluginData(hostile)
    rel = "good/rank0.pt.trace.json.gz"
    for n in (MAX_EVENTS + 1, 10**9, 0):
        got = _ok(data.step_window(rel, None, max_events=n))
        assert got["ok"] is False
        assert f"max_events={n}: give 1 to {MAX_EVENTS}" == got["error"]
    assert "step" in _ok(data.step_window(rel, None, max_events=MAX_EVENTS))


def test_step_windows_read_the_whole_trace_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole-trace arrays are made once per cached analysis, not per event shown: counted on
    the launch links' ``matched`` (a whole-trace array each time it is asked)."""
    from asynctrace.analysis.launches import LaunchLinks

    src = SHARED_TRACES / "kineto" / "hta_sampled_rank0.json.gz"
    if not src.exists():
        pytest.skip(f"real trace {src} not available")
    (tmp_path / "run").mkdir()
    shutil.copy(src, tmp_path / "run" / src.name)
    calls = []
    real = LaunchLinks.matched

    def counted(self: LaunchLinks) -> Any:
        calls.append(1)
        return real.fget(self)  # type: ignore[attr-defined]

    data = PluginData(tmp_path)
    rel = f"run/{src.name}"
    report = _ok(data.report(rel))
    steps = [w["step"] for w in report["windows"]]
    monkeypatch.setattr(LaunchLinks, "matched", property(counted))
    shown = 0
    for step in steps:
        win = _ok(data.step_window(rel, step))
        shown += len(win["device"])
    assert shown > 100 * len(steps)  # many activities shown in each window
    assert len(calls) <= 1  # was: one whole-trace array per activity shown


def test_windows_hold_exactly_the_events_that_overlap_them() -> None:
    """Against a brute-force reading of a built trace with a long kernel over every step,
    zero-length ones, and kernels of all lengths."""
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.render.views import timeline_index, timeline_window
    from asynctrace.traces.builder import TraceBuilder
    from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind

    rng = np.random.default_rng(7)
    b = TraceBuilder("built.json")
    n_steps, per = 6, 40
    b.activity("long", 5, 6 * 10_000, kind=ActivityKind.KERNEL, stream=3, correlation=-1)
    corr = 0
    for s in range(n_steps):
        t0 = s * 10_000
        b.range(f"ProfilerStep#{s}", t0, 10_000, kind=RangeKind.STEP, step=s, pid=1, tid=1)
        for _ in range(per):
            corr += 1
            t = t0 + int(rng.integers(0, 9_000))
            b.runtime("cudaLaunchKernel", t, 20, kind=RuntimeKind.LAUNCH, correlation=corr,
                      pid=1, tid=1)  # fmt: skip
            dur = int(rng.choice([0, 1, 50, 3000, 25_000]))
            b.activity(f"k{corr}", t + int(rng.integers(30, 2_000)), dur, stream=7,
                       correlation=corr)  # fmt: skip
    trace = b.build(device_name="test")
    analysis = analyze_detail(trace)
    at = timeline_index(analysis.trace)  # type: ignore[arg-type]
    act = trace.activities
    for i in range(len(analysis.report.steps)):
        win = timeline_window(analysis, i, max_events=10_000, at=at)
        w0, w1 = win.start_ns, win.end_ns
        want = sorted(
            (int(s), int(d))
            for s, d in zip(act.start_ns, act.dur_ns, strict=True)
            if s < w1 and (s + max(d, 0) > w0 or s >= w0)
        )
        assert sorted((d.start_ns, d.dur_ns) for d in win.device) == want
        assert win.counts.device == len(want)
        assert timeline_window(analysis, i, max_events=10_000) == win  # `at` made inside


# ------------------------------------------------------------------ through a real tensorboard


@pytest.mark.slow
def test_a_real_tensorboard_answers_json_for_every_hostile_entry(
    hostile: Path, tmp_path: Path
) -> None:
    with _tensorboard(hostile, tmp_path) as base:
        plugin = f"{base}/data/plugin/asynctrace"
        runs = _get(f"{plugin}/runs")  # was: HTTP 500
        assert "good" in {r["run"] for r in runs["runs"]}
        for rel in (
            "good/passwd.json.gz",
            "elsewhere/linked.pt.trace.json.gz",
            "good/" + "x" * 300 + ".pt.trace.json.gz",
        ):
            q = urllib.parse.urlencode({"path": rel})
            for route in ("report", "step_window"):
                got = _get(f"{plugin}/{route}?{q}")
                assert got["ok"] is False, (route, rel, got)
                assert "top secret" not in json.dumps(got)
        q = urllib.parse.urlencode({"path": "good/rank0.pt.trace.json.gz", "max_events": 10**9})
        assert _get(f"{plugin}/step_window?{q}")["ok"] is False
