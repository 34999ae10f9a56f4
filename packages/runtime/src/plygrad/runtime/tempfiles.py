"""Temporary files and folders that a later process can clean up after a killed one.

A compile writes its source and library into a temporary folder, and the disk cache writes each entry to a temporary
file before renaming it. Each is removed when the work is done,
but a process killed in between (SIGKILL, the OOM killer, a power cut) leaves it behind, and nothing else ever
would remove it. So every such name carries the id of the process that made it (`<prefix><pid>-<random>`), and
`sweep_stale` removes the ones whose process is gone.

A dead pid alone is not enough: a folder shared by several machines or containers (an NFS home, a bind-mounted
/tmp) holds names made by processes this one cannot see. Those are in use for at most the C compile timeout
(300 s), so an entry is removed only once it is older than `DEAD_GRACE_S` and its process is not alive here, or
older than `ABANDONED_AFTER_S` whatever its pid says (pids are reused, so a live pid proves nothing after a day).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

DEAD_GRACE_S: Final = 600.0
ABANDONED_AFTER_S: Final = 86400.0


def tagged(prefix: str) -> str:
    """`prefix` followed by this process's id: the start of every temporary name `sweep_stale` may clean up."""
    return f"{prefix}{os.getpid()}-"


def temp_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder in the system temp folder whose name says which process made it."""
    return tempfile.TemporaryDirectory(prefix=tagged(prefix))


def temp_file(prefix: str, suffix: str = "", folder: str | os.PathLike[str] | None = None) -> tuple[int, str]:
    """`tempfile.mkstemp` with a name that says which process made it (an open fd and the path)."""
    return tempfile.mkstemp(prefix=tagged(prefix), suffix=suffix, dir=folder)


@contextlib.contextmanager
def loadable_file(binary: bytes, prefix: str, suffix: str = "") -> Iterator[str]:
    """A path a loader that only takes paths (`dlopen`, `LoadLibrary`) can read `binary` from, for the `with` block.

    A backend's `Compiler.compile` returns bytes (the program cache keeps them), so a backend whose loader wants a
    file would write its library to disk a second time. On Linux the bytes go to an anonymous in-memory file
    (`memfd_create`) named by `/proc/self/fd/<n>` instead: no disk write, nothing a killed process leaves behind.
    Elsewhere, or where memfd is refused (a sandbox), a temporary file named `<prefix><pid>-...` that
    `sweep_stale` can clean up after a killed process. A loaded library's mapping outlives the file: close it (leave
    the block) right after loading.

    Every path handed out is a different string: `dlopen` treats a name it has loaded before as that library again,
    and a closed fd number is soon reused, so the path spells one more number (`_unique_fd_path`).
    """
    memfd = getattr(os, "memfd_create", None)
    fd = -1
    if memfd is not None and sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fd = memfd(prefix, getattr(os, "MFD_CLOEXEC", 0))
    if fd >= 0:
        try:
            _write_all(fd, binary)
            yield _unique_fd_path(fd)
        finally:
            os.close(fd)
        return
    fd, path = temp_file(prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(binary)
        yield path
    finally:
        Path(path).unlink(missing_ok=True)


_PATHS_GIVEN: Final = itertools.count(1)


def _unique_fd_path(fd: int) -> str:
    """`/proc/self/fd/<fd>` spelled differently for every call: the bits of a counter, most significant first, as
    `./` (1) or `fd/../` (0) steps that resolve to the same folder. Two distinct counters give distinct strings (the
    steps start with different characters), and the path grows by at most 6 characters per bit."""
    bits = bin(next(_PATHS_GIVEN))[2:]
    return "/proc/self/" + "".join("./" if bit == "1" else "fd/../" for bit in bits) + f"fd/{fd}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists here (it may belong to another user)."""
    if pid <= 0:
        return False
    if os.name == "nt":
        return True  # os.kill on Windows terminates the process: no safe probe, so only age decides there
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _owner(name: str, prefix: str) -> int:
    """The pid in `<prefix><pid>-...`, or 0 for a name without one (e.g. made by an older version)."""
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def is_stale(name: str, prefix: str, mtime: float, now: float) -> bool:
    """Whether a temporary entry named `name` and last modified at `mtime` was left behind (see module docstring)."""
    age = now - mtime
    if age > ABANDONED_AFTER_S:
        return True
    return age > DEAD_GRACE_S and not pid_alive(_owner(name, prefix))


def sweep_stale(folder: str | os.PathLike[str], prefix: str) -> int:
    """Remove the stale temporary files and folders named `<prefix>...` directly in `folder`; returns how many.

    Never raises: a folder that cannot be listed or an entry that cannot be removed is left as it is. Symlinks are
    removed as links, never followed.
    """
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not is_stale(entry.name, prefix, info.st_mtime, now):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                Path(entry.path).unlink()
            removed += 1
        except OSError:
            continue
    return removed
