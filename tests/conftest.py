"""Shared fixtures: where the real traces are, and a guard against leaked global state."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

# CI (`.ci/run` sets CI=true) explores the same examples every run: a property that fails there
# fails again on a rerun. Locally each run explores new ones.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: ``ASYNCTRACE_FULL_PROPERTIES=1``: the fuzz and property tests explore their full number of
#: examples (the nightly run, and before a release: docs/contributing.md); every other run, CI's
#: included, explores the smaller number each names, the same examples every CI run
FULL_PROPERTIES = os.environ.get("ASYNCTRACE_FULL_PROPERTIES", "") not in ("", "0")


def examples(full: int, *, quick: int) -> int:
    """A property test's ``max_examples``: ``full`` in the full run, else ``quick``."""
    return full if FULL_PROPERTIES else quick


ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
KINETO_DIR = SHARED_TRACES / "kineto"
NSYS_DIR = SHARED_TRACES / "nsys"


def shared_trace(kind: str, name: str) -> Path:
    """Path of a real trace under ../shared/traces, or skip the test with the reason."""
    path = SHARED_TRACES / kind / name
    if not path.exists():
        pytest.skip(
            f"real trace {path} not available (../shared/traces is absent on a user's clone)"
        )
    return path


@pytest.fixture
def kineto_trace():  # type: ignore[no-untyped-def]
    return lambda name: shared_trace("kineto", name)


@pytest.fixture
def nsys_trace():  # type: ignore[no-untyped-def]
    return lambda name: shared_trace("nsys", name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.gpu`` tests skip where torch sees no CUDA/ROCm device.

    ``python -m pytest -m gpu`` runs just them, on a lent GPU (``benchmarks/gpu_check.py`` does).
    torch is imported only when such a test was collected: the analysis tests run without it.
    """
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm device")
    for item in gpu_items:
        item.add_marker(skip)


# --- the suite leaves the checkout as it found it ------------------------------------------

#: what a run may add to a checkout: caches, and the Kineto loader's C accelerator it builds
_CACHE_DIRS = {"__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_CACHE_SUFFIXES = (".pyc", ".so", ".egg-info", ".egg-info/")

_tree_before = pytest.StashKey["set[str] | None"]()


def _is_cache(path: str) -> bool:
    parts = path.rstrip("/").split("/")
    return bool(_CACHE_DIRS.intersection(parts)) or any(
        part.endswith(_CACHE_SUFFIXES) for part in parts
    )


def _tree_status() -> set[str] | None:
    """``git status`` of the checkout, ignored files included, less caches; None where this is
    not a git checkout (an unpacked sdist) or git is missing."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(
            [git, "status", "--porcelain", "--ignored", "--untracked-files=all", "--", "."],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # each line is "XY path" (a rename: "XY old -> new")
    return {line for line in out.splitlines() if not _is_cache(line[3:].split(" -> ")[-1])}


def _default_stop_signals() -> None:
    """SIGINT, SIGHUP and SIGTERM as a terminal's program has them. A job started in the
    background of a script (``cmd &``, ``nohup``) inherits SIGINT, or SIGHUP, ignored; the
    signal tests stop this process and its children with them, and asynctrace keeps a signal
    the caller ignores ignored, so they would wait for an end that never comes."""
    for sig, default in (
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGHUP, signal.SIG_DFL),
        (signal.SIGTERM, signal.SIG_DFL),
    ):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, default)


def pytest_sessionstart(session: pytest.Session) -> None:
    _default_stop_signals()
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller checks
        return
    session.config.stash[_tree_before] = _tree_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if it left files in the checkout (a test writing under ``traces/`` or
    ``docs/`` instead of ``tmp_path``): what it wrote is named, so it can be found and removed."""
    before = session.config.stash.get(_tree_before, None)
    if before is None:
        return
    after = _tree_status()
    if after is None:
        return
    new = sorted(after - before)
    if not new:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [
        "the test run changed the checkout (tests must write into tmp_path); git status:",
        *(f"  {line}" for line in new),
    ]
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line, red=True)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
