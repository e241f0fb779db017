"""``asynctrace demo``: figures from scripted devices, and the command end to end on CPU, with
every artifact it writes checked against an independent reading of the files."""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rich.console import Console  # noqa: E402

from asynctrace._commands._demo_files import clear_previous  # noqa: E402
from asynctrace._commands._demo_loops import (  # noqa: E402
    _torch_device,
    run_loop,
    run_statements,
)
from asynctrace._commands._demo_run import run_demo  # noqa: E402
from asynctrace._commands._demo_text import render_demo  # noqa: E402
from asynctrace.capture.devices import CpuDevice, FakeClock, FakeDevice  # noqa: E402
from asynctrace.cli import main  # noqa: E402
from asynctrace.records import read_records  # noqa: E402
from tests.export._trace_event_validator import (  # noqa: E402
    load_events,
    tb_profiler_problems,
    validate,
    validate_file,
)


def test_statements_device_times_come_from_the_markers() -> None:
    clock = FakeClock(5_000)
    # marker i (one after each statement) executes 1 µs × (i + 1) after it was recorded
    dev = FakeDevice(clock, lambda i, t: t + 1_000 * (i + 1))
    r = run_statements(dev, torch.device("cpu"))
    assert [s.statement for s in r.statements] == [
        "x = torch.ones((1, 2), device=device)",
        "y = torch.ones((1, 2), device=device)",
        "z = x * y + 2",
    ]
    # the fake clock does not move by itself: host times are 0, device times are the script
    assert [s.returned_ns for s in r.statements] == [0, 0, 0]
    assert [s.device_done_ns for s in r.statements] == [1_000, 2_000, 3_000]
    assert r.printed == str(torch.tensor([[3.0, 3.0]]))
    assert dev.waits == 3  # only after the print, one per marker, to read their times


def test_statements_with_queued_matmuls_on_cpu() -> None:
    r = run_statements(CpuDevice(), torch.device("cpu"), queue_matmuls=2, size=64)
    assert r.statements[0].statement.startswith("2 × b = torch.mm(a, a)")
    assert len(r.statements) == 4
    # host clock: each statement ends after the previous one; CPU markers execute when recorded
    ends = [s.host_end_ns for s in r.statements]
    assert ends == sorted(ends)
    for s in r.statements:
        assert s.device_done_ns >= s.host_end_ns


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        # get_device reads "rocm[:N]" as the HIP build's "cuda[:N]" and times cuda:N
        ("rocm", "rocm:1", "cuda:1"),
        ("rocm", "rocm", "cuda"),
        ("cuda", "cuda:1", "cuda:1"),
        ("cuda", None, "cuda"),
        ("cpu", "cpu", "cpu"),
        ("cpu", None, "cpu"),
    ],
)
def test_the_demos_tensors_go_where_its_markers_are_recorded(
    kind: str, spec: str | None, expected: str
) -> None:
    dev = FakeDevice(FakeClock())
    dev.kind = kind  # the one attribute the choice reads
    assert _torch_device(dev, spec) == torch.device(expected)


def test_run_demo_small_on_cpu(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    res = run_demo(device="cpu", out=tmp_path, steps=3, size=64, views=False, console=console)
    assert not res.asynchronous
    assert res.matmuls.numpy.done_ns == res.matmuls.numpy.returned_ns
    assert res.matmuls.torch.done_ns == res.matmuls.torch.returned_ns
    assert [lp.synchronized for lp in res.loops] == [True, False]
    for lp in res.loops:
        assert lp.records_path is not None
        recs = read_records(lp.records_path)
        assert recs.complete
        assert len(recs.steps) == 3
        assert recs.header.name == lp.name
        # the CPU backend: device time is frontend time, nothing runs ahead, nothing in flight
        for st in recs.steps:
            assert st.device_ns == st.frontend_ns
            assert st.run_ahead_ns in (0, None)
            assert st.in_flight == 0
        assert lp.figures["in_flight"].p90 == 0
    text = out.getvalue()
    assert "Exercise: on CPU, can you still observe asynchrony in the backend? No." in text
    summary = json.loads((tmp_path / "demo.summary.json").read_text())
    assert summary["device_kind"] == "cpu"
    assert summary["answer"] == res.answer
    render_demo(res, Console(file=io.StringIO()))


def test_the_cpu_demo_shows_the_synced_loops_sync_with_its_line(tmp_path: Path) -> None:
    out = io.StringIO()
    # wide enough that the line naming the site is not wrapped, however long the path
    console = Console(file=out, width=400)
    res = run_demo(device="cpu", out=tmp_path, steps=3, size=64, views=False, console=console)
    synced, unsynced = res.loops
    # before: the default detector sees nothing on CPU, so both loops recorded 0 syncs
    assert [st["sync_count"] for st in synced.steps] == [1, 1, 1]
    assert synced.sync_detection == "lint"
    demo_py = Path(run_loop.__code__.co_filename)
    line = next(
        i for i, text in enumerate(demo_py.read_text().splitlines(), 1) if "loss.item())" in text
    )
    assert [(s["site"], s["op"]) for s in synced.sync_sites] == [
        (f"{demo_py}:{line}", "aten::_local_scalar_dense")
    ]
    assert f"sync at {demo_py}:{line}: aten::_local_scalar_dense ×3" in out.getvalue()
    # the loop that never syncs keeps the cheap default: its host times carry no lint
    assert unsynced.sync_detection == "off"
    assert all(st["sync_count"] == 0 for st in unsynced.steps)


def test_demo_command_defaults() -> None:
    import argparse

    from asynctrace._commands import demo as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.out, args.device, args.steps, args.quick) == ("traces/demo", None, None, False)


def test_demo_command_rejects_too_few_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "1"]) == 2
    assert "at least 2 steps" in capsys.readouterr().err


# --- the whole demo, quick mode, and what it writes ----------------------------------------

_TRACE_NAME = re.compile(r"^(?P<worker>.+_\d+)\.(?P<time_ns>\d+)\.pt\.trace\.json\.gz$")


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """``asynctrace demo --quick`` once for the module: (out folder, summary JSON, stdout)."""
    import contextlib

    out = tmp_path_factory.mktemp("demo") / "traces" / "demo"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["demo", "--quick", "--device", "cpu", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "demo.summary.json").read_text())
    return out, summary, buf.getvalue()


def _artifacts(summary: dict[str, Any], kind: str) -> list[Path]:
    return [Path(a["path"]) for a in summary["artifacts"] if a["kind"] == kind]


def test_quick_demo_writes_every_artifact(quick_demo: tuple[Path, dict[str, Any], str]) -> None:
    out, summary, _ = quick_demo
    kinds = {a["kind"] for a in summary["artifacts"]}
    assert kinds == {
        "records",
        "tensorboard",
        "profiler trace",
        "annotated trace",
        "plot",
        "html",
        "summary",
    }
    for a in summary["artifacts"]:
        assert Path(a["path"]).exists(), a
    records = sorted(out.glob("*.records.jsonl"))
    assert [f.name.split(".")[0] for f in records] == [
        "demo-profiled",
        "demo-synced",
        "demo-unsynced",
    ]
    for f in records:
        assert read_records(f).complete
    assert len(read_records(records[1]).steps) == 4  # --quick: 4 steps per loop
    assert sorted(p.name for p in _artifacts(summary, "plot")) == [
        "demo-synced.png",
        "demo-unsynced.png",
        "timeline.png",
    ]
    assert _artifacts(summary, "html") == [out / "report.html"]


def test_the_demo_prints_the_figures_asynctrace_report_prints(
    quick_demo: tuple[Path, dict[str, Any], str],
) -> None:
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source
    from asynctrace.render.rows import figure_rows

    def squeezed(text: str) -> str:
        """Without white space: rich wraps the lines, a long path anywhere."""
        return "".join(text.split())

    _, summary, text = quick_demo
    for lp in summary["loops"]:
        # the per-step table asynctrace report prints for the same records, step 0 included
        records = analyze(load_source(lp["records_path"]))
        rows = {r[0]: r[1:] for r in figure_rows(records.figures)}
        assert squeezed(
            f"median frontend {rows['frontend'][1]}, median device {rows['device'][1]}, "
            f"p90 run-ahead {rows['run-ahead'][2]}, p90 in flight {rows['in flight'][2]}; "
            f"records: {lp['records_path']}"
        ) in squeezed(text)
    # the profiled steps' median is the one the report of their trace prints
    (trace,) = _artifacts(summary, "profiler trace")
    traced = {r[0]: r[1:] for r in figure_rows(analyze(load_source(trace)).figures)}
    assert squeezed(f"The profiled steps (median {traced['frontend'][1]} of host time;") in (
        squeezed(text)
    )


def test_quick_demo_prints_how_to_view_each(quick_demo: tuple[Path, dict[str, Any], str]) -> None:
    out, summary, text = quick_demo
    assert "Exercise: on CPU, can you still observe asynchrony in the backend? No." in text
    assert "ui.perfetto.dev" in text
    assert f"tensorboard --logdir {out}" in text
    assert (out / "report.html").resolve().as_uri() in text
    assert f"asynctrace report {out}" in text
    for a in summary["artifacts"]:
        rel = Path(a["path"]).relative_to(out)
        assert str(rel) in text, rel
    # on CPU the demo says what its pictures can and cannot show
    assert "The profiled trace has no device activity" in text
    assert "flat at 0" in text


def test_the_reports_the_demo_suggests_run_clean(
    quick_demo: tuple[Path, dict[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    out, summary, _ = quick_demo
    capsys.readouterr()
    # "every session's per-step summary": the three sessions' records; the summary is not a trace
    assert main(["report", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    doc = json.loads(captured.out)
    assert [r["source"]["format"] for r in doc["reports"]] == ["records"] * 3
    # the profiled run's folder holds the trace and its annotated copy: one rank, not two
    (trace,) = _artifacts(summary, "profiler trace")
    assert main(["report", str(trace.parent), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [Path(r["source"]["path"]).name for r in doc["reports"]] == [trace.name]


def test_deep_mode_trace_has_the_tensorboard_profiler_layout(
    quick_demo: tuple[Path, dict[str, Any], str],
) -> None:
    out, summary, _ = quick_demo
    (trace,) = _artifacts(summary, "profiler trace")
    assert trace.parent == out / "demo-profiled"  # <logdir>/<run>/
    m = _TRACE_NAME.match(trace.name)
    assert m is not None, trace.name
    # worker = {host}_{pid}: the process that wrote the profiled session's records
    header = read_records(summary["profiled"]["records_path"]).header
    assert m["worker"] == f"{header.host}_{header.pid}"
    events, _ = load_events(trace)
    assert tb_profiler_problems(events) == []
    steps = sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    # DEMO_PROFILE: wait 1, warmup 1, active 3 -> the session's steps 2, 3, 4
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_annotated_trace_is_valid_and_matches_the_profiler_steps(
    quick_demo: tuple[Path, dict[str, Any], str],
) -> None:
    _, summary, _ = quick_demo
    (annotated,) = _artifacts(summary, "annotated trace")
    (trace,) = _artifacts(summary, "profiler trace")
    # the whole file is valid Trace Event Format; strictly (integer pid/tid, as Perfetto and
    # TensorBoard want), the only complaints are torch's own string-pid events, copied through
    assert validate_file(annotated, strict_ids=False) == []
    assert validate_file(annotated) == validate_file(trace)
    events, _ = load_events(annotated)
    source, _ = load_events(trace)
    # the original events are all there, unchanged
    assert events[: len(source)] == source
    overlay = events[len(source) :]
    assert validate(overlay) == []
    (pid,) = {
        e["pid"]
        for e in overlay
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == "asynctrace"
    }
    # the host lane's step spans (the device-idle and step-share tracks are named otherwise)
    spans = {
        e["name"]: e
        for e in overlay
        if e["ph"] == "X" and e["pid"] == pid and re.fullmatch(r"step \d+", e["name"])
    }
    want = {
        e["name"].replace("ProfilerStep#", "step "): e
        for e in source
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    }
    assert sorted(spans) == sorted(want)
    for name, e in spans.items():
        # the host lane's step span is the profiler's step range, to the nanosecond
        assert e["ts"] == pytest.approx(want[name]["ts"], abs=1e-3)
        assert e["dur"] == pytest.approx(want[name]["dur"], abs=1e-3)
    # what the demo's note says the CPU overlay lacks: no device activity, so no arrows and no
    # queue depth; the device timeline is all idle, drawn as such, with its cause
    assert {e["ph"] for e in overlay} == {"M", "X"}
    assert {e["tid"] for e in spans.values()} == {1}
    idle = [e for e in overlay if e["ph"] == "X" and e["name"].startswith("idle: ")]
    assert idle
    assert all(e["args"]["cause"] in e["name"] for e in idle)


def test_tensorboard_runs_hold_the_loops_scalars(
    quick_demo: tuple[Path, dict[str, Any], str],
) -> None:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    out, summary, _ = quick_demo
    # one run per session: <out>/<loop>/<time>-<pid>
    runs = sorted(p.parent.name for p in _artifacts(summary, "tensorboard"))
    assert runs == ["demo-profiled", "demo-synced", "demo-unsynced"]
    for loop in summary["loops"]:
        assert Path(loop["tensorboard_dir"]).parent == out / loop["name"]
        acc = ea.EventAccumulator(loop["tensorboard_dir"], size_guidance={ea.TENSORS: 0})
        acc.Reload()
        tags = set(acc.Tags()["tensors"])
        assert {
            "asynctrace/frontend_ms",
            "asynctrace/device_ms",
            "asynctrace/run_ahead_ms",
            "asynctrace/in_flight",
        } <= tags
        records = read_records(loop["records_path"])
        fe = acc.Tensors("asynctrace/frontend_ms")
        assert [e.step for e in fe] == [s.step for s in records.steps]
        got = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in fe]
        # TensorBoard stores scalars as float32: the records' figure, converted to ms, rounded so
        assert got == [float(np.float32(s.frontend_ns / 1e6)) for s in records.steps]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_plots_are_real_pngs_of_plausible_size(
    quick_demo: tuple[Path, dict[str, Any], str],
) -> None:
    _, summary, _ = quick_demo
    for png in _artifacts(summary, "plot"):
        data = png.read_bytes()
        w, h = _png_size(data)
        # 100 dpi figures: the timeline is 10×3 in, the records overviews 11×9 in
        assert (w, h) in ((1000, 300), (1100, 900)), (png.name, w, h)
        assert 10_000 < len(data) < 300_000, (png.name, len(data))
        assert data.endswith(b"IEND\xaeB`\x82")


def test_html_report_is_self_contained(quick_demo: tuple[Path, dict[str, Any], str]) -> None:
    out, summary, _ = quick_demo
    page = (out / "report.html").read_text(encoding="utf-8")
    low = page.lower()
    assert "<script" not in low
    assert "<link" not in low
    # the inline SVGs refer to their own clip paths and glyphs (url(#id), href="#id"), nothing else
    assert re.findall(r"""url\(\s*['"]?([^#'"\s])""", low) == []
    assert re.findall(r"""(?:src|href)\s*=\s*["']?([^#"'\s])""", low) == []
    assert "@import" not in low
    # the trace's overview and each loop's; on the CPU backend no idle-by-cause picture (a
    # synchronous run has no device timeline: its bound is not shown, render.rows.shown_bound)
    assert low.count("<svg") == 3
    for loop in summary["loops"]:
        assert Path(loop["records_path"]).name in page
    (trace,) = _artifacts(summary, "profiler trace")
    assert trace.name in page


def test_clear_previous_removes_only_the_demos_files(tmp_path: Path) -> None:
    mine = [
        "demo-synced.vm.1.2.records.jsonl",
        "demo-unsynced/events.out.tfevents.1.vm.1.0",
        "demo-profiled/vm_1.2.pt.trace.json.gz",
        "demo-profiled/vm_1.2.annotated.json.gz",
        "plots/timeline.png",
        "plots/demo-synced.png",
        "report.html",
        "demo.summary.json",
    ]
    theirs = [
        "train.vm.1.2.records.jsonl",
        "demo-synced/notes.txt",
        "plots/mine.png",
        "other/events.out.tfevents.1.vm.1.0",
    ]
    for name in mine + theirs:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    removed = clear_previous(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == sorted(mine)
    for name in theirs:
        assert (tmp_path / name).exists()


def test_demo_without_matplotlib_writes_everything_but_the_pictures(tmp_path: Path) -> None:
    # matplotlib is the `plot` extra: a base install must still run the main job to the end
    import subprocess
    import sys

    out = tmp_path / "demo"
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from asynctrace.cli import main\n"
        f"sys.exit(main(['demo', '--quick', '--device', 'cpu', '--out', {str(out)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "matplotlib is not installed (pip install 'asynctrace[plot]'" in " ".join(
        done.stdout.split()
    )
    summary = json.loads((out / "demo.summary.json").read_text())
    kinds = {a["kind"] for a in summary["artifacts"]}
    assert "plot" not in kinds
    assert {"records", "tensorboard", "profiler trace", "annotated trace", "html"} <= kinds
    page = (out / "report.html").read_text()
    assert "<svg" not in page
    assert "Per-step figures" in page
    assert not (out / "plots").exists()


def test_profiler_overhead_sentence_follows_the_measurement() -> None:
    from asynctrace._commands._demo_files import _records_notes
    from asynctrace._commands._demo_loops import LoopResult
    from asynctrace.analysis.report import Report, analyze
    from asynctrace.records import Records, SessionHeader, StepRecord

    header = SessionHeader(
        name="x",
        host="h",
        pid=1,
        device_kind="cpu",
        device_name="cpu",
        asynchronous=False,
        started_unix_ns=0,
    )

    def report(frontend_ns: int) -> Report:
        steps = [
            StepRecord(step=k, start_ns=k * frontend_ns, frontend_ns=frontend_ns) for k in range(3)
        ]
        return analyze(
            Records(path="x", header=header, steps=steps, syncs=[], summary=None, complete=True)
        )

    records = [(LoopResult("demo-unsynced", False, None, []), report(1_000_000))]
    slower = _records_notes(records, report(2_000_000))
    assert (
        "The profiled steps (median 2.00 ms of host time; 1.00 ms in demo-unsynced)" in (slower[-1])
    )
    assert "and include its overhead:" in slower[-1]
    # the profiled steps measured faster this time: the sentence must not claim an overhead
    faster = _records_notes(records, report(500_000))
    assert "though this run's noise hid it" in faster[-1]
    # no trace of the profiled steps: nothing said of them
    assert not any("profiled steps" in n for n in _records_notes(records, None))


def test_the_synced_loops_picture_marks_its_syncs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the plot extra")
    from asynctrace._commands._demo_files import _mark_syncs
    from asynctrace._commands._demo_loops import LoopResult
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.records import Records, SessionHeader, StepRecord
    from asynctrace.render import plot

    header = SessionHeader(
        name="demo-synced", host="h", pid=1, device_kind="cpu", device_name="cpu",
        asynchronous=False, started_unix_ns=0, sync_detection="lint",
    )  # fmt: skip
    steps = [
        StepRecord(step=i, start_ns=i * 1_000_000, frontend_ns=1_000_000, sync_count=1)
        for i in range(4)
    ]
    rec = Records(path="x", header=header, steps=steps, syncs=[], summary=None, complete=False)
    loop = LoopResult(
        name="demo-synced", synchronized=True, records_path="x", steps=[],
        sync_detection="lint",
        sync_sites=[{"site": "/a/demo.py:367", "op": "aten::_local_scalar_dense", "count": 4}],
    )  # fmt: skip
    analysis = analyze_detail(rec)
    fig = plot.overview_figure(analysis)
    before = len(fig.axes[0].collections)
    _mark_syncs(fig, analysis.report, loop, color=plot.COLORS["sync"])
    # before: nothing drawn for syncs whose wait is 0 (the lint measures none)
    assert len(fig.axes[0].collections) == before + 1
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[-1] == (
        "sync at demo.py:367 (aten::_local_scalar_dense; sync lint: would block on an accelerator)"
    )
    assert "launch / issue (host)" in labels  # the plot's own legend is kept
    plot.save_figure(fig, tmp_path / "x.png")
