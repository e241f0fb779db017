"""The ``asynctrace`` command line: a thin layer over the library.

Each subcommand lives in ``asynctrace._commands.<name>`` with two functions,
``add_arguments(parser)`` and ``run(args) -> int``, imported only when that subcommand runs so
that ``asynctrace report`` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from asynctrace import __version__
from asynctrace._frames import register_launcher
from asynctrace.errors import AsyncTraceError
from asynctrace.render.printable import printable

__all__ = ["console", "main"]

# the command line launches a user's script: a sync's stack stops here
register_launcher(__file__)

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("asynctrace._commands.demo", "run the book's asynchronous-computation experiments"),
    "report": ("asynctrace._commands.report", "analyse traces or session records (text or JSON)"),
    "check": ("asynctrace._commands.check", "run a script and report its hidden synchronizations"),
    "run": ("asynctrace._commands.run", "run a training script in a session and print its summary"),
    "capture": ("asynctrace._commands.capture", "open a deep-mode window on a running session"),
    "annotate": ("asynctrace._commands.annotate", "write a trace plus an asynctrace overlay"),
    "plot": ("asynctrace._commands.plot", "draw a trace or session records (PNG or SVG)"),
    "compare": ("asynctrace._commands.compare", "compare two reports or sessions (before/after)"),
    "export": (
        "asynctrace._commands.export",
        "write every rank's tables as Parquet (DuckDB, Polars)",
    ),
}


#: Commands that only read and analyse files: they run no user code, and numpy's BLAS has nothing
#: to do for them (their arrays are one-dimensional), so its worker threads are not started.
#: Started, OpenBLAS's threads spin on the second core while the loader works and cost a short
#: ``asynctrace report`` 20-50 ms on 2 cores (docs/performance.md).
ANALYSIS_ONLY = frozenset({"report", "annotate", "plot", "compare", "export"})

#: the commands that run torch code (capture): where torch is absent they say so in one line
NEEDS_TORCH = frozenset({"demo", "check", "run"})


def _help_width() -> int:
    """What argparse's formatter computes through ``shutil.get_terminal_size`` (COLUMNS, else
    the terminal, else 80; minus 2), without importing shutil: argparse builds a formatter for
    every ``add_argument``, and shutil brings bz2 and lzma along (~2 ms of each run)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=_help_width())


class _Parser(argparse.ArgumentParser):
    """argparse, saying a usage error in one line like every other error, and where to look."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (and its options added): importing
    every command module would cost the one that runs their dependencies (rich, msgspec...)."""
    parser = _Parser(
        prog="asynctrace",
        formatter_class=_formatter,
        description="Make PyTorch's asynchrony visible: capture, analyse and show it.",
    )
    parser.add_argument("--version", action="version", version=f"asynctrace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=_formatter)
        if name != command:
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        mod.add_arguments(p)
        p.set_defaults(_module=mod, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None, *, owns_process: bool = False) -> int:
    """Entry point of the ``asynctrace`` console script; returns the exit status.

    ``owns_process``: the process ends with this call (the console script), so a script that
    ``run`` or ``check`` ran may leave its ``__main__`` in place, as ``python`` does.
    """
    if argv is None:
        argv = sys.argv[1:]
    # the top-level options take no value, so the first other word is the command
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in ANALYSIS_ONLY and "numpy" not in sys.modules:
        # our own process (the console script): set before numpy loads, never overriding a
        # user's choice; in-process callers that already imported numpy are left alone
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    prog = f"asynctrace {command}" if command else "asynctrace"
    try:
        if command in NEEDS_TORCH:
            from asynctrace._extras import require_torch

            require_torch()
        # building the parser imports the command's module: Ctrl-C may land there too
        parser = _parser(command)
        args, extra = parser.parse_known_args(argv)
        if extra:
            # said by the command's parser: "asynctrace plot: ... (see asynctrace plot --help)"
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command is None or not hasattr(args, "_module"):
            parser.print_help()
            return 2
        args.owns_process = owns_process
        status: int = args._module.run(args)
    except AsyncTraceError as e:
        # one line, whatever the message quotes (a file name or a schema with newlines), and
        # no terminal escape sequence that a name in it may hold
        message = printable(" ".join(str(e).splitlines()))
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader has read what it wanted (`| head -1`): not a failure. What is still
        # buffered goes nowhere, so that the interpreter's last flush cannot fail either.
        _stdout_to_devnull()
        return 0
    except OSError as e:
        # a path the file system refuses where no check caught it first (a name too long...)
        where = "" if e.filename is None else f"{os.fsdecode(e.filename)}: "
        print(printable(f"{prog}: error: {where}{e.strerror or e}"), file=sys.stderr)
        return 2
    return status


def _stdout_to_devnull() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass  # no stdout of a file descriptor (a caller's StringIO): nothing to flush to


def console() -> NoReturn:
    """The ``asynctrace`` console script and ``python -m asynctrace``: :func:`main`, then exit.

    Analysis-only commands (:data:`ANALYSIS_ONLY`) leave without the interpreter's teardown:
    once their output is flushed nothing is left to do, and freeing numpy's and our modules one
    by one costs ~15 ms of a ~0.12 s ``asynctrace report`` (docs/performance.md). They run no user
    code, start no threads that outlive them, and close every file they write. Other commands run
    the user's code, whose atexit handlers, threads and buffered files need a normal exit.
    """
    argv = sys.argv[1:]
    if sys.stdout is not None and sys.stdout.errors == "strict":
        # a file name that is not UTF-8 prints as its bytes, as Python does in the C locale,
        # rather than fail the whole output where the locale is strict (en_US.UTF-8)
        sys.stdout.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
    command = next((a for a in argv if not a.startswith("-")), None)
    # this process ends with the command: a script that `run` or `check` ran keeps its __main__
    # and sys.argv for what runs after its last line (atexit handlers, its threads)
    status = main(argv, owns_process=True)
    if command in ANALYSIS_ONLY:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass  # a closed pipe (`| head`): what could be written was written
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    console()
