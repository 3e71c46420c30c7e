"""Faults for the safety tests: the rebaser CLI run in a subprocess that dies at a chosen
call of a chosen function, as a `kill -9` (no cleanup at all) or a Ctrl-C would leave it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, Sequence

import pytest

# Runs in the subprocess: wraps `module:Qualified.name` so that its nth call dies before or
# after the original runs, then hands the remaining arguments to the CLI.
_DRIVER = r"""
import importlib, os, sys
target, when, nth, how, *argv = sys.argv[1:]
module, _, qualname = target.partition(":")
owner = importlib.import_module(module)
*parents, name = qualname.split(".")
for parent in parents:
    owner = getattr(owner, parent)
original = getattr(owner, name)
calls = 0

def fault():
    if how == "kill":
        os._exit(137)  # what kill -9 leaves: no finally, no atexit, no flushing
    if how == "pause":  # say so, then wait for the test's word: another process acts meanwhile
        import time
        with open(os.environ["FORKKIT_PAUSED"], "w") as said:
            said.write(str(os.getpid()))
        while not os.path.exists(os.environ["FORKKIT_RESUME"]):
            time.sleep(0.05)
        return
    raise KeyboardInterrupt  # what Ctrl-C raises in the main thread

def wrapper(*args, **kwargs):
    global calls
    calls += 1
    if calls == int(nth) and when == "before":
        fault()
    result = original(*args, **kwargs)
    if calls == int(nth) and when == "after":
        fault()
    return result

setattr(owner, name, wrapper)
from rebaser.cli import main
sys.exit(main(argv))
"""


@dataclass(frozen=True)
class FaultPoint:
    """Die at the `nth` call of `target` ("module:Class.method"), `when` before or after it."""

    target: str
    when: Literal["before", "after"]
    nth: int = 1


def run_with_fault(
    point: FaultPoint, args: Sequence[object], *, how: Literal["kill", "interrupt"] = "kill"
) -> subprocess.CompletedProcess:
    return subprocess.run(_command(point, args, how), capture_output=True, text=True, timeout=300)


def start_paused(
    point: FaultPoint, args: Sequence[object], paused: Path, resume: Path
) -> subprocess.Popen:
    """The CLI in a process that stops at `point`, writes its pid to `paused` and waits until
    `resume` exists (wait_for_file(paused, ...) is the moment to act)."""
    env = {**os.environ, "FORKKIT_PAUSED": str(paused), "FORKKIT_RESUME": str(resume)}
    return subprocess.Popen(
        _command(point, args, "pause"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _command(point: FaultPoint, args: Sequence[object], how: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        _DRIVER,
        point.target,
        point.when,
        str(point.nth),
        how,
        *map(str, args),
    ]


def run_cli(args: Sequence[object], **popen: object) -> subprocess.Popen:
    """`rebaser ARGS` as its own process, for signals sent from outside. It takes Ctrl-C as
    from a terminal even when the suite runs in the background (a shell's `&` starts it with
    SIGINT ignored, and Python then never raises KeyboardInterrupt)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rebaser", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
        **popen,  # type: ignore[arg-type]
    )


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 120) -> str:
    """The text of `path` once it exists (written by a test in the patched tree)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if process.poll() is not None:
            raise AssertionError(f"rebaser ended first: {process.communicate()}")
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{path} never appeared")


def process_alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


def kill_leftover(pid: int) -> None:
    """Clean up after a failing test: never leave a process of ours behind."""
    if process_alive(pid):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def mounted(folder: Path, *how: str) -> Iterator[Path]:
    """A real file system on `folder` for the block: `mount <how...> <folder>` (a read-only
    bind mount, a small tmpfs); the test is skipped where mounting is not allowed."""
    done = subprocess.run(["mount", *how, str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def read_only(folder: Path) -> contextlib.AbstractContextManager[Path]:
    """`folder` on a real read-only bind mount (root bypasses mode bits)."""
    return mounted(folder, "--bind", "-o", "ro", str(folder))
