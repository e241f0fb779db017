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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy
import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace.analysis.report import Analysis, Report, analyze, analyze_detail
from asynctrace.capture.benchmark import Benchmark, BenchmarkResult
from asynctrace.capture.devices import Device, get_device
from asynctrace.capture.profiler import Profile
from asynctrace.records import StepRecord
from asynctrace.session import trace
from asynctrace.sources import load_source
from asynctrace.traces.load import ANNOTATED_SUFFIX

__all__ = [
    "DEMO_PROFILE",
    "Artifact",
    "DemoResult",
    "LoopResult",
    "MatmulResult",
    "StatementTiming",
    "StatementsResult",
    "clear_previous",
    "render_artifacts",
    "render_demo",
    "run_demo",
    "run_loop",
    "run_matmuls",
    "run_statements",
    "write_views",
]

#: deep mode's window in the demo: step 0 runs unprofiled, step 1 warms the profiler up, steps
#: 2-4 are recorded (the first step of a loop pays one-time costs, so it stays out)
DEMO_PROFILE = Profile(wait=1, warmup=1, active=3)
#: the loops' session names, which are also their TensorBoard runs and file-name prefixes
_LOOP_NAMES = ("demo-synced", "demo-unsynced", "demo-profiled")
_PLOTS = "plots"


@dataclass(frozen=True)
class MatmulResult:
    """(a): ten 1000×1000 matmuls, numpy vs torch."""

    size: int
    repeats: int
    numpy: BenchmarkResult
    torch: BenchmarkResult
    #: the torch loop run again without Benchmark (the round whose read waited least):
    #: host time until it returned ...
    check_returned_ns: int
    #: ... and how long a forcing read (``b[0, 0].item()``) right after it waited
    forced_read_wait_ns: int
    #: the same read again, with nothing pending: the read's own cost, for comparison
    forced_read_again_ns: int


@dataclass(frozen=True)
class StatementTiming:
    statement: str
    #: host time inside the statement
    returned_ns: int
    #: host time at the statement's end, since the first statement started
    host_end_ns: int
    #: when the device executed a marker recorded right after the statement, same origin
    device_done_ns: int


@dataclass(frozen=True)
class StatementsResult:
    """(b): ``z = x * y + 2`` and printing ``z``."""

    title: str
    statements: list[StatementTiming]
    #: host time ``str(z)`` took the first time (waits for ``z``) and again (nothing to wait for)
    print_ns: int
    print_again_ns: int
    printed: str


@dataclass(frozen=True)
class LoopResult:
    """(c): one training loop under ``asynctrace.trace``."""

    name: str
    synchronized: bool
    records_path: str | None
    steps: list[dict[str, Any]]
    #: medians over the steps after the first (the first includes one-time setup)
    median_frontend_ns: float
    median_device_ns: float | None
    max_run_ahead_ns: int | None
    max_in_flight: int
    #: the session's TensorBoard run folder (``<out>/<name>/<time>-<pid>/``), when it wrote one
    tensorboard_dir: str | None = None
    #: deep mode: the profiler traces this session wrote, and their annotated copies
    profiler_traces: list[str] = field(default_factory=list)
    #: the sync detector the session ran ("cuda", "lint", "off"; "auto" resolved)
    sync_detection: str | None = None
    #: {site, op, count} of each synchronizing line the session saw, most frequent first
    sync_sites: list[dict[str, Any]] = field(default_factory=list)
    annotated_traces: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Artifact:
    """One file or folder the demo wrote, and how to look at it."""

    #: "records", "tensorboard", "profiler trace", "annotated trace", "plot", "html", "summary"
    kind: str
    path: str
    what: str
    view: str


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


def _torch_device(dev: Device, spec: str | None) -> torch.device:
    if dev.kind in ("cuda", "rocm"):
        if spec and spec.startswith(("cuda", "rocm")):
            # "rocm[:N]" is the HIP build's "cuda[:N]", as get_device reads it: the tensors go
            # to the device the markers are recorded on, index included
            return torch.device("cuda" + spec[4:])
        return torch.device("cuda")
    return torch.device("cpu")


def _timed(clock: Callable[[], int], fn: Callable[[], Any]) -> tuple[int, Any]:
    t0 = clock()
    value = fn()
    return clock() - t0, value


def run_matmuls(
    dev: Device, tdev: torch.device, *, size: int = 1000, repeats: int = 10, rounds: int = 3
) -> MatmulResult:
    """(a) numpy vs torch, as in the book (warm up first), timed with :class:`Benchmark`."""
    a = torch.randn(size=(size, size), device=tdev)
    b = torch.mm(a, a)
    b[0, 0].item()  # warm-up finished before we measure; also warms .item() itself
    cpu = get_device("cpu")
    with Benchmark("numpy", device=cpu, file=None) as bn:
        for _ in range(repeats):
            an = numpy.random.normal(size=(size, size))
            numpy.dot(an, an)
    with Benchmark("torch", device=dev, file=None) as bt:
        for _ in range(repeats):
            a = torch.randn(size=(size, size), device=tdev)
            b = torch.mm(a, a)
    # Independent check, without Benchmark's exit wait: run the loop again and time a read that
    # forces completion; what it waits is the work still pending when Python got control back.
    clock = dev.host_now_ns
    best: tuple[int, int] | None = None
    for _ in range(rounds):
        t0 = clock()
        for _ in range(repeats):
            a = torch.randn(size=(size, size), device=tdev)
            b = torch.mm(a, a)
        t1 = clock()
        b[0, 0].item()
        t2 = clock()
        # the least-disturbed round: other processes can only add time
        if best is None or t2 - t1 < best[1]:
            best = (t1 - t0, t2 - t1)
    if best is None:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    again_ns = min(_timed(clock, lambda: b[0, 0].item())[0] for _ in range(rounds))
    if bn.result is None or bt.result is None:  # pragma: no cover - set by a completed block
        raise RuntimeError("Benchmark produced no result")
    return MatmulResult(
        size=size,
        repeats=repeats,
        numpy=bn.result,
        torch=bt.result,
        check_returned_ns=best[0],
        forced_read_wait_ns=best[1],
        forced_read_again_ns=again_ns,
    )


def run_statements(
    dev: Device, tdev: torch.device, *, queue_matmuls: int = 0, size: int = 1000
) -> StatementsResult:
    """(b) the book's ``z = x * y + 2``; optionally with matmuls queued ahead of it."""
    clock = dev.host_now_ns
    env: dict[str, Any] = {"torch": torch, "device": tdev}
    program: list[tuple[str, Callable[[], None]]] = []
    if queue_matmuls:
        env["a"] = torch.randn(size=(size, size), device=tdev)
        env["a"][0, 0].item()

        def queue() -> None:
            for _ in range(queue_matmuls):
                env["b"] = torch.mm(env["a"], env["a"])

        program.append((f"{queue_matmuls} × b = torch.mm(a, a)  ({size}×{size})", queue))
    program += [
        (
            "x = torch.ones((1, 2), device=device)",
            lambda: env.__setitem__("x", torch.ones((1, 2), device=tdev)),
        ),
        (
            "y = torch.ones((1, 2), device=device)",
            lambda: env.__setitem__("y", torch.ones((1, 2), device=tdev)),
        ),
        ("z = x * y + 2", lambda: env.__setitem__("z", env["x"] * env["y"] + 2)),
    ]
    str(torch.ones((1, 2), device=tdev))  # the first print of a tensor pays one-time setup
    origin = clock()
    marks: list[tuple[str, int, int, Any]] = []
    for text, fn in program:
        t0 = clock()
        fn()
        t1 = clock()
        marks.append((text, t1 - t0, t1 - origin, dev.record()))
    print_ns, printed = _timed(clock, lambda: str(env["z"]))
    again_ns, _ = _timed(clock, lambda: str(env["z"]))
    rows = []
    for text, returned, host_end, ev in marks:
        dev.wait(ev)  # already executed: printing z needed it
        rows.append(
            StatementTiming(
                statement=text,
                returned_ns=returned,
                host_end_ns=host_end,
                device_done_ns=dev.executed_at_ns(ev) - origin,
            )
        )
    title = "as in the book" if not queue_matmuls else f"with {queue_matmuls} matmuls issued first"
    return StatementsResult(
        title=title, statements=rows, print_ns=print_ns, print_again_ns=again_ns, printed=printed
    )


def _mlp(tdev: torch.device, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    ).to(tdev)


def run_loop(
    dev: Device,
    tdev: torch.device,
    *,
    synchronized: bool,
    steps: int,
    out: Path,
    batch: int = 128,
    width: int = 256,
    name: str | None = None,
    tensorboard: bool = False,
    profile: Profile | None = None,
    detect_syncs: str = "auto",
) -> LoopResult:
    """(c) one training loop under ``asynctrace.trace``; figures read back from its records.

    ``tensorboard``: the session also writes its scalars to ``<out>/<name>/<time>-<pid>/``;
    ``profile``: deep mode, the profiler traces land in ``<out>/<name>/``; ``detect_syncs``:
    the session's sync detector.
    """
    gen = torch.Generator().manual_seed(1)
    data = [
        (
            torch.randn(batch, 64, generator=gen).to(tdev),
            torch.randint(0, 10, (batch,), generator=gen).to(tdev),
        )
        for _ in range(steps)
    ]
    net = _mlp(tdev, width)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss: torch.Tensor = loss_fn(net(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        return loss.detach()

    train_step(*data[0])  # warm-up outside the session
    if name is None:
        name = "demo-synced" if synchronized else "demo-unsynced"
    total = torch.zeros((), device=tdev)
    losses: list[float] = []
    run_dir = out / name
    # what deep mode writes is found by name afterwards; files already there are not ours
    before = set(run_dir.glob("*.json.gz")) if profile is not None else set()
    session = trace(
        name,
        dir=out,
        device=dev,
        print_summary=False,
        tensorboard=tensorboard,
        profile=profile,
        detect_syncs=detect_syncs,
    )
    with session as s:
        for x, y in s.steps(data):
            loss = train_step(x, y)
            if synchronized:
                losses.append(loss.item())  # the book's advice: sync once per minibatch
            else:
                total += loss
    total.item()
    path = session.records_path
    report = analyze(load_source(path)) if path is not None else None
    return _loop_result(
        name,
        synchronized,
        report,
        tensorboard_dir=session.tensorboard_dir,
        profiler_traces=_new_files(run_dir, "*.pt.trace.json.gz", before),
        annotated_traces=_new_files(run_dir, f"*{ANNOTATED_SUFFIX}", before),
    )


def _loop_result(
    name: str,
    synchronized: bool,
    report: Report | None,
    *,
    tensorboard_dir: Path | None,
    profiler_traces: list[str],
    annotated_traces: list[str],
) -> LoopResult:
    """A loop's figures, from the report of the records its session wrote (None: it wrote
    none)."""
    recs: list[StepRecord] = report.steps if report is not None else []
    later = recs[1:] or recs
    fe = sorted(r.frontend_ns for r in later)
    dv = sorted(r.device_ns for r in later if r.device_ns is not None)
    ra = [r.run_ahead_ns for r in recs if r.run_ahead_ns is not None]
    session = report.source.session if report is not None else None
    return LoopResult(
        name=name,
        synchronized=synchronized,
        records_path=report.source.path if report is not None else None,
        steps=[msgspec.structs.asdict(r) for r in recs],
        median_frontend_ns=_median(fe),
        median_device_ns=_median(dv) if dv else None,
        max_run_ahead_ns=max(ra) if ra else None,
        max_in_flight=max((r.in_flight for r in recs), default=0),
        tensorboard_dir=(
            str(tensorboard_dir)
            if tensorboard_dir is not None and tensorboard_dir.is_dir()
            else None
        ),
        profiler_traces=profiler_traces,
        annotated_traces=annotated_traces,
        sync_detection=session.sync_detection if session is not None else None,
        sync_sites=[
            {"site": site.site, "op": site.op, "count": site.count}
            for site in (report.sync_sites if report is not None else [])
        ],
    )


def _new_files(folder: Path, pattern: str, before: set[Path]) -> list[str]:
    if not folder.is_dir():
        return []
    return [str(p) for p in sorted(folder.glob(pattern)) if p not in before]


def _median(values: list[int]) -> float:
    if not values:
        return 0.0
    n = len(values)
    mid = n // 2
    return float(values[mid]) if n % 2 else (values[mid - 1] + values[mid]) / 2


def _answer(
    dev: Device, m: MatmulResult, st: list[StatementsResult], loops: list[LoopResult]
) -> str:
    """The book's exercise, answered from the measured figures."""
    queued = st[-1]
    first = queued.statements[0]
    ra = [lp.max_run_ahead_ns or 0 for lp in loops]
    inflight = [lp.max_in_flight for lp in loops]
    if not dev.asynchronous:
        share = m.forced_read_wait_ns / max(m.check_returned_ns, 1)
        return (
            "Exercise: on CPU, can you still observe asynchrony in the backend? No. The CPU "
            "backend runs each operator before returning to Python. The ten torch matmuls "
            f"returned after {_s(m.torch.returned_ns)} with the work done; run again, a read "
            f"that forces completion right after waited {_us(m.forced_read_wait_ns)} "
            f"({share:.2%} of the loop's {_s(m.check_returned_ns)}). With matmuls issued before "
            f"z = x * y + 2, that statement itself took {_s(first.returned_ns)}, and printing z "
            f"took {_us(queued.print_ns)}, not the {_s(first.returned_ns)} an asynchronous "
            "backend would make it wait. In both training loops run-ahead was at most "
            f"{_us(max(ra, default=0))} and at most {max(inflight, default=0)} steps were in "
            "flight: device time is frontend time."
        )
    return (
        f"On {dev.name} the backend is asynchronous: the ten torch matmuls returned after "
        f"{_s(m.torch.returned_ns)} but the device finished them {_s(m.torch.done_ns)} after the "
        f"block started; a forcing read right after waited {_us(m.forced_read_wait_ns)}. With "
        f"matmuls queued, printing z waited {_us(queued.print_ns)}. Unsynchronized, the loop ran "
        f"up to {_us(ra[-1] if ra else 0)} ahead with up to {inflight[-1] if inflight else 0} "
        "steps in flight; synchronized once per minibatch it stays close to the device. "
        "(Exercise: on the CPU backend none of this shows: it runs synchronously.)"
    )


def _s(ns: float) -> str:
    return f"{ns / 1e9:.4f} s"


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} µs"


def _opt_us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e3:,.1f}"


def _synced_detector(dev: Device) -> str:
    """The detector of the loop that syncs once per minibatch: on a synchronous backend the
    default one sees nothing (there is no device to wait for), and that loop would record no
    sync at all — the lint shows its ``loss.item()`` with its line, as it would block on a GPU.
    The other loops keep the default, so the lint's cost is in none of their figures."""
    return "auto" if dev.asynchronous else "lint"


def _plain_detector(dev: Device) -> str:
    """The detector of the loops whose host times the demo compares: the default on an
    accelerator (CUDA's hooks), none on a synchronous backend, where the default is a sampled
    lint whose linted steps would weigh on the figures."""
    return "auto" if dev.asynchronous else "off"


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
    loops = [
        run_loop(
            dev,
            tdev,
            synchronized=True,
            steps=steps,
            out=out_dir,
            tensorboard=True,
            detect_syncs=_synced_detector(dev),
        ),
        run_loop(
            dev,
            tdev,
            synchronized=False,
            steps=steps,
            out=out_dir,
            tensorboard=True,
            detect_syncs=_plain_detector(dev),
        ),
    ]
    if console is not None:
        for lp in loops:
            render_loop(lp, console)
    p = DEMO_PROFILE
    profiled = run_loop(
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


def clear_previous(out: Path) -> list[Path]:
    """Remove what an earlier demo wrote in ``out`` (only the demo's own file names), so that
    TensorBoard and the HTML report show this run alone; returns the files removed."""
    patterns = [f"{name}.*.records.jsonl" for name in _LOOP_NAMES]
    for name in _LOOP_NAMES:
        patterns += [
            f"{name}/events.out.tfevents.*",
            f"{name}/*/events.out.tfevents.*",
            f"{name}/*.pt.trace.json.gz",
            f"{name}/*{ANNOTATED_SUFFIX}",
        ]
    patterns += [f"{_PLOTS}/{name}.png" for name in ("timeline", *_LOOP_NAMES[:2])]
    patterns += ["report.html", "demo.summary.json"]
    removed: list[Path] = []
    for pattern in patterns:
        for path in sorted(out.glob(pattern)):
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def write_views(
    out: Path, *, loops: list[LoopResult], profiled: LoopResult | None
) -> tuple[list[Artifact], list[str]]:
    """Plots, the HTML report and (when deep mode did not) the annotated trace, from what the
    loops wrote; returns every artifact with how to view it, and notes on what the pictures
    show for this run's data."""
    from asynctrace.render import plot

    notes: list[str] = []
    # matplotlib is the `plot` extra: without it everything but the pictures is still written
    pictures = plot.available()
    if not pictures:
        notes.append(
            "No plots, and no pictures in the HTML report: matplotlib is not installed "
            "(pip install 'asynctrace[plot]', or pip install matplotlib, then run the demo again)."
        )
    arts = _session_artifacts(out, [*loops, *([profiled] if profiled is not None else [])])
    # each file analysed once: the pictures, the notes and the HTML report draw from it
    runs = [
        (lp, analyze_detail(load_source(lp.records_path)))
        for lp in loops
        if lp.records_path is not None
    ]
    traced: list[Analysis] = []
    if profiled is not None and profiled.profiler_traces:
        analysis, trace_arts = _trace_views(out, profiled, pictures=pictures)
        traced.append(analysis)
        arts += trace_arts
        notes += _trace_notes(analysis.report, pictures=pictures)
    if pictures:
        arts += _records_plots(out, runs)
    notes += _records_notes([(lp, a.report) for lp, a in runs], profiled, pictures=pictures)
    arts.append(_html_report(out, [*traced, *(a for _, a in runs)]))
    return arts, notes


def _session_artifacts(out: Path, loops: list[LoopResult]) -> list[Artifact]:
    """Each session's records, then each one's TensorBoard run."""
    arts = [
        Artifact(
            "records",
            lp.records_path,
            f"session records of {lp.name} (JSON lines, one record per step)",
            f"asynctrace report {lp.records_path}",
        )
        for lp in loops
        if lp.records_path is not None
    ]
    view = (
        f"tensorboard --logdir {out}  (then http://localhost:6006: SCALARS, TEXT, and "
        "ASYNCTRACE, our plugin, which works offline)"
    )
    what = "per-step asynctrace/ scalars and a text summary"
    arts += [
        Artifact("tensorboard", lp.tensorboard_dir, what, view)
        for lp in loops
        if lp.tensorboard_dir
    ]
    return arts


def _trace_views(
    out: Path, profiled: LoopResult, *, pictures: bool
) -> tuple[Analysis, list[Artifact]]:
    """The profiled loop's trace: its analysis (made once), the trace and its annotated copy
    (written here when deep mode did not), and its timeline picture."""
    from asynctrace.capture.profiler import annotated_path
    from asynctrace.export.chrome import annotate_file
    from asynctrace.render import plot

    trace_path = Path(profiled.profiler_traces[0])
    p = DEMO_PROFILE
    arts = [
        Artifact(
            "profiler trace",
            str(trace_path),
            f"torch.profiler trace of {profiled.name}'s steps {p.wait + p.warmup}-"
            f"{p.wait + p.warmup + p.active - 1} (TensorBoard profiler layout)",
            f"tensorboard --logdir {out}  (ASYNCTRACE tab: its step timeline, offline; the "
            "deprecated torch-tb-profiler's PYTORCH_PROFILER tab needs the internet)",
        )
    ]
    analysis = analyze_detail(load_source(trace_path))
    if profiled.annotated_traces:
        annotated = Path(profiled.annotated_traces[0])
    else:
        annotated = annotate_file(trace_path, annotated_path(trace_path), analysis)
    what = "the profiler trace plus the asynctrace overlay process"
    view = "https://ui.perfetto.dev → Open trace file (or chrome://tracing → Load)"
    arts.append(Artifact("annotated trace", str(annotated), what, view))
    if pictures:
        png = plot.save_figure(plot.plot_timeline(analysis), _plots(out) / "timeline.png")
        what = "frontend (host) vs backend (device) timeline of the profiled steps"
        arts.append(Artifact("plot", str(png), what, "any image viewer"))
    return analysis, arts


def _plots(out: Path) -> Path:
    plots = out / _PLOTS
    plots.mkdir(exist_ok=True)
    return plots


def _records_plots(out: Path, runs: list[tuple[LoopResult, Analysis]]) -> list[Artifact]:
    """Each loop's overview picture, with its syncs marked."""
    from asynctrace.render import plot

    arts = []
    for lp, analysis in runs:
        if not analysis.report.steps:
            continue
        fig = plot.overview_figure(analysis)
        _mark_syncs(fig, analysis.report, lp, color=plot.COLORS["sync"])
        png = plot.save_figure(fig, _plots(out) / f"{lp.name}.png")
        what = f"{lp.name}: timeline of 8 steps, per-step bars, run-ahead and in flight"
        arts.append(Artifact("plot", str(png), what, "any image viewer"))
    return arts


def _html_report(out: Path, analyses: list[Analysis]) -> Artifact:
    """One self-contained page of every run analysed (its pictures where matplotlib is)."""
    from asynctrace.render.html import combined_html, write_html

    page = combined_html(analyses, title="asynctrace demo")
    html_path = write_html(out / "report.html", page)
    what = "self-contained HTML report of the profiled trace and both loops' records"
    return Artifact(
        "html", str(html_path), what, f"open {html_path.resolve().as_uri()} in a browser"
    )


def _mark_syncs(fig: Any, report: Report, lp: LoopResult, *, color: str) -> None:
    """Mark each counted sync on the overview's timeline (its first axis, the first 8 steps):
    the plots draw sync *waits*, and the lint (a synchronous backend) measures none, so without
    this the once-per-minibatch loop's picture would look like the loop that never syncs."""
    steps = report.steps
    if not lp.sync_sites or not steps or not fig.axes:
        return
    top = lp.sync_sites[0]
    where = (
        Path(str(top["site"]).rpartition(":")[0]).name + ":" + str(top["site"]).rpartition(":")[2]
    )
    how = "sync lint: would block on an accelerator" if lp.sync_detection == "lint" else "sync"
    ax = fig.axes[0]
    t0 = steps[0].start_ns
    # where inside a step it happened is not recorded: drawn at the step's end, as the plots
    # draw sync waits
    xs = [(st.start_ns + st.frontend_ns - t0) / 1e6 for st in steps[:8] if st.sync_count]
    if not xs:
        return
    # a thick tick across the host lane (host bar: y 0.7-1.3) at each step's end
    marker = ax.vlines(xs, 0.62, 1.38, colors=color, linewidths=3, zorder=5)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend is not None else []
    labels = [t.get_text() for t in legend.get_texts()] if legend is not None else []
    ax.legend(
        handles=[*handles, marker],
        labels=[*labels, f"sync at {where} ({top['op']}; {how})"],
        loc="upper right",
        fontsize=7,
        ncols=3,
    )


def _trace_notes(report: Report, *, pictures: bool = True) -> list[str]:
    """What the trace's pictures show when it has no device activity (a CPU run)."""
    figures = report.trace
    if figures is None or figures.activities.total:
        return []
    syncs = "" if figures.syncs.count else ", sync markers"
    annotated = (
        "timeline.png therefore shows the operators on the host lane and marks the device "
        "lane 'no device activity recorded'; the annotated trace's"
        if pictures
        else "The annotated trace's"
    )
    return [
        "The profiled trace has no device activity: the CPU backend ran every operator on the "
        f"host. {annotated} asynctrace process has only "
        f"the 'steps: queued on host' lane (no device lane, flow arrows{syncs}, queue-depth or "
        "run-ahead counters: there is nothing on a device to draw), and the HTML report's "
        "device columns are 0 or '—'."
    ]


def _records_notes(
    records: list[tuple[LoopResult, Report]],
    profiled: LoopResult | None,
    *,
    pictures: bool = True,
) -> list[str]:
    """What the loops' pictures show on a synchronous backend, and what the profiler cost."""
    notes: list[str] = []
    steps = [st for _, report in records for st in report.steps]
    if (
        pictures
        and steps
        and all(
            st.run_ahead_ns == 0 and st.in_flight == 0 and st.device_ns == st.frontend_ns
            for st in steps
        )
    ):
        notes.append(
            "In both loops' plots the device bar equals the host bar and run-ahead and in flight "
            "are flat at 0: on a synchronous backend the session records device time = frontend "
            "time and nothing ahead or in flight."
        )
    if profiled is not None and records:
        unsynced = records[-1][0]
        p = DEMO_PROFILE
        first, last = p.wait + p.warmup, p.wait + p.warmup + p.active - 1
        prof = sorted(r["frontend_ns"] for r in profiled.steps if first <= int(r["step"]) <= last)
        if prof:
            profiled_ns, plain_ns = _median(prof), unsynced.median_frontend_ns
            # said as measured: on a noisy machine the profiled steps may not be the slower
            cost = (
                "include its overhead"
                if profiled_ns > plain_ns
                else "would include its overhead, though this run's noise hid it"
            )
            notes.append(
                f"The profiled steps (median {_us(profiled_ns)} of host time; "
                f"{_us(plain_ns)} in {unsynced.name}) ran under torch.profiler and {cost}: "
                "deep mode runs as a separate session so that the two loops' figures carry "
                "none of it."
            )
    return notes


#: how each kind of artifact is titled in the closing list, in the order shown
_KIND_TITLES: dict[str, str] = {
    "annotated trace": "Annotated trace (Perfetto, chrome://tracing)",
    "tensorboard": "TensorBoard",
    "profiler trace": "torch.profiler trace",
    "plot": "Plots (PNG)",
    "html": "HTML report",
    "records": "Session records",
    "summary": "Summary",
}


def render_artifacts(result: DemoResult, console: Console) -> None:
    """The closing list: what was written and the command to view each."""
    for note in result.notes:
        console.print()
        # plain text: a note may hold brackets ("asynctrace[plot]") that markup would eat
        console.print(note, highlight=False, markup=False)
    out = Path(result.out_dir)
    console.print()
    console.print(
        f"[bold]Written under {escape(str(out))}/[/], and how to view it:",
        highlight=False,
        soft_wrap=True,
    )
    for kind, title in _KIND_TITLES.items():
        items = [a for a in result.artifacts if a.kind == kind]
        if not items:
            continue
        console.print(f"  [bold]{title}[/]", highlight=False)
        for a in items:
            console.print(
                f"    {_rel(a.path, out)}: {a.what}", highlight=False, soft_wrap=True, markup=False
            )
        views = dict.fromkeys(a.view for a in items)
        for view in views if len(views) == 1 else ():
            console.print(f"    → {view}", highlight=False, soft_wrap=True, markup=False)
    if any(a.kind == "records" for a in result.artifacts):
        console.print(
            f"  every session's per-step summary: asynctrace report {out}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )


def _rel(path: str, out: Path) -> str:
    p = Path(path)
    try:
        rel = str(p.relative_to(out))
    except ValueError:
        rel = path
    return rel + "/" if p.is_dir() else rel


def render_matmuls(m: MatmulResult, console: Console) -> None:
    t = Table(title=f"(a) ten {m.size}×{m.size} matmuls: returned vs done")
    for col in ("", "returned", "done", "forcing read after"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row("numpy", _s(m.numpy.returned_ns), _s(m.numpy.done_ns), "—")
    t.add_row("torch", _s(m.torch.returned_ns), _s(m.torch.done_ns), "")
    t.add_row(
        "torch again, then b[0, 0].item()",
        _s(m.check_returned_ns),
        _s(m.check_returned_ns + m.forced_read_wait_ns),
        f"waited {_us(m.forced_read_wait_ns)} (again: {_us(m.forced_read_again_ns)})",
    )
    console.print(t)
    console.print(m.numpy.line())
    console.print(m.torch.line())


def render_statements(s: StatementsResult, console: Console) -> None:
    t = Table(title=f"(b) z = x * y + 2, {s.title} (µs since the first statement started)")
    for col in ("statement", "took (host)", "returned at", "device done at"):
        t.add_column(col, justify="left" if col == "statement" else "right")
    for r in s.statements:
        t.add_row(
            r.statement, _opt_us(r.returned_ns), _opt_us(r.host_end_ns), _opt_us(r.device_done_ns)
        )
    t.add_row("print(z)", _opt_us(s.print_ns), "", f"(printing again: {_opt_us(s.print_again_ns)})")
    console.print(t)


def render_loop(lp: LoopResult, console: Console, *, max_rows: int = 12) -> None:
    how = (
        "synchronized once per minibatch (loss.item())" if lp.synchronized else "never synchronized"
    )
    t = Table(title=f"(c) training loop, {how} — {lp.name}")
    for col in ("step", "frontend µs", "device µs", "run-ahead µs", "in flight", "mem alloc MiB"):
        t.add_column(col, justify="right")
    rows: list[dict[str, Any] | None] = list(lp.steps)
    if len(rows) > max_rows:
        rows = [*rows[: max_rows // 2], None, *rows[-max_rows // 2 :]]
    shown = rows
    for r in shown:
        if r is None:
            t.add_row("…", "", "", "", "", "")
            continue
        mem = r.get("mem_allocated_bytes")
        t.add_row(
            str(r["step"]),
            _opt_us(r["frontend_ns"]),
            _opt_us(r.get("device_ns")),
            _opt_us(r.get("run_ahead_ns")),
            str(r.get("in_flight", 0)),
            "n/a" if mem is None else f"{mem / 2**20:,.1f}",
        )
    console.print(t)
    console.print(
        f"median frontend {_us(lp.median_frontend_ns)}, median device "
        f"{'n/a' if lp.median_device_ns is None else _us(lp.median_device_ns)}, "
        f"max run-ahead {'n/a' if lp.max_run_ahead_ns is None else _us(lp.max_run_ahead_ns)}, "
        f"max in flight {lp.max_in_flight}; records: {lp.records_path}",
        markup=False,
    )
    steps = max(len(lp.steps), 1)
    for site in lp.sync_sites[:3]:
        console.print(
            f"sync at {site['site']}: {site['op']} ×{site['count']} "
            f"({site['count'] / steps:.2f} per step)",
            markup=False,
        )
    if lp.sync_detection == "lint":
        console.print(
            "(syncs found by the sync lint: on this synchronous backend nothing waits, so the "
            "lint flags what would block on an accelerator; it costs ~20 µs per op, so this "
            "loop's host times carry that cost)",
            markup=False,
        )


def render_demo(result: DemoResult, console: Console) -> None:
    """Print every table of a finished demo."""
    render_matmuls(result.matmuls, console)
    for s in result.statements:
        render_statements(s, console)
    for lp in result.loops:
        render_loop(lp, console)
    console.print(result.answer, markup=False)
    render_artifacts(result, console)
