"""How fast ``load()`` reads Kineto traces: MB/s of raw (inflated) JSON, and where the time goes.

For each file: the best and median of ``--repeat`` timed loads (in this process, after one
warm-up load, so imports and the page cache are out of the figure), MB/s of raw JSON from the
median, and one extra load with the phases timed:

* ``inflate``: reading (and gunzipping) the file alone, in a separate pass. In ``load()`` it
  runs in a reader thread, overlapped with the rest.
* ``decode``: msgspec decoding events into Structs.
* ``collect``: classifying the decoded events and turning them into numpy columns.
* ``build``: concatenating the columns, linking flows, sorting the tables.
* ``other``: the rest of the load (cutting the text at event boundaries, waiting on the reader).

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
from asynctrace.traces._io import iter_blocks
from asynctrace.traces.load import load

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


class _Timed:
    """A stand-in for a decoder object whose ``decode`` adds its time to ``totals``."""

    def __init__(self, inner: Any, totals: dict[str, float], key: str) -> None:
        self.inner = inner
        self.totals = totals
        self.key = key

    def decode(self, data: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.decode(data)
        finally:
            self.totals[self.key] += time.perf_counter() - t0


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
    totals = {"decode": 0.0, "collect": 0.0, "build": 0.0}
    saved = {
        "_DEC_EVENTS": kineto._DEC_EVENTS,
        "_DEC_EVENTS_EXACT": kineto._DEC_EVENTS_EXACT,
    }
    saved_methods = {m: getattr(kineto._Loader, m) for m in ("_collect", "_build")}
    kineto._DEC_EVENTS = _Timed(kineto._DEC_EVENTS, totals, "decode")  # type: ignore[assignment]
    kineto._DEC_EVENTS_EXACT = _Timed(  # type: ignore[assignment]
        kineto._DEC_EVENTS_EXACT, totals, "decode"
    )
    kineto._Loader._collect = _timed_method(  # type: ignore[method-assign]
        kineto._Loader, "_collect", totals, "collect"
    )
    kineto._Loader._build = _timed_method(  # type: ignore[method-assign]
        kineto._Loader, "_build", totals, "build"
    )
    try:
        yield totals
    finally:
        for k, v in saved.items():
            setattr(kineto, k, v)
        for m, f in saved_methods.items():
            setattr(kineto._Loader, m, f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="load() speed per Kineto trace, with phases")
    ap.add_argument("files", nargs="*", type=Path, help="traces (default: the largest shared)")
    ap.add_argument("--repeat", type=int, default=5, help="timed loads per file (default 5)")
    a = ap.parse_args(argv)
    files = list(a.files) or [SHARED / f for f in DEFAULT_FILES if (SHARED / f).exists()]
    if not files:
        print("no traces found (../shared/traces is absent); pass files", file=sys.stderr)
        return 2
    print(f"# load() per file: {a.repeat} timed loads after one warm-up; MB/s from the median")
    print(
        f"{'file':48} {'raw MB':>7} {'best s':>7} {'med s':>7} {'MB/s':>6} | "
        f"{'inflate':>7} {'decode':>7} {'collect':>7} {'build':>7} {'other':>7}  (s)"
    )
    for path in files:
        n_raw, inflate_s = raw_bytes(path)
        load(path)  # warm-up: imports, page cache
        times = []
        for _ in range(a.repeat):
            gc.collect()
            t0 = time.perf_counter()
            load(path)
            times.append(time.perf_counter() - t0)
        with phase_timers() as ph:
            gc.collect()
            t0 = time.perf_counter()
            load(path)
            total = time.perf_counter() - t0
        other = total - ph["decode"] - ph["collect"] - ph["build"]
        med = statistics.median(times)
        mb = n_raw / 1e6
        print(
            f"{path.name[:48]:48} {mb:7.1f} {min(times):7.3f} {med:7.3f} {mb / med:6.0f} | "
            f"{inflate_s:7.3f} {ph['decode']:7.3f} {ph['collect']:7.3f} {ph['build']:7.3f} "
            f"{other:7.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
