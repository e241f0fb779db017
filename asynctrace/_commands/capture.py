"""``asynctrace capture DIR|PID --steps N [--wait]``: a deep-mode window on a running job.

Asks every live session writing under ``DIR`` (or the one of process ``PID``) to run
torch.profiler over ``N`` steps, all from the same step number: one every session has yet to
reach (the largest of each one's current step plus what it runs in a couple of seconds), so the
ranks' traces line up. The sessions see the request at a step boundary (they look at most
twice a second) and write what deep mode writes: ``DIR/<name>/{worker}.{time_ns}.pt.trace.json.gz``
and its annotated copy; their records' summary notes the profiled steps. ``kill -USR2 PID``
does the same for one process, with the default 5 steps, from its next step.

Prints where the traces will appear; ``--wait`` waits for every session's window and prints
the traces' paths. Exit 0 on success; 1 where a window is already open (one at a time) or
``--wait`` saw a session fail or miss the window, or timed out; 2 where no live session is
found (said in one line).
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from asynctrace.capture.trigger import (
    CONTROL_DIR,
    LEAD_S,
    REQUEST_NAME,
    pid_file,
    read_json,
    write_json,
)
from asynctrace.errors import AsyncTraceError

__all__ = ["add_arguments", "run"]

#: a session on another host whose control file is older than this is taken for gone
_STALE_S = 30.0
#: how long to wait for fresh control files before choosing the start step
_FRESH_S = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", help="the folder the sessions write under (their --dir), or a process id"
    )
    parser.add_argument("--steps", type=int, default=5, help="steps to profile (default: 5)")
    parser.add_argument(
        "--wait", action="store_true", help="wait for the traces and print their paths"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="with --wait: give up after this many seconds (default: 600)",
    )


def _alive(info: dict[str, Any]) -> bool:
    if info.get("ended"):
        return False
    pid = info.get("pid")
    if info.get("host") == socket.gethostname() and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return time.time() - float(info.get("updated_unix", 0)) < _STALE_S


def _sessions(control: Path, pid: int | None) -> dict[Path, dict[str, Any]]:
    found: dict[Path, dict[str, Any]] = {}
    for p in sorted(control.glob("session.*.json")):
        info = read_json(p)
        if isinstance(info, dict) and _alive(info) and (pid is None or info.get("pid") == pid):
            found[p] = info
    return found


def _fresh(sessions: dict[Path, dict[str, Any]]) -> dict[Path, dict[str, Any]]:
    """The sessions' control files once each has been rewritten since now (they are every
    half second, at a step boundary): a current step and step rate; as they were after
    :data:`_FRESH_S` (a session inside a long step)."""
    t0 = time.time()
    deadline = time.monotonic() + _FRESH_S
    out = dict(sessions)
    waiting = set(out)
    while waiting and time.monotonic() < deadline:
        for p in sorted(waiting):
            info = read_json(p)
            if isinstance(info, dict) and float(info.get("updated_unix", 0)) > t0:
                out[p] = info
                waiting.discard(p)
        if waiting:
            time.sleep(0.05)
    return out


def _control_of(target: str) -> tuple[Path, int | None]:
    if target.isdigit():
        pid = int(target)
        try:
            return Path(pid_file(pid).read_text()), pid
        except OSError:
            raise AsyncTraceError(
                f"process {pid} runs no asynctrace session (none of this user's on this host)"
            ) from None
    folder = Path(target)
    if not folder.is_dir():
        raise AsyncTraceError(f"{target}: no such folder (give the sessions' --dir or a pid)")
    return folder / CONTROL_DIR, None


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise AsyncTraceError(f"--steps {args.steps}: need at least 1")
    control, pid = _control_of(args.target)
    sessions = _sessions(control, pid)
    if not sessions:
        where = f"process {pid}" if pid is not None else f"under {args.target}"
        raise AsyncTraceError(f"no live asynctrace session {where}")
    busy = [
        i
        for i in sessions.values()
        if isinstance(i.get("window"), dict) and i["window"].get("state") in ("scheduled", "open")
    ]
    if busy:
        w = busy[0]["window"]
        print(
            f"asynctrace capture: a window is already open on steps {w['start']}-"
            f"{w['stop'] - 1} (process {busy[0]['pid']}); one window at a time",
            file=sys.stderr,
        )
        return 1
    sessions = _fresh(sessions)
    # a step every session has yet to reach, however far each runs before it looks
    start = 1 + max(
        int(i.get("step", 0)) + math.ceil(float(i.get("rate", 0.0)) * LEAD_S) + 1
        for i in sessions.values()
    )
    rid = f"{time.time_ns()}-{os.getpid()}"
    request: dict[str, Any] = {
        "id": rid,
        "start_step": start,
        "steps": args.steps,
        "pids": None if pid is None else [pid],
    }
    write_json(control / REQUEST_NAME, request)
    folders = sorted(
        {str(control.parent / str(i.get("name", "session"))) for i in sessions.values()}
    )
    print(
        f"asynctrace capture: steps {start}-{start + args.steps - 1} of {len(sessions)} "
        f"session(s); traces will appear in {', '.join(folders)}"
    )
    if not args.wait:
        return 0
    return _wait(control, list(sessions), rid, args.timeout)


def _wait(control: Path, paths: list[Path], rid: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    pending = set(paths)
    status = 0
    while pending:
        for p in sorted(pending):
            info = read_json(p)
            if not isinstance(info, dict):
                if not p.exists():
                    # the session ended (its control file goes with it)
                    pending.discard(p)
                    status = 1
                    print(
                        f"asynctrace capture: a session ended before its window was seen done "
                        f"({p.name}); its traces, if any, are under {control.parent}",
                        file=sys.stderr,
                    )
                continue
            w = info.get("window")
            state = w.get("state") if isinstance(w, dict) and w.get("id") == rid else None
            if state in ("done", "failed", "missed"):
                pending.discard(p)
                assert isinstance(w, dict)
                if state == "done":
                    for t in w.get("traces", []):
                        print(t)
                else:
                    status = 1
                    print(
                        f"asynctrace capture: process {info.get('pid')}: the window {state}"
                        + (" (it had passed the start step)" if state == "missed" else ""),
                        file=sys.stderr,
                    )
            elif info.get("ended") or not _alive(info):
                pending.discard(p)
                status = 1
                print(
                    f"asynctrace capture: process {info.get('pid')} ended before its window",
                    file=sys.stderr,
                )
        if pending:
            if time.monotonic() > deadline:
                print(
                    f"asynctrace capture: timed out after {timeout:g} s waiting for "
                    f"{len(pending)} session(s)",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.1)
    return status
