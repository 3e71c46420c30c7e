"""Issue 18: nothing written outside, nothing left behind. A kill -9 during `bisect` or the
tests leaves folders the next run removes (and no worktree registered in the user's
repository); a symlink where rebaser writes (its lock, a new series folder) is refused, its
target untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faults import FaultPoint, kill_leftover, run_with_fault, wait_until_gone
from synthetic import CALC, edit, git, history, two_patch_series
from test_safety_interrupt import start_slow_apply

from rebaser.errors import ExitCode


@pytest.fixture
def own_tmpdir(tmp_path, monkeypatch) -> Path:
    """A temporary folder of this test's own, for the processes it starts."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def bisect_args(series, upstream) -> list:
    return ["bisect", "--series", series, "--repo", upstream.path, "--good", "v1", "--bad", "main"]


def registered(upstream) -> list[str]:
    listing = git(upstream.path, "worktree", "list", "--porcelain").splitlines()
    return [line.split(" ", 1)[1] for line in listing if line.startswith("worktree ")][1:]


def test_a_bisect_killed_midway_leaves_nothing_the_next_one_keeps(tmp_path, upstream, own_tmpdir):
    """Case 7: kill -9 while `git bisect run` walks: its detached worktree stayed registered
    in the user's repository for good; the next bisect removes it and its folder."""
    series = two_patch_series(tmp_path, upstream)
    history(upstream, 5, {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}, 8)
    died = run_with_fault(
        FaultPoint("rebaser.commands.bisect:Git", "after"), bisect_args(series, upstream)
    )
    assert died.returncode == 137, died.stdout + died.stderr
    (left,) = registered(upstream)
    assert Path(left).is_relative_to(own_tmpdir)
    again = subprocess.run(
        [sys.executable, "-m", "rebaser", *map(str, bisect_args(series, upstream))],
        capture_output=True,
        text=True,
    )
    assert again.returncode == ExitCode.OK, again.stdout + again.stderr
    assert "first bad commit" in again.stdout
    assert registered(upstream) == []
    assert list(own_tmpdir.iterdir()) == []


@pytest.mark.parametrize("in_base", [False, True], ids=["overlay tests", "base tests"])
def test_folders_a_kill_during_tests_leaves_are_swept(tmp_path, upstream, own_tmpdir, in_base):
    """Case 8: kill -9 during the tests left $TMPDIR/forkkit-pytest-* and forkkit-base-* (a
    full copy of the base tree: 63 MB for Megatron-LM) for good; the next test run removes
    them, as the lane's orphans are removed."""
    process, pytest_pid = start_slow_apply(tmp_path, upstream, in_base=in_base)
    try:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=600)
        assert wait_until_gone(pytest_pid, timeout=300)
    finally:
        kill_leftover(pytest_pid)
    left = sorted(path.name.rsplit("-", 1)[0] for path in own_tmpdir.iterdir())
    assert left == (["forkkit-base", "forkkit-pytest"] if in_base else ["forkkit-pytest"]), left
    done = subprocess.run(
        [sys.executable, "-m", "rebaser", "continue", "--repo", str(upstream.path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert list(own_tmpdir.iterdir()) == []


def test_a_symlink_at_the_lock_path_is_refused_and_its_target_kept(rebaser, tmp_path, upstream):
    """Case 9: a symlink at .git/forkkit/lock had its target truncated."""
    series = two_patch_series(tmp_path, upstream)
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    lock = upstream.path / ".git" / "forkkit" / "lock"
    lock.parent.mkdir(parents=True)
    os.symlink(precious, lock)
    result = rebaser(*apply_args(series, upstream))
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "symlink" in result.err and str(lock) in result.err, result.err
    assert precious.read_text() == "precious\n"
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""


def test_import_into_a_dangling_symlink_writes_nothing_at_its_target(rebaser, tmp_path, upstream):
    """Case 10: `import --series-dir <dangling symlink>` wrote the series at the link's
    target."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    upstream.commit({"pkg/extra.py": "X = 1\n"}, "extra: new module")
    git(upstream.path, "checkout", "-q", "main")
    target = tmp_path / "elsewhere" / "planted"
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "series-link"
    os.symlink(target, link)
    args = ["import", "--repo", upstream.path, "--range", "v1..fork", "--series-dir", link]
    result = rebaser(*args)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "symlink" in result.err and str(link) in result.err, result.err
    assert not target.exists() and list((tmp_path / "elsewhere").iterdir()) == []


def apply_args(series, upstream) -> list:
    return ["apply", "--series", series, "--repo", upstream.path, "--base", "v1", "--test", "none"]
