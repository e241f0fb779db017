"""``asynctrace demo``: the book's asynchronous-computation experiments, measured."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="torch device to run on, e.g. cuda, cuda:1, cpu (default: cuda if available)",
    )
    parser.add_argument(
        "--out",
        default="traces/demo",
        help="folder for the session records and demo.summary.json (default: traces/demo)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help="steps per training loop (default: 20)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from asynctrace.demo import run_demo
    from asynctrace.errors import CaptureError

    if args.steps < 2:
        raise CaptureError(f"--steps {args.steps}: use at least 2 steps per loop")
    run_demo(device=args.device, out=args.out, steps=args.steps, console=Console())
    return 0
