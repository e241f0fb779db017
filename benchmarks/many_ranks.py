"""Many ranks: ``asynctrace report DIR --workers 1`` vs ``--workers N``, and memory per worker.

Builds ``--ranks`` rank files (default 24) from one real trace, replicated to ``--target-mb`` of
raw JSON each (``make_large_trace.py``; its ``distributedInfo`` removed so each file's rank
comes from its name, ``rank0.json.gz`` …, written with ``gzip -1``). Then, alternating the
order over ``--repeat`` rounds, each in a fresh process from a neutral working directory:

* ``asynctrace report DIR --json --workers W`` for each W of ``--workers`` (default 1 and 2),
  end to end (start-up, the map, the reduce, the JSON on stdout), wall time;
* once per W, ``asynctrace.analyze_many(paths, workers=W)`` in a fresh process, for each
  worker's peak RSS (``ru_maxrss`` of the worker process after its last file).

Prints the medians, the speed-up over ``--workers 1``, raw MB/s in all and per worker, each
worker's peak RSS over the largest rank's raw size, the load average before and after, and how
much a second core gives right now (two pure-Python CPU loops at once vs one alone: 2.0 on two
idle cores; a shared machine gives less, and the speed-up can be no better)::

    python benchmarks/many_ranks.py                       # 24 ranks x 50 MB raw, 3 rounds
    python benchmarks/many_ranks.py --ranks 48 --target-mb 100 --workers 1 2 --repeat 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT.parent / "shared" / "traces" / "kineto" / "hta_a100_16ranks_rank0_graphlaunch.json.gz"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_trace import replicate  # noqa: E402

#: a pure-Python CPU loop: one alone, then two at once, says how much of a second core this
#: machine gives right now (1.0: all of it; ~0.5 means the other core is busy elsewhere)
SPIN = "sum(range(6 * 10**7))"

MEMORY_SCRIPT = r"""
import json, sys
import asynctrace
paths, workers = json.loads(sys.argv[1]), int(sys.argv[2])
many = asynctrace.analyze_many(paths, workers=workers, keep_sync_calls=True)
peaks = {}
for f in many.files:
    assert f.ok, f.error
    peaks[f.worker] = max(peaks.get(f.worker, 0), f.peak_rss_bytes)
import msgspec
size = max(len(msgspec.msgpack.encode(r)) for r in many.reports)
seconds = [f.seconds for f in many.files]
print(json.dumps({"peaks": peaks, "seconds": seconds, "report_bytes": size}))
"""


def build(folder: Path, ranks: int, target_mb: float, source: Path) -> tuple[list[Path], int]:
    """The rank files, and the raw (inflated) size of one."""
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    doc.pop("distributedInfo", None)
    stripped = folder / "source.json"
    stripped.write_text(json.dumps(doc))
    raw = folder / "raw.json"
    replicate(stripped, raw, int(target_mb * 1e6))
    stripped.unlink()
    raw_bytes = raw.stat().st_size
    first = folder / "rank0.json.gz"
    with raw.open("rb") as src, gzip.open(first, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()
    files = [first]
    for r in range(1, ranks):
        p = folder / f"rank{r}.json.gz"
        shutil.copyfile(first, p)
        files.append(p)
    return files, raw_bytes


def time_report(folder: Path, workers: int, cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "asynctrace",
            "report",
            str(folder),
            "--json",
            "--workers",
            f"{workers}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return time.perf_counter() - t0


def worker_memory(files: list[Path], workers: int, cwd: Path) -> dict[str, object]:
    r = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, json.dumps([str(p) for p in files]), str(workers)],
        check=True,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    result: dict[str, object] = json.loads(r.stdout)
    return result


def parallel_headroom() -> float:
    """Throughput of two CPU-bound processes at once over one alone (2.0 on two idle cores)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", SPIN], check=True)
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    for p in procs:
        p.wait()
    two = time.perf_counter() - t0
    return 2 * one / two


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ranks", type=int, default=24)
    ap.add_argument("--target-mb", type=float, default=50.0, help="raw JSON per rank file")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--keep", type=Path, default=None, help="build the files here and keep them")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if not args.source.exists():
        print(f"needs the real trace {args.source} (../shared/traces)", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="asynctrace-many-"))
    folder = args.keep or tmp / "ranks"
    try:
        load_before = os.getloadavg()
        files, raw_bytes = build(folder, args.ranks, args.target_mb, args.source)
        total_raw_mb = raw_bytes * len(files) / 1e6
        on_disk_mb = sum(p.stat().st_size for p in files) / 1e6
        print(
            f"{len(files)} rank files, {raw_bytes / 1e6:.1f} MB raw each "
            f"({total_raw_mb:.0f} MB raw, {on_disk_mb:.0f} MB gzip -1 on disk); "
            f"{os.cpu_count()} CPUs; load average before {load_before[0]:.2f}",
            flush=True,
        )
        headroom = [parallel_headroom()]
        print(f"  two CPU loops at once run {headroom[0]:.2f}x as fast as one", flush=True)
        times: dict[int, list[float]] = {w: [] for w in args.workers}
        for round_ in range(args.repeat):
            order = args.workers if round_ % 2 == 0 else list(reversed(args.workers))
            if round_:
                headroom.append(parallel_headroom())
            line = []
            for w in order:
                t = time_report(folder, w, tmp)
                times[w].append(t)
                line.append(f"--workers {w}: {t:.2f} s")
            print(
                f"  round {round_ + 1} (second core gives {headroom[-1]:.2f}x): " + ", ".join(line),
                flush=True,
            )
        memory = {w: worker_memory(files, w, tmp) for w in args.workers}
        headroom.append(parallel_headroom())
        load_after = os.getloadavg()

        base = statistics.median(times[args.workers[0]])
        rows = []
        print()
        print(
            "| --workers | median s | speed-up | raw MB/s | MB/s per worker | "
            "peak RSS per worker (max) | × largest raw |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for w in args.workers:
            med = statistics.median(times[w])
            peaks = memory[w]["peaks"]
            assert isinstance(peaks, dict)
            peak = max(peaks.values())
            row = {
                "workers": w,
                "median_s": med,
                "all_s": times[w],
                "speedup": base / med,
                "mb_per_s": total_raw_mb / med,
                "mb_per_s_per_worker": total_raw_mb / med / w,
                "peak_rss_mb_per_worker": {k: v / 1e6 for k, v in peaks.items()},
                "peak_over_raw": peak / raw_bytes,
            }
            rows.append(row)
            print(
                f"| {w} | {med:.2f} | {base / med:.2f}× | {total_raw_mb / med:.0f} | "
                f"{total_raw_mb / med / w:.0f} | {peak / 1e6:.0f} MB | {peak / raw_bytes:.2f}× |"
            )
        print(
            f"\nload average before {load_before[0]:.2f} / {load_before[1]:.2f} / "
            f"{load_before[2]:.2f}, after {load_after[0]:.2f} / {load_after[1]:.2f} / "
            f"{load_after[2]:.2f}; {platform.python_version()}, {platform.machine()}"
        )
        report_kb = max(int(m["report_bytes"]) for m in memory.values()) / 1e3  # type: ignore[call-overload]
        print(
            f"two CPU loops at once, before each round and after: "
            f"{' '.join(f'{h:.2f}x' for h in headroom)} one alone (2.0 = two free cores); "
            f"largest report sent back: {report_kb:.0f} kB"
        )
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "ranks": len(files),
                        "raw_mb_per_rank": raw_bytes / 1e6,
                        "on_disk_mb": on_disk_mb,
                        "cpus": os.cpu_count(),
                        "load_before": load_before,
                        "load_after": load_after,
                        "parallel_headroom": headroom,
                        "rows": rows,
                    },
                    indent=2,
                )
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
