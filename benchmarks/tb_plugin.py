"""How fast the TensorBoard plugin answers, through a real TensorBoard on 127.0.0.1.

Two figures (targets: both under 2 s):

* **listing**: a logdir of ``--runs`` runs (each a session's records file and a small trace),
  timed from a cold start: ``/data/plugins_listing`` (which walks the logdir for
  ``is_active()``) and the plugin's ``/runs``;
* **step window**: a large trace (``--large``; made with ``make_large_trace.py`` when absent):
  the first ``/report`` (load + analysis), the first ``/step_window`` (which also links
  launches and builds the queue series, once), then ``--repeat`` more windows of other steps,
  served from the cached trace.

With ``--screenshot PNG`` it also takes the picture for docs/viewing.md: the plugin's page in
TensorBoard, in headless Chromium with every request to another origin refused::

    python benchmarks/tb_plugin.py --large /tmp/large_400mb.json
    python benchmarks/tb_plugin.py --skip-large --screenshot docs/images/tb-plugin.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces" / "kineto"
DEMO = ROOT / "traces" / "cpu-demo"
SMALL = SHARED / "hta_2022_small_base.json.gz"
LARGE_SRC = SHARED / "hta_a100_16ranks_rank0_graphlaunch.json.gz"
SHOT_TRACE = SHARED / "tracelens_h100_bert_small_with_stack.json.gz"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tensorboard(logdir: Path) -> str:
    """TensorBoard in this process (a server thread), with its default plugins and ours."""
    from tensorboard import default, program

    from asynctrace.tb_plugin import AsyncTraceLoader

    plugins = default.get_plugins()  # the static ones and every entry point
    if not any(getattr(p, "__name__", "") == "AsyncTraceLoader" for p in plugins):
        plugins.append(AsyncTraceLoader)
    tb = program.TensorBoard(plugins=plugins)
    port = _free_port()
    tb.configure(
        argv=[None, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port),
              "--load_fast=false"]
    )  # fmt: skip
    return str(tb.launch()).rstrip("/")


def _get(url: str) -> tuple[Any, float]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        body = r.read()
    return json.loads(body), time.perf_counter() - t


def _plugin(base: str, route: str, **params: object) -> tuple[Any, float]:
    q = urllib.parse.urlencode(params)
    return _get(f"{base}/data/plugin/asynctrace/{route}" + (f"?{q}" if q else ""))


def bench_listing(n_runs: int, scratch: Path) -> dict[str, float]:
    logdir = scratch / "many"
    records = sorted(DEMO.glob("*.records.jsonl"))
    for i in range(n_runs):
        d = logdir / f"run-{i:03d}"
        d.mkdir(parents=True)
        shutil.copy(records[i % len(records)], d)
        if SMALL.exists():
            shutil.copy(SMALL, d / f"rank0.{i}.pt.trace.json.gz")
    base = start_tensorboard(logdir)
    listing, t_listing = _get(f"{base}/data/plugins_listing")
    assert listing["asynctrace"]["enabled"], listing["asynctrace"]
    runs, t_runs = _plugin(base, "runs")
    assert len(runs["runs"]) == n_runs, len(runs["runs"])
    _, t_runs2 = _plugin(base, "runs")
    return {"plugins_listing_s": t_listing, "runs_s": t_runs, "runs_again_s": t_runs2}


def bench_large(large: Path, scratch: Path, repeat: int) -> dict[str, Any]:
    if not large.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "make_large_trace.py"), str(LARGE_SRC),
             str(large), "--target-mb", "400"],
            check=True,
        )  # fmt: skip
    logdir = scratch / "large"
    (logdir / "big").mkdir(parents=True)
    # the plugin reads *.pt.trace.json / *.json.gz: the file under such a name, hard-linked
    # (the plugin refuses a symbolic link out of its logdir), copied across file systems
    name = "rank0.pt.trace.json" if large.suffix == ".json" else "rank0.json.gz"
    try:
        os.link(large.resolve(), logdir / "big" / name)
    except OSError:
        shutil.copy(large, logdir / "big" / name)
    rel = f"big/{name}"
    base = start_tensorboard(logdir)
    report, t_report = _plugin(base, "report", path=rel)
    assert report["ok"], report
    steps = [w["step"] for w in report["windows"]]
    _win, t_first = _plugin(base, "step_window", path=rel, step=steps[0])
    times = []
    sizes = []
    for k in range(repeat):
        step = steps[(k + 1) * max(1, len(steps) // (repeat + 1)) % len(steps)]
        w, t = _plugin(base, "step_window", path=rel, step=step)
        assert w["step"] == step, w
        times.append(t)
        sizes.append(w["counts"]["device_shown"] + w["counts"]["host_shown"])
    activities = report["report"]["trace"]["activities"]
    return {
        "file_mb": large.stat().st_size / 1e6,
        "activities": activities["total"],
        "kernels": activities["per_kind"].get("kernel", 0),
        "steps": len(steps),
        "first_report_s": t_report,
        "first_window_s": t_first,
        "window_median_s": statistics.median(times),
        "window_max_s": max(times),
        "events_per_window": statistics.median(sizes),
    }


def screenshot(png: Path, scratch: Path) -> None:
    """The page over the demo's logdir plus a real H100 trace, as TensorBoard shows it."""
    from playwright.sync_api import sync_playwright

    logdir = scratch / "shot"
    for name in ("demo-synced", "demo-unsynced"):
        (logdir / name).mkdir(parents=True)
        shutil.copy(next(DEMO.glob(f"{name}.*.records.jsonl")), logdir / name)
    if SHOT_TRACE.exists():
        (logdir / "bert-h100").mkdir()
        shutil.copy(SHOT_TRACE, logdir / "bert-h100" / "rank0.pt.trace.json.gz")
    base = start_tensorboard(logdir)
    foreign: list[str] = []

    def route(r: Any) -> None:
        if urllib.parse.urlsplit(r.request.url).hostname != "127.0.0.1":
            foreign.append(r.request.url)
            r.abort()
        else:
            r.continue_()

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 1250})
        page.route("**/*", route)
        page.goto(f"{base}/#asynctrace")
        frame = None
        for _ in range(600):
            frame = next((f for f in page.frames if "plugin_entry.html" in f.url), None)
            if frame is not None and frame.query_selector("main.at-root[data-ready='true']"):
                break
            page.wait_for_timeout(100)
        assert frame is not None, f"the plugin's iframe did not load ({foreign=})"
        if SHOT_TRACE.exists():
            frame.wait_for_selector("svg.at-timeline rect.activity", timeout=60_000)
            # the H100 run open, the sessions folded (each opens with a click)
            frame.evaluate(
                """() => document.querySelectorAll('details.at-source-wrap').forEach((d) => {
                  d.open = d.querySelector('.at-source').dataset.path.startsWith('bert-h100'); })"""
            )
        page.wait_for_timeout(1000)
        png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(png), full_page=False)
        browser.close()
    if foreign:
        raise SystemExit(f"the page asked another origin for: {foreign}")
    print(f"wrote {png}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--large", type=Path, default=Path("/tmp/large_400mb.json"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--screenshot", type=Path)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        if a.screenshot:
            screenshot(a.screenshot, scratch)
        print(f"machine: {platform.machine()}, {platform.processor() or '?'}, Python "
              f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
        listing = bench_listing(a.runs, scratch)
        print(f"listing {a.runs} runs: " + ", ".join(f"{k} {v:.3f}" for k, v in listing.items()))
        if not a.skip_large:
            large = bench_large(a.large, scratch, a.repeat)
            print(
                "large trace: "
                + ", ".join(
                    f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in large.items()
                )
            )
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    # the in-process TensorBoard's server thread never ends: leave without waiting for it
    os._exit(status)
