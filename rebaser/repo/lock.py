"""One state-changing rebaser command per repository at a time.

`apply`, `continue`, `abort` and `refresh` hold an exclusive `flock` on
`<git-common-dir>/forkkit/lock` while they run; a second one fails at once with exit 2 and
says which command holds the lock (it does not wait: a test run can take an hour). The lock
belongs to the open file, so the kernel releases it when its holder exits, even on kill -9:
there is never a stale lock to remove by hand.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rebaser.errors import RebaserError
from rebaser.repo.git import Git
from rebaser.repo.workspace import forkkit_dir


def lock_path(repo: Git) -> Path:
    return forkkit_dir(repo) / "lock"


@contextmanager
def repository_lock(repo: Git, command: str) -> Iterator[None]:
    """Hold the repository's lock for `rebaser <command>`, or fail naming the holder."""
    path = lock_path(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise RebaserError(
                f"another rebaser command is running in this repository: {_holder(handle.read())}",
                where=str(path),
                next_step="wait for it to finish, then run again (the lock goes with its process)",
            ) from None
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        json.dump({"pid": os.getpid(), "command": command, "started": started}, handle)
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"rebaser {info['command']} (pid {info['pid']}, started {info['started']})"
    except (ValueError, KeyError, TypeError):
        return "a rebaser command that is just starting"
