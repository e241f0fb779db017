"""What asynctrace writes: files written whole or not at all, the paths a command writes to
checked before it does the work, and JSON that any file name fits in.

A path that cannot be written is found before a trace is analysed or a script runs for an hour,
and said in one line (:class:`AsyncTraceError`), as is a failed write (:func:`write_failed`).
A reader that stops reading (``| head -1``) is no error: every rich console of a command's
output comes from :func:`stdout_console`, and the CLI exits 0 on the closed pipe.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from asynctrace.errors import AsyncTraceError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "atomic_file",
    "fs_name",
    "is_utf8",
    "json_text",
    "output_file",
    "output_folder",
    "stdout_console",
    "utf8",
    "write_atomically",
    "write_failed",
]


def write_atomically(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file renamed over it (:func:`atomic_file`)."""
    with atomic_file(path) as (f, p):
        f.write(data)
    return p


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[tuple[BinaryIO, Path]]:
    """A binary file to write ``path``'s content to, and ``path``; put in place at the end.

    The content goes to a temporary file in the same folder, created exclusively under an
    unpredictable name (a link planted at a predictable ``<path>.tmp`` would have the content
    written through it, to wherever it points), flushed to disk and renamed over ``path``: a
    reader never sees half a file, and a failed write (no space, a folder in the way) leaves
    neither a partial file nor the temporary behind; the exception propagates. The file gets
    the mode of a new file (``0o666`` less the umask). A path that exists and is not a regular
    file (``/dev/null``, ``/dev/stdout``, a FIFO) is written in place: a rename would replace
    the device or the link itself.
    """
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        with open(p, "wb") as f:
            yield f, p
        return
    # the name's start only: the prefix and the random part must still fit NAME_MAX
    # imported here: tempfile imports shutil, and `report --json` to stdout needs neither
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name[:200]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes 0o600; a file written by this tool is an ordinary new file
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            yield f, p
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    # Linux says it without changing it; os.umask can only read it by setting it, for a moment
    # in which another thread's new files would get the wrong mode
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def json_text(obj: object, *, indent: int | None = 2) -> str:
    """``obj`` as JSON, indented unless ``indent`` is None. A file name that is not UTF-8
    (Python's surrogate escapes for its odd bytes) cannot be JSON: those characters become "?"
    rather than fail the output."""
    try:
        data = msgspec.json.encode(obj)
    except UnicodeEncodeError:
        data = msgspec.json.encode(_utf8(msgspec.to_builtins(obj)))
    if indent is not None:
        data = msgspec.json.format(data, indent=indent)
    return data.decode()


def utf8(text: str) -> str:
    """``text`` with "?" for what UTF-8 cannot hold (the surrogate escapes of a file name's odd
    bytes): for names that go into records and JSON."""
    return text.encode("utf-8", "replace").decode()


def is_utf8(text: str) -> bool:
    """Whether UTF-8 holds ``text`` (a file name whose bytes are not UTF-8 holds surrogate
    escapes, which it does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fs_name(path: str) -> str:
    """A file name as text that UTF-8 holds: the bytes of a name that is not UTF-8 (Python's
    surrogate escapes) shown as ``\\xNN``, everything else unchanged. The name a report,
    its JSON and msgpack carry for such a file, which is analysed like any other, and the
    name a message or a JSON note shows for one that is skipped."""
    if is_utf8(path):
        return path
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate, which no name's bytes decode to
        raw = path.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


def _utf8(x: Any) -> Any:
    if isinstance(x, str):
        return utf8(x)
    if isinstance(x, dict):
        return {_utf8(k): _utf8(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_utf8(v) for v in x]
    return x


def output_file(
    path: str | os.PathLike[str], *, what: str, inputs: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """``path`` as a file to write ``what`` to, or :class:`AsyncTraceError` saying why not.

    The path is no folder, its folder exists, and it is none of ``inputs``: writing over a
    trace the command reads would lose the trace.
    """
    out = Path(path)
    if os.path.isdir(out):
        raise AsyncTraceError(f"{out}: is a folder; give a file name for {what}")
    folder = out.parent
    if not os.path.isdir(folder):
        state = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise AsyncTraceError(f"{out}: {folder} {state}; create the folder or choose another path")
    for p in inputs:
        with contextlib.suppress(OSError):
            if os.path.samefile(out, p):
                raise AsyncTraceError(f"{out}: is the input {p}; choose another file for {what}")
    return out


def output_folder(path: str | os.PathLike[str], *, option: str) -> Path:
    """The folder ``path``, created if missing, that takes new files; else
    :class:`AsyncTraceError` naming ``option`` (a read-only folder is found now, not after the
    script ran)."""
    d = Path(path)
    if os.path.exists(d) and not os.path.isdir(d):
        raise AsyncTraceError(f"{option} {d}: is a file, not a folder; choose a folder")
    probe = d / f".asynctrace-probe-{os.getpid()}"
    try:
        d.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise AsyncTraceError(
            f"{option} {d}: cannot write there ({e.strerror or e}); choose another folder"
        ) from None
    return d


def write_failed(path: str | os.PathLike[str], error: OSError, what: str) -> AsyncTraceError:
    """The one-line error for ``what`` that could not be written to ``path``."""
    return AsyncTraceError(f"{path}: cannot write {what}: {error.strerror or error}")


_console_class: type[Console] | None = None


def stdout_console(**options: Any) -> Console:
    """A rich ``Console(**options)`` for a command's output on which a closed pipe raises
    :class:`BrokenPipeError`, as a plain ``print`` does; ``asynctrace``'s ``main`` takes that
    for the reader having read enough (``| head -1``) and exits 0. Rich's own handling raises
    ``SystemExit(1)``, which reads as a failure."""
    global _console_class
    if _console_class is None:
        # imported here: ``--json`` never pays for rich
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True  # nothing more to write to this reader
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

        _console_class = _Console
    return _console_class(**options)
