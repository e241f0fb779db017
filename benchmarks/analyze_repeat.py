"""``analyze()`` of one trace, load excluded, in the checkout given: for side-by-side runs.

    python benchmarks/make_large_trace.py \\
        ../shared/traces/kineto/hta_a100_16ranks_rank0_graphlaunch.json.gz /tmp/large.json \\
        --target-mb 100
    for i in 1 2 3; do
        python benchmarks/analyze_repeat.py /path/to/base /tmp/large.json
        python benchmarks/analyze_repeat.py . /tmp/large.json
    done

Loads the trace once with that checkout's package, then times ``--calls`` ``analyze()`` calls;
prints the load time and the min and median of the calls. Alternate the sides, as above, so
the machine's load hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="the checkout whose asynctrace to time")
    p.add_argument("trace", type=Path)
    p.add_argument("--calls", type=int, default=12)
    a = p.parse_args(argv)
    root = str(a.root.resolve())
    sys.path.insert(0, root)
    import asynctrace
    from asynctrace.analysis.report import analyze
    from asynctrace.traces.load import load

    assert asynctrace.__file__.startswith(root), asynctrace.__file__
    t0 = time.perf_counter()
    trace = load(a.trace)
    loaded = time.perf_counter() - t0
    times = []
    for _ in range(a.calls):
        t = time.perf_counter()
        analyze(trace)
        times.append(time.perf_counter() - t)
    print(
        f"{root}: load {loaded * 1000:.0f} ms, analyze min {min(times) * 1000:.1f} ms, "
        f"median {statistics.median(times) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
