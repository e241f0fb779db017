"""The console entry point: analysis commands exit without interpreter teardown (os._exit), so
their output must be complete and their exit status exact; other commands exit normally."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import shared_trace


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asynctrace", *args], capture_output=True, text=True, cwd=cwd
    )


def test_report_output_is_complete_and_status_kept(tmp_path: Path) -> None:
    trace = shared_trace("kineto", "hta_a100_alexnet_syncs.json.gz")
    ok = _run("report", str(trace), "--json", cwd=tmp_path)
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["schema_version"] >= 1  # all of it reached the pipe
    bad = _run("report", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "no such file" in bad.stderr


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    trace = shared_trace("kineto", "hta_a100_alexnet_syncs.json.gz")
    cmd = [sys.executable, "-m", "asynctrace", "report", str(trace), "--json"]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    ) as producer:
        assert producer.stdout is not None
        assert producer.stderr is not None
        producer.stdout.read(10)
        producer.stdout.close()  # like `| head -c 10`
        err = producer.stderr.read().decode()
        assert producer.wait(timeout=60) == 0
    assert "Traceback" not in err


def test_user_code_commands_exit_normally(tmp_path: Path) -> None:
    # `run` executes the user's script: its atexit handlers must still run
    script = tmp_path / "train.py"
    script.write_text("import atexit\natexit.register(lambda: print('atexit ran', flush=True))\n")
    r = _run("run", str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "atexit ran" in r.stdout


def test_ctrl_c_while_the_command_module_imports_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # building the parser imports the command's module (numpy, msgspec...): the slowest part
    # of start-up, so where a Ctrl-C most often lands
    from asynctrace import cli

    def interrupted(command: str | None = None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parser", interrupted)
    assert cli.main(["report", "trace.json"]) == 130
    assert capsys.readouterr().err == "asynctrace report: interrupted\n"
    assert cli.main([]) == 130
    assert capsys.readouterr().err == "asynctrace: interrupted\n"


_SIGINT_WHILE_READING = """
import signal, sys
from asynctrace.traces import kineto
fill = kineto._Loader.fill
calls = []
def fill_then_interrupt(self, n):
    calls.append(n)
    if len(calls) == 3:
        signal.raise_signal(signal.SIGINT)
    return fill(self, n)
kineto._Loader.fill = fill_then_interrupt
sys.argv[0] = "asynctrace"
from asynctrace.cli import console
console()
"""


def test_ctrl_c_while_reading_a_trace_is_one_line(tmp_path: Path) -> None:
    # a real SIGINT in a fresh process, in the middle of reading, while the thread importing
    # numpy may still run: one line, status 130, no traceback from either thread
    trace = shared_trace("kineto", "hta_v100_ns_resolution_rank0.json.gz")
    proc = subprocess.run(
        [sys.executable, "-c", _SIGINT_WHILE_READING, "report", str(trace), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 130
    assert proc.stderr == "asynctrace report: interrupted\n"
    assert proc.stdout == ""
