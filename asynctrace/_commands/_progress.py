"""A progress bar on stderr for a map over many files: files done, MB read, MB/s.

Shown only where stderr is a terminal (never in a pipe, a file or CI), and never mixed into
stdout, so the report itself is the same with or without it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asynctrace.files.many import FileRun

__all__ = ["FileProgress"]


class FileProgress:
    """``with FileProgress(total_files, total_bytes, show=...) as p: ... p.advance(run)``."""

    def __init__(self, files: int, total_bytes: int, *, show: bool) -> None:
        self._files = files
        self._done = 0
        self._progress: Any = None
        self._task: Any = None
        if not show:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("analysing"),
            BarColumn(),
            TextColumn("{task.fields[done]}/{task.fields[files]} files"),
            DownloadColumn(binary_units=False),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr, emoji=False),
            transient=True,
        )
        self._task = self._progress.add_task("", total=max(total_bytes, 1), done=0, files=files)

    def __enter__(self) -> FileProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def advance(self, run: FileRun) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=run.size_bytes, done=self._done)

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
