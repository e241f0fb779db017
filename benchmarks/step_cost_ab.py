"""Per-step capture cost of this checkout against another, side by side in one run.

    python benchmarks/step_cost_ab.py --base ../asynctrace-old     # another checkout's root
    python benchmarks/step_cost_ab.py --base ../asynctrace-old --noise   # + each side twice

One worker interpreter per side stays up for the whole run; a round asks each of them, in an
order that rotates and reverses from round to round, for one trial of ``session_step_cost``
(this checkout's ``benchmarks/overhead.py``, run against that side's package: a session step
plus one ``asynctrace.range`` with nothing in the step, minus the bare loop, ``--steps``
steps; ``--device fake`` takes a GPU's path, markers and pending steps). Trials of the sides are
milliseconds apart, so the machine's load (other jobs on a shared 2-core VM move the cost by
±50 % within seconds) hits every side alike, and the per-round ratio cancels it.

Prints, per side, the median and the minimum ns per step over the rounds, and for each pair
the median of the per-round ratios (the headline), the ratio of medians and the ratio of
minima. ``--noise`` adds a second worker of each checkout ("this again", "base again"): their
ratios to the first are the run-to-run noise of the same figures, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["main"]

_WORKER = """
import sys, tempfile
root, benchmarks, steps, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
options = {"detect_syncs": sys.argv[5]} if sys.argv[5] != "default" else {}
sys.path.insert(0, root)
import asynctrace
assert asynctrace.__file__.startswith(root), asynctrace.__file__
sys.path.insert(0, benchmarks)
import torch
torch.set_num_threads(1)
from overhead import session_step_cost
out = tempfile.mkdtemp(prefix="asynctrace-ab-")
for _ in range(3):  # warm: lazy imports, the allocator, the first records files
    session_step_cost(out, n=steps, repeat=1, device=device, **options)
print("ready", flush=True)
for line in sys.stdin:
    print(session_step_cost(out, n=steps, repeat=1, device=device, **options), flush=True)
"""


class _Worker:
    def __init__(self, root: Path, steps: int, device: str, detect_syncs: str) -> None:
        self.root = root
        benchmarks = Path(__file__).resolve().parent
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WORKER,
                str(root),
                str(benchmarks),
                str(steps),
                device,
                detect_syncs,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
            cwd=root,
        )
        if self._line() != "ready":
            raise RuntimeError(f"the worker for {root} did not start")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker for {self.root} ended (rc {self.proc.wait()})")
        return line.strip()

    def trial(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self._line())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def _pair(costs: dict[str, list[float]], a: str, b: str) -> str:
    paired = statistics.median(x / y for x, y in zip(costs[a], costs[b], strict=True))
    medians = statistics.median(costs[a]) / statistics.median(costs[b])
    minima = min(costs[a]) / min(costs[b])
    return (
        f"{a} / {b}: {paired:.3f} (median of per-round ratios), {medians:.3f} (of medians), "
        f"{minima:.3f} (of minima)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, type=Path, help="the other checkout's root")
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--steps", type=int, default=5000, help="steps per trial")
    p.add_argument("--device", choices=("cpu", "fake"), default="cpu")
    p.add_argument("--noise", action="store_true", help="also run a second worker of each checkout")
    p.add_argument(
        "--detect-syncs",
        default="default",
        help="the sessions' detect_syncs (default: the option's default, on a CPU the sampled "
        "lint where the checkout has it); 'off' compares the capture alone",
    )
    args = p.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    roots = {"this": here, "base": args.base.resolve()}
    if args.noise:
        roots |= {"this again": here, "base again": args.base.resolve()}
    workers = {
        side: _Worker(root, args.steps, args.device, args.detect_syncs)
        for side, root in roots.items()
    }
    costs: dict[str, list[float]] = {side: [] for side in workers}
    names = list(workers)
    try:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            if r % 2:
                order.reverse()
            for side in order:
                costs[side].append(workers[side].trial())
    finally:
        for w in workers.values():
            w.close()
    print(
        f"{args.rounds} rounds × {args.steps} steps per side, device {args.device}, "
        f"detect_syncs {args.detect_syncs}, "
        f"load average {os.getloadavg()}"
    )
    for side, v in costs.items():
        print(f"  {side:<11} median {statistics.median(v):6.0f} ns/step, min {min(v):6.0f}")
    print(_pair(costs, "this", "base"))
    if args.noise:
        print(_pair(costs, "this again", "this"))
        print(_pair(costs, "base again", "base"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
