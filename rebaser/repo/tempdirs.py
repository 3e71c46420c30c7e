"""The temporary folders rebaser makes, and what a kill leaves of them.

A test run's plugin and results (`forkkit-pytest-*`), the base's files for upstream tests
(`forkkit-base-*`, a full copy of the tree), the walk of `git bisect` (`forkkit-bisect-*`),
private indexes and the fast lane's scratch repository: each is made by `owned`, which
holds an exclusive `flock` on a file inside the folder for as long as the folder is in use.
A kill -9 leaves the folder behind; the next folder of the same kind removes those whose
lock no process holds.

The lock, not a pid, says whether the owner lives: a pid means nothing to a process in
another PID namespace sharing the same /dev/shm or /tmp (containers run with --ipc=host, as
PyTorch jobs are), and the kernel drops the lock with its holder, wherever it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

OWNER = ".forkkit-owner"  # the lock file inside each folder
# A folder without its lock file is being made right now (the lock comes a moment after
# the folder), or was left by a rebaser from before the locks: removed once it is this old.
_UNLOCKED_GRACE_S = 3600


class Owned:
    """A temporary folder this process holds; release() removes it."""

    def __init__(self, prefix: str, parent: Optional[Path] = None) -> None:
        parent = parent or Path(tempfile.gettempdir())
        sweep(parent, prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            self._lock = _hold(self.path)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def release(self) -> None:
        try:
            shutil.rmtree(self.path, ignore_errors=True)
        finally:  # interrupted, what is left is an orphan the next sweep removes
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None


@contextlib.contextmanager
def owned(prefix: str, parent: Optional[Path] = None) -> Iterator[Path]:
    """A new folder `<parent>/<prefix>*` (the system's temporary folder by default), held
    by this process and removed after the block; orphans of the same kind go first."""
    folder = Owned(prefix, parent)
    try:
        yield folder.path
    finally:
        folder.release()


def sweep(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders `<parent>/<prefix>*` that no living process holds; which."""
    removed = []
    for folder in parent.glob(f"{prefix}*"):
        if _ours(folder) and _orphaned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def held(folder: Path) -> bool:
    """Whether a living process holds `folder` (a folder made by `owned`)."""
    return not _orphaned(folder)


def _ours(folder: Path) -> bool:
    """A folder (not a link) of this user's: another user's is never judged nor removed."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def _hold(folder: Path) -> int:
    """Lock a new file, then give it its name: a sweeper never sees the lock file unlocked."""
    fresh = folder / f"{OWNER}.new"
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(fresh, folder / OWNER)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _orphaned(folder: Path) -> bool:
    try:
        fd = os.open(folder / OWNER, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime > _UNLOCKED_GRACE_S
        except OSError:
            return False
    except OSError:  # another user's, or not ours to judge
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process lives
        return False
    finally:
        os.close(fd)
    return True
