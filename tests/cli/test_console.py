"""The console entry point: analysis commands exit without interpreter teardown (os._exit), so
their output must be complete and their exit status exact; other commands exit normally."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
