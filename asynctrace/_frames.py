"""Which Python frames are the user's own code: one rule for the sync sites a trace's frames
give (``asynctrace.analysis.syncs``) and the stacks a running session records
(``asynctrace.capture.syncs``), with nothing imported that capture does not need."""

from __future__ import annotations

import re

__all__ = ["is_user_file", "is_user_frame", "short_path", "site_of"]

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
        "session.py",
        "tb_plugin",
        "sinks",
        "traces",
    }
)


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
