"""What a default CPU session's sampled sync lint costs: ``detect_syncs="auto"`` against "off".

    python benchmarks/lint_sample_cost.py                 # ~1-2 minutes on 2 loaded cores
    python benchmarks/lint_sample_cost.py --rounds 30 --steps 500

The step is ``overhead.py``'s (an MLP of 8 Linear(64, 64)+ReLU, batch 32, SGD) plus a
``loss.item()``, the sync the sampled lint must name. Modes, each a whole session of
``--steps`` steps per round, in an order that rotates between rounds, after a ``gc.collect()``:

* ``off``        — ``detect_syncs="off"``;
* ``auto``       — the default: on a CPU the lint on the first 5 steps, then one step at a
  time, spaced to 1 % of the steps' time (``capture/_lint_sample.py``);
* ``off again``  — "off" once more: its ratio to "off" is the noise of the same figure;
* ``lint``       — every step linted, for reference.

Prints the median over rounds of ns per step, and for each mode the median of its per-round
(paired) ratios to "off": the headline is ``auto / off``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import batches, make_step

import asynctrace

__all__ = ["main"]

MODES = {"off": "off", "auto": "auto", "off again": "off", "lint": "lint"}


def run(step: Callable[..., Any], data: list[Any], n: int, out: str, detect: str) -> float:
    with asynctrace.trace(
        "lint-cost", dir=out, device="cpu", print_summary=False, detect_syncs=detect
    ) as s:
        t0 = time.perf_counter_ns()
        for x, y in s.steps(batches(data, n)):
            step(x, y)
        loop = time.perf_counter_ns() - t0
    return loop / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=400, help="steps per session")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    plain_step, data = make_step()
    net_loss: list[torch.Tensor] = []

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        plain_step(x, y)
        # the per-step sync the lint must name (a scalar read of the batch's result)
        net_loss.append(x.sum())
        net_loss.pop().item()

    out = tempfile.mkdtemp(prefix="asynctrace-lint-cost-")
    names = list(MODES)
    for name in names:  # warm every path once
        run(step, data, 50, out, MODES[name])
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r % 2:
            order.reverse()
        for name in order:
            gc.collect()
            per[name].append(run(step, data, args.steps, out, MODES[name]))
    print(
        f"{args.rounds} rounds × {args.steps} steps per mode; {platform.processor() or ''} "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()}, torch {torch.__version__}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )
    for name in names:
        ratios = [a / b for a, b in zip(per[name], per["off"], strict=True)]
        print(
            f"  {name:<10} median {statistics.median(per[name]):9.0f} ns/step, "
            f"/ off: {statistics.median(ratios):.3f} (median of per-round ratios)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
