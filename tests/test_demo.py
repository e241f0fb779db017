"""``asynctrace demo``: figures from scripted devices, and the command end to end on CPU."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rich.console import Console  # noqa: E402

from asynctrace.capture.devices import CpuDevice, FakeClock, FakeDevice  # noqa: E402
from asynctrace.cli import main  # noqa: E402
from asynctrace.demo import _median, render_demo, run_demo, run_statements  # noqa: E402
from asynctrace.records import read_records  # noqa: E402


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


def test_median() -> None:
    assert _median([]) == 0.0
    assert _median([3]) == 3.0
    assert _median([1, 2, 3, 10]) == 2.5


def test_run_demo_small_on_cpu(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    res = run_demo(device="cpu", out=tmp_path, steps=3, size=64, console=console)
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
        assert lp.max_in_flight == 0
    text = out.getvalue()
    assert "Exercise: on CPU, can you still observe asynchrony in the backend? No." in text
    summary = json.loads((tmp_path / "demo.summary.json").read_text())
    assert summary["device_kind"] == "cpu"
    assert summary["answer"] == res.answer
    render_demo(res, Console(file=io.StringIO()))


@pytest.mark.slow
def test_demo_command_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--device", "cpu", "--steps", "2"]) == 0
    files = sorted((tmp_path / "traces" / "demo").glob("*.records.jsonl"))
    assert [f.name.split(".")[0] for f in files] == ["demo-synced", "demo-unsynced"]
    for f in files:
        assert read_records(f).complete
    out = capsys.readouterr().out
    assert "numpy:" in out
    assert "torch:" in out
    assert "(= returned: cpu is synchronous)" in out


def test_demo_command_rejects_too_few_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "1"]) == 2
    assert "at least 2 steps" in capsys.readouterr().err
