"""What ``asynctrace report --json`` imports: only what it needs (start-up time is part of every
end-to-end figure we publish against HolisticTraceAnalysis)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import shared_trace

_PROBE = """
import contextlib, io, json, sys
from asynctrace.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        status = main(sys.argv[1:])
    except SystemExit as e:  # --help
        status = e.code
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"rich", "torch", "matplotlib"})
commands = sorted(m for m in sys.modules if m.startswith("asynctrace._commands."))
print(json.dumps({"status": status, "loaded": loaded, "commands": commands, "out": out.getvalue()}))
"""


def _probe(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_report_json_imports_neither_rich_nor_other_commands() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    r = _probe("report", str(trace), "--json")
    assert r["status"] == 0
    assert json.loads(str(r["out"]))["schema_version"] >= 1
    assert r["loaded"] == []
    assert r["commands"] == ["asynctrace._commands.report"]


def test_text_report_still_renders_with_rich() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    r = _probe("report", str(trace))
    assert r["status"] == 0
    assert r["loaded"] == ["rich"]
    assert str(r["out"]).strip()


def test_top_level_help_imports_no_command() -> None:
    r = _probe("--help")
    assert r["status"] == 0
    assert r["commands"] == []
    # every command is listed with its help, though none was imported to build the list
    for name in ("demo", "report", "check", "run", "annotate", "plot", "compare"):
        assert name in str(r["out"])
