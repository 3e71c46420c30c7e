"""Nothing is written outside the worktree: symlinks on the overlay's way (upstream's or the
overlay's own), `.git` entries and series entries leaving the series folder are refused with
exit 2 and the path, before any branch, worktree or file is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from synthetic import ADD_DOC, apply, calc_series, git

from rebaser.errors import ExitCode


def series_with_overlay(tmp_path, upstream, overlay):
    return calc_series(tmp_path, upstream, [("demo: document add", ADD_DOC)], overlay=overlay)


def commit_symlink(upstream, link: str, target: str, tag: str) -> None:
    path = upstream.path / link
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)
    git(upstream.path, "add", "--all")
    git(upstream.path, "commit", "-qm", f"symlink {link}")
    git(upstream.path, "tag", tag)


def assert_nothing_created(upstream, outside: Path) -> None:
    assert list(outside.iterdir()) == []
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 1


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside every worktree that nothing may write into."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


@pytest.mark.parametrize(
    "link, target_of, overlay_path",
    [
        # a dangling link where the overlay puts a file: the copy would create its target
        ("pkg/extra.py", lambda outside: str(outside / "planted.py"), "pkg/extra.py"),
        # a link to a folder where the overlay puts a file
        ("pkg/extra.py", lambda outside: str(outside), "pkg/extra.py"),
        # a symlinked parent folder of an overlay file
        ("pkg/plugins", lambda outside: str(outside), "pkg/plugins/new.py"),
    ],
    ids=["dangling-link", "link-to-folder", "linked-parent"],
)
def test_upstream_symlink_at_an_overlay_path_is_refused(
    rebaser, tmp_path, upstream, outside, link, target_of, overlay_path
):
    commit_symlink(upstream, link, target_of(outside), tag="v2")
    series = series_with_overlay(tmp_path, upstream, {overlay_path: "PLANTED = True\n"})
    result = apply(rebaser, series, upstream, "v2")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert f"upstream has a symlink at {link}" in result.err
    assert overlay_path in result.err
    assert_nothing_created(upstream, outside)


def test_symlink_inside_the_overlay_is_refused(rebaser, tmp_path, upstream, outside):
    secret = outside / "secret.txt"
    secret.write_text("private key\n")
    series = series_with_overlay(tmp_path, upstream, {"pkg/extra.py": "X = 1\n"})
    os.symlink(secret, tmp_path / "proj" / "overlay" / "pkg" / "leak.txt")
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert "pkg/leak.txt is a symlink" in result.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert "private key" not in git(upstream.path, "log", "--all", "-p")


@pytest.mark.parametrize("entry", [".git/config", "pkg/.git", "pkg/deep/.GIT/HEAD"])
def test_overlay_entry_named_dot_git_is_refused(rebaser, tmp_path, upstream, entry):
    series = series_with_overlay(tmp_path, upstream, {entry: "[core]\n\tworktree = /\n"})
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert "named .git" in result.err.lower()
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""


def test_series_entry_leaving_the_series_folder_is_refused(rebaser, tmp_path, upstream):
    series = series_with_overlay(tmp_path, upstream, None)
    patch = series.parent / "0001-change-1.patch"
    (tmp_path / "elsewhere.patch").write_text(patch.read_text())
    series.write_text("@name demo\n../elsewhere.patch\n")
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert "patch entry ../elsewhere.patch leaves" in result.err
    assert f"{series}:2" in result.err


def test_overlay_file_is_never_written_through_a_link_planted_in_the_worktree(tmp_path, outside):
    from rebaser.series.confinement import write_new_file

    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    os.symlink(outside, root / "pkg" / "sub")
    os.symlink(outside / "x.py", root / "pkg" / "dangling.py")
    with pytest.raises(Exception, match="leads outside the worktree"):
        write_new_file(root, "pkg/sub/new.py", b"x")
    with pytest.raises(Exception, match="already exists"):
        write_new_file(root, "pkg/dangling.py", b"x")
    assert list(outside.iterdir()) == []
