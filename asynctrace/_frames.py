"""Which Python frames are the user's own code: one rule for the sync sites a trace's frames
give (``asynctrace.analysis.syncs``) and the stacks a running session records
(``asynctrace.capture.syncs``), with nothing imported that capture does not need.

Two kinds of asynctrace's own files are told apart where a running session locates a sync, and
the code they belong to registers them: code that stands for the user's (``asynctrace demo``'s
loops, :func:`register_user_code`), and the command line that launches a user's script
(``asynctrace run``/``check``, :func:`register_launcher`)."""

from __future__ import annotations

import os
import re

__all__ = [
    "is_standing_in_for_user",
    "is_user_file",
    "is_user_frame",
    "launchers",
    "register_launcher",
    "register_user_code",
    "short_path",
    "site_of",
]

_FRAME = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\)")
#: folders whose files are never the user's own code
_NOT_USER_DIRS = frozenset({"torch", "site-packages", "dist-packages"})
#: asynctrace's own modules and subpackages: ``.../asynctrace/<one of these>`` is our frame,
#: while a user's ``~/asynctrace/train.py`` stays theirs (a test keeps this list complete)
_OWN_MODULES = frozenset(
    {
        "__init__.py",
        "__main__.py",
        "_commands",
        "_frames.py",
        "_extras.py",
        "analysis",
        "capture",
        "cli.py",
        "errors.py",
        "export",
        "files",
        "integrations",
        "records",
        "render",
        "tracing.py",
        "tb_plugin",
        "sinks",
        "traces",
    }
)


#: asynctrace's files whose frames stand for the user's (their syncs are shown as the user's)
_STAND_INS: set[str] = set()
#: path prefixes (files, or folders ending in a separator) of the code that launches a user's
#: script: no frame outside it is the user's
_LAUNCHERS: tuple[str, ...] = ()


def register_user_code(path: str) -> None:
    """Have a running session take the frames of file ``path`` (asynctrace's own) for the
    user's: a sync made there is shown at its line, as a user's would be."""
    _STAND_INS.add(os.path.abspath(path))


def register_launcher(path: str) -> None:
    """Have a running session stop a sync's stack at file ``path``, or at any file of folder
    ``path`` (given with a trailing separator): the command line that runs a user's script,
    whose callers are never the user's."""
    global _LAUNCHERS
    where = os.path.abspath(path) + (os.sep if path.endswith(("/", os.sep)) else "")
    if where not in _LAUNCHERS:
        _LAUNCHERS = (*_LAUNCHERS, where)


def is_standing_in_for_user(path: str) -> bool:
    """Whether ``path`` (an absolute file name, as a code object has it) is registered by
    :func:`register_user_code`."""
    return path in _STAND_INS


def launchers() -> tuple[str, ...]:
    """The prefixes :func:`register_launcher` registered (for ``str.startswith``)."""
    return _LAUNCHERS


def is_user_frame(name: str) -> bool:
    """A frame of the user's code: a ``file(line)`` outside torch, site-packages, asynctrace.

    Judged by whole folder names of the file's path, so ``~/pytorch/train.py`` and
    ``~/asynctrace_runs/train.py`` are user code, and a function's name never counts.
    """
    m = _FRAME.match(name)
    return m is not None and is_user_file(m.group("file"))


def is_user_file(path: str) -> bool:
    """A file of the user's code (the rule of :func:`is_user_frame`, for a bare path)."""
    path = path.replace("\\", "/")
    if path.startswith(("<built-in", "<frozen")):  # a notebook's <ipython-input-3-...> is user code
        return False
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _NOT_USER_DIRS or (part == "asynctrace" and parts[i + 1] in _OWN_MODULES):
            return False
    return True


def site_of(frame_name: str) -> str:
    """``path/file.py(123): fn`` → ``path/file.py:123`` (the name itself if it has no line)."""
    m = _FRAME.match(frame_name)
    return f"{m.group('file')}:{m.group('line')}" if m else frame_name


#: folders an installed package lives in; what follows is the package's own path
_INSTALL_DIRS = ("site-packages", "dist-packages")


def short_path(path: str) -> str:
    """An installed package's file as ``package/…/file.py`` (``package/file.py`` when it sits in
    the package's top folder); any other path as it is. A site-packages path is 60–100
    characters of which only the package and the file name tell the reader anything."""
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in _INSTALL_DIRS and i + 2 < len(parts):
            rest = parts[i + 1 :]
            return "/".join(rest) if len(rest) <= 2 else f"{rest[0]}/…/{rest[-1]}"
    return path
