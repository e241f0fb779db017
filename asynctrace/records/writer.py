"""Streaming writer of a session's records file (JSON lines, atomic rename at the end).

The session writes every step as it completes, so memory stays flat however long the run;
records are batched and encoded a block at a time (``encode_lines``), one ``write(2)`` per
block (the session hands its steps over a batch at a time, :meth:`RecordsWriter.write_all`),
which keeps the per-step cost to a fraction of a µs of encoding.
The file is written as ``<final>.tmp`` and renamed into place by :meth:`finish`, so a file
without the ``.tmp`` suffix is always complete. :meth:`RecordsWriter.open` claims a name
(creates the ``.tmp`` exclusively, then checks that no final file has it), so two sessions that
come up with the same name never write over each other: the second is told to pick another.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import msgspec

__all__ = ["RecordsWriter"]

#: records batched before they are encoded and written; amortizes the call, stays flat (~60 kB)
_BATCH = 256


class RecordsWriter:
    """Writes records to ``path + ".tmp"`` and renames to ``path`` on :meth:`finish`.

    Every method may raise :class:`OSError`; the session decides whether that is a warning or an
    error. After an error the writer should be :meth:`abort`-ed.
    """

    __slots__ = ("_batch", "_claimed", "_encode_lines", "_file", "path", "tmp_path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp_path = path.with_name(path.name + ".tmp")
        self._batch: list[msgspec.Struct] = []
        self._encode_lines = msgspec.json.Encoder().encode_lines
        self._file: BinaryIO | None = None
        # whether tmp_path is this writer's file (created by open(), not yet renamed)
        self._claimed = False

    def open(self) -> None:
        """Claim the name; :class:`FileExistsError` if another writer has it (choose another)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            # a file where the folder should be: not a name clash, choosing another won't help
            raise NotADirectoryError(
                errno.ENOTDIR, "not a directory", str(self.path.parent)
            ) from None
        # unbuffered: our own batch already groups lines, so each flush is one write(2);
        # "x": a .tmp of the same name belongs to another live writer
        f = open(self.tmp_path, "xb", buffering=0)  # noqa: SIM115 - closed in finish()/abort()
        # Checked after the .tmp is ours: a writer of this name that finished earlier renamed
        # its .tmp away before ours could be created, so its final file is visible by now.
        if self.path.exists():
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_path)
            raise FileExistsError(errno.EEXIST, "records file exists", str(self.path))
        self._file = f
        self._claimed = True

    def write(self, record: msgspec.Struct) -> None:
        """Append one record line (the hot path: called once per step)."""
        batch = self._batch
        batch.append(record)
        if len(batch) >= _BATCH:
            self.flush()

    def write_all(self, records: Iterable[msgspec.Struct]) -> None:
        """Append record lines and write them out (a batch of the session's steps)."""
        self._batch.extend(records)
        self.flush()

    def flush(self) -> None:
        f = self._file
        batch = self._batch
        if f is None or not batch:
            return
        data = self._encode_lines(batch)
        # dropped before writing: a failing disk must not make the batch grow without bound
        batch.clear()
        view = memoryview(data)
        while view:
            written = f.write(view)
            if not written:
                raise OSError(f"could not write to {self.tmp_path}")
            view = view[written:]

    def finish(self) -> Path:
        """Flush, close, and rename the temporary file into place; returns the final path."""
        f = self._file
        if f is None:
            raise OSError(f"records file {self.tmp_path} is not open")
        try:
            self.flush()
            f.flush()
        finally:
            self._file = None
            f.close()
        os.replace(self.tmp_path, self.path)
        self._claimed = False
        return self.path

    def abort(self, *, remove: bool = False) -> None:
        """Close without renaming; what was flushed stays in the ``.tmp`` file, unless
        ``remove`` (after a write error: on a full disk, a partial file only takes the space
        the training job needs for its checkpoints)."""
        f = self._file
        self._file = None
        self._batch.clear()
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        if remove and self._claimed:
            self._claimed = False
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_path)
