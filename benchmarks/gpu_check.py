"""The GPU check: run on a machine with a CUDA/ROCm device, one command, under 5 minutes.

    python benchmarks/gpu_check.py --out traces/gpu/<gpu-name>

What it does, writing everything under ``--out``:

1. ``demo/``: the full ``asynctrace demo`` (records, ``demo.summary.json``, ``demo.txt``).
2. ``matmul``: ten 4096×4096 matmuls under :class:`asynctrace.Benchmark` — large enough that
   even a fast GPU takes far longer to run them than Python takes to queue them.
3. ``loops/``: a GPU-bound training loop (MLP 64→4096→4096→10, batch 2048) under
   ``asynctrace.trace``, synchronized once per step (``loss.item()``) and never synchronized,
   plus one Kineto trace of the unsynchronized loop (``loops/*.pt.trace.json``), analysed as
   ``asynctrace report`` analyses it (activities, launches linked, steps, queue depth).
4. ``overhead``: light-mode overhead on the device — a launch-bound step (8×Linear(64, 64),
   batch 32) bare, under asynctrace (steps + one range per step), under torch.profiler
   (CPU + CUDA activities); interleaved rounds, medians, ratios to bare.
5. ``gpu_tests.txt``: the test suite's GPU-only tests (``pytest -m gpu``: real CUDA events,
   the CUDA sync hooks, ``Benchmark``), which skip on every other machine.
6. ``gpu_check.summary.json``: every figure above, the checks and whether each passed.

Checks (CUDA/ROCm only; on a CPU-only machine it runs everything small and says it skipped them):

* the matmul block's *returned* time is far below its *done* time (≤ 1/5);
* unsynchronized loop: run-ahead and in-flight steps are positive (max run-ahead > 1 ms,
  at least 2 steps in flight at some step);
* synchronized loop: run-ahead near zero (median |run-ahead| < 0.5 ms) and at most the step
  just ended in flight (its end marker, recorded microseconds before, may not have run yet);
* the Kineto trace of the unsynchronized loop: device activities present, every one linked to
  its launch, one step per ``train_step`` range (without a schedule torch.profiler writes no
  ``ProfilerStep#N``: the analysis takes the user's annotations as steps).

Exit status 0 when every check passed (or was skipped), 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

import asynctrace
from asynctrace._commands._demo_loops import run_loop
from asynctrace._commands._demo_run import run_demo
from asynctrace.capture.benchmark import Benchmark
from asynctrace.capture.devices import get_device

__all__ = ["main"]


def matmul_check(dev: Any, tdev: torch.device, size: int, repeats: int) -> dict[str, Any]:
    a = torch.randn(size, size, device=tdev)
    torch.mm(a, a)[0, 0].item()  # warm-up (cuBLAS handles, kernels) before measuring
    with Benchmark(f"{repeats} × mm {size}", device=dev, file=None) as b:
        for _ in range(repeats):
            c = torch.mm(a, a)
    c[0, 0].item()
    if b.result is None:
        raise RuntimeError("Benchmark produced no result")
    return b.result.to_json()


def loop_figures(lp: Any) -> dict[str, Any]:
    steps = lp.steps[1:] or lp.steps  # the first step includes one-time setup
    ra = [s["run_ahead_ns"] for s in steps if s.get("run_ahead_ns") is not None]
    dv = [s["device_ns"] for s in steps if s.get("device_ns") is not None]
    return {
        "name": lp.name,
        "synchronized": lp.synchronized,
        "records_path": lp.records_path,
        "steps": len(lp.steps),
        "median_frontend_us": statistics.median(s["frontend_ns"] for s in steps) / 1e3,
        "median_device_us": statistics.median(dv) / 1e3 if dv else None,
        "median_run_ahead_us": statistics.median(ra) / 1e3 if ra else None,
        "max_run_ahead_us": max(ra) / 1e3 if ra else None,
        "max_in_flight": max((s["in_flight"] for s in steps), default=0),
        "in_flight_per_step": [s["in_flight"] for s in lp.steps],
    }


def kineto_trace(tdev: torch.device, out: Path, width: int, batch: int, steps: int) -> str:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU]
    if tdev.type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)
    ).to(tdev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(batch, 64, device=tdev)
    y = torch.randint(0, 10, (batch,), device=tdev)
    path = out / f"unsynced.{platform.node()}.{time.time_ns()}.pt.trace.json"
    with profile(activities=acts) as prof:
        for _ in range(steps):
            with asynctrace.range("train_step"):
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(net(x), y).backward()
                opt.step()
            prof.step()
    prof.export_chrome_trace(str(path))
    return str(path)


def trace_figures(path: str) -> dict[str, Any]:
    """What ``asynctrace report`` reads from the trace: the analysis of our own capture."""
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source

    r = analyze(load_source(path))
    t = r.trace
    assert t is not None  # a trace file
    return {
        "device": r.source.device,
        "activities": t.activities.total,
        "per_kind": t.activities.per_kind,
        "streams": len(t.activities.per_stream),
        "launch_matched": t.launch.matched,
        "launch_unmatched": t.launch.unmatched,
        "queue_delay_p50_ns": t.launch.queue_delay_ns.p50,
        "launch_to_start_p50_ns": t.launch.launch_to_start_ns.p50,
        "queue_max": max((q.max for q in t.queue.values()), default=0),
        "steps": [s.step for s in r.steps],
        "step_source": t.step_source,
        "syncs": t.syncs.count,
        # what bounds the traced loop, to hold against the live session's label of it
        "bound": r.bound.label if r.bound is not None else None,
    }


def overhead(tdev: torch.device, dev: Any, out: Path, rounds: int, steps: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).to(tdev)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=tdev)
    y = torch.randn(32, 64, device=tdev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if tdev.type == "cuda" else [])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    def done() -> None:
        if tdev.type == "cuda":
            torch.cuda.synchronize(tdev)

    # Each mode's time is the loop plus a final sync, so queued work is paid for in every mode.
    def bare(n: int) -> int:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            step()
        done()
        return time.perf_counter_ns() - t0

    def traced(n: int) -> int:
        with asynctrace.trace("overhead", dir=out, device=dev, print_summary=False) as s:
            t0 = time.perf_counter_ns()
            for _ in s.steps(range(n)):
                with asynctrace.range("train_step"):
                    step()
            done()
            return time.perf_counter_ns() - t0

    def profiled(n: int) -> int:
        with profile(activities=acts) as prof:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                step()
                prof.step()
            done()
            return time.perf_counter_ns() - t0

    modes = {"bare": bare, "asynctrace": traced, "profiler": profiled}
    for fn in modes.values():
        fn(50)
    per: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(rounds):
        order = names[r % 3 :] + names[: r % 3]
        if r % 2:
            order.reverse()
        for m in order:
            per[m].append(modes[m](steps) / steps)
    med = {m: statistics.median(v) for m, v in per.items()}
    return {
        "step": "8 × Linear(64, 64)+ReLU, batch 32, SGD",
        "rounds": rounds,
        "steps_per_round": steps,
        "median_step_us": {m: v / 1e3 for m, v in med.items()},
        "ratio_to_bare": {m: med[m] / med["bare"] for m in modes},
        # per-round ratios compare runs made moments apart: robust to slow drifts in load
        "paired_ratio_to_bare": {
            m: statistics.median(a / b for a, b in zip(v, per["bare"], strict=True))
            for m, v in per.items()
        },
    }


def _here() -> int:
    """The caller's current line number."""
    return sys._getframe(1).f_lineno


def sync_check(dev: Any, tdev: torch.device, out: Path) -> dict[str, Any]:
    """What the sync detector catches here: a loop with a hidden ``loss.item()`` per step and,
    on a GPU, an explicit ``torch.cuda.synchronize()`` — the CUDA hooks on CUDA/ROCm, the
    dispatch-mode lint elsewhere."""
    on_gpu = dev.kind in ("cuda", "rocm")
    mode = "cuda" if on_gpu else "lint"
    model = torch.nn.Linear(256, 256).to(tdev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device=tdev)
    expected: dict[str, str] = {}
    with asynctrace.trace(
        "syncs", dir=out, device=dev, detect_syncs=mode, print_summary=False
    ) as s:
        for _ in range(5):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            _value, line = loss.item(), _here()
            expected["loss.item()"] = f"{__file__}:{line}"
            if on_gpu:
                _none, line = torch.cuda.synchronize(tdev), _here()
                expected["torch.cuda.synchronize()"] = f"{__file__}:{line}"
            s.step()
    report = s.summary()
    sites = {
        r.site: {"op": r.op, "count": r.count, "wait_ns": r.wait_ns} for r in report.sync_sites
    }
    caught = {what: site in sites for what, site in expected.items()}
    return {
        "mode": mode,
        "expected": expected,
        "caught": caught,
        "sites": sites,
        "syncs_per_step": (
            report.figures["sync_count"].mean if "sync_count" in report.figures else None
        ),
        "verdict": report.verdict.code,
    }


def run_gpu_tests(out: Path) -> dict[str, Any]:
    """``pytest -m gpu`` on this checkout's tests, in a child process; output to a file."""
    import subprocess

    tests = Path(__file__).resolve().parents[1] / "tests"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", str(tests)]
    proc = subprocess.run(
        cmd, cwd=tests.parent, capture_output=True, text=True, timeout=240, check=False
    )
    (out / "gpu_tests.txt").write_text(proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return {
        "command": " ".join(cmd),
        "returncode": proc.returncode,
        "last_line": lines[-1] if lines else "(no output)",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="output folder, e.g. traces/gpu/<gpu-name>")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = get_device(args.device)
    on_gpu = dev.asynchronous
    tdev = torch.device((args.device or "cuda") if dev.kind in ("cuda", "rocm") else "cpu")
    print(f"gpu_check on {dev.name} ({dev.kind}); torch {torch.__version__}")
    if not on_gpu:
        print("no CUDA/ROCm device: running everything small and SKIPPING the CUDA assertions")

    # 1. the demo, as a user runs it
    buf = io.StringIO()
    demo = run_demo(
        device=args.device,
        out=out / "demo",
        steps=20 if on_gpu else 5,
        size=1000 if on_gpu else 200,
        console=Console(file=buf, width=120),
    )
    (out / "demo" / "demo.txt").write_text(buf.getvalue())
    print(f"demo: done ({demo.wall_ns / 1e9:.1f} s); {demo.answer}")

    # 2. the async matmul check
    mm = matmul_check(dev, tdev, 4096 if on_gpu else 256, 10)
    print(f"matmul: returned {mm['returned_ns'] / 1e6:.3f} ms, done {mm['done_ns'] / 1e6:.3f} ms")

    # 3. GPU-bound loops, synced and unsynced
    loops_dir = out / "loops"
    loops_dir.mkdir(exist_ok=True)
    width, batch, nsteps = (4096, 2048, 30) if on_gpu else (128, 64, 5)
    loops = {
        sync: loop_figures(
            run_loop(
                dev,
                tdev,
                synchronized=sync,
                steps=nsteps,
                out=loops_dir,
                batch=batch,
                width=width,
                name="gpu-synced" if sync else "gpu-unsynced",
            )
        )
        for sync in (True, False)
    }
    synced, unsynced = loops[True], loops[False]
    for lp in (synced, unsynced):
        print(
            f"loop {lp['name']}: frontend {lp['median_frontend_us']:.1f} µs, device "
            f"{lp['median_device_us']} µs, run-ahead median {lp['median_run_ahead_us']} µs "
            f"max {lp['max_run_ahead_us']} µs, max in flight {lp['max_in_flight']}"
        )
    trace_steps = 8 if on_gpu else 3
    trace_path = kineto_trace(tdev, loops_dir, width, batch, trace_steps)
    tf = trace_figures(trace_path)
    print(
        f"trace: {tf['activities']} activities {tf['per_kind']}, launches linked "
        f"{tf['launch_matched']} (unlinked {tf['launch_unmatched']}), queue delay p50 "
        f"{tf['queue_delay_p50_ns']} ns, queue max {tf['queue_max']}, steps {tf['steps']}"
    )

    # 4. light-mode overhead on the device
    ov = overhead(
        tdev, dev, out / "overhead", rounds=9 if on_gpu else 5, steps=300 if on_gpu else 50
    )
    print(
        "overhead: "
        + ", ".join(
            f"{m} {ov['median_step_us'][m]:.1f} µs/step ({ov['ratio_to_bare'][m]:.3f}×, "
            f"paired {ov['paired_ratio_to_bare'][m]:.3f}×)"
            for m in ov["ratio_to_bare"]
        )
    )

    # 4b. what the sync detector catches on this device
    syncs = sync_check(dev, tdev, out / "syncs")
    print(
        f"syncs ({syncs['mode']}): "
        + ", ".join(f"{k} {'caught' if v else 'MISSED'}" for k, v in syncs["caught"].items())
        + f"; {syncs['syncs_per_step']} per step; verdict {syncs['verdict']}"
    )

    # 4c. the test suite's GPU-only tests (they skip on every other machine)
    gpu_tests = run_gpu_tests(out) if on_gpu else None
    if gpu_tests is not None:
        print(f"gpu tests: {gpu_tests['last_line']}")

    # 5. checks
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, ok: bool, detail: str) -> None:
        checks[name] = {"passed": ok if on_gpu else None, "detail": detail}

    check(
        "matmul returned far below done",
        mm["returned_ns"] * 5 <= mm["done_ns"],
        f"returned {mm['returned_ns']} ns, done {mm['done_ns']} ns (need returned ≤ done / 5)",
    )
    check(
        "unsynced loop runs ahead",
        # GPU-bound steps (~ms of device work for ~0.3 ms of issuing): the host gets whole
        # steps ahead, so several are in flight and run-ahead reaches milliseconds
        (unsynced["max_run_ahead_us"] or 0) > 1000 and unsynced["max_in_flight"] >= 2,
        f"max run-ahead {unsynced['max_run_ahead_us']} µs, "
        f"max in flight {unsynced['max_in_flight']}",
    )
    check(
        "synced loop stays in step",
        # the step that just ended may count as in flight only through its own end marker,
        # recorded microseconds earlier (loss.item() already waited for its work)
        synced["max_in_flight"] <= 1
        and synced["median_run_ahead_us"] is not None
        and abs(synced["median_run_ahead_us"]) < 500,
        f"max in flight {synced['max_in_flight']}, "
        f"median run-ahead {synced['median_run_ahead_us']} µs",
    )
    check(
        "our Kineto trace is fully linked",
        tf["activities"] > 0
        and tf["launch_unmatched"] == 0
        and tf["launch_matched"] == tf["activities"]
        and tf["steps"] == list(range(trace_steps))
        and tf["step_source"] == "annotation",
        f"{tf['activities']} activities, {tf['launch_matched']} linked, "
        f"{tf['launch_unmatched']} unlinked, steps {tf['steps']} from {tf['step_source']} "
        f"(need {trace_steps} train_step annotations)",
    )
    check(
        "CUDA sync hooks name the lines",
        all(syncs["caught"].values()),
        f"{syncs['caught']} (sites seen: {sorted(syncs['sites'])})",
    )
    check(
        "GPU-only tests pass",
        gpu_tests is not None and gpu_tests["returncode"] == 0,
        "not run (no CUDA/ROCm device)"
        if gpu_tests is None
        else f"{gpu_tests['last_line']} (pytest -m gpu, output in gpu_tests.txt)",
    )
    failed = [k for k, v in checks.items() if v["passed"] is False]
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "device_kind": dev.kind,
        "device_name": dev.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "asynctrace": asynctrace.__version__,
        "cuda_assertions": "checked" if on_gpu else "skipped (no CUDA/ROCm device)",
        "demo": demo.to_json(),
        "matmul": mm,
        "loops": {
            "synced": synced,
            "unsynced": unsynced,
            "kineto_trace": trace_path,
            "kineto_trace_figures": tf,
        },
        "overhead": ov,
        "syncs": syncs,
        "gpu_tests": gpu_tests,
        "checks": checks,
        "wall_s": time.perf_counter() - t_start,
    }
    (out / "gpu_check.summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for k, v in checks.items():
        state = {True: "PASS", False: "FAIL", None: "SKIP"}[v["passed"]]
        print(f"{state}  {k}: {v['detail']}")
    print(f"wrote {out}/ in {summary['wall_s']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
