"""``asynctrace run script.py [args…]``: run any training script unchanged inside a session.

``asynctrace run -m pkg.train [args…]`` runs a module instead, as ``python -m`` would.

The script runs as ``__main__`` (``sys.argv`` = the script and its arguments, its folder first
on ``sys.path``) inside ``asynctrace.trace(optimizer_steps=True)``: each ``optimizer.step()`` of
any optimizer ends a step. When the script ends the session's summary is printed (also when the
script failed), and the command exits with the script's own status.

Options go before the script; everything after it belongs to the script, unchanged, but for a
``--`` right after the script, which is dropped (``run x.py -- -- a`` gives the script ``-- a``),
as with ``check``.

* ``--nsys-capture A:B`` calls ``cudaProfilerStart()`` when step A starts and
  ``cudaProfilerStop()`` when step B starts, for ``nsys profile -c cudaProfilerApi``.
* ``--gather-ranks``: under torch.distributed, gather every rank's recent steps to rank 0 at the
  end and print the per-rank table (slowest rank and skew per step). Every rank must reach the
  end of its script, or its ``torch.distributed.destroy_process_group()``: the gather runs
  there, before the group is gone (the steps after it are not in the table).

The command's status is the script's whatever happens while the session ends: the session's
end runs with Python-level signal handlers deferred (torch's DataLoader raises from its
``SIGCHLD`` handler when a worker dies, and that must not cut the records file in two), and an
error of the session's end is said in one line, never instead of the script's own. A process
the script forked that returns from it rather than calling ``os._exit`` (as a child of plain
``python`` would) ends the session's copy it inherited without touching it and prints nothing:
the summary and records are the parent's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from asynctrace._commands._script import (
    add_script_argument,
    resolve_target,
    run_script,
    script_arguments,
    stdout_to_stderr,
)
from asynctrace.capture.signals import deferred_signals, resend
from asynctrace.errors import AsyncTraceError
from asynctrace.render.output import json_text, output_folder, utf8

if TYPE_CHECKING:
    from asynctrace.tracing import Session

__all__ = ["add_arguments", "parse_step_range", "run"]


def parse_step_range(text: str) -> range:
    """``"10:20"`` → ``range(10, 20)`` (steps 10 to 19); ``"5"`` → ``range(5, 6)``."""
    start_s, sep, stop_s = text.partition(":")
    try:
        start = int(start_s)
        stop = int(stop_s) if sep else start + 1
    except ValueError:
        raise AsyncTraceError(
            f"--nsys-capture {text!r}: give steps as START:STOP, e.g. 10:20 for steps 10 to 19"
        ) from None
    if start < 0 or stop <= start:
        raise AsyncTraceError(
            f"--nsys-capture {text!r}: need 0 <= START < STOP (steps count from 0)"
        )
    return range(start, stop)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None, help="session name (default: the script's name)")
    parser.add_argument(
        "--dir", default="traces", help="where the session records go (default: traces)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="device to time, e.g. cuda:1 (default: cuda if any, else cpu)",
    )
    parser.add_argument(
        "--detect",
        choices=("auto", "cuda", "lint", "off"),
        default="auto",
        help="sync detection mode (default: auto)",
    )
    parser.add_argument("--no-nvtx", action="store_true", help="no NVTX range per step")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as JSON on stdout (the script's own prints go to stderr)",
    )
    parser.add_argument(
        "--nsys-capture",
        metavar="START:STOP",
        type=parse_step_range,
        default=None,
        help="call cudaProfilerStart/Stop around steps START..STOP-1 "
        "(for nsys profile -c cudaProfilerApi)",
    )
    parser.add_argument(
        "--gather-ranks",
        action="store_true",
        help="under torch.distributed: print a per-rank step table on rank 0 at the end",
    )
    add_script_argument(
        parser,
        help="the Python script to run, then its arguments, unchanged but for a -- right after "
        "the script, which is dropped",
    )


class _Ending:
    """Enters ``around`` (the session) for the script; its end never replaces the script's.

    The end runs with signal handlers deferred but SIGINT's (a Ctrl-C still interrupts the wait
    for the device; the session keeps every step's host figures then), so a handler raising
    (torch's SIGCHLD one for a dead DataLoader worker) runs after the records are finished. An
    ``Exception`` out of the end is kept in :attr:`error`, not raised: the script's own
    exception, if any, goes on to be reported, and the status stays the script's. In a process
    the script forked (``os.fork()`` returning normally in the child) nothing is ended: the
    session is the parent's (an at-fork hook already forgot the child's copy)."""

    def __init__(self, around: Any) -> None:
        self._around = around
        self._pid = os.getpid()
        #: what the session's end raised (after the script), if anything
        self.error: Exception | None = None
        #: what a signal handler deferred past the session's end raised, if anything
        self.signal_error: Exception | None = None

    @property
    def forked(self) -> bool:
        """Whether this is a child the script forked, not the process that started the run."""
        return os.getpid() != self._pid

    def __enter__(self) -> Any:
        return self._around.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.forked:
            return
        # KeyboardInterrupt and SystemExit go on (reported as the script's interrupt)
        try:
            self._end(exc_type, exc, tb)
        except Exception as e:
            # raised by a deferred handler, run once the session had ended, or by a handler
            # before its deferral took hold (the second worker's SIGCHLD right as the script
            # ended): then the session has not ended, and ends now
            self.signal_error = e
            if getattr(self._around, "active", False):
                with contextlib.suppress(Exception):
                    self._end(exc_type, exc, tb)

    def _end(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with deferred_signals(keep=(signal.SIGINT,)):
            try:
                self._around.__exit__(exc_type, exc, tb)
            except Exception as e:
                self.error = e


def _say_unclean_end(around: _Ending) -> None:
    """On stderr: the session's end failed, or a signal handler raised while it ended."""
    if around.error is not None:
        print(
            "asynctrace run: warning: the session did not end cleanly: " + _one_line(around.error),
            file=sys.stderr,
        )
    if around.signal_error is not None:
        print(
            "asynctrace run: note: a signal handler raised while the session ended (run once "
            f"the records were written): {_one_line(around.signal_error)}",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    from asynctrace.capture.devices import get_device
    from asynctrace.render.text import print_summary
    from asynctrace.tracing import trace

    script = resolve_target(args)
    # resolved here so that a wrong one is said as the option typed, not as trace(device=...)
    device = get_device(args.device, option="--device")
    # absolute: a script that changes its working folder (Hydra does) must not move the records
    folder = output_folder(args.dir, option="--dir").absolute()
    script_args = script_arguments(args.args)
    session = trace(
        utf8(args.name or script.stem),  # a name that is not UTF-8 cannot go into the records
        dir=folder,
        device=device,
        nvtx=not args.no_nvtx,
        detect_syncs=args.detect,
        optimizer_steps=True,
        nsys_capture=args.nsys_capture,
        gather_ranks=args.gather_ranks,
        # printed below, also when the script fails (the session prints only on success)
        print_summary=False,
    )
    # a SIGTERM/SIGHUP ends the session; the signal is sent again below, after the summary
    session.resend_signals = False
    around = _Ending(session)
    # with --json, stdout carries only the result
    out = stdout_to_stderr() if args.json else contextlib.nullcontext()
    with out:
        status = run_script(
            script, script_args, around=around, keep_main=getattr(args, "owns_process", False)
        )
    if around.forked:
        # a child the script forked that returned from it: the summary, records and ranks
        # are the parent's, which goes on and says them once
        return status
    _say_unclean_end(around)
    try:
        report = session.summary()
    except Exception:
        # the end failed before the report was built (said above, once), or building it fails
        # again: the script's outcome stands
        print(
            "asynctrace run: warning: no summary: the session's end failed before its report "
            "was built",
            file=sys.stderr,
        )
        _resend_stop(session)
        if status and not args.json:
            print(f"the script exited with status {status}", file=sys.stderr)
        return status
    if session.records_path is not None:
        # said as --dir was given, from where the command was typed
        records_path = str(Path(args.dir) / session.records_path.name)
        source = msgspec.structs.replace(report.source, path=records_path)
        report = msgspec.structs.replace(report, source=source)
    sys.stdout.flush()
    if args.json:
        # the report's JSON form, as `asynctrace report --json` prints it
        print(json_text(report, indent=None))
    else:
        # not "use asynctrace.trace() in the script": under run that is a second session,
        # and sessions do not nest (the script fails with a CaptureError)
        print_summary(
            report,
            no_steps_hint=(
                "no optimizer.step() ended a step, and asynctrace run ends steps only there. In "
                "another loop, call asynctrace.current_session().step() after each iteration "
                "(it is None under plain python); a script with its own asynctrace.trace() runs "
                "with plain python (sessions do not nest)"
            ),
        )
    if args.gather_ranks:
        _print_rank_table(session)
    _resend_stop(session)
    if status and not args.json:
        print(f"the script exited with status {status}", file=sys.stderr)
    return status


def _resend_stop(session: Session) -> None:
    """The job was stopped (SLURM, Kubernetes, torchrun send SIGTERM): it dies of the signal,
    as it would have without us, once its records and summary are out."""
    signum = session.stop_signal()
    if signum is not None:
        print(
            f"asynctrace run: the script was stopped by {signal.Signals(signum).name}",
            file=sys.stderr,
        )
        resend(signum)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _print_rank_table(session: Session) -> None:
    from asynctrace.capture import distributed as _distributed
    from asynctrace.render.ranks import format_rank_table

    table = session.rank_table
    if table is not None:
        print(format_rank_table(table))
    elif not session.ranks_gathered and not _distributed.is_distributed():
        print(
            "note: --gather-ranks: no initialized torch.distributed process group of more than "
            "one rank at the end of the script, nor one destroyed through "
            "torch.distributed.destroy_process_group() during it",
            file=sys.stderr,
        )
