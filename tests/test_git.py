"""The git runner's own shortcuts agree with git."""

from __future__ import annotations

from pathlib import Path

from rebaser.git import Git
from tests.synthetic import git


def test_common_dir_is_what_git_says_for_every_layout(tmp_path: Path) -> None:
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q")
    git(main, "commit", "-q", "--allow-empty", "-m", "start")
    (main / "sub").mkdir()
    git(main, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    git(tmp_path, "clone", "-q", "--bare", str(main), str(tmp_path / "bare.git"))
    linked_git_dir = main / ".git" / "worktrees" / "linked"
    for where in (main, main / "sub", tmp_path / "linked", linked_git_dir, tmp_path / "bare.git"):
        said = git(where, "rev-parse", "--git-common-dir")
        assert Git(where).common_dir() == (where / said).resolve(), where
