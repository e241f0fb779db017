"""Running a user's script unchanged, as ``python script.py args…`` would: shared by commands.

:func:`run_script` runs the file with :mod:`runpy` as ``__main__``, with ``sys.argv`` set to the
script and its arguments and the script's folder first on ``sys.path``, restores both after,
and turns the way the script ended into the exit status Python itself would give: ``sys.exit``'s
code, 1 (with the traceback on stderr) for an uncaught exception, 0 otherwise.
``KeyboardInterrupt`` and other ``BaseException``\\ s are not the script's result and propagate.

:func:`add_script_argument` is the ``script`` positional of the commands that run one: it keeps
every word after the script as typed, ``--`` included, for the command to split.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from asynctrace.errors import AsyncTraceError

__all__ = [
    "add_script_argument",
    "as_main",
    "exit_code",
    "resolve_script",
    "run_script",
    "script_arguments",
]


class _ScriptAndWords(argparse.Action):
    """Stores ``script`` and, as ``args``, every word after it exactly as typed.

    ``nargs=REMAINDER`` after a plain ``script`` positional loses a ``--`` typed right after the
    script (the positional swallows it), so ``check x.py -- --json`` read like
    ``check x.py --json``. ``nargs=PARSER`` takes the script and all that follows, ``--``
    included; only a ``--`` before the script may come along (older Pythons keep it), and that
    one ends the command's options, not the script's words.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        words = [values] if isinstance(values, str) else list(values or ())
        if words[:1] == ["--"]:
            words = words[1:]
        namespace.script = words[0]
        namespace.args = words[1:]


def add_script_argument(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``script [args…]``: ``args.script``, and ``args.args`` the words after it as typed."""
    parser.add_argument("script", nargs=argparse.PARSER, action=_ScriptAndWords, help=help)


def script_arguments(words: Sequence[str]) -> list[str]:
    """The script's ``sys.argv[1:]`` from the words typed after it: a ``--`` right after the
    script separates it from its arguments and is dropped; everything else goes as typed."""
    return list(words[1:] if words[:1] == ["--"] else words)


def resolve_script(path: str | Path) -> Path:
    """The script's absolute path; :class:`AsyncTraceError` if there is no such file."""
    p = Path(path)
    if not p.is_file():
        raise AsyncTraceError(f"{p}: no such script (give the path of a Python file)")
    return p.resolve()


@contextlib.contextmanager
def as_main(script: Path, argv: Sequence[str]) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python script.py argv…`` sets them; restored after,
    with ``sys.stdout`` and ``sys.stderr`` where the script replaced them."""
    saved_argv = sys.argv
    saved_path = list(sys.path)
    saved_streams = (sys.stdout, sys.stderr)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.parent))
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        # what is printed after the script (the summary) goes where it would have gone; where
        # the script closed that stream, nowhere, as Python prints nothing more to it either
        sys.stdout, sys.stderr = (
            s if s is None or not s.closed else io.StringIO() for s in saved_streams
        )


def exit_code(e: SystemExit) -> int:
    """The process status ``sys.exit(code)`` gives: None → 0, an int as is, else print it → 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_script(
    script: Path, argv: Sequence[str], *, around: AbstractContextManager[Any] | None = None
) -> int:
    """Run ``script`` as ``__main__`` with ``argv``; return the status Python would exit with.

    ``around`` (a capture session, say) is entered just around the script: an exception the
    script raises passes through it, so it can record the failure, while ``sys.exit`` (an
    ordinary end, whatever its code) is caught inside it.
    """
    status = 0
    started = False
    with as_main(script, argv):
        try:
            with around if around is not None else contextlib.nullcontext():
                started = True
                try:
                    runpy.run_path(str(script), run_name="__main__")
                except SystemExit as e:
                    status = exit_code(e)
        except Exception:
            if not started:
                # entering ``around`` failed (a CUDA-only option on CPU): the script never ran,
                # so this is no traceback of the script's but our error, said in one line
                raise
            traceback.print_exc()
            status = 1
    return status
