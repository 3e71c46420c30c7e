"""One state-changing command per repository at a time, with real concurrent processes: the
second fails with exit 2 naming the holder, and the first one's state is never lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synthetic import CALC, apply, apply_args, git, two_patch_series

from rebaser.errors import ExitCode

# An overlay test that holds the first apply (and so its lock) until the test releases it.
WAITING_TEST = """
    import os, pathlib, time

    def test_waits_for_release():
        pathlib.Path(os.environ["FORKKIT_HELD"]).write_text("held")
        deadline = time.monotonic() + 120
        while not pathlib.Path(os.environ["FORKKIT_RELEASE"]).exists():
            assert time.monotonic() < deadline, "never released"
            time.sleep(0.05)
"""


def rebaser_process(*args, env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rebaser", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


@pytest.fixture
def held_apply(tmp_path, upstream):
    """A real `rebaser apply` process, paused inside its test run (holding the lock)."""
    series = two_patch_series(tmp_path, upstream, overlay={"tests/test_hold.py": WAITING_TEST})
    env = dict(
        os.environ,
        FORKKIT_HELD=str(tmp_path / "held"),
        FORKKIT_RELEASE=str(tmp_path / "release"),
    )
    first = rebaser_process(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1", env=env
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "held").exists():
        if first.poll() is not None or time.monotonic() > deadline:
            first.kill()
            pytest.fail("the first apply never reached its tests: " + first.communicate()[1])
        time.sleep(0.05)
    yield series, env, first
    (tmp_path / "release").write_text("go")
    first.communicate(timeout=120)


def test_second_apply_fails_naming_the_first(held_apply, upstream):
    series, env, first = held_apply
    second = rebaser_process(
        *apply_args(series, upstream, "v1", "--force"),
        env=env,
    )
    _, err = second.communicate(timeout=120)
    assert second.returncode == ExitCode.USAGE, err
    assert "another rebaser command is running in this repository" in err
    assert f"rebaser apply (pid {first.pid}," in err
    # The first apply is untouched and finishes.
    (Path(env["FORKKIT_RELEASE"])).write_text("go")
    out, err = first.communicate(timeout=120)
    assert first.returncode == ExitCode.OK, out + err
    assert git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/heads/forkkit") == (
        "refs/heads/forkkit/demo/v1"
    )


def hold_lock(repo: Path) -> subprocess.Popen:
    """Another process holding the repository's lock, as a running `continue` would."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom rebaser.repo.git import Git\nfrom rebaser.repo.lock import "
            "repository_lock\nwith repository_lock(Git(sys.argv[1]), 'continue'):\n"
            "    print('held', flush=True)\n    time.sleep(120)",
            str(repo),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize(
    "command",
    [("abort",), ("continue",), ("apply", "--base", "v1", "--test", "none"), ("refresh",)],
    ids=lambda c: c[0],
)
def test_state_changing_commands_refuse_while_the_lock_is_held(
    rebaser, tmp_path, upstream, command
):
    series = two_patch_series(tmp_path, upstream)
    upstream.commit(
        {"pkg/calc.py": CALC.replace("def add(a, b):", "def add(x, y):")}, "v2", tag="v2"
    )
    stopped = apply(rebaser, series, upstream, "v2")
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    worktree = (
        git(upstream.path, "worktree", "list", "--porcelain").split("worktree ")[2].split("\n")[0]
    )
    holder = hold_lock(upstream.path)
    try:
        extra = ["--series", series] if command[0] in ("apply", "refresh") else []
        where = ["--repo", worktree if command[0] == "refresh" else upstream.path]
        blocked = subprocess.run(
            [sys.executable, "-m", "rebaser", *command, *extra, *map(str, where)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert blocked.returncode == ExitCode.USAGE, blocked.stderr
        assert f"rebaser continue (pid {holder.pid}," in blocked.stderr
        # Nothing of the stopped apply was touched.
        status = rebaser("status", "--repo", upstream.path)
        assert "stopped at 0001-change-1.patch" in status.out
        assert Path(worktree).is_dir()
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock with its holder: no stale lock to remove by hand.
    assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK
