"""Child processes that do not outlive rebaser: a test run stopped by Ctrl-C, a timeout or
a `kill -9` of rebaser leaves nothing running behind it."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_TAIL_BYTES = 64 * 1024  # of a run's output, kept to say why it failed


def run_own_group(
    command: Sequence[str],
    *,
    cwd: os.PathLike,
    env: Mapping[str, str],
    timeout: float,
    output: Path,
) -> subprocess.CompletedProcess:
    """Run `command` in a process group of its own, its output (stdout and stderr) written
    to the file `output`; the result's stdout is the output's last 64 KiB, as text (a test
    may print gigabytes: they stay on disk, not in rebaser's memory).

    On any way out but its own end (Ctrl-C, TimeoutExpired) the whole group is killed: the
    pytest run and whatever it started. If rebaser itself is killed, Linux kills the child.
    """
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches rebaser only; it stops the group itself
            preexec_fn=_die_with(os.getpid()),
        )
        try:
            process.wait(timeout=timeout)
        except BaseException:
            _kill_group(process)
            raise
    return subprocess.CompletedProcess(list(command), process.returncode, _tail(output), "")


def _tail(output: Path) -> str:
    with open(output, "rb") as file:
        file.seek(max(0, file.seek(0, os.SEEK_END) - _TAIL_BYTES))
        return file.read().decode("utf-8", errors="replace")


def helper(command: Sequence[str], *, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a helper that answers on its stdout what it is asked on its stdin, silent
    (stderr discarded: its caller says what failed). A session of its own: Ctrl-C reaches
    rebaser only, which ends it. If rebaser is killed, its stdin ends, and it stops after
    the answer under way (no preexec_fn: the lane's threads are running when it starts)."""
    return subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.communicate()


def _die_with(parent: int) -> Optional[Callable[[], None]]:
    """In the child, before it runs: ask the kernel for SIGKILL when `parent` dies."""
    if not sys.platform.startswith("linux"):
        return None

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return setup


def cores() -> int:
    """The cores this process may run on: how many child processes can run at once."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
