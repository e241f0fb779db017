"""``asynctrace demo``: the book's asynchronous-computation experiments, measured.

Dive into Deep Learning §12.2 (zh §8.2) shows asynchrony with hand-placed synchronizations.
Here the same experiments run under asynctrace instead:

(a) numpy vs torch, ten 1000×1000 matmuls: when Python got control back (*returned*), when the
    device finished (*done*, from a marker recorded at the end of the block), and, as an
    independent check, how long a forcing read (``b[0, 0].item()``) right after the block
    waited — the work still pending when Python got control back.
(b) ``x = torch.ones((1, 2)); y = ...; z = x * y + 2``; ``print(z)``: each statement's host
    time, when the device executed it, and how long printing ``z`` waited. Run as in the book,
    and once more with ten matmuls queued ahead of it so the wait is large enough to see.
(c) a small MLP training loop run twice under :func:`asynctrace.trace`: synchronized once per
    minibatch (``loss.item()`` each step) and never synchronized, with per-step frontend and
    device time, run-ahead, steps in flight and memory.

(d) the unsynchronized loop once more in deep mode (``profile=``: ``torch.profiler`` over a few
    steps), kept apart so that the profiler's overhead stays out of (c)'s figures.

Then it writes everything the project can show, under ``out`` (default ``traces/demo/``): the
session records, TensorBoard event files with the ``asynctrace/`` scalars (one run per loop),
the profiler trace in the TensorBoard profiler layout with its annotated copy (Perfetto,
chrome://tracing), PNG plots and one self-contained HTML report, and prints how to view each.

On the CPU backend every op runs before it returns, and the numbers show it: the forcing read
waits nothing, the print of ``z`` costs what printing a finished tensor costs, run-ahead and
in-flight are zero. That answers the book's exercise. The profiled trace then has no device
activity at all, and the pictures say so rather than draw any.

The parts: the experiments (:mod:`asynctrace._commands._demo_loops`), the files written
(:mod:`asynctrace._commands._demo_files`) and the tables printed
(:mod:`asynctrace._commands._demo_text`); :func:`run_demo` runs them in order.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console
from rich.markup import escape

from asynctrace._commands._demo_files import Artifact, clear_previous, write_views
from asynctrace._commands._demo_loops import (
    _LOOP_NAMES,
    DEMO_PROFILE,
    LoopResult,
    MatmulResult,
    StatementsResult,
    _plain_detector,
    _synced_detector,
    _torch_device,
    run_loop,
    run_matmuls,
    run_statements,
)
from asynctrace._commands._demo_text import (
    figure_text,
    render_artifacts,
    render_loop,
    render_matmuls,
    render_statements,
)
from asynctrace.capture.devices import Device, get_device
from asynctrace.records.units import format_ns

if TYPE_CHECKING:
    import torch

__all__ = ["DemoResult", "run_demo"]


@dataclass(frozen=True)
class DemoResult:
    device_kind: str
    device_name: str
    asynchronous: bool
    matmuls: MatmulResult
    statements: list[StatementsResult]
    loops: list[LoopResult]
    answer: str
    out_dir: str
    wall_ns: int = 0
    notes: list[str] = field(default_factory=list)
    #: (d): the unsynchronized loop under deep mode (None when not run)
    profiled: LoopResult | None = None
    artifacts: list[Artifact] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _answer(
    dev: Device, m: MatmulResult, st: list[StatementsResult], loops: list[LoopResult]
) -> str:
    """The book's exercise, answered from the measured figures."""
    queued = st[-1]
    first = queued.statements[0]
    # each loop's p90s, as asynctrace report prints them for its records
    ra = [figure_text(lp, "run_ahead_ns", "p90") for lp in loops]
    inflight = [figure_text(lp, "in_flight", "p90") for lp in loops]
    names = [lp.name for lp in loops]
    if not dev.asynchronous:
        share = m.forced_read_wait_ns / max(m.check_returned_ns, 1)
        return (
            "Exercise: on CPU, can you still observe asynchrony in the backend? No. The CPU "
            "backend runs each operator before returning to Python. The ten torch matmuls "
            f"returned after {format_ns(m.torch.returned_ns)} with the work done; run again, a "
            "read "
            f"that forces completion right after waited {format_ns(m.forced_read_wait_ns)} "
            f"({share:.2%} of the loop's {format_ns(m.check_returned_ns)}). With matmuls issued "
            "before "
            f"z = x * y + 2, that statement itself took {format_ns(first.returned_ns)}, and "
            "printing z "
            f"took {format_ns(queued.print_ns)}, not the {format_ns(first.returned_ns)} an "
            "asynchronous "
            f"backend would make it wait. In the training loops ({', '.join(names)}) the p90 of "
            f"run-ahead was {' and '.join(ra)} and that of the steps in flight "
            f"{' and '.join(inflight)}: device time is frontend time."
        )
    return (
        f"On {dev.name} the backend is asynchronous: the ten torch matmuls returned after "
        f"{format_ns(m.torch.returned_ns)} but the device finished them "
        f"{format_ns(m.torch.done_ns)} after the "
        f"block started; a forcing read right after waited {format_ns(m.forced_read_wait_ns)}. "
        "With "
        f"matmuls queued, printing z waited {format_ns(queued.print_ns)}. Unsynchronized, the "
        f"loop ran {ra[-1] if ra else 'n/a'} ahead with "
        f"{inflight[-1] if inflight else 'n/a'} steps in flight (p90s); synchronized once per "
        "minibatch it stays close to the device. "
        "(Exercise: on the CPU backend none of this shows: it runs synchronously.)"
    )


def _run_loops(dev: Device, tdev: torch.device, *, steps: int, out_dir: Path) -> list[LoopResult]:
    """(c) and (d): the loop synchronized once per minibatch, and left to run ahead."""
    loops = ((True, _synced_detector), (False, _plain_detector))
    return [
        run_loop(
            dev,
            tdev,
            synchronized=synced,
            steps=steps,
            out=out_dir,
            tensorboard=True,
            detect_syncs=detector(dev),
        )
        for synced, detector in loops
    ]


def _run_profiled(dev: Device, tdev: torch.device, *, out_dir: Path) -> LoopResult:
    """The unsynchronized loop again, under the profiler's window (the trace the views show)."""
    p = DEMO_PROFILE
    return run_loop(
        dev,
        tdev,
        synchronized=False,
        # one step after the window, so the window closes on a step boundary
        steps=p.wait + p.warmup + p.active + 1,
        out=out_dir,
        name=_LOOP_NAMES[2],
        tensorboard=True,
        profile=p,
    )


def run_demo(
    *,
    device: str | None = None,
    out: str | os.PathLike[str] = "traces/demo",
    steps: int = 20,
    size: int = 1000,
    views: bool = True,
    console: Console | None = None,
) -> DemoResult:
    """Run (a), (b), (c), (d) on ``device``; write records, TensorBoard runs, the profiler trace
    and, with ``views``, the annotated trace, plots and HTML report under ``out``; print tables
    and the list of what was written to ``console`` (None: print nothing).

    The demo's own earlier outputs in ``out`` are replaced (see :func:`clear_previous`).
    """
    t_start = time.perf_counter_ns()
    dev = get_device(device)
    tdev = _torch_device(dev, device)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_previous(out_dir)
    if console is not None:
        console.print(
            f"[bold]asynctrace demo[/] on {escape(dev.name)} ({dev.kind}, "
            f"{'asynchronous' if dev.asynchronous else 'synchronous'} backend)"
        )
    m = run_matmuls(dev, tdev, size=size)
    if console is not None:
        render_matmuls(m, console)
    st = [run_statements(dev, tdev), run_statements(dev, tdev, queue_matmuls=10, size=size)]
    if console is not None:
        for s in st:
            render_statements(s, console)
    loops = _run_loops(dev, tdev, steps=steps, out_dir=out_dir)
    if console is not None:
        for lp in loops:
            render_loop(lp, console)
    profiled = _run_profiled(dev, tdev, out_dir=out_dir)
    artifacts: list[Artifact] = []
    notes: list[str] = []
    if views:
        artifacts, notes = write_views(out_dir, loops=loops, profiled=profiled)
    summary_path = out_dir / "demo.summary.json"
    what = "every figure printed above, as JSON"
    artifacts.append(
        Artifact("summary", str(summary_path), what, f"python -m json.tool {summary_path}")
    )
    result = DemoResult(
        device_kind=dev.kind,
        device_name=dev.name,
        asynchronous=dev.asynchronous,
        matmuls=m,
        statements=st,
        loops=loops,
        answer=_answer(dev, m, st, loops),
        out_dir=str(out_dir),
        wall_ns=time.perf_counter_ns() - t_start,
        notes=notes,
        profiled=profiled,
        artifacts=artifacts,
    )
    summary_path.write_bytes(msgspec.json.encode(result.to_json()))
    if console is not None:
        console.print()
        console.print(result.answer, markup=False)
        render_artifacts(result, console)
    return result
