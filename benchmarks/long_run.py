"""Memory over a long run: 10^6 steps of a capture session on the fake device.

Prints, every ``--every`` steps, the process's resident set size and what tracemalloc sees
(memory held now by allocations made since the run started, and the peak since the previous
line), so a leak of even a few bytes per step shows as a rising column. The session runs as in
production: NVTX ranges on, records streamed to disk, the fake device executing each step's
marker ``--lag-ns`` after it was recorded (so steps are collected lazily, a few behind).
At the end the records file is checked: one step line per step and a summary line.

    python benchmarks/long_run.py                 # 10^6 steps, tracemalloc on (~2-3 min)
    python benchmarks/long_run.py --no-tracemalloc  # RSS only, at full speed
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgspec
import torch  # noqa: F401 - imported before tracing starts: the session needs it, the curve does not

from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.records import SessionSummary
from asynctrace.tracing import Session

__all__ = ["main", "run"]


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc; the peak from getrusage elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(*, steps: int, every: int, lag_ns: int, trace_memory: bool, out: Path) -> None:
    """Run the session, printing the curve as it goes."""
    clock = FakeClock(1_000_000)
    device = FakeDevice(clock, lambda i, t: t + lag_ns)
    session = Session("long", dir=out, device=device, print_summary=False, nvtx=True, window=10_000)

    def emit(line: str) -> None:
        # printed, never kept: a list of lines would be a (tiny) leak in the curve
        print(line, flush=True)

    emit(
        f"{'steps':>9} {'RSS MiB':>9} {'traced KiB':>11} {'peak KiB':>9} {'blocks':>9} "
        f"{'µs/step':>8}"
    )
    gc.collect()
    if trace_memory:
        tracemalloc.start()
    t_last = time.perf_counter()
    with session:
        for i in range(1, steps + 1):
            clock.now_ns += 1_000
            session.step()
            if i % every == 0:
                now = time.perf_counter()
                traced = peak = 0
                if trace_memory:
                    traced, peak = tracemalloc.get_traced_memory()
                    tracemalloc.reset_peak()
                emit(
                    f"{i:>9} {_rss_bytes() / 2**20:>9.1f} {traced / 1024:>11.1f} "
                    f"{peak / 1024:>9.1f} {sys.getallocatedblocks():>9} "
                    f"{(now - t_last) / every * 1e6:>8.2f}"
                )
                t_last = time.perf_counter()
    if trace_memory:
        tracemalloc.stop()
    path = session.records_path
    assert path is not None
    n_steps = 0
    last = b""
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(b'{"type":"step"'):
                n_steps += 1
            last = line
    summary = msgspec.json.decode(last, type=SessionSummary)
    emit(
        f"records: {path.name}: {n_steps} step lines, summary steps={summary.steps}, "
        f"{path.stat().st_size / 2**20:.1f} MiB"
    )
    if n_steps != steps or summary.steps != steps:
        raise SystemExit(f"records incomplete: {n_steps} step lines for {steps} steps")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--lag-ns", type=int, default=2_500, help="marker execution lag")
    parser.add_argument("--no-tracemalloc", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="records folder (default: temp)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run(
            steps=args.steps,
            every=args.every,
            lag_ns=args.lag_ns,
            trace_memory=not args.no_tracemalloc,
            out=args.dir or Path(tmp),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
