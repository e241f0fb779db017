"""Per-step capture cost of this checkout against another, side by side in one run.

    python benchmarks/step_cost_ab.py --base ../asynctrace-old     # another checkout's root

Each round runs ``session_step_cost`` (``benchmarks/overhead.py``: a session step plus one
``asynctrace.range`` with nothing in the step, minus the bare loop; best of 5 × 20 000 steps) in
a fresh interpreter per checkout, alternating which goes first, so drifts in machine load hit
both alike. Prints each side's median ns per step over the rounds and the ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["main"]

_PROBE = """
import sys, tempfile
sys.path.insert(0, sys.argv[1])
import asynctrace
assert asynctrace.__file__.startswith(sys.argv[1]), asynctrace.__file__
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import torch
torch.set_num_threads(1)
from overhead import session_step_cost
print(session_step_cost(tempfile.mkdtemp(prefix="asynctrace-ab-")))
"""


def _cost(root: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=root,
    )
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, type=Path, help="the other checkout's root")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    sides = {"this": here, "base": args.base.resolve()}
    costs: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            costs[side].append(_cost(sides[side]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f} ns" for k, v in costs.items()))
    med = {k: statistics.median(v) for k, v in costs.items()}
    print(
        f"median ns per step: this {med['this']:.0f}, base {med['base']:.0f}; "
        f"this / base = {med['this'] / med['base']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
