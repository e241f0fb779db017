"""``asynctrace compare A B`` against two ``asynctrace report`` runs, side by side.

Makes a ~100 MB Kineto trace (``make_large_trace.py``: a shared trace replicated) and a second
copy of it, then runs, alternating, in fresh processes: ``report A --json``, ``report B --json``
and ``compare A B --json`` (output to /dev/null), ``--repeat`` rounds; prints each command's
median wall time and the ratio of compare to the two reports together (the target: at most
1.10). Usage::

    PYTHONPATH=. python benchmarks/compare_speed.py --repeat 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_large_trace import replicate

SRC = Path(__file__).parents[1] / ".." / "shared" / "traces" / "kineto"
DEFAULT = SRC / "hta_a100_16ranks_rank0_graphlaunch.json.gz"


def _run(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "asynctrace", *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT)
    ap.add_argument("--target-mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ta, tb = Path(tmp) / "a.json", Path(tmp) / "b.json"
        copies, size = replicate(a.src, ta, int(a.target_mb * 1e6))
        shutil.copyfile(ta, tb)
        print(f"A, B: {copies} copies of {a.src.name}, {size / 1e6:.1f} MB each", flush=True)
        times: dict[str, list[float]] = {"report A": [], "report B": [], "compare A B": []}
        for r in range(a.repeat):
            rounds = [
                ("report A", ["report", str(ta), "--json"]),
                ("report B", ["report", str(tb), "--json"]),
                ("compare A B", ["compare", str(ta), str(tb), "--json"]),
            ]
            if r % 2:  # alternate the order: a warm page cache favours no side
                rounds.reverse()
            for name, args in rounds:
                times[name].append(_run(args))
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            print(f"{k:12s} median {med[k]:.2f} s  ({', '.join(f'{x:.2f}' for x in v)})")
        ratio = med["compare A B"] / (med["report A"] + med["report B"])
        print(f"compare / (report A + report B) = {ratio:.2f} (target <= 1.10)")
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
