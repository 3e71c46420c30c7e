"""Many merges in one `git merge-tree --stdin` (rebaser/repo/merge_tree.py): each answer is
the one a `git merge-tree --write-tree` of its own gives, whatever its messages, and a
process that fails hands over to one process a merge."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from synthetic import commit_verbatim, git

from rebaser.repo.git import Git
from rebaser.repo.merge_tree import Merged, TreeMerges

AUTHOR = "T <t@t>"


def _commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            git(repo, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(repo, "add", name)
    return commit_verbatim(repo, message + "\n", author=AUTHOR)


def _history(repo: Path) -> list[str]:
    """Branch tips whose merges are clean, conflicted in one or several files, with
    messages (auto-merges, a rename against a modification, modify/delete), and with file
    names git would quote (a space, a tab, non-ASCII)."""
    git(repo, "init", "-q", "-b", "main")
    lines = "".join(f"line {n}\n" for n in range(40))
    base = _commit(
        repo,
        {
            "a.py": lines,
            "b.py": lines,
            "dir/c.py": lines,
            "gone.py": lines,
            "odd name\t é.py": lines,
        },
        "base",
    )
    tips = []
    for branch, files in [
        ("edits-a-top", {"a.py": "top\n" + lines}),
        ("edits-a-top-too", {"a.py": "other top\n" + lines}),
        ("edits-a-bottom", {"a.py": lines + "bottom\n"}),
        ("renames-b", {"b.py": None, "renamed/b.py": lines}),
        ("edits-b", {"b.py": lines.replace("line 7\n", "seven\n")}),
        ("deletes-gone", {"gone.py": None, "odd name\t é.py": "w\n" + lines}),
        ("edits-gone-and-odd", {"gone.py": "x\n" + lines, "odd name\t é.py": "y\n" + lines}),
        ("edits-odd", {"odd name\t é.py": "z\n" + lines, "dir/c.py": "c\n" + lines}),
    ]:
        git(repo, "checkout", "-q", "-b", branch, base)
        tips.append(_commit(repo, files, branch))
    return tips


def _alone(repo: Git, ours: str, theirs: str) -> Merged | None:
    merges = TreeMerges(repo)
    merges._one_process = False  # the path of a git without --stdin
    return merges.merge(ours, theirs)


def test_answers_match_a_process_per_merge(tmp_path):
    tips = _history(tmp_path)
    repo = Git(tmp_path)
    pairs = [(ours, theirs) for ours in tips for theirs in tips if ours != theirs]
    with TreeMerges(repo) as merges:
        answers = [merges.merge(ours, theirs) for ours, theirs in pairs]
        assert merges._one_process, "the long-running process answered every merge"
    expected = [_alone(repo, ours, theirs) for ours, theirs in pairs]
    assert answers == expected
    conflicted = {tuple(answer.conflicted) for answer in answers if answer}
    assert ("a.py",) in conflicted and ("gone.py", "odd name\t é.py") in conflicted
    assert () in conflicted  # clean merges too
    # each tree is the one git writes for the merge
    ours, theirs = tips[0], tips[2]
    assert answers[pairs.index((ours, theirs))].tree == git(
        tmp_path, "merge-tree", "--write-tree", ours, theirs
    )


def test_a_process_that_dies_hands_over_to_one_process_a_merge(tmp_path):
    tips = _history(tmp_path)
    repo = Git(tmp_path)
    with TreeMerges(repo) as merges:
        first = merges.merge(tips[0], tips[1])
        assert merges._process is not None
        os.kill(merges._process.pid, signal.SIGKILL)
        merges._process.wait()
        second = merges.merge(tips[0], tips[2])
        assert not merges._one_process and merges._process is None
        third = merges.merge(tips[3], tips[4])
    assert first == _alone(repo, tips[0], tips[1]) and first.conflicted == ["a.py"]
    assert second == _alone(repo, tips[0], tips[2]) and second.conflicted == []
    assert third == _alone(repo, tips[3], tips[4])


def test_unrelated_histories_are_no_merge(tmp_path):
    tips = _history(tmp_path)
    git(tmp_path, "checkout", "-q", "--orphan", "unrelated")
    git(tmp_path, "rm", "-rq", "--cached", ".")
    lone = _commit(tmp_path, {"lone.py": "x\n"}, "unrelated root")
    repo = Git(tmp_path)
    with TreeMerges(repo) as merges:
        assert merges.merge(tips[0], lone) is None
        assert merges.merge(tips[0], tips[2]) == _alone(repo, tips[0], tips[2])
    assert _alone(repo, tips[0], lone) is None


def test_threads_share_one_process(tmp_path):
    tips = _history(tmp_path)
    repo = Git(tmp_path)
    pairs = [(ours, theirs) for ours in tips for theirs in tips if ours != theirs] * 3
    with TreeMerges(repo) as merges, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda pair: merges.merge(*pair), pairs))
        assert merges._one_process
    assert answers == [_alone(repo, ours, theirs) for ours, theirs in pairs]


def test_commits_written_by_python_are_the_ones_commit_tree_makes(tmp_path, monkeypatch):
    """The probes' commits (rebaser/repo/commits.py) are written as loose objects into the
    scratch repository, their trees named by one `git cat-file --batch-check`: at the same
    second and in the same time zone each is, byte for byte, the commit `git commit-tree`
    makes, git reads it, and a name of no tree (a commit's, a missing one) fails as
    commit-tree fails. Outside a scratch repository (the user's own) git makes them."""
    import time

    import pytest

    from rebaser.errors import RebaserError
    from rebaser.repo import scratch
    from rebaser.repo.commits import Commits
    from rebaser.repo.git import commit_tree

    repo = tmp_path / "repo"
    repo.mkdir()
    tips = _history(repo)
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.5)  # git.commit_text's clock
    # git's zone when no date is given is the local one (POSIX form: no time zone database)
    monkeypatch.setenv("TZ", "XST-5:30")
    time.tzset()
    at = "@1700000000 +0530"
    try:
        with scratch.repository(repo / ".git", tips[0]) as lane, Commits(lane) as made:
            assert made._objects is not None
            base = made.commit(f"{tips[0]}^{{tree}}", [], "base\n")
            assert base == commit_tree(lane, f"{tips[0]}^{{tree}}", [], "base\n", date=at)
            assert git(lane.path, "cat-file", "-t", base) == "commit"
            for tip in tips[1:]:
                tree = f"{tip}^{{tree}}"
                ours = made.commit(tree, [base, tips[0]], "upstream\n")
                assert ours == commit_tree(lane, tree, [base, tips[0]], "upstream\n", date=at)
                trees = [git(lane.path, "rev-parse", f"{c}^{{tree}}") for c in (ours, tip)]
                assert trees[0] == trees[1]
            for wrong in ("no-such-branch^{tree}", tips[1]):
                with pytest.raises(RebaserError):
                    made.commit(wrong, [base], "upstream\n")
            tree = git(repo, "rev-parse", f"{tips[1]}^{{tree}}")
            assert made.commit(tree, [base], "again\n") == commit_tree(
                lane, tree, [base], "again\n", date=at
            )
            assert made._objects is not None  # still written by Python after the failed names
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    with Commits(Git(repo)) as own:  # the user's repository: commit-tree makes them
        assert own._objects is None
        made_there = own.commit(tree, [tips[0]], "again\n")  # at git's clock
    assert (
        git(repo, "rev-parse", f"{made_there}^{{tree}}", f"{made_there}^") == f"{tree}\n{tips[0]}"
    )


def test_a_subtree_holds_only_the_paths_asked(tmp_path):
    """A probe's trees cut to some paths (repo/subtrees.py): the tree git writes from an
    index holding only those entries as the whole tree holds them (an executable, a
    submodule whose commit is not in the repository, names with spaces and tabs), a path
    the tree lacks left out; in the user's own repository none is written."""
    from rebaser.repo import scratch
    from rebaser.repo.commits import Commits
    from rebaser.repo.subtrees import Subtrees, Unreadable

    repo = tmp_path / "repo"
    repo.mkdir()
    _history(repo)  # the last branch checked out
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "my file.py").write_text("x\n")
    git(repo, "add", "run.sh", "my file.py")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    tip = commit_verbatim(repo, "script\n", author=AUTHOR)
    asked = {"a.py", "dir/c.py", "odd name\t é.py", "run.sh", "my file.py", "sub", "no/such.py"}
    with scratch.repository(repo / ".git", tip) as lane, Commits(lane) as made:
        trees = Subtrees(made)
        cut = trees.cut(tip, asked)
        assert trees.holds(tip, "my file.py") and not trees.holds(tip, "my")
        assert trees._process is not None
        trees._process.kill()  # git's answers end: the cut cannot read, and says so
        trees._process.wait()
        with pytest.raises(Unreadable):
            trees.entry(f"{tip}^", "a.py")
        assert trees.holds(f"{tip}^", "a.py")  # a new process answers the next one
        with pytest.raises(Unreadable):
            trees.entry("no-such-commit", "a.py")
        trees.close()
        index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
        listed = lane.run("ls-tree", "-r", "-z", f"{tip}^{{tree}}").stdout.split("\0")
        entries = [entry.split("\t", 1) for entry in listed if entry]
        info = "".join(
            f"{meta.split()[0]} {meta.split()[2]}\t{path}\0"
            for meta, path in entries
            if path in asked
        )
        lane.run("update-index", "-z", "--add", "--index-info", env=index, stdin=info.encode())
        assert cut == lane.out("write-tree", env=index)
        assert sorted(lane.out("ls-tree", "-r", "--name-only", "-z", cut).split("\0")[:-1]) == [
            "a.py", "dir/c.py", "my file.py", "odd name\t é.py", "run.sh", "sub"
        ]  # fmt: skip
    with Commits(Git(repo)) as own:
        assert Subtrees(own).cut(tip, asked) is None


def test_a_cut_probe_answers_as_a_whole_one_where_ort_pairs_files(tmp_path):
    """From a hostile review, each a case where the first cut answered otherwise: upstream
    renames a folder the patch adds a file to; the patch renames a folder upstream adds a
    file to; a rename of a file whose name has one space; a submodule both sides move; a
    patch that renames a file upstream then edits (bisected: the edit is named)."""
    from rebaser.carry.collision import Bisector
    from rebaser.repo import scratch

    lines = "".join(f"line {n}\n" for n in range(30))
    cases = {
        "upstream moves the folder": (
            {"dir/a.py": lines, "dir/b.py": lines.upper()},
            {"dir/new.py": "fork\n"},
            {"dir/a.py": None, "dir/b.py": None, "pkg/a.py": lines, "pkg/b.py": lines.upper(),
             "pkg/new.py": "upstream\n"},
        ),
        "the patch moves the folder": (
            {"lib_old/a.py": lines, "lib_old/b.py": lines.upper()},
            {"lib_old/a.py": None, "lib_old/b.py": None, "lib/a.py": lines,
             "lib/b.py": lines.upper(), "lib/new.py": "fork\n"},
            {"lib_old/new.py": "upstream\n"},
        ),
        "a name with one space": (
            {"my file.py": lines},
            {"my file.py": lines.replace("line 7\n", "fork 7\n")},
            {"my file.py": None, "my_file.py": lines.replace("line 7\n", "upstream 7\n")},
        ),
    }  # fmt: skip
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for number, (name, (base, fork, upstream)) in enumerate(cases.items()):
        git(repo, "checkout", "-q", "--orphan", f"base{number}")
        git(repo, "rm", "-rqf", "--ignore-unmatch", ".")
        root = _commit(repo, {**base, "keep.py": name}, "base")
        git(repo, "checkout", "-q", "-b", f"fork{number}")
        patch = _commit(repo, fork, "fork")
        git(repo, "checkout", "-q", "-b", f"up{number}", root)
        theirs = _commit(repo, upstream, "upstream")
        with (
            scratch.repository(repo / ".git", theirs) as lane,
            Bisector(lane, root, theirs, commit_of=lambda patch: patch) as bisector,
        ):
            whole = bisector.conflicts(patch, [], theirs)  # type: ignore[arg-type]
            assert whole, name
            for asked in whole:
                cut = bisector.conflicts(patch, [], theirs, {asked})  # type: ignore
                assert asked in (cut or []), (name, asked, whole, cut)


def test_a_probe_cut_to_the_files_asked_answers_as_a_whole_one(tmp_path):
    """Each branch of the history picked onto each other, asked about each file either
    changes or the whole merge leaves in conflict: a conflict, a modify/delete, a rename
    against a modification (either way round). The cut merge conflicts in the file asked
    exactly when the whole one does; the file a patch changes that all three trees hold
    and nothing asks about is left out."""
    from rebaser.carry.collision import Bisector
    from rebaser.repo import scratch

    repo = tmp_path / "repo"
    repo.mkdir()
    tips = _history(repo)
    base = git(repo, "rev-parse", f"{tips[0]}^")
    with (
        scratch.repository(repo / ".git", tips[0]) as lane,
        Bisector(lane, base, tips[0], commit_of=lambda patch: patch) as bisector,
    ):
        for patch in tips:
            for upstream in tips:
                whole = bisector.conflicts(patch, [], upstream)  # type: ignore[arg-type]
                assert whole is not None
                files = {*whole, *bisector._picks.changed(patch)}
                for asked in files | bisector._picks.changed(upstream):
                    cut = bisector.conflicts(patch, [], upstream, {asked})  # type: ignore
                    assert cut is not None
                    assert (asked in cut) == (asked in whole), (patch, upstream, asked, whole)
        edits_gone_and_odd, deletes_gone = tips[6], tips[5]
        within = bisector._within(edits_gone_and_odd, [], tips[0], {"gone.py"})  # type: ignore
        assert within == {"gone.py"}
        within = bisector._within(deletes_gone, [], tips[0], {"gone.py"})  # type: ignore
        assert within == {"gone.py"}  # the other file it changes, all three trees hold
        assert bisector._within(base, [], tips[0], {"a.py"}) is None  # a root: no changes known
