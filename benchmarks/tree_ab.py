"""Time ``asynctrace report`` and ``analyze()`` of one trace with two source trees, side by side.

Each round runs, for tree A then tree B (the order alternating each round), one process of
``python -m asynctrace report TRACE`` (wall time, output discarded) and one process that loads
the trace once and times ``analyze()`` ``--calls`` times (its minimum). Rounds alternate so that
a loaded machine slows both trees alike; the figures are medians over rounds::

    python benchmarks/tree_ab.py /tmp/large_100mb.json --a /work/main --b . --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_ANALYZE = """
import sys, time
from asynctrace.traces.load import load
from asynctrace.analysis.report import analyze
t = load(sys.argv[1])
best = float("inf")
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); analyze(t); best = min(best, time.perf_counter() - t0)
print(best)
"""


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree.resolve())}


def _report_s(tree: Path, trace: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", trace],
        env=_env(tree),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def _analyze_s(tree: Path, trace: str, calls: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _ANALYZE, trace, str(calls)],
        env=_env(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--a", type=Path, required=True, help="the tree before")
    p.add_argument("--b", type=Path, required=True, help="the tree after")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    args = p.parse_args()
    trees = {"a": args.a, "b": args.b}
    report: dict[str, list[float]] = {"a": [], "b": []}
    analyze: dict[str, list[float]] = {"a": [], "b": []}
    for r in range(args.rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            report[side].append(_report_s(trees[side], args.trace))
            analyze[side].append(_analyze_s(trees[side], args.trace, args.calls))
    for side in ("a", "b"):
        print(
            f"{side} ({trees[side]}): report median {statistics.median(report[side]):.2f} s "
            f"(all {', '.join(f'{x:.2f}' for x in report[side])}); analyze() min-of-"
            f"{args.calls} median {1e3 * statistics.median(analyze[side]):.1f} ms "
            f"(all {', '.join(f'{1e3 * x:.1f}' for x in analyze[side])})"
        )
    ra = statistics.median(report["b"]) / statistics.median(report["a"])
    aa = statistics.median(analyze["b"]) / statistics.median(analyze["a"])
    print(f"b / a: report {ra:.3f}, analyze() {aa:.3f}")


if __name__ == "__main__":
    main()
