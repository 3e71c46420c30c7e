"""One state-changing rebaser command per repository at a time.

`apply`, `continue`, `abort` and `refresh` hold an exclusive `flock` on
`<git-common-dir>/forkkit/lock` while they run; a second one fails at once with exit 2 and
says which command holds the lock (it does not wait: a test run can take an hour). The lock
belongs to the open file, so the kernel releases it when its holder exits, even on kill -9:
there is never a stale lock to remove by hand.

`verify` and `bisect` apply on throwaway branches, removing first what an earlier run left
of one; each holds a lock of the same kind on its branch, so that a second run of the same
base never removes the worktree a running one uses.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

from rebaser.errors import RebaserError, unusable_git_dir
from rebaser.repo.git import Git
from rebaser.repo.workspace import forkkit_dir


def lock_path(repo: Git) -> Path:
    return forkkit_dir(repo) / "lock"


@contextmanager
def repository_lock(repo: Git, command: str) -> Iterator[None]:
    """Hold the repository's lock for `rebaser <command>`, or fail naming the holder."""
    with _exclusive(
        lock_path(repo), command, "another rebaser command is running in this repository: "
    ):
        yield


@contextmanager
def throwaway_lock(repo: Git, branch: str, command: str) -> Iterator[None]:
    """Hold a throwaway branch (verify's, bisect's) for `rebaser <command>`: the run that
    holds it removes what an earlier one left of it, never what a running one uses."""
    key = hashlib.sha1(branch.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    path = forkkit_dir(repo) / "throwaway" / key
    busy = f"another rebaser command is applying onto {branch} in this repository: "
    with _exclusive(path, command, busy):
        yield


@contextmanager
def _exclusive(path: Path, command: str, busy: str) -> Iterator[None]:
    """An exclusive lock on `path` while the block runs, saying who holds it; `busy` starts
    the refusal when another process does."""
    with _opened(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise RebaserError(
                f"{busy}{_holder(handle.read())}",
                where=str(path),
                next_step="wait for it to finish, then run again (the lock goes with its process)",
            ) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        try:
            handle.seek(0)
            handle.truncate()
            json.dump({"pid": os.getpid(), "command": command, "started": started}, handle)
            handle.flush()
        except OSError as exc:
            raise unusable_git_dir("write rebaser's lock", path, exc) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):  # the lock itself goes with the file
                handle.truncate(0)


def _opened(path: Path) -> TextIO:
    """The lock file, opened without following a link and never truncated by the open."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_a_lock(path, "is a symlink") from None
        if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST):
            raise _not_a_lock(path, "is a folder (or on a path through a file)") from None
        raise unusable_git_dir("make rebaser's lock", path, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_a_lock(path, "is not a regular file")
    return os.fdopen(fd, "r+", encoding="utf-8")


def _not_a_lock(path: Path, what: str) -> RebaserError:
    return RebaserError(
        f"{path} {what}, where rebaser keeps the file it locks while it changes the repository",
        where=str(path),
        next_step="remove it (rebaser makes the file itself), then run again",
    )


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"rebaser {info['command']} (pid {info['pid']}, started {info['started']})"
    except (ValueError, KeyError, TypeError):
        return "a rebaser command that is just starting"
