"""The per-step bound estimates of a long session's records, this checkout against another.

    python benchmarks/records_bound.py --base /path/to/other/checkout           # 200 000 steps
    python benchmarks/records_bound.py --this-only --steps 1000000              # this one alone

What ``asynctrace report --html`` of a records file pays for its per-step bound picture: the
binned bound series (``analyze_detail(records).bounds``), and ``bound_of_records`` with and
without its per-step objects. Each side runs in its own interpreter on the same synthetic
steps (a seeded mix of steps that kept pace and steps whose device was behind), one after the
other, twice, in alternating order, so the machine's load hits both alike; the best of the two
runs of each figure is printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

__all__ = ["main"]

_WORKER = """
import json, random, sys, time
root, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)
import asynctrace
assert asynctrace.__file__.startswith(root), asynctrace.__file__
from asynctrace.analysis.records_bound import bound_of_records
from asynctrace.analysis.report import Analysis, Report, SourceInfo, VerdictInfo
from asynctrace.records import StepRecord

rng = random.Random(7)
steps = [
    StepRecord(
        step=i,
        start_ns=i * 10_000_000,
        frontend_ns=rng.randrange(1_000_000, 10_000_000),
        data_wait_ns=rng.randrange(0, 1_000_000),
        sync_wait_ns=rng.randrange(0, 3_000_000),
        device_ns=rng.randrange(0, 10_000_000),
        run_ahead_ns=rng.randrange(-1_000_000, 2_000_000),
        in_flight=rng.choice((0, 1, 2)),
    )
    for i in range(n)
]
out = {}
t = time.perf_counter()
bound_of_records(steps, asynchronous=True, per_step=False)
out["run only"] = time.perf_counter() - t
t = time.perf_counter()
bound_of_records(steps, asynchronous=True)
out["with per-step objects"] = time.perf_counter() - t
report = Report(
    source=SourceInfo(path="x", format="records", device="cuda", asynchronous=True, rank=None,
                      world_size=None, events=n),
    steps=steps,
    verdict=VerdictInfo(code="x", message="x"),
)
t = time.perf_counter()
Analysis(report=report).bounds
out["binned bound series (report --html)"] = time.perf_counter() - t
print(json.dumps(out))
"""


def _run(root: Path, steps: int) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, "-c", _WORKER, str(root), str(steps)],
        check=True,
        capture_output=True,
        text=True,
    )
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, default=Path("."), help="another checkout's root")
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--this-only", action="store_true", help="time this checkout alone")
    a = p.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    if a.this_only:
        print(f"{a.steps:,} steps, this checkout (seconds)")
        for k, v in _run(here, a.steps).items():
            print(f"{k:40} {v:8.2f}")
        return
    sides = {"this": here, "base": a.base.resolve()}
    best: dict[str, dict[str, float]] = {}
    for order in (("base", "this"), ("this", "base")):
        for side in order:
            got = _run(sides[side], a.steps)
            prev = best.setdefault(side, got)
            for k, v in got.items():
                prev[k] = min(prev[k], v)
    print(f"{a.steps:,} steps (best of 2 runs each, seconds)")
    print(f"{'':40} {'base':>8} {'this':>8} {'ratio':>7}")
    for k in best["this"]:
        b, t = best["base"][k], best["this"][k]
        print(f"{k:40} {b:8.2f} {t:8.2f} {b / t:6.1f}x")


if __name__ == "__main__":
    main()
