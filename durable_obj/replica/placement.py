"""Where the process's engine keeps its files: in memory, or on disk.

The local copy is a cache of the store (the store is the truth: a head, a
base and the WAL), so where the engine writes its part files is ours to
choose, and it is the largest cost of a write. Each INSERT makes a part
(about ten small files), and merges rewrite and delete them. Measured on
this project's machine (ext4 mounted with `discard`, 2 cores), CPU per
single-row INSERT into a MergeTree table on a raw connection: 5.0 ms with
the files on disk, 2.1 ms in a RAM-backed folder (`/dev/shm`). Table
settings (marks, sparse serialization, merge cadence) moved it by less than
the noise (`python benchmarks/run.py --only cpu` shows the whole unit).

The choice (`configure`, or the environment before the first open):

* `"auto"` (the default): memory when a RAM-backed folder exists (`/dev/shm`
  on Linux, a tmpfs) and the budget below is at least `MIN_BUDGET`; the disk
  otherwise.
* `"ram"`: memory, or `InvalidArgument` if there is no RAM-backed folder.
* `"disk"`: the system's temporary folder, as before.
* any other string: a folder of the caller's (made if missing).

The budget (`ram_budget`, default a quarter of the memory this process may
use: the machine's, or its cgroup's limit if lower, and never more than
half of what the RAM folder has free) caps the part files kept in memory.
Past it, nothing fails: the engine's default storage policy has a second
volume on disk, so a part that does not fit the budget is written to disk,
and when less than a fifth of the budget is free the engine moves the
oldest parts there in the background (ClickHouse's `move_factor`). Metadata
and BACKUP's scratch (`backups/`) stay on disk either way: an archive is as
large as the object, and is written once per checkpoint or open.

On a RAM filesystem (the default in memory, or a caller's folder on a
tmpfs) the engine reads its parts with plain `pread`
(`local_filesystem_read_method`, set by `server._start`): its default first
asks for a page-cache read without blocking (`preadv2` with `RWF_NOWAIT`),
which a tmpfs refuses, so every read went through its thread pool. Measured
on a bare chdb: a scan of 100k rows took 130 ms that way against 57 ms with
`pread` (54 ms with the files on disk), and BACKUP of 10k rows 33 against
20 ms.

A process killed with SIGKILL cannot remove its folders, and in memory
they would hold RAM until the machine restarts. Each folder holds a lock
(`.alive`, an `flock` the kernel drops when the process dies); the next
process that starts an engine removes every folder of ours whose lock it
can take (`sweep`, in a thread beside the open that started it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from durable_obj.errors import InvalidArgument

#: Where a RAM-backed folder is looked for (Linux's POSIX shared memory).
RAM_FOLDER = "/dev/shm"
#: File systems whose files live in memory.
_RAM_FS = frozenset({"tmpfs", "ramfs"})
#: Below this budget the engine keeps its files on disk ("auto").
MIN_BUDGET = 64 * 1024 * 1024
#: The prefix of every folder an engine of ours makes.
PREFIX = "durable_obj-"
#: A folder younger than this is never swept (its lock may not be taken yet).
_SWEEP_AGE = 60.0
ENV_FILES = "DURABLE_OBJ_ENGINE_FILES"
ENV_BUDGET = "DURABLE_OBJ_RAM_BUDGET"
_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3}


@dataclass(frozen=True, slots=True)
class Placement:
    """Where this process's engine keeps its files."""

    #: "ram", "disk" or "folder" (a folder of the caller's).
    kind: str
    #: The engine's data path (metadata and, in memory, the part files).
    data: str
    #: The folder on disk: backups/, and spill/ when the data is in memory.
    root: str
    #: Bytes of part files kept in memory (0 when kind is not "ram").
    budget: int
    #: The engine's config file (the storage policy), or None.
    config: str | None


_SETTINGS: dict[str, str | int | None] = {}


def configure(files: str = "auto", *, ram_budget: int | str | None = None) -> None:
    """Choose where the process's engine keeps its files, before it starts.

    `files`: "auto", "ram", "disk" or a folder; `ram_budget`: bytes (or "512MiB",
    "2GiB") of part files to keep in memory. Raises `InvalidArgument` once the
    engine has started with other settings: one engine per process.
    """
    from durable_obj.replica import server

    if files not in ("auto", "ram", "disk") and not os.path.isabs(files):
        raise InvalidArgument(
            f"files must be 'auto', 'ram', 'disk' or an absolute folder, not {files!r}"
        )
    budget = None if ram_budget is None else parse_bytes(ram_budget)
    wanted = {"files": files, "budget": budget}
    if server.started() and wanted != _SETTINGS:
        raise InvalidArgument(
            "the engine already started with its files placed as "
            f"{server.placement().kind!r}; configure the engine before the first open"
        )
    _SETTINGS.update(wanted)


def parse_bytes(value: int | str) -> int:
    """Bytes from an int or "512MiB" / "2GiB" / "1073741824"."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InvalidArgument(f"ram_budget must be >= 0, not {value}")
        return value
    text = str(value).strip().lower().replace(" ", "")
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(digits) :]
    unit = "" if unit == "b" else unit
    if not digits.isdigit() or unit not in _UNITS:
        raise InvalidArgument(
            f"ram_budget must be bytes, or like '512MiB' or '2GiB', not {value!r}"
        )
    return int(digits) * _UNITS[unit]


def _wanted() -> tuple[str, int | None]:
    files = _SETTINGS.get("files") or os.environ.get(ENV_FILES) or "auto"
    budget = _SETTINGS.get("budget")
    if budget is None and os.environ.get(ENV_BUDGET):
        budget = parse_bytes(os.environ[ENV_BUDGET])
    assert isinstance(files, str) and (budget is None or isinstance(budget, int))
    return files, budget


def _mounts() -> dict[str, str]:
    """{mount point: filesystem type} of this machine ({} off Linux)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            return {f[1]: f[2] for f in (line.split() for line in mounts) if len(f) > 2}
    except OSError:
        return {}


def ram_folder() -> str | None:
    """The RAM-backed folder this machine has, writable by us, or None."""
    if not os.path.isdir(RAM_FOLDER) or not os.access(RAM_FOLDER, os.W_OK | os.X_OK):
        return None
    return RAM_FOLDER if ram_backed(RAM_FOLDER) else None


def ram_backed(path: str) -> bool:
    """Whether `path` (which may not exist yet) is on a RAM filesystem: the
    mount holding it, the longest mount point it is below, is a tmpfs."""
    real = os.path.realpath(path)
    kinds = _mounts()
    under = [m for m in kinds if real == m or real.startswith(m.rstrip("/") + "/")]
    return bool(under) and kinds[max(under, key=len)] in _RAM_FS


def usable_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's
    limit when that is lower (tmpfs pages count against the cgroup)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            with open(path, encoding="utf-8") as handle:
                text = handle.read().strip()
            if text.isdigit():
                total = min(total, int(text))
    return total


def default_budget(folder: str) -> int:
    """A quarter of usable memory, at most half of what `folder` has free."""
    stat = os.statvfs(folder)
    return min(usable_memory() // 4, stat.f_bavail * stat.f_frsize // 2)


def decide() -> Placement:
    """Make this process's folders as configured (`configure`, the environment)."""
    files, budget = _wanted()
    # Beside the open, not before it: a lock tried per folder of ours in
    # the temporary folder (hundreds on a busy host), perhaps a large
    # removal. It never takes a folder younger than a minute: not ours.
    threading.Thread(target=sweep, name="durable_obj-sweep", daemon=True).start()
    root = _made(tempfile.gettempdir())
    os.makedirs(os.path.join(root, "backups"))
    if files == "disk":
        return Placement("disk", os.path.join(root, "data"), root, 0, None)
    if files not in ("auto", "ram"):
        os.makedirs(files, exist_ok=True)
        return Placement("folder", os.path.join(_made(files), "data"), root, 0, None)
    ram = ram_folder()
    if ram is None and files == "ram":
        raise InvalidArgument(
            f"no RAM-backed folder ({RAM_FOLDER} on a tmpfs) on this machine; use 'auto'"
        )
    budget = default_budget(ram) if ram is not None and budget is None else budget
    if ram is None or budget is None or (files == "auto" and budget < MIN_BUDGET):
        return Placement("disk", os.path.join(root, "data"), root, 0, None)
    data = os.path.join(_made(ram), "data")
    stat = os.statvfs(ram)
    keep = max(0, stat.f_bavail * stat.f_frsize - budget)
    config = os.path.join(root, "engine.xml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(_policy(os.path.join(root, "spill") + os.sep, keep))
    return Placement("ram", data, root, budget, config)


def _policy(spill: str, keep: int) -> str:
    """The engine's default storage policy: part files in memory (the data
    path's disk, `keep` bytes of the RAM folder left free: the budget), then
    on disk; parts move to disk when less than a fifth of the budget is free."""
    return f"""<clickhouse>
 <storage_configuration>
  <disks>
   <default><keep_free_space_bytes>{keep}</keep_free_space_bytes></default>
   <spill><type>local</type><path>{spill}</path></spill>
  </disks>
  <policies>
   <default>
    <volumes>
     <memory><disk>default</disk></memory>
     <disk><disk>spill</disk></disk>
    </volumes>
    <move_factor>0.2</move_factor>
   </default>
  </policies>
 </storage_configuration>
</clickhouse>
"""


#: The lock of each folder this process made, held until it exits.
_LOCKS: list[int] = []


def _made(parent: str) -> str:
    """A new folder of ours in `parent`, locked for this process's life."""
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent)
    fd = os.open(os.path.join(folder, ".alive"), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _LOCKS.append(fd)
    return folder


def sweep(min_age: float = _SWEEP_AGE) -> list[str]:
    """Remove the folders that dead processes of ours left (in memory and in
    the temporary folder): those whose `.alive` lock can be taken. A folder
    without a lock (made by an older version) or younger than `min_age`
    seconds is left alone. Returns the folders removed."""
    removed: list[str] = []
    for parent in {tempfile.gettempdir(), ram_folder() or tempfile.gettempdir()}:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            folder = os.path.join(parent, name)
            if _abandoned(folder, min_age):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def _abandoned(folder: str, min_age: float) -> bool:
    try:
        info = os.lstat(folder)
        if info.st_uid != os.getuid() or time.time() - info.st_mtime < min_age:
            return False
        fd = os.open(os.path.join(folder, ".alive"), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its process is alive
    finally:
        os.close(fd)  # closing drops the lock we took, if we took it
    return True


def release() -> None:
    """Drop this process's locks (at exit, after its folders are removed)."""
    while _LOCKS:
        with contextlib.suppress(OSError):
            os.close(_LOCKS.pop())
