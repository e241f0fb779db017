"""Instructions a capture step costs, counted by callgrind: this checkout against another.

    python benchmarks/step_instructions.py --base ../asynctrace-old        # ~3 minutes
    python benchmarks/step_instructions.py --base ../asynctrace-old --detect-syncs auto

For each checkout, two sessions of empty steps (``session.steps`` + one ``asynctrace.range``,
CPU device) run under ``valgrind --tool=callgrind``, one of ``--short`` and one of ``--long``
steps; the difference of their instruction totals over the difference of their steps is what a
step costs, with the interpreter's, torch's and the session's start-up left out. Instruction
counts do not move with the machine's load, so two trees are compared on a shared machine
where timings move by percents; what varies between runs (file names, the records' digits,
when the collector runs) moves them by about 1 %. The on-demand trigger is left out (it acts on
host time, which valgrind stretches). (Four valgrind runs, two at a time.)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

_LOOP = """
import sys, tempfile
root, n, detect = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, root)
import asynctrace
from asynctrace.capture.options import TraceOptions
assert asynctrace.__file__.startswith(root), asynctrace.__file__
# the trigger looks at its folder every 0.5 s of host time: under valgrind's ~50x slowdown that
# is 50x as often a step as at full speed, so it is left out (capture_parts_cost.py times it)
kw = {"on_demand": False} if hasattr(TraceOptions(), "on_demand") else {}
with asynctrace.trace("cost", dir=tempfile.mkdtemp(), print_summary=False,
                      detect_syncs=detect, **kw) as s:
    for _ in s.steps(range(n)):
        with asynctrace.range("train_step"):
            pass
"""


def _start(root: Path, steps: int, detect: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            _LOOP,
            str(root),
            str(steps),
            detect,
        ],
        env={**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _total(path: Path) -> int:
    m = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"), re.M)
    if m is None:
        raise RuntimeError(f"no instruction total in {path}")
    return int(m.group(1))


def per_step(root: Path, short: int, long: int, detect: str, tmp: Path) -> float:
    outs = [tmp / f"{root.name}.{n}.out" for n in (short, long)]
    procs = [_start(root, n, detect, o) for n, o in zip((short, long), outs, strict=True)]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"valgrind on {root} failed (rc {p.returncode})")
    return (_total(outs[1]) - _total(outs[0])) / (long - short)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--base", required=True, type=Path, help="the other checkout's root")
    p.add_argument("--short", type=int, default=2_000)
    p.add_argument("--long", type=int, default=12_000)
    p.add_argument("--detect-syncs", default="off")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        this = per_step(here, args.short, args.long, args.detect_syncs, Path(tmp))
        base = per_step(args.base.resolve(), args.short, args.long, args.detect_syncs, Path(tmp))
    print(f"detect_syncs={args.detect_syncs}: instructions a step")
    print(f"  base  {base:10.0f}")
    print(f"  this  {this:10.0f}  ({this / base:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
