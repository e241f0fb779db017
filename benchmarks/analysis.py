"""Trace analysis speed and memory: asynctrace vs HolisticTraceAnalysis, side by side in one run.

Each measurement runs in a fresh process, from a neutral working directory; we report its wall
time and peak RSS (``ru_maxrss`` of that child, from ``os.wait4``). asynctrace runs
``asynctrace report FILE --json`` end to end (start-up, load, every analysis, JSON out).
HolisticTraceAnalysis (HTA) runs ``TraceAnalysis`` on the same file plus queue length summary,
kernel launch stats, temporal and idle breakdowns. In the same rounds we time what each tool
pays before reading a byte (``asynctrace report`` on an empty trace; HTA's import), so that the
"after start-up" ratio subtracts the floor of the same moment. HTA needs ``pandas<3``, so it
lives in its own virtual environment; asynctrace is best measured from a wheel install, as users
get it (an editable install adds a path finder to every Python start)::

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install holistictraceanalysis==0.5.0 'pandas<3'
    python3 -m venv /tmp/at-venv
    /tmp/at-venv/bin/pip install torch==2.13.0 && /tmp/at-venv/bin/pip install .
    python benchmarks/make_large_trace.py \
        ../shared/traces/kineto/hta_a100_16ranks_rank0_graphlaunch.json.gz \
        /tmp/large_400mb.json --target-mb 400
    python benchmarks/analysis.py --hta-python /tmp/hta-venv/bin/python \
        --asynctrace-python /tmp/at-venv/bin/python --extra /tmp/large_400mb.json

Pass ``--no-hta`` to time asynctrace alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces" / "kineto"
DEFAULT_FILES = [
    "kineto_2021_resnet50_barelist.json.gz",
    "hta_a100_16ranks_rank0_graphlaunch.json.gz",
    "hta_v100_ns_resolution_rank0.json.gz",
    "tracelens_b200_compile_culaunchkernelex.json.gz",
    "hta_a100_nccl_launchkernelexc.json.gz",
]

HTA_SCRIPT = r"""
import sys, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_queue_length_summary(ranks=None)
a.get_cuda_kernel_launch_stats(visualize=False)
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
"""


@dataclass
class Run:
    tool: str
    file: str
    raw_mb: float
    wall_s: float
    peak_rss_mb: float
    ok: bool
    error: str = ""

    @property
    def mb_per_s(self) -> float:
        return self.raw_mb / self.wall_s if self.wall_s else 0.0


def raw_size(path: Path) -> int:
    if path.suffix != ".gz":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def measure(cmd: list[str], *, timeout_s: float) -> tuple[float, float, bool, str]:
    t0 = time.perf_counter()
    # from a neutral folder: `-m`/`-c` put the working directory first on sys.path, and from the
    # repository root that would shadow an installed asynctrace with the source tree
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tempfile.gettempdir()
    )
    deadline = t0 + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            return time.perf_counter() - t0, _rss_mb(usage), False, "timeout"
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    ok = os.waitstatus_to_exitcode(status) == 0
    return wall, _rss_mb(usage), ok, "" if ok else err.strip().splitlines()[-1:][0][:200]


def _rss_mb(usage: resource.struct_rusage) -> float:
    # ru_maxrss is in KiB (Linux); MB is 10^6 bytes here, like the raw JSON sizes, so that
    # RSS / raw compares like with like (KiB / 1024 would be MiB, 4.9 % smaller)
    return usage.ru_maxrss * 1024 / 1e6


def run_ours(path: Path, raw_mb: float, python: str, timeout_s: float) -> Run:
    cmd = [python, "-m", "asynctrace", "report", str(path), "--json"]
    wall, rss, ok, err = measure(cmd, timeout_s=timeout_s)
    return Run("asynctrace", path.name, raw_mb, wall, rss, ok, err)


def run_hta(path: Path, raw_mb: float, hta_python: str, timeout_s: float) -> Run:
    with tempfile.TemporaryDirectory(prefix="hta-") as d:
        os.symlink(path.resolve(), Path(d) / path.name)
        wall, rss, ok, err = measure([hta_python, "-c", HTA_SCRIPT, d], timeout_s=timeout_s)
    return Run("HTA", path.name, raw_mb, wall, rss, ok, err)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="asynctrace vs HolisticTraceAnalysis on the same traces"
    )
    ap.add_argument("files", nargs="*", type=Path, help="traces (default: the largest shared ones)")
    ap.add_argument(
        "--extra", nargs="*", type=Path, default=[], help="more traces, e.g. a 400 MB one"
    )
    ap.add_argument("--hta-python", default=shutil.which("python3") or "python3")
    ap.add_argument(
        "--asynctrace-python",
        default=sys.executable,
        help="interpreter whose asynctrace runs (default: this one). An editable install adds "
        "a path finder to every start (~13 ms here); a wheel install is what users run",
    )
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per tool and file; medians reported"
    )
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", type=Path, help="also write the raw runs here")
    a = ap.parse_args(argv)
    files = list(a.files) or [SHARED / f for f in DEFAULT_FILES if (SHARED / f).exists()]
    files += a.extra
    files = [f.resolve() for f in files]
    if not files:
        print("no traces found (../shared/traces is absent); pass files", file=sys.stderr)
        return 2
    print(
        f"# {platform.node()} {platform.machine()} {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    py = a.asynctrace_python
    # HTA runs from site-packages with the .pyc pip wrote; an editable asynctrace under
    # PYTHONDONTWRITEBYTECODE=1 would recompile every module on every run (~65 ms). Compile once
    # so that both tools start from bytecode.
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "asynctrace")], check=True)
    info = subprocess.run(  # (from a neutral folder, as the runs: see measure)
        [
            py,
            "-c",
            "import asynctrace, asynctrace.traces.kineto as k; "
            "print(asynctrace.__file__, 'accelerator' if k.HAVE_ACCELERATOR else 'pure Python')",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    print(
        f"# asynctrace: {info}; precompiled, as pip does for HTA; "
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}"
    )
    # What each tool pays before its first byte of trace: the interpreter, its imports and, for
    # us, a whole report of an empty trace. Measured in the same rounds as the files (machine
    # load drifts), so that "after start-up" subtracts the floor of the same moment.
    tmp = tempfile.TemporaryDirectory(prefix="empty-")
    empty = Path(tmp.name) / "empty.json"
    empty.write_text('{"traceEvents": []}')
    empty_cmd = [py, "-m", "asynctrace", "report", str(empty), "--json"]
    import_cmd = [a.hta_python, "-c", "from hta.trace_analysis import TraceAnalysis"]
    print(
        "# 'start-up': asynctrace report on an empty trace / HTA's import, measured in the same "
        "rounds; 'after start-up': the speed-up without them; 'data RSS/raw': our peak RSS "
        "above the empty-trace run, over the raw JSON size"
    )
    runs: list[Run] = []
    header = (
        f"{'file':48} {'raw MB':>7} | {'ours s':>7} {'ours MB/s':>9} {'ours RSS':>8} | "
        f"{'HTA s':>7} {'HTA RSS':>8} | {'speedup':>7} | {'start-up s':>11} "
        f"{'after start-up':>14} | {'RSS/raw':>7} {'data RSS/raw':>12}"
    )
    print(header)
    for path in files:
        raw_mb = raw_size(path) / 1e6
        ours: list[Run] = []
        theirs: list[Run] = []
        floors: list[tuple[float, float]] = []
        hta_floors: list[float] = []
        for i in range(a.repeat):
            # alternate the order so neither tool always runs on a warm page cache
            order = ["ours", "hta"] if i % 2 == 0 else ["hta", "ours"]
            for tool in order:
                if tool == "ours":
                    ours.append(run_ours(path, raw_mb, py, a.timeout))
                    wall, rss, _, _ = measure(empty_cmd, timeout_s=60)
                    floors.append((wall, rss))
                elif not a.no_hta:
                    theirs.append(run_hta(path, raw_mb, a.hta_python, a.timeout))
                    hta_floors.append(measure(import_cmd, timeout_s=60)[0])
        runs += ours + theirs
        o = sorted(ours, key=lambda r: r.wall_s)[len(ours) // 2]
        floor_ours = statistics.median(f[0] for f in floors)
        floor_rss = statistics.median(f[1] for f in floors)
        line = (
            f"{path.name[:48]:48} {raw_mb:7.1f} | "
            f"{o.wall_s:7.2f} {o.mb_per_s:9.0f} {o.peak_rss_mb:7.0f}M |"
        )
        if theirs:
            floor_hta = statistics.median(hta_floors)
            h = sorted(theirs, key=lambda r: r.wall_s)[len(theirs) // 2]
            hs = f"{h.wall_s:7.2f} {h.peak_rss_mb:7.0f}M" if h.ok else f"{'fail':>7} {'':>8}"
            speed = f"{h.wall_s / o.wall_s:6.1f}x" if h.ok and o.ok else "-"
            work_o, work_h = o.wall_s - floor_ours, h.wall_s - floor_hta
            after = f"{work_h / work_o:6.1f}x" if h.ok and o.ok and work_o > 0 else "-"
            line += f" {hs} | {speed:>7} | {floor_ours:4.2f}/{floor_hta:4.2f}  {after:>14} |"
        else:
            line += f" {'':7} {'':8} | {'':7} | {floor_ours:4.2f}{'':7} {'':14} |"
        if raw_mb:
            line += f" {o.peak_rss_mb / raw_mb:7.2f} {(o.peak_rss_mb - floor_rss) / raw_mb:12.2f}"
        if not o.ok:
            line += f"  (asynctrace failed: {o.error})"
        if theirs and not theirs[0].ok:
            line += f"  (HTA failed: {theirs[0].error})"
        print(line, flush=True)
    tmp.cleanup()
    if a.json:
        a.json.write_text(json.dumps([asdict(r) for r in runs], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
