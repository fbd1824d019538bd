"""Progress bars for large transfers, as an fsspec callback."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from fsspec.callbacks import Callback
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from durable_obj.cli.session import session

#: Transfers of at least this many bytes get a progress bar (on a terminal).
PROGRESS_MIN_BYTES = 4 * 1024 * 1024


class RichProgress(Callback):  # type: ignore[misc]  # fsspec ships no types
    """An fsspec callback showing a rich progress bar for each transfer of at
    least `min_bytes`, on a terminal only. One instance serves many transfers
    in a row (each starts with `set_size`)."""

    def __init__(self, console: Console, description: str, *, min_bytes: int | None = None) -> None:
        super().__init__()
        self._console = console
        self._description = description
        self._min_bytes = PROGRESS_MIN_BYTES if min_bytes is None else min_bytes
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self.transfers = 0

    def set_size(self, size: int) -> None:
        with self._lock:
            self._stop_locked()
            self.size = size
            self.value = 0
            self.transfers += 1
            if size and size >= self._min_bytes and self._console.is_terminal:
                self._progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    DownloadColumn(binary_units=True),
                    TransferSpeedColumn(),
                    TimeRemainingColumn(),
                    console=self._console,
                    transient=True,
                )
                self._progress.start()
                self._task = self._progress.add_task(self._description, total=size)

    def relative_update(self, inc: int = 1) -> None:
        with self._lock:
            self.value += inc
            self._refresh_locked()

    def absolute_update(self, value: int) -> None:
        with self._lock:
            self.value = value
            self._refresh_locked()

    def call(self, hook_name: str | None = None, **kwargs: Any) -> Any:
        return None  # no hooks: the bar is the only consumer

    def close(self) -> None:
        with self._lock:
            self._stop_locked()

    def _refresh_locked(self) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=self.value)
        if self.size and self.value >= self.size:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress = None
        self._task = None


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[RichProgress]:
    """A `RichProgress` on the invocation's stderr, closed on the way out."""
    bar = RichProgress(session().stderr(), description)
    try:
        yield bar
    finally:
        bar.close()
