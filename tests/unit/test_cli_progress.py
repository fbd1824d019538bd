"""The CLI's fsspec progress callback (a rich bar, terminals only)."""

from __future__ import annotations

import io

from rich.console import Console

from durable_obj.cli.progress import RichProgress


def test_progress_bar_only_for_large_transfers() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    bar = RichProgress(console, "verify", min_bytes=1000)
    bar.set_size(10)
    bar.relative_update(10)
    assert buffer.getvalue() == ""  # small: no bar
    bar.set_size(5000)
    for _ in range(5):
        bar.relative_update(1000)
    bar.close()
    assert "verify" in buffer.getvalue()
    assert bar.transfers == 2 and bar.value == 5000
    buffer = io.StringIO()
    bar = RichProgress(Console(file=buffer, width=100), "x", min_bytes=1)
    bar.set_size(10)
    bar.relative_update(10)
    assert buffer.getvalue() == ""  # not a terminal: no bar


def test_absolute_updates_and_hooks() -> None:
    bar = RichProgress(Console(file=io.StringIO(), force_terminal=True), "t", min_bytes=1)
    bar.set_size(100)
    bar.absolute_update(40)
    assert bar.value == 40
    assert bar.call("anything", x=1) is None
    bar.absolute_update(100)  # complete: the bar stops by itself
    bar.set_size(0)  # an empty transfer shows nothing
    assert (bar.transfers, bar.value) == (2, 0)
    bar.close()
