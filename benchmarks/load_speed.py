"""How fast ``load()`` reads Kineto traces: MB/s of raw (inflated) JSON, and where the time goes.

For each file, side by side in one process: the median of ``--repeat`` timed loads (after one
warm-up load, so imports and the page cache are out of the figure) through the compiled
accelerator and through the pure-Python reference path (``load_kineto(accelerate=False)``),
MB/s of raw JSON from each median, their ratio, and one extra accelerated load with phases:

* ``inflate``: reading (and gunzipping) the file alone, in a separate pass. In ``load()`` it is
  interleaved with filing, chunk by chunk.
* ``file``: the accelerator filing each chunk's events into columns (msgspec decode plus the
  Python loop, for chunks it gives back).
* ``build``: concatenating the columns, linking flows, sorting the tables.
* ``other``: the rest of the load (reading and inflating, cutting the text at event
  boundaries).

The phase timers wrap a few calls per chunk, so they cost nothing measurable; the timed loads
run without them. Run on a quiet machine: on 2 cores a concurrent job halves every figure::

    python benchmarks/load_speed.py                      # the largest shared Kineto traces
    python benchmarks/load_speed.py /tmp/large_400mb.json --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from asynctrace.traces import kineto
from asynctrace.traces.reading import iter_blocks

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces" / "kineto"
DEFAULT_FILES = [
    "kineto_2021_resnet50_barelist.json.gz",
    "hta_a100_16ranks_rank0_graphlaunch.json.gz",
    "hta_v100_ns_resolution_rank0.json.gz",
    "tracelens_b200_compile_culaunchkernelex.json.gz",
    "hta_a100_nccl_launchkernelexc.json.gz",
]


def raw_bytes(path: Path) -> tuple[int, float]:
    """The inflated size and the time to read (and inflate) it alone."""
    t0 = time.perf_counter()
    n = sum(len(b) for b in iter_blocks(path))
    return n, time.perf_counter() - t0


def _timed_method(cls: type, name: str, totals: dict[str, float], key: str) -> Callable[..., Any]:
    inner = getattr(cls, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t0

    return wrapper


@contextmanager
def phase_timers() -> Iterator[dict[str, float]]:
    totals = {"file": 0.0, "build": 0.0}
    phases = {"_collect_fast": "file", "_collect": "file", "_build": "build"}
    saved = {m: getattr(kineto._Loader, m) for m in phases}
    for m, key in phases.items():
        setattr(kineto._Loader, m, _timed_method(kineto._Loader, m, totals, key))
    try:
        yield totals
    finally:
        for m, f in saved.items():
            setattr(kineto._Loader, m, f)


def median_load_s(path: Path, repeat: int, *, accelerate: bool) -> float:
    kineto.load_kineto(path, accelerate=accelerate)  # warm-up: imports, page cache
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        kineto.load_kineto(path, accelerate=accelerate)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="load() speed per Kineto trace, with phases")
    ap.add_argument("files", nargs="*", type=Path, help="traces (default: the largest shared)")
    ap.add_argument("--repeat", type=int, default=5, help="timed loads per file (default 5)")
    a = ap.parse_args(argv)
    files = list(a.files) or [SHARED / f for f in DEFAULT_FILES if (SHARED / f).exists()]
    if not files:
        print("no traces found (../shared/traces is absent); pass files", file=sys.stderr)
        return 2
    print(
        f"# load_kineto() per file: {a.repeat} timed loads after one warm-up, medians; "
        f"accelerator {'compiled' if kineto.HAVE_ACCELERATOR else 'NOT compiled'}"
    )
    print(
        f"{'file':48} {'raw MB':>7} | {'accel s':>7} {'MB/s':>6} | {'python s':>8} {'MB/s':>6} | "
        f"{'ratio':>5} | {'inflate':>7} {'file':>7} {'build':>7} {'other':>7}  (s)"
    )
    for path in files:
        n_raw, inflate_s = raw_bytes(path)
        mb = n_raw / 1e6
        fast = median_load_s(path, a.repeat, accelerate=True)
        slow = median_load_s(path, a.repeat, accelerate=False)
        with phase_timers() as ph:
            gc.collect()
            t0 = time.perf_counter()
            kineto.load_kineto(path)
            total = time.perf_counter() - t0
        other = total - ph["file"] - ph["build"]
        print(
            f"{path.name[:48]:48} {mb:7.1f} | {fast:7.3f} {mb / fast:6.0f} | "
            f"{slow:8.3f} {mb / slow:6.0f} | {slow / fast:4.1f}x | "
            f"{inflate_s:7.3f} {ph['file']:7.3f} {ph['build']:7.3f} {other:7.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
