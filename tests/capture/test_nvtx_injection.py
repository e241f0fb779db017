"""Our NVTX ranges reach an NVTX tool, without a GPU.

We build ``nvtx_injection/log_injection.c`` (an NVTX v3 injection library that logs every
domain create, registered string, push and pop) with the system C compiler, run a traced loop
in a subprocess with ``NVTX_INJECTION64_PATH`` pointing at it, and compare the exact sequence
of pushes and pops. Skips with the reason where the NVTX headers or a compiler are missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

from asynctrace.capture.ranges import color_of

SOURCE = Path(__file__).parent / "nvtx_injection" / "log_injection.c"


def _nvtx_include_dir() -> str | None:
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(os.path.join(os.environ[env], "include"))
    candidates += sorted(glob.glob("/usr/local/cuda*/include"), reverse=True)
    candidates += ["/usr/include", "/usr/local/include"]
    for inc in candidates:
        if os.path.exists(os.path.join(inc, "nvtx3", "nvToolsExt.h")):
            return inc
    return None


@pytest.fixture(scope="module")
def injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("the injection test builds a Linux shared library")
    include = _nvtx_include_dir()
    if include is None:
        pytest.skip("NVTX v3 headers (nvtx3/nvToolsExt.h) not found under /usr/local/cuda*/include")
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc/cc) to build the NVTX injection library")
    out = tmp_path_factory.mktemp("nvtx") / "liblog_injection.so"
    proc = subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", f"-I{include}", str(SOURCE), "-o", str(out), "-lpthread"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the NVTX injection library failed:\n{proc.stderr}")
    return out


def run_logged(
    lib: Path, tmp_path: Path, code: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``code`` under the injection; return the process and our domain's log lines."""
    log = tmp_path / "nvtx.log"
    env = dict(os.environ)
    env.pop("NVTX_DISABLE", None)
    env["NVTX_INJECTION64_PATH"] = str(lib)
    env["ASYNCTRACE_NVTX_LOG"] = str(log)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    lines = log.read_text().splitlines() if log.exists() else []
    # other libraries in the process may use NVTX too; keep only our domain
    ours = [ln for ln in lines if ln.split(" ")[1:2] == ["asynctrace"]]
    return proc, ours


def push(name: str) -> str:
    return f"push asynctrace {name} {color_of(name):08x}"


POP = "pop asynctrace"


def pushes_and_pops(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith(("push ", "pop "))]


def test_ranges_reach_the_tool(injection_lib: Path, tmp_path: Path) -> None:
    proc, lines = run_logged(
        injection_lib,
        tmp_path,
        """
        import asynctrace
        from asynctrace.capture import ranges

        @asynctrace.range("decorated")
        def f():
            with asynctrace.range("inner"):
                pass

        with asynctrace.range("forward"):
            f()
        try:
            with asynctrace.range("raises"):
                raise ValueError("boom")
        except ValueError:
            pass
        f()
        assert ranges.nvtx_attached(), "injection library not attached"
        assert ranges.open_ranges() == 0
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert lines[0] == "domain asynctrace"
    # one registered string per distinct name, registered once (a decorator's when applied)
    strings = [ln for ln in lines if ln.startswith("string ")]
    assert strings == [
        f"string asynctrace {n}" for n in ("decorated", "forward", "inner", "raises")
    ]
    assert pushes_and_pops(lines) == [
        push("forward"),
        push("decorated"),
        push("inner"),
        POP,
        POP,
        POP,
        push("raises"),
        POP,
        push("decorated"),
        push("inner"),
        POP,
        POP,
    ]


def test_traced_loop_balanced_when_loop_raises(injection_lib: Path, tmp_path: Path) -> None:
    proc, lines = run_logged(
        injection_lib,
        tmp_path,
        """
        import torch
        import asynctrace
        from asynctrace.capture import ranges

        x = torch.ones(4, 4)
        try:
            with asynctrace.trace("inj", dir="records", device="cpu", print_summary=False) as s:
                for i in s.steps(range(5)):
                    with asynctrace.range("forward"):
                        y = x @ x
                    if i == 2:
                        raise RuntimeError("user code failed")
        except RuntimeError:
            pass
        assert ranges.open_ranges() == 0, ranges.open_ranges()
        print("ok")
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")
    # The session opens step 0 at entry (for loops that call session.step()); steps() then
    # closes that pre-loop interval unrecorded and reopens step 0 at the first next(). The tool
    # sees both: one short range for the pre-loop interval, then the real steps.
    expected: list[str] = [push("step 0"), POP]
    for n in range(3):
        expected += [push(f"step {n}"), push("forward"), POP, POP]
    assert pushes_and_pops(lines) == expected


def test_no_nvtx_when_disabled_in_session(injection_lib: Path, tmp_path: Path) -> None:
    proc, lines = run_logged(
        injection_lib,
        tmp_path,
        """
        import asynctrace
        t = asynctrace.trace("off", device="cpu", nvtx=False, write=False, print_summary=False)
        with t as s:
            for _ in s.steps(range(3)):
                pass
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert pushes_and_pops(lines) == []
