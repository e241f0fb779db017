"""``asynctrace demo``: the book's asynchronous-computation experiments, measured, and every
view the project has of them (records, TensorBoard, profiler and annotated traces, plots, HTML).
"""

from __future__ import annotations

import argparse

__all__ = ["QUICK_SIZE", "QUICK_STEPS", "add_arguments", "run"]

#: ``--quick``: matrices and loops small enough for a test, every artifact still written
QUICK_SIZE = 128
QUICK_STEPS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="torch device to run on, e.g. cuda, cuda:1, cpu (default: cuda if available)",
    )
    parser.add_argument(
        "--out",
        default="traces/demo",
        help="folder for everything the demo writes (default: traces/demo); the demo's own "
        "earlier outputs there are replaced",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps per training loop (default: 20, or 4 with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_SIZE}×{QUICK_SIZE} matmuls and {QUICK_STEPS} steps per loop: a few "
        "seconds, the same outputs",
    )


def run(args: argparse.Namespace) -> int:
    from asynctrace._commands._demo_run import run_demo
    from asynctrace.capture.devices import get_device
    from asynctrace.errors import CaptureError
    from asynctrace.render.output import output_folder, stdout_console, utf8

    steps = args.steps if args.steps is not None else (QUICK_STEPS if args.quick else 20)
    if steps < 2:
        raise CaptureError(f"--steps {steps}: use at least 2 steps per loop")
    if utf8(args.out) != args.out:
        raise CaptureError(
            f"--out {args.out!r}: give a folder name in UTF-8 (TensorBoard needs it)"
        )
    # checked here so that a wrong one is said as the option typed (and before --out is
    # created); run_demo resolves the spec again, as its tensors need the spec itself
    get_device(args.device, option="--device")
    output_folder(args.out, option="--out")
    run_demo(
        device=args.device,
        out=args.out,
        steps=steps,
        size=QUICK_SIZE if args.quick else 1000,
        console=stdout_console(),
    )
    return 0
