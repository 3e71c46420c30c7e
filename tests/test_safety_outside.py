"""Issue 18: nothing written outside, nothing left behind. A kill -9 during `bisect` or the
tests leaves folders the next run removes (and no worktree registered in the user's
repository); a symlink where rebaser writes (its lock, a new series folder) is refused, its
target untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faults import FaultPoint, kill_leftover, run_with_fault, wait_until_gone
from synthetic import ADD_DOC, CALC, calc_series, edit, git, history, two_patch_series
from test_safety_interrupt import start_slow_apply

from rebaser.errors import ExitCode
from rebaser.upstream import pypi_cache


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


def test_a_fifo_in_the_overlay_is_refused_not_read_forever(tmp_path, upstream):
    """Found in the sweep: a FIFO in the overlay was read by the overlay step, which waited
    forever for a writer."""
    series = two_patch_series(tmp_path, upstream, overlay={"pkg/extra.py": "X = 1\n"})
    os.mkfifo(series.parent.parent / "overlay" / "pkg" / "pipe")
    done = subprocess.run(
        [sys.executable, "-m", "rebaser", *map(str, apply_args(series, upstream))],
        capture_output=True,
        text=True,
        timeout=300,  # a guard: the bug was a hang
    )
    assert done.returncode == ExitCode.USAGE, done.stdout + done.stderr
    assert "pkg/pipe is not a regular file" in done.stderr


def test_refresh_replaces_a_linked_patch_file_and_never_writes_through_it(
    rebaser, tmp_path, upstream
):
    """Found in the sweep: refresh wrote a changed patch through a patch file that was a
    symlink, into the file it points to (outside the series folder)."""
    series = calc_series(tmp_path, upstream, [("demo: document add", ADD_DOC)])
    patch = series.parent / "0001-change-1.patch"
    outside = tmp_path / "outside.patch"
    outside.write_bytes(patch.read_bytes())
    patch.unlink()
    os.symlink(outside, patch)
    report = tmp_path / "r.json"
    assert rebaser(*apply_args(series, upstream), "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    (tree / "pkg" / "calc.py").write_text((tree / "pkg" / "calc.py").read_text() + "# more\n")
    git(tree, "commit", "-q", "-a", "--amend", "--no-edit")
    before = outside.read_bytes()
    assert rebaser("refresh", "--series", series, "--repo", tree).code == ExitCode.OK
    assert outside.read_bytes() == before
    assert not patch.is_symlink() and "+# more" in patch.read_text()


def test_a_link_at_the_cache_lock_is_refused_and_its_target_kept(rebaser, tmp_path, fake_pypi):
    """Found in the sweep: the release cache's lock file was opened for writing (truncated)
    through a symlink planted there."""
    cache = pypi_cache("megatron-core")
    cache.cache_dir.mkdir(parents=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    os.symlink(precious, cache.cache_dir / ".lock")
    result = rebaser("apply", "--upstream", "pypi:megatron-core==9.9.0", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.out + result.err
    assert "is a symlink" in result.err and precious.read_text() == "precious\n"
