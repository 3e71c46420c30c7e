"""Which commits of a range touch some paths (rebaser/repo/history.py): the answers worked out
from one read of the range are the ones `git log -- <paths>` gives, in its order, on a
history whose merges git simplifies away (one TREESAME to its first parent, one to its
second, one to both, an octopus, one whose first parent is the range's base), with a
rename, a folder, an empty commit and a file that never existed."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest
from synthetic import commit_files, git

from rebaser.repo.git import Git
from rebaser.repo.history import ASKED_ALONE, RangeHistory

PATHS = ["a.py", "b.py", "dir/c.py", "dir", "old.py", "new.py", "dir/x.py", "twin.py", "never.py"]


def _merge(repo: Path, *branches: str, strategy: str = "") -> str:
    chosen = ["-s", strategy] if strategy else []  # git's own: ort, octopus for several
    git(repo, "merge", "-q", "--no-ff", *chosen, "-m", f"merge {' '.join(branches)}", *branches)
    return git(repo, "rev-parse", "HEAD")


def _merged_onto(repo: Path, parent: str, message: str) -> None:
    """A merge of `parent` (first) and HEAD, with HEAD's files, as main's tip."""
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    made = subprocess.run(
        ["git", "commit-tree", tree, "-p", parent, "-p", "HEAD", "-m", message],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(repo, "update-ref", "refs/heads/main", made)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, str, str]:
    repo = tmp_path_factory.mktemp("history")
    git(repo, "init", "-q", "-b", "main")
    root = commit_files(repo, {"a.py": "a\n", "b.py": "b\n"}, "root")
    base = commit_files(repo, {"dir/c.py": "c\n", "old.py": "o\n"}, "base")
    git(repo, "checkout", "-q", "-b", "before", base)
    commit_files(repo, {"dir/before.py": "x\n"}, "a side branch forked at the base")
    git(repo, "checkout", "-q", "main")
    commit_files(repo, {"a.py": "a1\n"}, "main edits a")
    git(repo, "checkout", "-q", "-b", "ours", base)
    commit_files(repo, {"a.py": "a ours\n"}, "side edits a")
    commit_files(repo, {"b.py": "b ours\n"}, "side edits b")
    git(repo, "checkout", "-q", "main")
    _merge(repo, "ours", strategy="ours")  # TREESAME to its first parent everywhere
    git(repo, "checkout", "-q", "-b", "side", "main")
    commit_files(repo, {"dir/c.py": "c side\n"}, "side edits dir/c")
    commit_files(repo, {"old.py": None, "new.py": "o\n"}, "side renames old to new")
    git(repo, "checkout", "-q", "main")
    commit_files(repo, {"b.py": "b main\n"}, "main edits b")
    _merge(repo, "side")  # TREESAME to its second parent in dir/ and the renamed file
    for branch, name in (("one", "a.py"), ("two", "dir/x.py")):
        git(repo, "checkout", "-q", "-b", branch, "main")
        commit_files(repo, {name: f"{branch}\n"}, f"{branch} edits {name}")
    git(repo, "checkout", "-q", "main")
    _merge(repo, "one", "two")  # an octopus
    _merge(repo, "before")
    commit_files(repo, {}, "an empty commit")
    git(repo, "checkout", "-q", "-b", "twin", "main")
    commit_files(repo, {"twin.py": "same\n"}, "twin adds twin.py")
    git(repo, "checkout", "-q", "main")
    commit_files(repo, {"twin.py": "same\n"}, "main adds the same twin.py")
    _merge(repo, "twin")  # TREESAME to both parents in twin.py: git follows the first
    commit_files(repo, {"b.py": "b\n"}, "main puts b back as the base had it")
    # Merges made by hand onto a commit outside the range, TREESAME to it: git's
    # simplification follows the range's base (its bottom) but no older commit.
    _merged_onto(repo, base, "merge onto the base")  # b.py as on the base
    commit_files(repo, {"a.py": "a\n"}, "main puts a back as the root had it")
    _merged_onto(repo, root, "merge onto the root")  # a.py as on the root
    commit_files(repo, {"dir/c.py": "c last\n"}, "main edits dir/c")
    return repo, base, git(repo, "rev-parse", "HEAD")


def _sets() -> list[list[str]]:
    return [list(chosen) for size in (1, 2, 3) for chosen in itertools.combinations(PATHS, size)]


def test_answers_from_one_read_are_gits(history) -> None:
    repo, base, target = history
    read = RangeHistory(Git(repo), base, target, asked_alone=0)
    for paths in _sets():
        logged = git(repo, "--literal-pathspecs", "log", "--no-merges", "--format=%H %s",
                     f"{base}..{target}", "--", *paths)  # fmt: skip
        assert [f"{sha} {subject}" for sha, subject in read.touching(paths)] == (
            logged.splitlines()
        ), paths
        first = git(repo, "--literal-pathspecs", "log", "--first-parent", "--reverse",
                    "--format=%H", f"{base}..{target}", "--", *paths)  # fmt: skip
        assert read.first_parent_touching(paths) == first.split(), paths
    # The history is not trivial: git's simplification hides commits here.
    every = git(repo, "log", "--no-merges", "--format=%H", f"{base}..{target}").split()
    assert len(read.touching(["a.py"])) < len([s for s in every if git(
        repo, "diff-tree", "--no-commit-id", "--name-only", "-r", s, "--", "a.py")])  # fmt: skip


def test_the_first_questions_ask_git_and_later_ones_read_the_range(history, monkeypatch) -> None:
    repo, base, target = history
    asked: list[tuple[str, ...]] = []
    real = Git.run

    def counted(self, *args, **kwargs):
        asked.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Git, "run", counted)
    shared = RangeHistory(Git(repo), base, target)
    alone = RangeHistory(Git(repo), base, target, asked_alone=len(_sets()) * 2)
    for paths in _sets():
        assert shared.touching(paths) == alone.touching(paths)
        assert shared.first_parent_touching(paths) == alone.first_parent_touching(paths)
    own = [args for args in asked if "--literal-pathspecs" in args]
    read = [args for args in asked if args[0] in ("log", "diff-tree")]
    assert len(own) == ASKED_ALONE + len(_sets()) * 2  # the first few, then `alone`'s
    assert [args[0] for args in read] == ["log", "diff-tree"]  # the range, once


def _at(repo: Path, when: int, message: str, tree: str, *parents: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    env.update(GIT_AUTHOR_DATE=f"{when} +0000", GIT_COMMITTER_DATE=f"{when} +0000")
    args = [arg for parent in parents for arg in ("-p", parent)]
    return subprocess.run(
        ["git", "commit-tree", tree, *args, "-m", message],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_git_order_ties_older_ancestors_and_odd_paths(tmp_path) -> None:
    """Commits of one second met in another order than an unlimited walk's; a merge onto an
    ancestor of the base's parent (git's walk has not yet marked it uninteresting); a
    folder's pathspec with a trailing slash, which a file of that name does not match;
    subjects with control characters."""
    repo = tmp_path
    git(repo, "init", "-q", "-b", "main")
    old = commit_files(repo, {"f": "0\n", "p": "file\n"}, "old")
    commit_files(repo, {"b": "b\n"}, "the base's parent")
    base = commit_files(repo, {"c": "c\n"}, "base")
    tree = {}
    for name, text in (("f", "1\n"), ("f", "2\n")):
        (repo / name).write_text(text)
        git(repo, "add", name)
        tree[text] = git(repo, "write-tree")
    s = _at(repo, 1700000002, "S\x01", tree["1\n"], base)
    t = _at(repo, 1700000002, "T\u2028", tree["2\n"], s)
    y = _at(repo, 1700000003, "Y", tree["2\n"], t)
    x = _at(repo, 1700000004, "X", tree["1\n"], s)
    m = _at(repo, 1700000005, "M", tree["2\n"], x, y)
    target = _at(repo, 1700000006, "onto old", git(repo, "rev-parse", f"{old}^{{tree}}"), old, m)
    read = RangeHistory(Git(repo), base, target, asked_alone=0)
    for paths in (["f"], ["p"], ["p/"], ["b"], ["c"], ["f", "c"], ["./f"]):
        logged = git(repo, "--literal-pathspecs", "log", "--no-merges", "-z", "--format=%H %s",
                     f"{base}..{target}", "--", *paths)  # fmt: skip
        assert read.touching(paths) == [
            tuple(record.split(" ", 1)) for record in logged.split("\0") if record
        ], paths
        first = git(repo, "--literal-pathspecs", "log", "--first-parent", "--reverse",
                    "--format=%H", f"{base}..{target}", "--", *paths)  # fmt: skip
        assert read.first_parent_touching(paths) == first.split(), paths
