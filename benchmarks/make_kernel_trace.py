"""Make a synthetic Kineto trace of many kernels: a dense GPU run, for costs that grow with the
number of device activities (the TensorBoard plugin's step windows).

Real traces carry ~300-700 activities per MB (CPU operators, Python frames); this one is launch
calls and kernels only (~250 bytes a kernel), so a million kernels fit in ~300 MB. Each step is a
``ProfilerStep#N`` range on the host holding ``--kernels / --steps`` ``cudaLaunchKernel`` calls,
each launching one kernel on one of two streams, which runs after the previous one on its stream
(the device keeps up: each step's window holds about its own kernels). Usage::

    python benchmarks/make_kernel_trace.py /tmp/kernels_1200k.json --kernels 1200000 --steps 100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def write_trace(path: Path, *, kernels: int, steps: int, seed: int = 1) -> int:
    """Write the trace; returns its size in bytes."""
    per_step = max(1, kernels // steps)
    launch_us, gap_us = 4, 1
    durs = [1, 2, 3, 5, 8, 1, 2, 4]  # µs, cycled (a spread of lengths, deterministic)
    device_free = {7: 0.0, 13: 0.0}
    host = 0
    corr = 0
    with path.open("w") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "synthetic"}],\n')
        out.write(' "distributedInfo": {"rank": 0, "world_size": 1},\n "traceEvents": [\n')
        first = True

        def emit(e: dict[str, object]) -> None:
            nonlocal first
            out.write(("" if first else ",\n") + json.dumps(e, separators=(",", ":")))
            first = False

        for s in range(steps):
            step_start = host
            for k in range(per_step):
                corr += 1
                stream = 7 if k % 3 else 13
                args = {"correlation": corr}
                emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                      "tid": 1, "ts": host, "dur": launch_us, "args": args})  # fmt: skip
                start = max(device_free[stream], host + launch_us + 2)
                dur = durs[(corr + seed) % len(durs)]
                emit({"ph": "X", "cat": "kernel", "name": f"kernel_{k % 97}", "pid": 0,
                      "tid": stream, "ts": start, "dur": dur,
                      "args": {"stream": stream, "correlation": corr, "device": 0}})  # fmt: skip
                device_free[stream] = start + dur
                host += launch_us + gap_us
            emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
                  "tid": 1, "ts": step_start, "dur": host - step_start})  # fmt: skip
            host += 10
        out.write("\n]}\n")
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_200_000)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args(argv)
    size = write_trace(a.out, kernels=a.kernels, steps=a.steps)
    print(f"{a.out}: {a.kernels} kernels in {a.steps} steps, {size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
