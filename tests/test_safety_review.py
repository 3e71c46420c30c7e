"""Issue 18, reviewed as a hostile user would: what the review found, each through the CLI on
a real repository (docs/safety.md names the promise beside each test)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from faults import FaultPoint, kill_leftover, run_with_fault, start_paused, wait_for_file
from synthetic import apply_args, commit_verbatim, git, two_patch_series
from test_apply_synthetic import stopped_apply

from rebaser.errors import ExitCode
from rebaser.series.patches import load_series


def applied(rebaser, tmp_path: Path, series: Path, upstream) -> Path:
    """The worktree of a finished apply of `series` onto v1."""
    report = tmp_path / "applied.json"
    result = rebaser(*apply_args(series, upstream, "v1", "--test", "none", "--json", report))
    assert result.code == ExitCode.OK, result.out + result.err
    return Path(json.loads(report.read_text())["worktree"])


class RoundTrip:
    """The fork branch `fork` imported from v1 and applied onto v1, then refreshed back."""

    def __init__(self, rebaser, tmp_path: Path, upstream) -> None:
        self.rebaser, self.target = rebaser, tmp_path / "imported"
        args = ["--repo", upstream.path, "--range", "v1..fork", "--series-dir", self.target]
        result = rebaser("import", *args)
        assert result.code == ExitCode.OK, result.out + result.err
        self.series = self.target / "series"
        self.patches = self.exported()
        self.worktree = applied(rebaser, tmp_path, self.series, upstream)

    def exported(self) -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in self.target.glob("*.patch")}

    def assert_refresh_keeps_the_patches(self) -> None:
        """`refresh --check` passes, and `refresh` writes the patches byte for byte again."""
        refresh = ["refresh", "--series", self.series, "--repo", self.worktree]
        check = self.rebaser(*refresh, "--check")
        assert check.code == ExitCode.OK, check.out + check.err
        assert self.rebaser(*refresh).code == ExitCode.OK
        assert self.exported() == self.patches


def commit_on(worktree: Path, message: str) -> None:
    """A commit of one more line in pkg/calc.py, with exactly `message`."""
    calc = worktree / "pkg" / "calc.py"
    calc.write_text(calc.read_text() + "# one more line\n")
    git(worktree, "add", "--all")
    commit_verbatim(worktree, message, author="A U Thor <author@example.com>")


def test_refresh_never_writes_where_a_commit_trailer_points(rebaser, tmp_path, upstream):
    """A commit on the branch whose `Forkkit-Patch:` trailer names a path (absolute, `..`,
    the series file itself) is a new patch of the series: refresh wrote the patch text over
    whatever file the trailer named."""
    series = two_patch_series(tmp_path, upstream)
    worktree = applied(rebaser, tmp_path, series, upstream)
    victims = [tmp_path / "absolute.txt", series.parent.parent / "relative.txt"]
    for victim in victims:
        victim.write_text("precious\n")
    for name in [str(victims[0]), "../relative.txt", "series", ".hidden.patch"]:
        commit_on(worktree, f"more: {name}\n\nForkkit-Patch: {name}\n")
    result = rebaser("refresh", "--series", series, "--repo", worktree)
    assert result.code == ExitCode.OK, result.out + result.err
    assert [victim.read_text() for victim in victims] == ["precious\n", "precious\n"]
    assert not (series.parent / ".hidden.patch").exists()
    names = [patch.name for patch in load_series(series).patches]
    assert names[:2] == ["0001-change-1.patch", "0002-change-2.patch"]
    assert [name[:5] for name in names[2:]] == ["0003-", "0004-", "0005-", "0006-"]


def test_refresh_writes_patches_listed_in_a_subfolder_where_they_are(rebaser, tmp_path, upstream):
    """A series may list its patches in a subfolder: refresh wrote their new text into new
    files beside the series file (and --check never passed), so the change never reached
    the listed patch."""
    series = two_patch_series(tmp_path, upstream)
    folder = series.parent
    (folder / "part").mkdir()
    for name in ["0001-change-1.patch", "0002-change-2.patch"]:
        (folder / name).rename(folder / "part" / name)
        series.write_text(series.read_text().replace(name, f"./part/{name}"))
    listed = series.read_text()
    worktree = applied(rebaser, tmp_path, series, upstream)
    check = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert check.code == ExitCode.OK, check.out + check.err
    message = git(worktree, "log", "-1", "--format=%B").replace("\n", ", reworded\n", 1)
    git(worktree, "commit", "-q", "--amend", "-m", message)
    result = rebaser("refresh", "--series", series, "--repo", worktree)
    assert result.code == ExitCode.OK, result.out + result.err
    assert sorted(path.name for path in folder.iterdir()) == ["part", "series"]
    assert ", reworded" in (folder / "part" / "0002-change-2.patch").read_text()
    assert series.read_text() == listed


def test_two_patches_of_one_file_name_are_refused(rebaser, tmp_path, upstream):
    """Records, identities and steps go by a patch's file name: two listed patches with the
    same file name in different folders would share them."""
    series = two_patch_series(tmp_path, upstream)
    folder = series.parent
    (folder / "part").mkdir()
    (folder / "part" / "0001-change-1.patch").write_bytes(
        (folder / "0001-change-1.patch").read_bytes()
    )
    series.write_text(series.read_text() + "part/0001-change-1.patch\n")
    result = rebaser(*apply_args(series, upstream, "v1", "--test", "none"))
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "0001-change-1.patch" in result.err and "file name" in result.err, result.err
    assert not git(upstream.path, "branch", "--list", "forkkit/*")


def test_refresh_carries_overlay_files_whose_names_git_quotes(rebaser, tmp_path, upstream):
    """Overlay files named with non-ASCII letters, a tab or a quote: git quotes such names,
    and refresh took the quoted name for a file removed on the branch, so it never wrote
    them back (and --check said nothing)."""
    series = two_patch_series(tmp_path, upstream)
    overlay = series.parent.parent / "overlay"
    names = ["données.py", "tab\there.py", 'quote"d.py', "plain.py"]
    for name in names:
        (overlay / "pkg").mkdir(parents=True, exist_ok=True)
        (overlay / "pkg" / name).write_text("X = 1\n")
    series.write_text(series.read_text().replace("@name", "@overlay ../overlay\n@name", 1))
    worktree = applied(rebaser, tmp_path, series, upstream)
    for name in names:
        (worktree / "pkg" / name).write_text("X = 2\n")
    git(worktree, "commit", "-q", "--all", "-m", "overlay: changed on the branch")
    check = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert check.code == ExitCode.VERIFY_FAILED, check.out + check.err
    assert check.out.count("to update overlay/pkg/") == len(names), check.out
    result = rebaser("refresh", "--series", series, "--repo", worktree)
    assert result.code == ExitCode.OK, result.out + result.err
    assert {name: (overlay / "pkg" / name).read_text() for name in names} == {
        name: "X = 2\n" for name in names
    }


def fork_with_messages(upstream, messages: list[str]) -> None:
    """Branch `fork` on v1: one commit per message, each adding a module."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    for number, message in enumerate(messages):
        (upstream.path / "pkg" / f"more{number}.py").write_text(f"M = {number}\n")
        git(upstream.path, "add", "--all")
        commit_verbatim(upstream.path, message, author="A U Thor <author@example.com>")
    git(upstream.path, "checkout", "-q", "main")


PREFIXED = [
    "[PATCH] calc: a subject like format-patch's prefix\n\nBody.\n",
    "[PATCH v2 3/7] more\n",
]


def test_a_subject_that_starts_like_a_patch_prefix_is_carried(rebaser, tmp_path, upstream):
    """`[PATCH...]` at the start of a subject was taken for the prefix format-patch adds
    without --keep-subject and dropped; rebaser's exports never add one (`git rebase`
    keeps the subject as it is)."""
    fork_with_messages(upstream, PREFIXED)
    carried = RoundTrip(rebaser, tmp_path, upstream)
    messages = git(carried.worktree, "log", "--reverse", "--format=%B%x00", "HEAD~2..HEAD")
    assert [
        message.strip("\n").rsplit("\n\nForkkit-Patch: ", 1)[0]
        for message in messages.split("\0")[:-1]
    ] == [message.rstrip("\n") for message in PREFIXED]
    carried.assert_refresh_keeps_the_patches()


QUOTED_DIFFS = {
    "git diff": "calc: explain\n\nThe old spelling:\ndiff --git a/pkg/old.py b/pkg/old.py\n"
    "--- a/pkg/old.py\n+++ b/pkg/old.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n",
    "unified diff": "calc: explain\n\n--- a/pkg/old.py\n+++ b/pkg/old.py\n@@ -1 +1 @@\n-A\n+B\n",
}


@pytest.mark.parametrize("quoted", sorted(QUOTED_DIFFS))
def test_a_message_quoting_a_diff_is_refused_by_name(rebaser, tmp_path, upstream, quoted):
    """A message that quotes a diff cannot be told from the patch's own diff in a patch
    file (`git apply` applied the quoted one too, and `git am` cuts the message there):
    import wrote it anyway, and apply stopped on a patch that applies cleanly. Now import,
    and refresh of a branch commit reworded so, refuse it naming the commit, exit 2."""
    fork_with_messages(upstream, ["calc: fine\n", QUOTED_DIFFS[quoted]])
    target = tmp_path / "imported"
    args = ["--repo", upstream.path, "--range", "v1..fork", "--series-dir", target]
    result = rebaser("import", *args)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "calc: explain" in result.err and "diff" in result.err, result.err
    assert not target.exists()

    result = rebaser(
        "import", "--repo", upstream.path, "--range", "v1..fork~1", "--series-dir", target
    )
    assert result.code == ExitCode.OK, result.out + result.err
    series = target / "series"
    (tmp_path / "overlay" / "pkg").mkdir(parents=True)
    (tmp_path / "overlay" / "pkg" / "extra.py").write_text("E = 1\n")
    series.write_text(series.read_text().replace("@base", "@overlay ../overlay\n@base"))
    worktree = applied(rebaser, tmp_path, series, upstream)
    (worktree / "pkg" / "extra.py").write_text("E = 2\n")
    message = QUOTED_DIFFS[quoted] + "\nForkkit-Patch: 0001-fine.patch\n"
    git(worktree, "commit", "-q", "--all", "--amend", "--cleanup=verbatim", "-m", message)
    before = {path: path.read_bytes() for path in tmp_path.glob("[io]*/**/*") if path.is_file()}
    result = rebaser("refresh", "--series", series, "--repo", worktree)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "calc: explain" in result.err, result.err
    assert {path: path.read_bytes() for path in before} == before


def test_a_file_name_that_is_not_utf8_is_carried_and_shown(rebaser, tmp_path, upstream):
    """A fork commit adding `café.py` spelled in Latin-1 (a name git keeps as bytes): the
    apply did its work, then printing its table crashed (exit 6); now the branch has the
    file under its own name, the table shows it escaped, and refresh round-trips it."""
    name = os.fsdecode(b"caf\xe9.py")
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    (upstream.path / "pkg" / name).write_text("C = 1\n")
    git(upstream.path, "add", "--all")
    commit_verbatim(upstream.path, "pkg: a Latin-1 name\n", author="A U Thor <a@example.com>")
    git(upstream.path, "checkout", "-q", "main")
    target = tmp_path / "imported"
    args = ["--repo", upstream.path, "--range", "v1..fork", "--series-dir", target]
    assert rebaser("import", *args).code == ExitCode.OK
    series = target / "series"
    patches = {path.name: path.read_bytes() for path in target.glob("*.patch")}
    report = tmp_path / "applied.json"
    result = rebaser(*apply_args(series, upstream, "v1", "--test", "none", "--json", report))
    assert result.code == ExitCode.OK, result.out + result.err
    assert "caf\\udce9.py" in result.out, result.out
    worktree = Path(json.loads(report.read_text())["worktree"])
    assert (worktree / "pkg" / name).read_bytes() == b"C = 1\n"
    assert git(worktree, "rev-parse", "HEAD^{tree}") == git(
        upstream.path, "rev-parse", "fork^{tree}"
    )
    status = rebaser("status", "--repo", upstream.path)
    assert status.code in (ExitCode.OK, ExitCode.USAGE), status.out + status.err
    check = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert check.code == ExitCode.OK, check.out + check.err
    assert rebaser("refresh", "--series", series, "--repo", worktree).code == ExitCode.OK
    assert {path.name: path.read_bytes() for path in target.glob("*.patch")} == patches


def test_a_second_verify_never_removes_a_running_ones_worktree(rebaser, tmp_path, upstream):
    """verify (and bisect's probes) apply on a throwaway branch named by series and base,
    removing what an earlier run left of it first: a second verify of the same base removed
    the first one's worktree while it ran (which then failed, "moved or deleted?"). Now the
    second says another rebaser is applying onto that branch (exit 2), and the first ends
    as if alone."""
    series = two_patch_series(tmp_path, upstream)
    args = ["verify", "--series", series, "--repo", upstream.path, "--bases", "v1"]
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    point = FaultPoint("rebaser.repo.workspace:create", "after")
    first = start_paused(
        point, [*args, "--test", "none", "--json", tmp_path / "first.json"], paused, resume
    )
    try:
        wait_for_file(paused, first)
        second = rebaser(*args, "--test", "none")
        resume.write_text("go")
        out, err = first.communicate(timeout=120)
    finally:
        kill_leftover(first.pid)
    assert second.code == ExitCode.USAGE, second.out + second.err
    assert "another rebaser" in second.out + second.err, second.out + second.err
    assert first.returncode == ExitCode.OK, out + err
    assert not git(upstream.path, "branch", "--list", "forkkit-verify/*")


def test_a_commit_dated_before_1973_round_trips(rebaser, tmp_path, upstream):
    """An author date before 1973-03-03 (under 10^8 seconds since 1970, which git does not
    read as a timestamp without `@`): import and refresh re-made the commit without its
    trailer from `--date=raw`, and git refused the date (exit 5, a raw git error)."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    (upstream.path / "pkg" / "old.py").write_text("OLD = 1\n")
    git(upstream.path, "add", "--all")
    message = "pkg: an old module\n\nForkkit-Patch: 0001-an-old-module.patch\n"
    author = "A U Thor <a@example.com>"
    commit_verbatim(upstream.path, message, author=author, date="1971-01-01T00:00:00+0100")
    git(upstream.path, "checkout", "-q", "main")
    carried = RoundTrip(rebaser, tmp_path, upstream)
    assert git(carried.worktree, "log", "-1", "--format=%ad", "--date=raw") == "31532400 +0100"
    carried.assert_refresh_keeps_the_patches()


def test_an_import_killed_midway_leaves_no_folder_behind(rebaser, tmp_path, upstream):
    """import writes the series into a hidden folder beside the target and renames it into
    place; a kill -9 left that half-written copy there for good (a `git add -A` in the
    project would commit it). The next import removes it, as other leftovers are swept."""
    fork_with_messages(upstream, ["calc: one\n", "calc: two\n"])
    target = tmp_path / "project" / "imported"
    args = ["import", "--repo", upstream.path, "--range", "v1..fork", "--series-dir", target]
    killed = run_with_fault(
        FaultPoint("rebaser.commands.import_series:load_series", "before"), args
    )
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert [path.name for path in (tmp_path / "project").iterdir()][0].startswith(".imported.")
    result = rebaser(*args)
    assert result.code == ExitCode.OK, result.out + result.err
    assert sorted(path.name for path in (tmp_path / "project").iterdir()) == ["imported"]
    assert sorted(path.name for path in target.iterdir()) == [
        "0001-one.patch",
        "0002-two.patch",
        "series",
    ]


def test_skip_never_resets_a_branch_the_user_switched_to(rebaser, tmp_path, upstream):
    """At a stop the user switched the worktree to a branch of their own and committed
    there; `skip` reset that branch to where the apply stopped (and went on committing
    the next patches onto it). Now it refuses, as `continue` and `abort` do, and the
    user's branch keeps its commit."""
    worktree = stopped_apply(rebaser, tmp_path, upstream)
    git(worktree, "checkout", "-q", "--theirs", "--", "pkg/calc.py")
    git(worktree, "switch", "-q", "-c", "mine")
    git(worktree, "commit", "-q", "--all", "-m", "my own work")
    mine = git(worktree, "rev-parse", "mine")
    stopped_at = git(worktree, "rev-parse", "forkkit/demo/v2")
    result = rebaser("skip", "--repo", upstream.path)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "git switch forkkit/demo/v2" in result.err, result.err
    assert git(worktree, "rev-parse", "mine") == mine
    assert git(worktree, "rev-parse", "forkkit/demo/v2") == stopped_at
    git(worktree, "switch", "-q", "forkkit/demo/v2")
    result = rebaser("skip", "--repo", upstream.path)
    assert result.code == ExitCode.NOT_APPLIED, result.out + result.err
    assert git(worktree, "rev-parse", "mine") == mine
