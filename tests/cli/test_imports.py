"""What ``asynctrace report --json`` imports: only what it needs (start-up time is part of every
end-to-end figure we publish against HolisticTraceAnalysis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import shared_trace

_PROBE = """
import contextlib, io, json, os, sys
from asynctrace.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        status = main(sys.argv[1:])
    except SystemExit as e:  # --help, or a bad file
        status = e.code
import threading
threads = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
watched = ("rich", "torch", "matplotlib", "sqlite3", "statistics", "numpy.ma", "shutil",
           "threading")
loaded = sorted(w for w in watched if w in sys.modules)
commands = sorted(m for m in sys.modules if m.startswith("asynctrace._commands."))
blas = os.environ.get("OPENBLAS_NUM_THREADS")
print(json.dumps({"status": status, "loaded": loaded, "commands": commands, "out": out.getvalue(),
                  "blas": blas, "threads": threads}))
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True, env=env
    )
    # `loaded` counts modules, whoever imported them: the probe imports threading itself
    # only after taking that list
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_report_json_imports_neither_rich_nor_other_commands() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    r = _probe("report", str(trace), "--json")
    assert r["status"] == 0
    assert json.loads(str(r["out"]))["schema_version"] >= 1
    # nor sqlite3 (Nsight Systems only), statistics, numpy.ma (np.unique's default hash path
    # imports it: ~9 ms of start-up) or shutil (argparse's formatter); threading is the thread
    # that imports numpy while the trace is read
    assert r["loaded"] == ["threading"]
    assert r["commands"] == ["asynctrace._commands.report"]
    # and that thread is gone before the command returns
    assert r["threads"] == []


def test_a_bad_trace_still_joins_the_import_thread(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    r = _probe("report", str(bad), "--json")
    assert r["status"] == 2
    assert r["threads"] == []


def test_nsys_report_json_imports_sqlite3_but_not_numpy_ma() -> None:
    # sqlite3 only for Nsight Systems exports; numpy.ma (~9 ms) neither in that loader nor in
    # the analysis, compare_ranks (a folder: one rank per file) or the JSON output
    folder = shared_trace("nsys", "extrap_con_kernel.sqlite").parent
    r = _probe("report", str(folder), "--json", "--workers", "1")  # analysed in this process
    assert r["status"] == 0
    assert r["loaded"] == ["sqlite3", "threading"]
    # by worker processes (the default for a folder): they load the traces, not this process;
    # multiprocessing brings shutil (tempfile), which process start-ups dwarf
    r = _probe("report", str(folder), "--json", "--workers", "2")
    assert r["status"] == 0
    assert r["loaded"] == ["shutil", "threading"]


def test_text_report_still_renders_with_rich() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    r = _probe("report", str(trace))
    assert r["status"] == 0
    assert r["loaded"] == ["rich", "threading"]  # rich's own import
    assert str(r["out"]).strip()


def test_top_level_help_imports_no_command() -> None:
    r = _probe("--help")
    assert r["status"] == 0
    assert r["commands"] == []
    # every command is listed with its help, though none was imported to build the list
    for name in ("demo", "report", "check", "run", "annotate", "plot", "compare"):
        assert name in str(r["out"])


def _env_without_blas_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}


def test_analysis_commands_start_no_blas_threads_but_respect_the_user() -> None:
    trace = shared_trace("kineto", "hta_2022_small_base.json.gz")
    r = _probe("report", str(trace), "--json", env=_env_without_blas_setting())
    assert r["blas"] == "1"
    r = _probe("report", str(trace), "--json", env={**os.environ, "OPENBLAS_NUM_THREADS": "4"})
    assert r["blas"] == "4"


def test_commands_running_user_code_leave_blas_alone() -> None:
    # `check`/`run` run the user's script in this process: its numpy keeps its threads
    r = _probe("check", "--help", env=_env_without_blas_setting())
    assert r["blas"] is None


def test_the_reader_and_the_report_command_import_no_numpy() -> None:
    # `asynctrace report` imports numpy on a thread while the trace is read; a numpy import on
    # the reader's own import path would quietly put it back on the critical path
    code = (
        "import sys, asynctrace.cli, asynctrace._commands.report, asynctrace.traces.load, "
        "asynctrace.traces.kineto, asynctrace.traces.model; print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


_WITHOUT_ACCELERATOR = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "asynctrace.traces._kineto_fast":
            raise ImportError("not compiled here")
        return None
sys.meta_path.insert(0, Block())
from asynctrace.cli import main
from asynctrace.traces.kineto import HAVE_ACCELERATOR
assert not HAVE_ACCELERATOR
sys.exit(main(sys.argv[1:]))
"""


def test_report_without_the_accelerator_prints_the_same_json() -> None:
    # an install without a C compiler: the Python path reads with its own reader thread while
    # the report command's thread imports numpy; the result is the same object
    trace = shared_trace("kineto", "hta_mi250_hip.json.gz")
    args = ["report", str(trace), "--json"]
    slow = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ACCELERATOR, *args],
        capture_output=True,
        text=True,
        check=True,
    )
    fast = subprocess.run(
        [sys.executable, "-m", "asynctrace", *args], capture_output=True, text=True, check=True
    )
    assert slow.stderr == ""
    assert json.loads(slow.stdout) == json.loads(fast.stdout)
