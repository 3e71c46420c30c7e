"""What a user changes at a stop that the stop did not expect (the series file, the branch's
history, the worktree's `.git` file, the state file, the worktree itself during a retry):
each found by a hostile review of the CLI (docs/safety.md, "Reviewed as a hostile user (third
pass, at the stops)"), each refused with what to do, or done without losing anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from synthetic import CALC, Change, build_series, edit, git
from test_apply_synthetic import CONFLICT_FIXED, apply
from test_keep_going import apply_onto_v2, series_with_a_knock_on, statuses
from test_retry import BRANCH, kept_going

from rebaser.errors import ExitCode


def stopped_at_0002(rebaser, tmp_path, upstream) -> tuple[Path, Path]:
    """Four patches onto v2, stopped at 0002 (0003 and 0004 to come): series, worktree."""
    series = series_with_a_knock_on(tmp_path, upstream)
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    assert result.code == ExitCode.NOT_APPLIED and report["stop"]["patch"].startswith("0002")
    return series, Path(report["worktree"])


def fixed(worktree: Path) -> None:
    (worktree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(worktree, "add", "pkg/calc.py")


def without_line(series: Path, prefix: str) -> None:
    lines = series.read_text().splitlines(keepends=True)
    series.write_text("".join(line for line in lines if not line.startswith(prefix)))


@pytest.mark.parametrize("command", ["continue", "skip"])
@pytest.mark.parametrize("removed", ["0002", "0001"], ids=["the-stopped-patch", "an-earlier-one"])
def test_a_series_edited_at_a_stop_before_the_next_patch_is_refused(
    rebaser, tmp_path, upstream, command, removed
):
    """With the stopped patch's line taken out of the series, `continue` committed the fix
    as the next patch (0003's identity on 0002's change, 0003's own change on no commit,
    exit 0) and `skip` left off 0003, never tried; with the series shorter than the stop,
    both crashed (IndexError, exit 6). The patches up to the stopped one must be those the
    apply started with; the later ones may change."""
    series, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    fixed(worktree)
    head = git(worktree, "rev-parse", "HEAD")
    kept = series.read_text()
    without_line(series, removed)
    refused = rebaser(command, "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.out + refused.err
    assert "0002-change-2.patch" in refused.err and "series" in refused.err, refused.err
    assert git(worktree, "rev-parse", "HEAD") == head
    assert git(worktree, "diff", "--cached", "--name-only") == "pkg/calc.py"  # the fix stays
    series.write_text(kept)
    again = rebaser(command, "--repo", upstream.path, "--json", tmp_path / "again.json")
    assert again.code == ExitCode.NOT_APPLIED, again.out + again.err  # 0003 conflicts now
    rows = json.loads((tmp_path / "again.json").read_text())["steps"]
    assert [(row["name"][:4], row["status"]) for row in rows[1:]] == [
        ("0001", "clean"),
        ("0002", "manual" if command == "continue" else "skipped"),
        ("0003", "failed"),
    ]


def test_a_later_patch_taken_out_at_a_stop_is_left_out(rebaser, tmp_path, upstream):
    """As `git rebase --edit-todo`: what is still to come may change at a stop."""
    series, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    fixed(worktree)
    without_line(series, "0004")
    resumed = rebaser("continue", "--repo", upstream.path)
    assert resumed.code == ExitCode.NOT_APPLIED, resumed.out + resumed.err  # 0003 conflicts
    skipped = rebaser("skip", "--repo", upstream.path, "--json", tmp_path / "s.json")
    assert skipped.code == ExitCode.NOT_APPLIED, skipped.out + skipped.err
    rows = json.loads((tmp_path / "s.json").read_text())["steps"]
    assert [row["name"][:4] for row in rows] == ["over", "0001", "0002", "0003"]


@pytest.mark.parametrize("how", ["reset-too-far", "amend"])
def test_continue_refuses_a_branch_that_lost_the_stops_commits(rebaser, tmp_path, upstream, how):
    """`git reset --hard HEAD~1` one commit too far, or `git commit --amend` of the last
    patch by habit: `continue` amended upstream's or 0001's commit with 0002's identity and
    reported 0002 applied by hand (its change on no commit, or inside 0001's)."""
    series, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    stopped_at = git(worktree, "rev-parse", "HEAD")
    if how == "reset-too-far":
        git(worktree, "reset", "-q", "--hard", "HEAD~1")
    else:
        fixed(worktree)
        git(worktree, "commit", "-q", "--amend", "--no-edit")
    moved = git(worktree, "rev-parse", "HEAD")
    refused = rebaser("continue", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.out + refused.err
    assert stopped_at[:12] in refused.err, refused.err
    assert git(worktree, "rev-parse", "HEAD") == moved
    git(worktree, "reset", "-q", "--soft", stopped_at)  # as the message says
    if how == "reset-too-far":
        git(worktree, "reset", "-q", "--hard", stopped_at)
        fixed(worktree)
    resumed = rebaser("continue", "--repo", upstream.path, "--json", tmp_path / "c.json")
    assert resumed.code == ExitCode.NOT_APPLIED, resumed.out + resumed.err  # 0003 conflicts
    rows = json.loads((tmp_path / "c.json").read_text())["steps"]
    assert [row["status"] for row in rows[:3]] == ["laid", "clean", "manual"]
    subjects = git(worktree, "log", "--format=%s", "-3").splitlines()
    assert subjects[:2] == ["fork: double mul", "fork: document add"], subjects


@pytest.mark.parametrize("notes", ["committed", "staged"])
def test_continue_refuses_more_than_one_commit_made_at_a_stop(rebaser, tmp_path, upstream, notes):
    """The fix committed, then an unrelated change committed too (`continue` put 0002's
    identity on it, and `refresh` wrote it into 0002's patch file and the fix out as a new
    patch), or staged on top (committed as a second commit with 0002's message). Which is
    the fix cannot be told: refused, and set right as the message says."""
    series, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    stopped_at = git(worktree, "rev-parse", "HEAD")
    fixed(worktree)
    git(worktree, "commit", "-q", "-m", "fork: double mul, resolved")
    (worktree / "notes.txt").write_text("unrelated\n")
    git(worktree, "add", "notes.txt")
    if notes == "committed":
        git(worktree, "commit", "-q", "-m", "unrelated: notes")
    made = git(worktree, "rev-parse", "HEAD")
    refused = rebaser("continue", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.out + refused.err
    said = {
        "committed": "2 commit(s) were made since the stop, and",
        "staged": "1 commit(s) were made since the stop, and changes are staged on top",
    }[notes]
    assert said in refused.err and f"git reset --soft {stopped_at[:12]}" in refused.err
    assert git(worktree, "rev-parse", "HEAD") == made  # untouched
    git(worktree, "reset", "-q", "--soft", stopped_at)  # as the message says
    git(worktree, "commit", "-q", "-m", "fork: double mul, resolved, with notes")
    resumed = rebaser("continue", "--repo", upstream.path, "--json", tmp_path / "c.json")
    assert resumed.code == ExitCode.NOT_APPLIED, resumed.out + resumed.err  # 0003 conflicts
    rows = json.loads((tmp_path / "c.json").read_text())["steps"]
    assert [row["status"] for row in rows[:3]] == ["laid", "clean", "manual"]
    message = git(worktree, "log", "-1", "--format=%B", "HEAD")
    assert "Forkkit-Patch: 0002-change-2.patch" in message


def test_abort_of_a_retry_refuses_a_worktree_switched_to_another_branch(
    rebaser, tmp_path, upstream
):
    """abort of a retry reset whatever branch the worktree was on to where the retry
    stopped: the user's own `main` lost its commits (kept only in a backup ref)."""
    series, tree = kept_going(rebaser, tmp_path, upstream)
    retried = rebaser("retry", "0002", "--series", series, "--repo", tree)
    assert retried.code == ExitCode.NOT_APPLIED, retried.out + retried.err
    git(tree, "reset", "-q", "--hard")
    git(tree, "switch", "-q", "-c", "mine", "v1")
    mine = git(tree, "rev-parse", "mine")
    refused = rebaser("abort", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.out + refused.err
    assert f"git switch {BRANCH}" in refused.err, refused.err
    assert git(tree, "rev-parse", "mine") == mine
    git(tree, "switch", "-q", BRANCH)
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == ExitCode.OK, aborted.out + aborted.err
    assert git(tree, "rev-parse", "mine") == mine


def test_abort_of_a_retry_whose_worktree_was_deleted_ends_it(rebaser, tmp_path, upstream):
    """The worktree folder deleted during a retry: `abort` failed on the missing folder and
    `apply --force` refused the apply in progress: only deleting state.json got out."""
    series, tree = kept_going(rebaser, tmp_path, upstream)
    tip = git(tree, "rev-parse", BRANCH)
    retried = rebaser("retry", "0002", "--series", series, "--repo", tree)
    assert retried.code == ExitCode.NOT_APPLIED, retried.out + retried.err
    shutil.rmtree(tree)
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == ExitCode.OK, aborted.out + aborted.err
    assert "missing" in aborted.out, aborted.out
    assert git(upstream.path, "rev-parse", BRANCH) == tip  # as the apply left it
    assert rebaser("status", "--repo", upstream.path).out.startswith("no apply in progress")
    again = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v2", "--test", "none",
        "--keep-going", "--force", "--json", tmp_path / "again.json",
    )  # fmt: skip
    assert again.code == ExitCode.NOT_APPLIED, again.out + again.err
    assert statuses(json.loads((tmp_path / "again.json").read_text()))[2] == "dropped"


def test_a_worktree_that_lost_its_git_file_is_named_with_the_repair(rebaser, tmp_path, upstream):
    """With the worktree's `.git` file deleted, git finds the repository's own git dir
    above it: rebaser said the worktree was on a detached HEAD and advised `git switch`,
    which fails there, and `abort` refused. `git worktree repair` is the way back."""
    series, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    (worktree / ".git").unlink()
    status = rebaser("status", "--repo", upstream.path)
    assert "git worktree repair" in status.out and "detached" not in status.out, status.out
    for command in ("continue", "skip", "abort"):
        refused = rebaser(command, "--repo", upstream.path)
        assert refused.code == ExitCode.USAGE, refused.out + refused.err
        assert f"`git worktree repair` in {upstream.path}" in refused.err, refused.err
    assert worktree.is_dir() and (worktree / "pkg/calc.py").is_file()  # nothing removed
    git(upstream.path, "worktree", "repair")
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == ExitCode.OK, aborted.out + aborted.err


@pytest.mark.parametrize(
    "field, value",
    [("worktree", 5), ("next_step", "x"), ("next_step", 99), ("series_file", None), ("steps", 3)],
)
def test_a_state_file_with_a_wrong_field_is_named_and_abort_ends_it(
    rebaser, tmp_path, upstream, field, value
):
    """A state.json whose fields have the wrong type (edited by hand, or by another tool)
    made every command crash with exit 6, abort included."""
    _, worktree = stopped_at_0002(rebaser, tmp_path, upstream)
    path = Path(git(upstream.path, "rev-parse", "--absolute-git-dir")) / "forkkit/state.json"
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    status = rebaser("status", "--repo", upstream.path)  # a step past the end reads well
    assert status.code in (ExitCode.OK, ExitCode.USAGE), status.out + status.err
    assert "rebaser abort" in status.out + status.err
    for command in ("continue", "skip"):
        result = rebaser(command, "--repo", upstream.path)
        assert result.code == ExitCode.USAGE, (command, result.out + result.err)
        assert "rebaser abort" in result.err, result.err
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == ExitCode.OK, aborted.out + aborted.err
    assert not path.exists()


def test_markers_left_in_a_file_whose_name_has_a_space_are_refused(rebaser, tmp_path, upstream):
    """A review: `continue` listed the staged files split at whitespace, so a file named
    `my calc.py` was looked for as `my` and `calc.py`, and the markers left in it went
    unseen into the branch."""
    upstream.commit({"pkg/my calc.py": CALC}, "a file with a space", tag="spaced")
    changed = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")
    series = build_series(
        tmp_path / "proj", upstream, "spaced", [Change("fork: double", {"pkg/my calc.py": changed})]
    )
    upstream.commit({"pkg/my calc.py": edit(CALC, "a * b", "b * a")}, "v2", tag="v2")
    report = tmp_path / "r.json"
    stopped = apply(rebaser, series, upstream, "v2", "--json", report)
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    tree = Path(json.loads(report.read_text())["worktree"])
    assert "<<<<<<<" in (tree / "pkg/my calc.py").read_text()
    git(tree, "add", "pkg/my calc.py")  # markers and all
    refused = rebaser("continue", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.out + refused.err
    assert "conflict markers left in pkg/my calc.py" in refused.err, refused.err
