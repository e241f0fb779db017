"""A real ``tensorboard --logdir`` for the plugin's tests (one helper for every test file that
needs a server of its logdir)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

ENTRY_POINT = "asynctrace.tb_plugin:AsyncTraceLoader"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry_point_visible() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "asynctrace" for ep in entry_points(group="tensorboard_plugins"))


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def _tensorboard(logdir: Path, scratch: Path) -> Iterator[str]:
    """``tensorboard --logdir`` as a subprocess on 127.0.0.1; the plugin is found through its
    entry point: the installed one, else (a checkout not reinstalled since the entry point was
    added) a dist-info naming it, on PYTHONPATH."""
    paths = [str(ROOT)]
    if not _entry_point_visible():
        info = scratch / "ep" / "asynctrace_tb_plugin_test-0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: asynctrace-tb-plugin-test\nVersion: 0\n"
        )
        (info / "entry_points.txt").write_text(
            f"[tensorboard_plugins]\nasynctrace = {ENTRY_POINT}\n"
        )
        paths.append(str(info.parent))
    port = _free_port()
    log = (scratch / "tensorboard.log").open("wb")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host",
         "127.0.0.1", "--port", str(port), "--load_fast=false"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=scratch,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                listing = _get(f"{base}/data/plugins_listing")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise AssertionError(
                        "tensorboard did not start: "
                        + (scratch / "tensorboard.log").read_text(errors="replace")[-3000:]
                    ) from None
                time.sleep(0.3)
        assert "asynctrace" in listing, listing
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
