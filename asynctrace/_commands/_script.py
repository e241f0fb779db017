"""Running a user's script unchanged, as ``python script.py args…`` would: shared by commands.

:func:`resolve_script` reads the script, :func:`run_script` runs it as ``__main__`` with what
``python script.py args…`` gives it: ``sys.argv`` (the script as typed, then its arguments),
``__file__`` (absolute, links kept), ``sys.path[0]`` (the folder of the file the links lead to),
a ``__main__`` module in ``sys.modules`` (pickle, multiprocessing's spawn and ``dataclasses``
look classes up there). Its status is the one Python would exit with: ``sys.exit``'s code as
the process would see it, 1 for an uncaught exception and 130 for ``KeyboardInterrupt``, each
reported through ``sys.excepthook`` (the script's own, where it set one) with the script's frames
only. A folder or zip with a ``__main__.py`` runs too.

:func:`resolve_module` and :class:`Module` do the same for ``-m module``, as ``python -m module
args…`` would: ``sys.argv[0]`` the module's file, ``sys.path[0]`` the current folder,
``__spec__`` set, a package run through its ``__main__`` submodule.

:func:`stdout_to_stderr` sends everything written to stdout during the script, subprocesses and
C code included, to stderr (``--json``).

:func:`add_script_argument` is the ``script`` positional of the commands that run one: it keeps
every word after the script as typed, ``--`` included, for the command to split.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import importlib.util
import io
import os
import pkgutil
import runpy
import stat
import struct
import sys
import traceback
import types
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, SourceFileLoader
from pathlib import Path
from types import TracebackType
from typing import Any

from asynctrace.capture.signals import TerminatedBySignal
from asynctrace.errors import AsyncTraceError

__all__ = [
    "Module",
    "Script",
    "add_script_argument",
    "as_main",
    "exit_code",
    "resolve_module",
    "resolve_script",
    "resolve_target",
    "run_script",
    "script_arguments",
    "stdout_to_stderr",
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
        if self.dest == "script" and getattr(namespace, "module", None) is not None:
            # argparse ends an option's words at a ``--``, so ``-m pkg -- --json`` reaches here
            # with ``--json``: the module's still, after the ``--`` it typed
            namespace.args = [*namespace.args, "--", *words]
            return
        setattr(namespace, self.dest, words[0])
        namespace.args = words[1:]


def add_script_argument(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``script [args…]`` or ``-m module [args…]``: ``args.script`` or ``args.module``, and
    ``args.args`` the words after it as typed.

    Exclusive by construction: whichever comes first takes every word after it, so a ``-m``
    after the script is the script's, and a path after ``-m NAME`` the module's (as with
    ``python``). Neither given is said by :func:`resolve_target`."""
    parser.add_argument(
        "-m",
        dest="module",
        metavar="MODULE",
        nargs=argparse.PARSER,
        action=_ScriptAndWords,
        default=None,
        help="run a module as python -m does, then its arguments (instead of a script)",
    )
    script = parser.add_argument(
        "script", nargs=argparse.PARSER, action=_ScriptAndWords, default=None, help=help
    )
    # argparse cannot make a positional optional otherwise; -m stands in for it
    script.required = False
    parser.set_defaults(args=[])


def script_arguments(words: Sequence[str]) -> list[str]:
    """The script's ``sys.argv[1:]`` from the words typed after it: a ``--`` right after the
    script separates it from its arguments and is dropped; everything else goes as typed."""
    return list(words[1:] if words[:1] == ["--"] else words)


@dataclass(frozen=True)
class Script:
    """A script to run, named as Python names it."""

    #: as typed: the script's ``sys.argv[0]``
    typed: str
    #: absolute but not resolved, as Python 3.9+ makes ``__file__``: a script reached through a
    #: link finds what lies beside the link
    file: str
    #: the file's bytes; None for a folder or zip, which runpy runs from its ``__main__.py``
    source: bytes | None

    @property
    def stem(self) -> str:
        """The default session name: ``train`` for ``train.py``, ``app`` for ``app/``."""
        return Path(self.typed).stem or Path(self.file).stem

    @property
    def folder(self) -> str:
        """``sys.path[0]``: for a file, the folder of the file its links lead to (Python reads
        links); a folder or zip is put there by runpy itself."""
        return os.path.dirname(os.path.realpath(self.file))


@dataclass(frozen=True)
class Module(Script):
    """A module to run as ``python -m`` runs it; ``typed`` and ``file`` are its file (what
    Python makes ``sys.argv[0]``), ``source`` None."""

    #: the module's name as typed
    name: str
    #: ``sys.path[0]``: the current folder when the command started, as Python puts it there
    path0: str

    @property
    def stem(self) -> str:
        """``train`` for ``pkg.train``; for a package, its own name (``pkg`` runs
        ``pkg.__main__``)."""
        return self.name.rpartition(".")[2]

    @property
    def folder(self) -> str:
        return self.path0


def _find_without_running(name: str) -> ModuleSpec | None:
    """``name``'s spec, found as the import system finds it but without running any package's
    ``__init__``: those run once, inside the session, as under ``python -m``."""
    spec: ModuleSpec | None = None
    search: Sequence[str] | None = None
    parts = name.split(".")
    # A namespace package's path is recomputed from its parent module in sys.modules, so
    # finding ``ns1.ns2`` needs a module ``ns1`` there (KeyError otherwise). Namespace packages
    # run no code when imported: a bare module from the spec stands in while searching.
    stand_ins: list[str] = []
    try:
        for i in range(len(parts)):
            full = ".".join(parts[: i + 1])
            loaded = sys.modules.get(full)
            if loaded is not None:
                spec = getattr(loaded, "__spec__", None)
                found_path = getattr(loaded, "__path__", None)
            else:
                spec = None
                for finder in sys.meta_path:
                    find = getattr(finder, "find_spec", None)
                    if find is not None and (spec := find(full, search)) is not None:
                        break
                found_path = None if spec is None else spec.submodule_search_locations
            if spec is None or (found_path is None and i < len(parts) - 1):
                return None
            if loaded is None and found_path is not None and spec.origin is None:
                sys.modules[full] = importlib.util.module_from_spec(spec)
                stand_ins.append(full)
            search = found_path
    finally:
        for full in stand_ins:
            sys.modules.pop(full, None)
    return spec


def resolve_module(name: str) -> Module:
    """The module ``name``, found from the current folder and ``sys.path`` as ``python -m``
    finds it: :class:`AsyncTraceError` if there is none (before any session starts)."""
    if not name or name.startswith(".") or "" in name.split("."):
        raise AsyncTraceError(f"-m {name!r}: give a module's full name (no relative names)")
    path0 = os.getcwd()
    saved_path = list(sys.path)
    sys.path.insert(0, path0)
    try:
        spec = _find_without_running(name)
        if spec is not None and spec.submodule_search_locations is not None:
            main_spec = _find_without_running(f"{name}.__main__")
            if main_spec is None:
                raise AsyncTraceError(
                    f"-m {name}: a package without a __main__ module (give a module to run)"
                )
            spec = main_spec
    finally:
        sys.path[:] = saved_path
    if spec is None:
        raise AsyncTraceError(
            f"-m {name}: no such module (none importable from {path0} or sys.path)"
        )
    file = spec.origin if spec.origin is not None else name
    return Module(typed=file, file=file, source=None, name=name, path0=path0)


def resolve_target(args: argparse.Namespace) -> Script:
    """What :func:`add_script_argument` was given: ``-m`` module or script, resolved."""
    if args.module is not None:
        return resolve_module(args.module)
    if args.script is not None:
        return resolve_script(args.script)
    parser = getattr(args, "_parser", None)
    if isinstance(parser, argparse.ArgumentParser):
        parser.error("give a script to run, or -m MODULE")
    raise AsyncTraceError("give a script to run, or -m MODULE")


def resolve_script(path: str | os.PathLike[str]) -> Script:
    """The script at ``path``, read now: :class:`AsyncTraceError` if there is none,
    :class:`OSError` if it cannot be read (both before any session starts)."""
    typed = os.fspath(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(typed).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        raise AsyncTraceError(f"{typed}: no such script (give the path of a Python file)") from None
    file = typed if os.path.isabs(typed) else os.path.join(os.getcwd(), typed)
    if is_dir and not os.path.exists(os.path.join(file, "__main__.py")):
        raise AsyncTraceError(
            f"{typed}: a folder without a __main__.py (give the path of a Python file)"
        )
    if is_dir or pkgutil.get_importer(file) is not None:
        return Script(typed=typed, file=file, source=None)
    with io.open_code(file) as f:
        return Script(typed=typed, file=file, source=f.read())


@contextlib.contextmanager
def as_main(script: Script, argv: Sequence[str], *, keep_main: bool = False) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python script.py argv…`` sets them; restored after,
    with ``sys.modules["__main__"]``, ``sys.excepthook``, and ``sys.stdout`` and ``sys.stderr``
    where the script replaced them.

    ``keep_main``: where the process ends with the command (the console script), the script's
    ``__main__`` and ``sys.argv`` stay in place after it, as under ``python``, for what runs
    after its last line: its atexit handlers and the threads it left running, which pickle its
    classes by their ``__main__`` name (a checkpoint saved in the background, say)."""
    saved_argv = sys.argv
    saved_path = list(sys.path)
    saved_main = sys.modules.get("__main__")
    saved_modules = set(sys.modules)
    saved_streams = (sys.stdout, sys.stderr)
    saved_hook = sys.excepthook
    sys.argv = [script.typed, *argv]
    if script.source is not None or isinstance(script, Module):
        sys.path.insert(0, script.folder)
    try:
        yield
    finally:
        # the script's folder goes even so: the summary's imports must not find its modules;
        # its excepthook has reported what it left uncaught, and is not for our errors
        sys.path[:] = saved_path
        sys.excepthook = saved_hook
        if not keep_main:
            sys.argv = saved_argv
            if saved_main is not None:
                sys.modules["__main__"] = saved_main
            if isinstance(script, Module):
                # the package was imported from the current folder: the caller's own imports,
                # and a later run of edited code, must not find this one
                top = script.name.partition(".")[0]
                for name in set(sys.modules) - saved_modules:
                    if name == top or name.startswith(f"{top}."):
                        del sys.modules[name]
        # what is printed after the script (the summary) goes where it would have gone; where
        # the script closed that stream, nowhere, as Python prints nothing more to it either
        sys.stdout, sys.stderr = (
            s if s is None or not s.closed else io.StringIO() for s in saved_streams
        )


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout meanwhile goes to stderr: ``print``, ``sys.__stdout__``,
    and file descriptor 1 itself, so that subprocesses, DataLoader workers and C++ logs (NCCL)
    leave stdout to the command's JSON."""
    sys.stdout.flush()
    saved_fd: int | None = None
    try:
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        # no descriptor 1 (or 2): the Python-level redirection is all there is
        if saved_fd is not None:
            os.close(saved_fd)
            saved_fd = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved_fd is not None:
            # text still buffered for descriptor 1 was written meanwhile: it goes to stderr
            for stream in (sys.__stdout__, sys.stdout):
                with contextlib.suppress(Exception):
                    if stream is not None:
                        stream.flush()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


_C_LONG_MAX = 2 ** (8 * struct.calcsize("l") - 1) - 1
_C_LONG_MIN = -_C_LONG_MAX - 1


def exit_code(e: SystemExit) -> int:
    """The process status ``sys.exit(code)`` gives: None → 0, an int as the process sees it
    (``sys.exit(256 + 7)`` exits 7, ``sys.exit(-1)`` 255, ``sys.exit(2**63)`` 255), else print
    it → 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        code = int(code)  # bool is an int (sys.exit(True) exits 1)
        if not _C_LONG_MIN <= code <= _C_LONG_MAX:
            # CPython reads the code with PyLong_AsLong: beyond a C long it gets -1
            code = -1
        # POSIX keeps the low 8 bits of the status
        return code if os.name == "nt" else code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from the script's first frame: without this runner's, runpy's and importlib's,
    which ``python script.py`` would not show (a SyntaxError shows none: Python's own report)."""
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__
        or tb.tb_frame.f_code.co_filename.startswith("<frozen ")
    ):
        tb = tb.tb_next
    return tb


def report_uncaught(e: BaseException) -> int:
    """Report ``e`` as Python reports what a script leaves uncaught, through ``sys.excepthook``
    (a script's rich or wandb hook sees it); return the status Python would exit with."""
    # on the exception itself too: Python's own hook prints the exception's __traceback__
    tb = _script_frames(e.__traceback__)
    e.with_traceback(tb)
    try:
        sys.excepthook(type(e), e, tb)
    except Exception as hook_error:
        # what Python prints when the hook itself fails
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(hook_error)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(e), e, tb)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    return 130 if isinstance(e, KeyboardInterrupt) else 1


def _execute_module(module: Module) -> None:
    # found again, now importing the parent packages, as python -m imports them before the
    # module runs
    spec = importlib.util.find_spec(module.name)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(f"{module.name}.__main__")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {module.name}", name=module.name)
    get_code = getattr(spec.loader, "get_code", None)
    code = get_code(spec.name) if get_code is not None else None
    if code is None:
        raise ImportError(f"No code object available for {spec.name}")
    # what runpy's _run_module_as_main gives __main__; runpy.run_module would swap its own
    # __main__ back when the module ends, and keep_main needs it to stay
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=spec.origin if spec.has_location else None,
        __cached__=spec.cached,
        __builtins__=builtins,
        __loader__=spec.loader,
        __package__=spec.parent,
        __spec__=spec,
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _execute(script: Script) -> None:
    if isinstance(script, Module):
        _execute_module(script)
        return
    if script.source is None:
        runpy.run_path(script.file, run_name="__main__")
        return
    try:
        code = compile(script.source, script.file, "exec", dont_inherit=True)
    except ValueError as e:
        # Python 3.11's compile() says null bytes as a ValueError; python itself, a SyntaxError
        raise SyntaxError(f"source code cannot contain null bytes ({e})") from None
    # what python sets up for its __main__: runpy.run_path would leave __builtins__ a dict,
    # __loader__ None and __package__ "", and swap its own __main__ back when the script ends
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=script.file,
        __cached__=None,
        __builtins__=builtins,
        __loader__=SourceFileLoader("__main__", script.file),
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def run_script(
    script: Script,
    argv: Sequence[str],
    *,
    around: AbstractContextManager[Any] | None = None,
    keep_main: bool = False,
) -> int:
    """Run ``script`` as ``__main__`` with ``argv``; return the status Python would exit with.

    ``around`` (a capture session, say) is entered just around the script: an exception the
    script raises passes through it, so it can record the failure, while ``sys.exit`` (an
    ordinary end, whatever its code) is caught inside it. ``keep_main``: see :func:`as_main`.
    """
    status = 0
    started = False
    with as_main(script, argv, keep_main=keep_main):
        try:
            with around if around is not None else contextlib.nullcontext():
                started = True
                try:
                    _execute(script)
                except SystemExit as e:
                    status = exit_code(e)
        except BaseException as e:
            if not started:
                # entering ``around`` failed (a CUDA-only option on CPU): the script never ran,
                # so this is no traceback of the script's but our error, said in one line
                raise
            # SIGTERM/SIGHUP stopped the job: no traceback of the script's (the caller lets
            # the signal kill the process once its summary is out). KeyboardInterrupt is
            # reported: Python shows where Ctrl-C stopped the script, and the steps before it
            # still get their summary
            status = 128 + e.signum if isinstance(e, TerminatedBySignal) else report_uncaught(e)
    return status
