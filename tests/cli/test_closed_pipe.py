"""A reader that stops reading (``| head -1``) is no failure (#27.13): every command that
prints exits 0 on a closed pipe, with no traceback. Rich turned the broken pipe into
``SystemExit(1)``.

Deterministic on a loaded machine: either the output is far larger than a pipe holds (64 KiB),
so the writer is still writing when ``head`` exits, or the pipe's read end is closed before
the command starts, so its first write fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_report import _write_records
from tests.conftest import ROOT

ASYNCTRACE = [sys.executable, "-m", "asynctrace"]
DEMO = ROOT / "traces" / "cpu-demo"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _into_head(args: list[str]) -> tuple[int, str, bytes]:
    """``asynctrace ARGS | head -1``: the command's exit status and stderr, head's line."""
    cmd = subprocess.Popen(
        [*ASYNCTRACE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert cmd.stdout is not None
    head = subprocess.Popen(["head", "-1"], stdin=cmd.stdout, stdout=subprocess.PIPE)
    cmd.stdout.close()  # head holds the only read end
    line, _ = head.communicate(timeout=300)
    _, err = cmd.communicate(timeout=300)
    return cmd.returncode, err.decode(), line


def _into_closed_pipe(args: list[str], cwd: Path) -> tuple[int, str]:
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run(
            [*ASYNCTRACE, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=cwd,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)
    return r.returncode, r.stderr.decode()


@pytest.fixture(scope="module")
def long_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of two ranks of 4000 steps: ``--steps`` prints far more than a pipe holds."""
    d = tmp_path_factory.mktemp("long")
    for r in (0, 1):
        _write_records(
            d / f"train.rank{r}.records.jsonl", r, [1000 + r * 7 + i % 13 for i in range(4000)]
        )
    return d


@pytest.mark.timeout(600)
def test_report_steps_into_head(long_records: Path) -> None:
    status, err, line = _into_head(
        ["report", str(long_records / "train.rank0.records.jsonl"), "--steps"]
    )
    assert line.startswith(b"train.rank0.records.jsonl") or b"train.rank0" in line
    assert (status, err) == (0, "")
    status, err, line = _into_head(["report", str(long_records), "--steps"])
    assert (status, err) == (0, "")
    status, err, line = _into_head(["report", str(long_records), "--steps", "--json"])
    assert line == b"{\n"
    assert (status, err) == (0, "")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "args",
    [
        ["report", "traces/cpu-demo"],
        ["report", "traces/cpu-demo", "--steps"],
        ["compare", *(str(p) for p in sorted(DEMO.glob("demo-*synced.*.records.jsonl")))],
        ["--help"],
    ],
    ids=["report-dir", "report-steps", "compare", "help"],
)
def test_every_printing_command_exits_0_on_a_closed_pipe(args: list[str]) -> None:
    assert _into_closed_pipe(args, ROOT) == (0, "")


@pytest.mark.timeout(600)
def test_run_summary_into_a_closed_pipe(tmp_path: Path) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("x = 1\n")
    assert _into_closed_pipe(["run", str(script), "--dir", str(tmp_path)], tmp_path) == (0, "")
