"""Running a user's script unchanged, as ``python script.py args…`` would: shared by commands.

:func:`run_script` runs the file with :mod:`runpy` as ``__main__``, with ``sys.argv`` set to the
script and its arguments and the script's folder first on ``sys.path``, restores both after,
and turns the way the script ended into the exit status Python itself would give: ``sys.exit``'s
code, 1 (with the traceback on stderr) for an uncaught exception, 0 otherwise.
``KeyboardInterrupt`` and other ``BaseException``\\ s are not the script's result and propagate.
"""

from __future__ import annotations

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

__all__ = ["as_main", "exit_code", "resolve_script", "run_script"]


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
