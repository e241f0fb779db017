"""What the on-demand trigger and the sampled lint cost an empty step, side by side in one run.

    python benchmarks/capture_parts_cost.py                  # ~1 minute
    python benchmarks/capture_parts_cost.py --rounds 30 --steps 20000

Four sessions of ``--steps`` steps each (``session.steps`` + one ``asynctrace.range`` around an
empty body, CPU device), in an order that reverses from round to round, after a
``gc.collect()``:

* ``off, no trigger`` — ``detect_syncs="off", on_demand=False``: neither part;
* ``off``             — ``detect_syncs="off"``: the trigger (the default ``on_demand=True``);
* ``auto, no trigger``— the sampled lint alone;
* ``auto``            — the default session: both.

Per mode, the median over rounds of: the first 10 steps' time (a session's fixed cost: the
trigger's first step-rate check, the lint's first steps and its first turn off), and the ns per
step of the steps after them; then each mode's per-step cost over ``off, no trigger`` (median
of per-round ratios). An empty step makes the parts' cost as large a share as it can be.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import torch

import asynctrace

__all__ = ["main"]

MODES: dict[str, dict[str, Any]] = {
    "off, no trigger": {"detect_syncs": "off", "on_demand": False},
    "off": {"detect_syncs": "off"},
    "auto, no trigger": {"on_demand": False},
    "auto": {},
}
FIRST = 10


def one_session(out: str, steps: int, options: dict[str, Any]) -> tuple[int, float]:
    """(ns of the first FIRST steps, ns per step of the rest) of one session."""
    gc.collect()
    stamps = [0] * (steps + 1)
    clock = time.perf_counter_ns
    with asynctrace.trace("cost", dir=out, print_summary=False, **options) as s:
        stamps[0] = clock()
        for i in s.steps(range(1, steps + 1)):
            with asynctrace.range("train_step"):
                pass
            stamps[i] = clock()
    return stamps[FIRST] - stamps[0], (stamps[steps] - stamps[FIRST]) / (steps - FIRST)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=20_000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = tempfile.mkdtemp(prefix="asynctrace-parts-")
    for options in MODES.values():
        one_session(out, 2_000, options)
    first: dict[str, list[int]] = {m: [] for m in MODES}
    per: dict[str, list[float]] = {m: [] for m in MODES}
    names = list(MODES)
    for r in range(args.rounds):
        for m in names if r % 2 else names[::-1]:
            f, s = one_session(out, args.steps, MODES[m])
            first[m].append(f)
            per[m].append(s)
    print(
        f"{args.rounds} rounds x {args.steps} steps, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}"
    )
    base = per[names[0]]
    for m in names:
        ratio = statistics.median(a / b for a, b in zip(per[m], base, strict=True))
        print(
            f"{m:18s} first {FIRST} steps {statistics.median(first[m]) / 1e3:8.1f} us   "
            f"then {statistics.median(per[m]):7.0f} ns/step   / off, no trigger {ratio:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
