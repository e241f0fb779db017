"""Capture overhead: a small CPU training step run bare, under asynctrace, under torch.profiler.

    python benchmarks/overhead.py            # ~1 minute on 2 cores
    python benchmarks/overhead.py --json out.json

The step: an MLP of 8 Linear(64, 64)+ReLU layers, batch 32, SGD (about 0.5 ms on a desktop
core). Three ways, interleaved in one process so drifts in machine load hit all of them alike:

* ``bare``        — the loop as written;
* ``asynctrace``  — ``asynctrace.trace(print_summary=False)`` with ``session.steps(...)`` and one
  ``asynctrace.range("train_step")`` per step (records written to a temp folder);
* ``profiler``    — ``torch.profiler.profile(activities=[CPU])`` with ``prof.step()`` per step;
* ``bare again``  — the bare loop once more: its ratio to bare is the noise floor.

Each round runs every mode for ``--steps`` steps, in an order that rotates between rounds, each
after a ``gc.collect()`` (outside the timed loop). The
figure per mode is the median over rounds of (loop time / steps); the loop is timed inside the
context (set-up and tear-down are reported separately). Ratios to bare: of the medians, the
median of per-round (paired) ratios, and of the minima.

It also measures what one range costs with no NVTX tool attached (ns per ``with range``), the
fast push/pop the session uses per step, and ``record_function`` with no profiler running.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch

import asynctrace
from asynctrace.capture import ranges

__all__ = ["main"]


def make_step() -> tuple[
    Callable[[torch.Tensor, torch.Tensor], None], list[tuple[torch.Tensor, torch.Tensor]]
]:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss()
    data = [(torch.randn(32, 64), torch.randn(32, 64)) for _ in range(16)]

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    return step, data


def batches(data: list[Any], n: int) -> Iterator[Any]:
    for i in range(n):
        yield data[i % len(data)]


def run_bare(step: Callable[..., None], data: list[Any], n: int, out: str) -> tuple[int, int]:
    t0 = time.perf_counter_ns()
    for x, y in batches(data, n):
        step(x, y)
    t1 = time.perf_counter_ns()
    return t1 - t0, 0


def run_asynctrace(step: Callable[..., None], data: list[Any], n: int, out: str) -> tuple[int, int]:
    s0 = time.perf_counter_ns()
    session = asynctrace.trace("overhead", dir=out, device="cpu", print_summary=False)
    loop = 0
    with session as s:
        t0 = time.perf_counter_ns()
        for x, y in s.steps(batches(data, n)):
            with asynctrace.range("train_step"):
                step(x, y)
        loop = time.perf_counter_ns() - t0
    return loop, time.perf_counter_ns() - s0 - loop


def run_profiler(step: Callable[..., None], data: list[Any], n: int, out: str) -> tuple[int, int]:
    from torch.profiler import ProfilerActivity, profile

    s0 = time.perf_counter_ns()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter_ns()
        for x, y in batches(data, n):
            step(x, y)
            prof.step()
        loop = time.perf_counter_ns() - t0
    return loop, time.perf_counter_ns() - s0 - loop


MODES: dict[str, Callable[..., tuple[int, int]]] = {
    "bare": run_bare,
    # the same loop again: its ratio to bare is the noise floor of the measurement
    "bare again": run_bare,
    "asynctrace": run_asynctrace,
    "profiler": run_profiler,
}


def range_costs(number: int = 200_000, repeat: int = 7) -> dict[str, float]:
    """ns per call, best of ``repeat`` (other processes can only add time)."""
    rng = asynctrace.range

    def with_range() -> None:
        with rng("forward"):
            pass

    h = ranges._handle("step")

    def push_pop() -> None:
        ranges._push(h)
        ranges._pop()

    def record_function() -> None:
        with torch.autograd.profiler.record_function("forward"):
            pass

    def empty() -> None:
        with nullcontext():
            pass

    def best(fn: Callable[[], None], n: int = number) -> float:
        return min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e9

    return {
        "with asynctrace.range(name)": best(with_range),
        "session step push+pop": best(push_pop),
        "with record_function(name), no profiler": best(record_function, number // 10),
        "with nullcontext() (Python floor)": best(empty),
    }


def session_step_cost(
    out: str, n: int = 20_000, repeat: int = 5, *, device: str = "cpu", **options: Any
) -> float:
    """ns per step of ``session.steps`` + one range, with nothing in the step: the absolute
    cost asynctrace adds to every step. Best of ``repeat``, each minus the bare loop.

    ``device="fake"``: an asynchronous device whose markers have executed by the next
    boundary (a :class:`~asynctrace.capture.devices.FakeDevice` on a clock that stands still),
    so every step takes the path of a GPU's: a marker, a pending step, its collection."""
    from asynctrace.capture.devices import FakeClock, FakeDevice

    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        bare = time.perf_counter_ns() - t0
        dev: Any = FakeDevice(FakeClock(), lambda i, t: t) if device == "fake" else device
        with asynctrace.trace("cost", dir=out, device=dev, print_summary=False, **options) as s:
            t0 = time.perf_counter_ns()
            for _ in s.steps(range(n)):
                with asynctrace.range("train_step"):
                    pass
            traced = time.perf_counter_ns() - t0
        best = min(best, (traced - bare) / n)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=100, help="steps per mode per round")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)

    torch.set_num_threads(1)  # one intra-op thread: less noise from the other core's load
    step, data = make_step()
    out = tempfile.mkdtemp(prefix="asynctrace-overhead-")
    for mode in MODES.values():  # warm every path once (lazy imports, allocator, profiler init)
        mode(step, data, args.warmup, out)

    per_step: dict[str, list[float]] = {m: [] for m in MODES}
    setup: dict[str, list[int]] = {m: [] for m in MODES}
    names = list(MODES)
    t_start = time.perf_counter()
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r % 2:
            order.reverse()
        for m in order:
            # every mode starts with the collector's counts at zero: a full collection of what
            # the previous mode left (torch.profiler's events, ~0.1 s here) otherwise lands in
            # whichever loop happens to be running then, 100 steps' worth of time
            gc.collect()
            loop_ns, other_ns = MODES[m](step, data, args.steps, out)
            per_step[m].append(loop_ns / args.steps)
            setup[m].append(other_ns)
    wall = time.perf_counter() - t_start

    med = {m: statistics.median(v) for m, v in per_step.items()}
    # Paired: each round's ratio compares runs made moments apart, which cancels slow drifts
    # in machine load; the minima are the least-disturbed runs (other processes only add time).
    paired = {
        m: statistics.median(a / b for a, b in zip(v, per_step["bare"], strict=True))
        for m, v in per_step.items()
    }
    low = {m: min(v) / min(per_step["bare"]) for m, v in per_step.items()}
    costs = range_costs()
    costs["asynctrace step + range, empty body"] = session_step_cost(out)
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "asynctrace": asynctrace.__version__,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "median_step_us": {m: v / 1e3 for m, v in med.items()},
        "ratio_to_bare": {m: med[m] / med["bare"] for m in MODES},
        "paired_ratio_to_bare": paired,
        "ratio_of_minima": low,
        "per_round_step_us": {m: [x / 1e3 for x in v] for m, v in per_step.items()},
        "median_setup_teardown_ms": {m: statistics.median(v) / 1e6 for m, v in setup.items()},
        "range_cost_ns": costs,
        # the per-step cost measured on an empty step, over the bare step time
        "implied_ratio_from_step_cost": 1
        + costs["asynctrace step + range, empty body"] / med["bare"],
        "nvtx_tool_attached": ranges.nvtx_attached(),
        "wall_s": wall,
    }
    print(
        f"{'mode':<12}{'median µs/step':>16}{'× bare':>9}{'paired ×':>10}{'min ×':>8}"
        f"{'set-up+tear-down ms':>22}"
    )
    for m in MODES:
        print(
            f"{m:<12}{result['median_step_us'][m]:>16.1f}{result['ratio_to_bare'][m]:>9.3f}"
            f"{paired[m]:>10.3f}{low[m]:>8.3f}{result['median_setup_teardown_ms'][m]:>22.1f}"
        )
    print(
        f"({args.rounds} interleaved rounds × {args.steps} steps, {wall:.0f} s, "
        f"load average {result['load_average']})"
    )
    print("cost per call, no NVTX tool attached" if not ranges.nvtx_attached() else "cost per call")
    for k, v in costs.items():
        print(f"  {k:<42}{v:>8.0f} ns")
    print(
        f"implied asynctrace ratio: 1 + {costs['asynctrace step + range, empty body']:.0f} ns / "
        f"{med['bare']:.0f} ns = {result['implied_ratio_from_step_cost']:.4f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
