"""asynctrace does not depend on torch: analysis, the CLI on traces and the TensorBoard plugin run
without it, and capture says in one line what to install."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, shared_trace

# any import of torch in the child raises ImportError, as on a machine without torch
_BLOCK = "import sys\nsys.modules['torch'] = None\n"


def _child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )


def test_the_package_requires_no_torch() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split(">")[0].split("=")[0] == "torch"]
    # capture's requirement is an extra
    assert project["optional-dependencies"]["torch"] == ["torch>=2.2"]


def test_report_and_the_plugin_run_without_torch() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    out = _child(
        """
        import contextlib, io, json
        from asynctrace.cli import main
        import asynctrace.tb_plugin._data, asynctrace.export.tensorboard
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            status = main(["report", sys.argv[1], "--json"])
        loaded = sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None})
        print(json.dumps({"status": status, "torch": "torch" in loaded,
                          "schema": json.loads(buf.getvalue())["schema_version"]}))
        """,
        str(trace),
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["status"] == 0
    assert got["torch"] is False
    assert got["schema"] >= 3


def test_capture_without_torch_says_what_to_install() -> None:
    out = _child(
        """
        import asynctrace
        from asynctrace._extras import MissingExtraError
        try:
            asynctrace.trace
        except MissingExtraError as e:
            print("error:", e)
        """
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("error: capture")
    assert "pip install" in line
    assert "torch" in line


@pytest.mark.parametrize("command", ["run", "check", "demo"])
def test_a_capture_command_without_torch_is_one_line_and_exit_2(
    command: str, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    args = [command] if command == "demo" else [command, str(script)]
    out = _child(
        """
        from asynctrace.cli import main
        raise SystemExit(main(sys.argv[1:]))
        """,
        *args,
    )
    assert out.returncode == 2
    assert "never runs" not in out.stdout
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"asynctrace {command}: error: capture")
    assert "pip install" in lines[0]
