"""Where the engine keeps its files (`replica/placement.py`): the pure parts.

The engine itself is started once per process, so what a real placement does
(parts in memory, spilled to disk past the budget, swept after a crash) is
proved in fresh processes by tests/integration/test_placement.py.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from durable_obj.errors import InvalidArgument
from durable_obj.replica import placement


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (1234, 1234),
        ("1234", 1234),
        ("512MiB", 512 * 1024**2),
        ("512 mib", 512 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("2g", 2 * 1024**3),
        ("64k", 64 * 1024),
        ("10b", 10),
    ],
    ids=repr,
)
def test_budgets_are_read_as_bytes(text: int | str, expected: int) -> None:
    assert placement.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "1.5GiB", "-1", "2TiB", "GiB", True])
def test_an_unreadable_budget_is_refused_by_name(text: object) -> None:
    with pytest.raises(InvalidArgument, match="ram_budget"):
        placement.parse_bytes(text)  # type: ignore[arg-type]


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=">= 0"):
        placement.parse_bytes(-5)


@pytest.mark.parametrize("files", ["memory", "relative/folder", ""])
def test_an_unknown_placement_is_refused(files: str) -> None:
    with pytest.raises(InvalidArgument, match="'auto', 'ram', 'disk' or an absolute folder"):
        placement.configure(files)


def test_the_policy_keeps_parts_in_memory_then_on_disk() -> None:
    text = placement._policy("/spill/", 12345)
    assert "<keep_free_space_bytes>12345</keep_free_space_bytes>" in text
    memory, disk = (
        text.index("<memory><disk>default</disk></memory>"),
        text.index("<disk><disk>spill"),
    )
    assert memory < disk
    assert "<path>/spill/</path>" in text


def test_usable_memory_is_positive_and_at_most_the_machine() -> None:
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < placement.usable_memory() <= machine


def test_a_held_folder_is_never_swept_and_a_released_one_is(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(placement.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(placement, "ram_folder", lambda: None)
    held = tmp_path / f"{placement.PREFIX}1-held"
    gone = tmp_path / f"{placement.PREFIX}2-gone"
    old = tmp_path / f"{placement.PREFIX}3-no-lock"  # an older version's: no .alive
    other = tmp_path / "someone-else"
    for folder in (held, gone, old, other):
        (folder / "data").mkdir(parents=True)
    for folder in (held, gone):
        (folder / ".alive").touch()
    # `held` is locked by another process, as a live engine's folder is.
    locker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(held / ".alive"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        assert placement.sweep() == []  # everything is younger than a minute
        removed = placement.sweep(min_age=0)
        assert removed == [str(gone)]
        assert held.exists() and old.exists() and other.exists() and not gone.exists()
    finally:
        locker.kill()
        locker.communicate()
    assert placement.sweep(min_age=0) == [str(held)]  # its process died


def test_a_folder_this_process_made_is_held(tmp_path) -> None:
    made = placement._made(str(tmp_path))
    try:
        fd = os.open(os.path.join(made, ".alive"), os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        assert not placement._abandoned(made, 0)
    finally:
        os.close(placement._LOCKS.pop())
    assert placement._abandoned(made, 0)


def test_ram_backed_reads_the_mount_a_path_is_on(tmp_path, monkeypatch) -> None:
    """The mount holding a path is the longest mount point it is below;
    a path that does not exist yet is judged by where it would be."""
    mounts = {"/": "ext4", "/dev/shm": "tmpfs", "/dev/shm/disk": "ext4", "/mnt/r": "ramfs"}
    monkeypatch.setattr(placement, "_mounts", lambda: mounts)
    assert placement.ram_backed("/dev/shm/durable_obj-1/data")
    assert placement.ram_backed("/mnt/r/not/made/yet")
    assert not placement.ram_backed("/dev/shm/disk/data")  # a disk mounted below it
    assert not placement.ram_backed("/dev/shmx/data")  # a name that only starts alike
    assert not placement.ram_backed("/var/lib/data")
    link = tmp_path / "to-shm"
    link.symlink_to("/dev/shm")
    assert placement.ram_backed(str(link / "data"))  # where it resolves to


@pytest.mark.skipif(placement.ram_folder() is None, reason="needs a RAM-backed /dev/shm (Linux)")
def test_ram_backed_on_this_machine() -> None:
    assert placement.ram_backed(os.path.join(placement.RAM_FOLDER, "x", "data"))
    assert not placement.ram_backed("/proc/self")  # procfs
