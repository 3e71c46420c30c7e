"""The git runner's own shortcuts agree with git."""

from __future__ import annotations

import os
from pathlib import Path

from rebaser.carry.structured import Unmerged
from rebaser.repo.git import Git, commit_env
from rebaser.repo import memo as memo_module
from rebaser.repo.memo import memo
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


def test_common_dir_of_a_linked_worktree_whose_files_look_like_a_git_dir(tmp_path: Path) -> None:
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q")
    (main / "HEAD").write_text("a file of the project\n")
    (main / "objects").mkdir()
    (main / "objects" / "README").write_text("so is this\n")
    git(main, "add", "-A")
    git(main, "commit", "-q", "-m", "start")
    git(main, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    for where in (main, tmp_path / "linked"):
        said = git(where, "rev-parse", "--git-common-dir")
        assert Git(where).common_dir() == (where / said).resolve(), where


def test_unmerged_paths_keep_spaces_and_other_characters(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    names = ["sp ace.py", "café.py"]
    for name in names:
        (repo / name).write_text("start\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    git(repo, "checkout", "-q", "-b", "other")
    for name in names:
        (repo / name).write_text("other\n")
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    for name in names:
        (repo / name).write_text("main\n")
    git(repo, "commit", "-q", "-am", "main")
    # no identity is configured on a fresh machine: the merge commit would need one
    merge = Git(repo).run("merge", "other", env=commit_env("1700000000 +0000"), check=False)
    assert not merge.ok and "CONFLICT" in merge.stdout
    assert Git(repo).unmerged_paths() == sorted(names)
    # what the structured merge reads of the same index, in one `ls-files -u`
    unmerged = Unmerged.read(Git(repo))
    assert unmerged.paths == sorted(names)
    blob = {side: git(repo, "rev-parse", f"{side}:café.py") for side in ("HEAD~1", "HEAD", "other")}
    assert unmerged.stages["café.py"] == (blob["HEAD~1"], blob["HEAD"], blob["other"])


def test_blobs_reads_each_name_once_and_only_blobs(tmp_path: Path) -> None:
    """One `cat-file --batch` for names that repeat and name trees or nothing: a tree's
    content must not be taken for the next blob's (git writes it too)."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "pkg" / "a.py").write_text("A = 1\n")
    (repo / "b.py").write_text("B = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    names = ["HEAD:pkg", "HEAD:b.py", "HEAD:missing.py", "HEAD:b.py", "HEAD:pkg/a.py"]
    found = Git(repo).blobs(names)
    assert found == {
        "HEAD:pkg": None,
        "HEAD:b.py": b"B = 2\n",
        "HEAD:missing.py": None,
        "HEAD:pkg/a.py": b"A = 1\n",
    }
    assert list(found) == ["HEAD:pkg", "HEAD:b.py", "HEAD:missing.py", "HEAD:pkg/a.py"]


def test_blobs_read_a_name_with_a_newline_apart(tmp_path: Path) -> None:
    """`cat-file --batch` reads a name a line: a path holding a newline would be two names,
    and every later answer taken for the name before it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "two\nlines.py").write_text("TWO = 2\n")
    (repo / "b.py").write_text("B = 2\n")
    (repo / "lines.py").write_text("LINES = 3\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    names = ["HEAD:two\nlines.py", "HEAD:b.py", "HEAD:gone\nfile.py", "HEAD:lines.py"]
    assert Git(repo).blobs(names) == {
        "HEAD:two\nlines.py": b"TWO = 2\n",
        "HEAD:b.py": b"B = 2\n",
        "HEAD:gone\nfile.py": None,
        "HEAD:lines.py": b"LINES = 3\n",
    }


def test_blobs_read_missing_names_with_spaces_and_a_carriage_return(tmp_path: Path) -> None:
    """git answers a missing name with the name and "missing": a path with one space read
    as a size (ValueError: an apply exited 6); git 2.39 drops a name's trailing CR, and gave
    the file without it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("A = 1\n")
    (repo / "my mod.py").write_text("MOD = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    names = [
        "HEAD:pkg/my mod.py",
        "HEAD:my mod.py",
        "HEAD:a.py\r",
        "HEAD:no such file.py",
        "HEAD:a.py",
    ]
    assert Git(repo).blobs(names) == {
        "HEAD:pkg/my mod.py": None,
        "HEAD:my mod.py": b"MOD = 2\n",
        "HEAD:a.py\r": None,
        "HEAD:no such file.py": None,
        "HEAD:a.py": b"A = 1\n",
    }


def test_a_memo_keyed_by_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A fork's file named in Latin-1 reaches the memo's key (the series' files) as a
    surrogate escape: the entry is named, saved and read back with the name as it was."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    name = os.fsdecode(b"pkg/caf\xe9.py")
    entry = memo(Git(repo), "upstream", "base", "tip", name)
    entry.save({"files": [name]})
    assert memo(Git(repo), "upstream", "base", "tip", name).load() == {"files": [name]}
    assert memo(Git(repo), "upstream", "base", "tip", "pkg/café.py").path != entry.path


def test_a_memo_entry_of_other_code_is_not_found(tmp_path: Path, monkeypatch) -> None:
    """An entry may hold a verdict rebaser's rules made (a proposal's reason): another
    rebaser (an upgrade) must not read it as its own."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    memo(Git(repo), "same-lines", "target", "patch").save({"value": "superseded: ..."})
    assert memo(Git(repo), "same-lines", "target", "patch").load() == {"value": "superseded: ..."}
    monkeypatch.setattr(memo_module, "_code", lambda: "an upgraded rebaser")
    assert memo(Git(repo), "same-lines", "target", "patch").load() is None


def test_a_command_whose_bytes_are_read_fails_as_it_failed(tmp_path: Path, monkeypatch) -> None:
    """output_bytes ran a failed command again for run()'s message, and where that second
    run succeeded (a repository being written meanwhile) it returned the first run's empty
    output as an answer: the lane's judge then read no file at all."""
    import subprocess

    import pytest

    from rebaser.errors import RebaserError

    git(tmp_path, "init", "-q")
    runs = []

    def flaky(self, args, env, stdin):
        runs.append(args)
        code = 128 if len(runs) == 1 else 0
        return subprocess.CompletedProcess(args, code, b"" if code else b"ok\n", b"fatal: busy\n")

    monkeypatch.setattr(Git, "_completed", flaky)
    with pytest.raises(RebaserError, match="fatal: busy"):
        Git(tmp_path).output_bytes("cat-file", "--batch", stdin=b"HEAD\n")
    assert len(runs) == 1


def test_blobs_reads_commits_when_asked(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "start")
    head = git(tmp_path, "rev-parse", "HEAD")
    found = Git(tmp_path).blobs([head, "HEAD^{tree}", "nothing"], kind="commit")
    assert found[head] == git(tmp_path, "cat-file", "commit", head).encode() + b"\n"
    assert found["HEAD^{tree}"] is None and found["nothing"] is None
