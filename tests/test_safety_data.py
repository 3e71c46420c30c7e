"""Issue 9 item 1: `continue`, `abort` and `apply --force` never delete the user's files in
the worktree: untracked files are refused before anything happens, ignored ones are kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from synthetic import ADD_DOC, CALC, DOUBLE_MUL, Change, build_series, calc_series, edit, git
from test_apply_synthetic import apply, two_patch_series, worktree_of

from rebaser.errors import ExitCode

HALF_DIV = edit(DOUBLE_MUL, "    return a / b\n", "    return a / b / 2\n")
# v2 changes both lines the second and third patches change: each stops in turn.
V2 = edit(
    edit(CALC, "    return a * b\n", "    return b * a\n"),
    "    return a / b\n",
    "    return (a / b)\n",
)
RESOLVED_MUL = edit(
    edit(V2, "def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n'),
    "    return b * a\n",
    "    return 2 * b * a\n",
)


def stopped_twice_series(tmp_path, upstream) -> Path:
    """Three patches; on v2 the second stops, and after its fix the third stops too."""
    series = calc_series(
        tmp_path,
        upstream,
        [
            ("demo: document add", ADD_DOC),
            ("demo: double mul", DOUBLE_MUL),
            ("demo: halve div", HALF_DIV),
        ],
    )
    upstream.commit({"pkg/calc.py": V2, ".gitignore": "*.log\n"}, "v2", tag="v2")
    return series


def stop_at_second_patch(rebaser, tmp_path, upstream) -> Path:
    series = stopped_twice_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v2", "--json", report).code == ExitCode.NOT_APPLIED
    tree = worktree_of(report)
    (tree / "pkg/calc.py").write_text(RESOLVED_MUL)
    git(tree, "add", "pkg/calc.py")
    return tree


def test_continue_refuses_untracked_files_before_doing_anything(rebaser, tmp_path, upstream):
    tree = stop_at_second_patch(rebaser, tmp_path, upstream)
    (tree / "notes.txt").write_text("what I tried\n")
    (tree / "pkg/helper.py").write_text("def helper():\n    pass\n")
    head = git(tree, "rev-parse", "HEAD")

    refused = rebaser("continue", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE
    assert "untracked" in refused.err and "notes.txt" in refused.err
    assert "pkg/helper.py" in refused.err and "git add" in refused.err
    assert git(tree, "rev-parse", "HEAD") == head  # nothing committed, nothing reset
    assert (tree / "notes.txt").read_text() == "what I tried\n"
    assert git(tree, "diff", "--cached", "--name-only") == "pkg/calc.py"

    # The user adds what belongs to the fix and moves the notes out: continue goes on and
    # stops at the third patch, the added module committed with the second.
    git(tree, "add", "pkg/helper.py")
    (tree / "notes.txt").rename(tmp_path / "notes.txt")
    again = rebaser("continue", "--repo", upstream.path)
    assert again.code == ExitCode.NOT_APPLIED and "0003-change-3.patch" in again.out
    assert "pkg/helper.py" in git(tree, "show", "--name-only", "--format=", "HEAD")


def test_ignored_files_survive_a_continue_that_stops_again(rebaser, tmp_path, upstream):
    tree = stop_at_second_patch(rebaser, tmp_path, upstream)
    (tree / "run.log").write_text("my test log\n")
    again = rebaser("continue", "--repo", upstream.path)
    assert again.code == ExitCode.NOT_APPLIED and "0003-change-3.patch" in again.out
    assert (tree / "run.log").read_text() == "my test log\n"


def backups(upstream) -> list[str]:
    return git(
        upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/"
    ).split()


def test_abort_keeps_ignored_files_in_the_backup(rebaser, tmp_path, upstream):
    tree = stop_at_second_patch(rebaser, tmp_path, upstream)
    (tree / "results.log").write_text("measurements\n")
    result = rebaser("abort", "--repo", upstream.path)
    assert result.code == 0 and "ignored" in result.out
    (backup,) = backups(upstream)
    assert git(upstream.path, "show", f"{backup}:results.log") == "measurements"
    assert git(upstream.path, "show", f"{backup}:pkg/calc.py") + "\n" == RESOLVED_MUL


def test_apply_force_keeps_ignored_files_in_the_backup(rebaser, tmp_path, upstream):
    upstream.commit({".gitignore": "*.log\n"}, "ignore logs", tag="v1i")
    series = two_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1i", "--json", report).code == ExitCode.OK
    (worktree_of(report) / "bench.log").write_text("numbers\n")
    replaced = apply(rebaser, series, upstream, "v1i", "--force", "--json", report)
    assert replaced.code == ExitCode.OK, replaced.err
    (backup,) = backups(upstream)
    assert git(upstream.path, "show", f"{backup}:bench.log") == "numbers"
    # The new branch does not carry the saved files.
    assert not (worktree_of(report) / "bench.log").exists()
    assert json.loads(report.read_text())["steps"][-1]["status"] == "clean"


def test_an_apply_force_interrupted_while_removing_the_worktree_can_be_run_again(
    rebaser, tmp_path, upstream, monkeypatch
):
    """Ctrl-C while `apply --force` removed the old worktree: `git worktree remove` deletes
    file by file, and left a half-deleted worktree (its `.git` file gone, or files missing
    that read as changes) that every later command refused. The folder is now moved aside
    in one rename first; what an interrupted removal leaves, the next one sweeps."""
    series = two_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    old = worktree_of(report)
    rmtree = shutil.rmtree

    def interrupted(path, *args, **kwargs):
        if ".forkkit-removing-" in str(path):
            (Path(path) / old.name / "pkg" / "calc.py").unlink()  # part of it deleted
            raise KeyboardInterrupt
        return rmtree(path, *args, **kwargs)

    with monkeypatch.context() as ctrl_c:
        ctrl_c.setattr(shutil, "rmtree", interrupted)
        cut = apply(rebaser, series, upstream, "v1", "--force")
    assert cut.code == ExitCode.INTERRUPTED, cut.out + cut.err
    assert not old.exists()  # moved aside whole, not half there
    (left,) = old.parent.glob(".forkkit-removing-*")
    again = apply(rebaser, series, upstream, "v1", "--force", "--json", report)
    assert again.code == ExitCode.OK, again.out + again.err
    assert worktree_of(report) == old and (old / "pkg" / "calc.py").is_file()
    assert git(old, "status", "--porcelain") == ""
    assert not left.exists() and not list(old.parent.glob(".forkkit-removing-*"))


def test_a_worktree_folder_in_use_is_refused_and_no_branch_is_left(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = apply(rebaser, series, upstream, "v1", "--worktree", str(folder))
    assert result.code == ExitCode.USAGE and "exists and is not an empty folder" in result.err
    assert (folder / "notes.txt").read_text() == "mine\n" and len(list(folder.iterdir())) == 1
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert apply(rebaser, series, upstream, "v1").code == ExitCode.OK  # nothing in the way


def test_a_worktree_path_that_is_a_file_is_refused_and_no_branch_is_left(
    rebaser, tmp_path, upstream
):
    series = two_patch_series(tmp_path, upstream)
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    for where in (afile, afile / "wt"):
        result = apply(rebaser, series, upstream, "v1", "--worktree", str(where))
        assert result.code == ExitCode.USAGE, result.err
        assert str(where) in result.err and afile.read_text() == "mine\n"
        assert git(upstream.path, "branch", "--list", "forkkit/*") == ""


def test_a_file_a_later_patch_stops_ignoring_survives_patch_by_patch(rebaser, tmp_path, upstream):
    """A review: patch by patch, the cherry-pick after each exact apply reset the worktree
    with `git clean`, which deleted a file of the user's, ignored at the stop, once a
    carried patch dropped the rule that ignored it; the apply exited 0. The file stays, and
    the verification names it, as git rebase and the fast lane leave it."""
    base = upstream.commit({".gitignore": "*.local\n"}, "ignore local files", tag="ignoring")
    patched = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")
    series = build_series(
        tmp_path / "proj",
        upstream,
        "ignoring",
        [
            Change("fork: double mul", {"pkg/calc.py": patched}),
            Change("fork: no ignore rule", {".gitignore": ""}),
            Change(
                "fork: document add", {"pkg/calc.py": edit(patched, "(a, b):\n", "(a, b):  # +\n")}
            ),
        ],
        extra_directives=f"@base git:{base}\n",  # the patches' own commits: cherry-picks
    )
    upstream.commit({"pkg/calc.py": edit(CALC, "a * b", "b * a")}, "v2", tag="v2")
    report = tmp_path / "r.json"
    stopped = apply(rebaser, series, upstream, "v2", "--no-fast-lane", "--json", report)
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    tree = worktree_of(report)
    (tree / "pkg/calc.py").write_text(edit(CALC, "    return a * b\n", "    return 2 * b * a\n"))
    git(tree, "add", "pkg/calc.py")
    (tree / "notes.local").write_text("my notes\n")
    rebaser("continue", "--repo", upstream.path)
    assert (tree / "notes.local").read_text() == "my notes\n"
