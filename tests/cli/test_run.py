"""``asynctrace run script.py [args…]``: an unchanged script, stepped by its optimizer steps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asynctrace._commands.run import parse_step_range
from asynctrace.capture import ranges
from asynctrace.capture.session import SessionReport, current_session
from asynctrace.cli import main
from asynctrace.errors import AsyncTraceError, AsyncTraceWarning
from asynctrace.records import read_records

SCRIPT = """
import json, sys, time
import torch

out = sys.argv[1]
steps = int(sys.argv[2])
end = sys.argv[3] if len(sys.argv) > 3 else "ok"
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
stamps = [time.perf_counter_ns()]
for i in range(steps):
    time.sleep((2, 6, 4)[i % 3] / 1e3)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    stamps.append(time.perf_counter_ns())
    opt.zero_grad()
with open(out, "w") as f:
    json.dump({"name": __name__, "argv": sys.argv, "stamps": stamps}, f)
print("script done")
if end == "exit3":
    sys.exit(3)
if end == "raise":
    raise ValueError("script failed")
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT))
    return p


def _records(d: Path) -> Path:
    (path,) = d.glob("*.records.jsonl")
    return path


def test_runs_the_script_as_main_with_a_step_per_optimizer_step(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    d = tmp_path / "traces"
    argv_before = list(sys.argv)
    status = main(["run", "--dir", str(d), "--device", "cpu", str(script), str(out), "5"])
    assert status == 0
    assert sys.argv == argv_before
    assert current_session() is None
    assert ranges.open_ranges() == 0
    seen = json.loads(out.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(script), str(out), "5"]

    stdout = capsys.readouterr().out
    assert "script done" in stdout
    assert "asynctrace train: 5 steps" in stdout
    rec = read_records(_records(d))
    assert rec.header.name == "train"
    assert rec.complete
    assert [s.step for s in rec.steps] == [0, 1, 2, 3, 4]
    # step 0 runs from the session's start to the first optimizer.step(); each later step from
    # one optimizer.step() to the next, which the script timed itself
    stamps = seen["stamps"]
    for i, s in enumerate(rec.steps):
        assert s.frontend_ns >= (2, 6, 4)[i % 3] * 1_000_000
        if i > 0:
            expected = stamps[i + 1] - stamps[i]
            assert abs(s.frontend_ns - expected) < 1_000_000, (i, s.frontend_ns, expected)


def test_keeps_the_scripts_exit_status(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "t"
    args = ["run", "--dir", str(d), "--device", "cpu", str(script), str(tmp_path / "o"), "2"]
    assert main([*args, "exit3"]) == 3
    captured = capsys.readouterr()
    assert "asynctrace train: 2 steps" in captured.out
    assert "status 3" in captured.err
    rec = read_records(_records(d))
    assert len(rec.steps) == 2
    assert rec.summary is not None
    assert rec.summary.error is None


def test_a_failing_script_exits_1_and_its_session_records_the_error(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "t"
    args = ["run", "--dir", str(d), "--device", "cpu", str(script), str(tmp_path / "o"), "3"]
    assert main([*args, "raise"]) == 1
    captured = capsys.readouterr()
    assert "ValueError: script failed" in captured.err
    assert "asynctrace train: 3 steps" in captured.out
    rec = read_records(_records(d))
    assert len(rec.steps) == 3
    assert rec.summary is not None
    assert rec.summary.error == "ValueError: script failed"
    assert current_session() is None


def test_json_summary(tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--json", "--name", "j", "--dir", str(tmp_path), "--device", "cpu"]
    assert main([*args, str(script), str(tmp_path / "o"), "4"]) == 0
    captured = capsys.readouterr()
    report = SessionReport.from_json(captured.out)
    assert report.name == "j"
    assert report.steps == 4
    assert "script done" in captured.err  # the script's prints keep stdout clean


def test_nsys_capture_on_cpu_is_a_noop_with_a_warning(tmp_path: Path, script: Path) -> None:
    args = ["run", "--nsys-capture", "1:3", "--dir", str(tmp_path), "--device", "cpu"]
    with pytest.warns(AsyncTraceWarning, match="no CUDA/ROCm device"):
        assert main([*args, str(script), str(tmp_path / "o"), "4"]) == 0
    assert len(read_records(_records(tmp_path)).steps) == 4


def test_parse_step_range() -> None:
    assert parse_step_range("10:20") == range(10, 20)
    assert parse_step_range("7") == range(7, 8)
    for bad in ("a:b", "5:5", "-1:3", "3:1"):
        with pytest.raises(AsyncTraceError, match="nsys-capture"):
            parse_step_range(bad)


def test_missing_script_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_console_exit_status_in_a_real_process(tmp_path: Path, script: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asynctrace",
            "run",
            "--dir",
            str(tmp_path),
            "--device",
            "cpu",
            str(script),
            str(tmp_path / "o"),
            "2",
            "exit3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "asynctrace train: 2 steps" in proc.stdout


@pytest.mark.parametrize(
    ("after_script", "script_gets"),
    [
        (["--", "--json"], ["--json"]),
        # only the first `--` separates: argparse took one, then run dropped the script's own
        (["--", "--", "x"], ["--", "x"]),
        (["a", "--", "b"], ["a", "--", "b"]),
    ],
)
def test_a_double_dash_right_after_the_script_is_dropped_and_the_rest_kept(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    after_script: list[str],
    script_gets: list[str],
) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    assert main(["run", "--dir", str(tmp_path), "--device", "cpu", str(script), *after_script]) == 0
    out = capsys.readouterr().out
    assert f"argv {script_gets!r}" in out
    assert not out.startswith("{")  # a --json after `--` is the script's


def test_a_run_without_optimizer_steps_says_what_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "loop.py"
    plain.write_text("import torch\nfor _ in range(3):\n    torch.ones(2).sum()\n")
    assert main(["run", "--dir", str(tmp_path), "--device", "cpu", str(plain)]) == 0
    (note,) = [
        line for line in capsys.readouterr().out.splitlines() if "no optimizer.step()" in line
    ]
    # a second asynctrace.trace() under run fails (sessions do not nest): not what to suggest
    assert "use asynctrace.trace() in the script" not in note
    assert "asynctrace.current_session().step()" in note
    assert "plain python" in note

    # what the note suggests works under run, and without it
    stepped = tmp_path / "stepped.py"
    stepped.write_text(
        textwrap.dedent(
            """\
            import asynctrace, torch
            for _ in range(3):
                torch.ones(2).sum()
                session = asynctrace.current_session()
                if session is not None:
                    session.step()
            """
        )
    )
    assert main(["run", "--json", "--dir", str(tmp_path), "--device", "cpu", str(stepped)]) == 0
    assert SessionReport.from_json(capsys.readouterr().out).steps == 3
    subprocess.run([sys.executable, str(stepped)], check=True, timeout=120)
