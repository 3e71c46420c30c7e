"""One pass through every stop: `apply --keep-going`, `rebaser skip`, and knock-on failures
reported as the patch they need, never as upstream's doing."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from synthetic import (
    ADD_DOC,
    CALC,
    DOUBLE_MUL,
    DOUBLED,
    Change,
    apply_args,
    build_series,
    calc_series,
    edit,
    git,
)
from test_apply_synthetic import apply

from rebaser.carry.triage import Upstream
from rebaser.errors import ExitCode

COMMENTED = edit(DOUBLE_MUL, "    return 2 * a * b\n", "    return 2 * a * b  # doubled\n")
CHECKED = edit(COMMENTED, "    return a / b\n", "    assert b\n    return a / b\n")


def series_with_a_knock_on(tmp_path, upstream, v2_from: str = CALC) -> Path:
    """0002 conflicts with v2 (mul's operands swapped in `v2_from`); 0003 edits the line 0002
    adds; 0001 and 0004 are independent (0001 is in upstream when `v2_from` has its change)."""
    base = git(upstream.path, "rev-parse", "v1")
    series = calc_series(
        tmp_path,
        upstream,
        [
            ("fork: document add", ADD_DOC),
            ("fork: double mul", DOUBLE_MUL),
            ("fork: say why", COMMENTED),
            ("fork: check div", CHECKED),
        ],
        extra_directives=f"@base git:{base}\n",
    )
    upstream.commit(
        {"pkg/calc.py": edit(v2_from, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )
    return series


def apply_onto_v2(rebaser, tmp_path, series, upstream, *extra):
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report, *extra)
    assert report.is_file(), result.out + result.err
    return result, json.loads(report.read_text())


def statuses(report: dict) -> list[str]:
    return [step["status"] for step in report["steps"]]


def test_keep_going_drops_reports_the_knock_on_and_exits_3(rebaser, tmp_path, upstream):
    series = series_with_a_knock_on(tmp_path, upstream)
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    assert result.code == ExitCode.NOT_APPLIED
    assert statuses(report) == ["laid", "clean", "dropped", "blocked", "clean"]
    dropped, blocked = report["steps"][2], report["steps"][3]
    assert dropped["stop"]["conflicts"] == ["pkg/calc.py"] and dropped["stop"]["hunks"]
    assert blocked["detail"] == "needs 0002, which did not apply"
    assert blocked["stop"]["hunks"] == []  # not an upstream problem: no hunk hints
    assert "2 patches not applied" in report["outcome"] and report["stop"] is None
    assert "0002-change-2.patch dropped" in result.out and "tests were not run" in result.out
    assert f"`rebaser retry 0002 --series {series}` in that worktree brings" in result.out
    # retry with a series the branch was not made from names the one it was
    other = calc_series(tmp_path / "o", upstream, [("x", ADD_DOC)], name="other")
    wrong = rebaser("retry", "0002", "--series", other, "--repo", report["worktree"])
    assert wrong.code == ExitCode.USAGE
    assert "was made from series demo, not from series other" in wrong.err, wrong.err
    assert all(check["ok"] for check in report["checks"])
    tree = Path(report["worktree"])
    text = (tree / "pkg/calc.py").read_text()
    assert '"""Sum."""' in text and "assert b" in text and "return b * a" in text
    assert git(tree, "status", "--porcelain") == ""
    subjects = git(tree, "log", "--format=%s", "v2..HEAD").splitlines()
    assert subjects == ["fork: check div", "fork: document add", "forkkit: overlay (0 files)"]
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"
    # recorded beside the branch, for refresh: these patches still need work
    left_off = git(upstream.path, "cat-file", "blob", "refs/forkkit/left-off/forkkit/demo/v2")
    assert left_off == "0002-change-2.patch\tdropped\n0003-change-3.patch\tblocked"


def test_a_new_branch_drops_what_an_earlier_one_of_its_name_left_beside_it(
    rebaser, tmp_path, upstream
):
    series = series_with_a_knock_on(tmp_path, upstream)
    apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    worktree = git(upstream.path, "worktree", "list", "--porcelain").split("\n\n")[1]
    git(upstream.path, "worktree", "remove", "--force", worktree.split("\n")[0][len("worktree ") :])
    git(upstream.path, "branch", "-D", "forkkit/demo/v2")  # by hand: its refs stay behind
    assert git(upstream.path, "for-each-ref", "refs/forkkit/left-off", "refs/forkkit/series-start")
    for name in ("0002-change-2.patch", "0003-change-3.patch"):  # what did not apply goes
        series.write_text(series.read_text().replace(f"{name}\n", ""))
    result, _ = apply_onto_v2(rebaser, tmp_path, series, upstream)
    assert result.code == ExitCode.OK, result.out
    assert git(upstream.path, "for-each-ref", "refs/forkkit/left-off") == ""
    overlay = git(upstream.path, "rev-parse", "forkkit/demo/v2~2")
    start = git(upstream.path, "rev-parse", "refs/forkkit/series-start/forkkit/demo/v2")
    assert start == overlay


def test_skip_goes_on_and_the_report_still_counts_the_patch(rebaser, tmp_path, upstream):
    series = series_with_a_knock_on(tmp_path, upstream)
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    assert result.code == ExitCode.NOT_APPLIED and report["stop"]["patch"] == "0002-change-2.patch"
    tree = Path(report["worktree"])
    (tree / "pkg/calc.py").write_text("half-done work\n")
    skipped = rebaser("skip", "--repo", upstream.path)
    # 0003 needs 0002: it stops again, and says why
    assert skipped.code == ExitCode.NOT_APPLIED
    assert "stopped at 0003-change-3.patch" in skipped.out
    assert "needs 0002, which did not apply" in skipped.out
    backups = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    assert "skipped-0002-" in backups
    assert git(upstream.path, "show", f"{backups.split()[0]}:pkg/calc.py") == "half-done work"
    final = rebaser("skip", "--repo", upstream.path, "--json", tmp_path / "final.json")
    assert final.code == ExitCode.NOT_APPLIED  # never "applied, verified" with exit 0
    data = json.loads((tmp_path / "final.json").read_text())
    assert statuses(data) == ["laid", "clean", "skipped", "skipped", "clean"]
    assert "2 patches not applied" in data["outcome"]
    assert "assert b" in (tree / "pkg/calc.py").read_text()


def test_skip_without_a_stopped_patch_is_refused(rebaser, tmp_path, upstream):
    result = rebaser("skip", "--repo", upstream.path)
    assert result.code == ExitCode.USAGE and "no apply is in progress" in result.err


def test_a_cherry_pick_conflict_stop_continues_after_the_fix(rebaser, tmp_path, upstream):
    series = series_with_a_knock_on(tmp_path, upstream)
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    assert result.code == ExitCode.NOT_APPLIED
    assert report["stop"]["reason"].startswith("cherry-pick conflicts in pkg/calc.py")
    tree = Path(report["worktree"])
    assert "<<<<<<<" in (tree / "pkg/calc.py").read_text()
    (tree / "pkg/calc.py").write_text(DOUBLE_MUL)
    git(tree, "add", "pkg/calc.py")
    resumed = rebaser("continue", "--repo", upstream.path, "--json", tmp_path / "after.json")
    assert resumed.code == ExitCode.OK, resumed.out
    data = json.loads((tmp_path / "after.json").read_text())
    assert statuses(data) == ["laid", "clean", "manual", "clean", "clean"]
    assert (tree / "pkg/calc.py").read_text() == CHECKED


def test_refresh_drops_a_patch_in_upstream_and_keeps_the_ones_left_off(rebaser, tmp_path, upstream):
    series = series_with_a_knock_on(tmp_path, upstream, v2_from=ADD_DOC)  # v2 has 0001
    before = {
        name: (series.parent / name).read_text()
        for name in ("0002-change-2.patch", "0003-change-3.patch")
    }
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    assert statuses(report) == ["laid", "in upstream", "dropped", "blocked", "clean"]
    refreshed = rebaser("refresh", "--series", series, "--repo", report["worktree"])
    assert refreshed.code == ExitCode.OK, refreshed.err
    assert "kept (dropped on the branch)" in refreshed.out
    listed = [line for line in series.read_text().splitlines() if line.endswith(".patch")]
    assert listed == ["0002-change-2.patch", "0003-change-3.patch", "0004-change-4.patch"]
    assert not (series.parent / "0001-change-1.patch").exists()  # upstream has it
    assert {name: (series.parent / name).read_text() for name in before} == before
    # @base moved to v2 under the two left off, made on v1: said, and never advised wrongly
    assert "warning: 0002, 0003 (left off the branch) stay as they were" in refreshed.out
    again, rows = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going", "--force")
    assert again.code == ExitCode.NOT_APPLIED, again.out + again.err
    by_name = {row["name"][:4]: row for row in rows["steps"]}
    assert by_name["0002"]["proposal"] == "review", by_name["0002"]
    assert by_name["0002"]["reason"].startswith("made on another base"), by_name["0002"]
    assert by_name["0004"]["status"] == "clean" and by_name["0004"]["proposal"] == "keep"
    # and in a later command's triage too (its replay builds those commits only when asked)
    stopped, _ = apply_onto_v2(rebaser, tmp_path, series, upstream, "--force")  # at 0002
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    for number in (1, 2):
        skipped = rebaser("skip", "--repo", upstream.path, "--json", tmp_path / f"{number}.json")
        assert skipped.code == ExitCode.NOT_APPLIED, skipped.out + skipped.err
    rows = json.loads((tmp_path / "2.json").read_text())["steps"]
    assert [row["proposal"] for row in rows if row["name"][:4] in ("0002", "0003")] == [
        "review",
        "review",
    ], rows


def test_refresh_drops_the_resolutions_of_a_patch_it_drops(rebaser, tmp_path, upstream):
    series = series_with_a_knock_on(tmp_path, upstream, v2_from=ADD_DOC)  # v2 has 0001
    records = series.parent / "resolutions"
    for name in ("0001-change-1.patch", "0002-change-2.patch"):  # one goes, one stays listed
        (records / name / ("0" * 40)).mkdir(parents=True)
        (records / name / ("0" * 40) / "preimage").write_text(f"{name}\n")
        (records / name / ("0" * 40) / "postimage").write_text(f"{name}\n")
    _, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    refreshed = rebaser("refresh", "--series", series, "--repo", report["worktree"])
    assert refreshed.code == ExitCode.OK, refreshed.err
    assert "resolutions/0001-change-1.patch" in refreshed.out
    assert sorted(path.name for path in records.iterdir()) == ["0002-change-2.patch"]


def test_a_linked_resolutions_folder_is_refused_and_what_it_points_to_kept(
    rebaser, tmp_path, upstream
):
    """Records are plain folders (tests/test_safety_records.py): a linked one is refused by
    apply and by refresh, which never follow it."""
    series = series_with_a_knock_on(tmp_path, upstream, v2_from=ADD_DOC)  # v2 has 0001
    elsewhere = tmp_path / "shared-records" / ("0" * 40)
    elsewhere.mkdir(parents=True)
    (elsewhere / "preimage").write_text("kept\n")
    (series.parent / "resolutions").mkdir()
    (series.parent / "resolutions" / "0001-change-1.patch").symlink_to(elsewhere.parent)
    applied = apply(rebaser, series, upstream, "v2", "--keep-going")
    assert applied.code == ExitCode.USAGE and "is a symlink" in applied.err, applied.err
    refreshed = rebaser("refresh", "--series", series, "--repo", upstream.path, "--check")
    assert refreshed.code == ExitCode.USAGE and "is a symlink" in refreshed.err, refreshed.err
    assert (elsewhere / "preimage").read_text() == "kept\n"


def test_abort_drops_the_refs_beside_the_branch(rebaser, tmp_path, upstream):
    """The refs that say where the series starts and which patches the branch lacks go with
    the branch when `abort` removes it, not at the next apply of that name."""
    from test_fast_lane import fork_and_tip

    series = fork_and_tip(upstream, tmp_path)
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip"]
    assert rebaser(*args, "--test", "none").code == ExitCode.NOT_APPLIED  # the conflict
    assert rebaser("skip", "--repo", upstream.path).code == ExitCode.NOT_APPLIED  # blocked next
    beside = ("refs/forkkit/left-off/", "refs/forkkit/series-start/")
    for prefix in beside:
        assert git(upstream.path, "for-each-ref", "--format=%(refname)", prefix), prefix
    assert rebaser("abort", "--repo", upstream.path).code == 0
    for prefix in beside:
        assert git(upstream.path, "for-each-ref", "--format=%(refname)", prefix) == "", prefix


def test_a_later_stop_greps_nothing_the_first_stop_could_ask(
    rebaser, tmp_path, upstream, monkeypatch
):
    """Each stop's triage asked upstream (a grep of the whole tree) for the names the
    patches with rows by then define: on the real fork every `skip` and `continue` grepped
    again for its new stop's names, 0.2-0.3 s of a 1 s command. The first stop asks for
    the names of every patch in the series; the memo keeps the answers."""
    base = git(upstream.path, "rev-parse", "v1")
    helper = "    return twice_value(a * b)\n\n\ndef twice_value(x):\n    return 2 * x\n"
    series = calc_series(
        tmp_path,
        upstream,
        [
            ("fork: double mul", DOUBLED),
            ("fork: a helper", edit(DOUBLED, "    return 2 * a * b\n", helper)),
        ],
        extra_directives=f"@base git:{base}\n",
    )
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )
    first = apply(rebaser, series, upstream, "v2")
    assert first.code == ExitCode.NOT_APPLIED and "stopped at 0001" in first.out, first.out
    asked: list[list[str]] = []
    monkeypatch.setattr(Upstream, "defined", lambda self, rev, names: asked.append(names) or {})
    skipped = rebaser("skip", "--repo", upstream.path, "--json", tmp_path / "s.json")
    assert skipped.code == ExitCode.NOT_APPLIED and "stopped at 0002" in skipped.out
    assert asked == []
    rows = json.loads((tmp_path / "s.json").read_text())["steps"]
    assert [(row["name"][:4], row["status"]) for row in rows][-2:] == [
        ("0001", "skipped"),
        ("0002", "failed"),
    ]


def test_the_next_steps_for_patches_left_off_run_as_printed(
    rebaser, tmp_path, upstream, monkeypatch
):
    """With a fork's own series, `retry` and `refresh` typed in the worktree as the report
    prints them fell back to the embedded series and exited 2 ("made from series demo");
    the commands now name the series."""
    series = series_with_a_knock_on(tmp_path, upstream)
    _, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    printed = [
        shlex.split(command)
        for line in report["next_steps"]
        for command in re.findall(r"`(rebaser [^`]*)`", line)
    ]
    retry, refresh = (next(c for c in printed if c[1] == verb) for verb in ("retry", "refresh"))
    assert retry[2:] == ["0002", "--series", str(series)] and refresh[2:] == retry[3:]
    monkeypatch.delenv("DSA_FORKKIT_SERIES", raising=False)
    monkeypatch.chdir(report["worktree"])
    checked = rebaser(*refresh[1:], "--check")  # 4: the series would change (0001, 0004)
    assert checked.code == ExitCode.VERIFY_FAILED and "to update" in checked.out, checked.err
    retried = rebaser(*retry[1:])
    assert retried.code == ExitCode.NOT_APPLIED and "stopped at 0002" in retried.out, retried.err


def test_a_knock_on_on_a_file_with_a_space_missing_on_the_branch(rebaser, tmp_path, upstream):
    """0001 creates `pkg/my mod.py` and conflicts; 0002 edits that file: its knock-on check
    asked git for a file the branch lacks, and git's "<name> missing" answer, with the space,
    was read as a size (exit 6)."""
    name = "pkg/my mod.py"
    base = git(upstream.path, "rev-parse", "v1")
    changes = [
        Change("fork: a module", {"pkg/calc.py": DOUBLE_MUL, name: "X = 1\n"}),
        Change("fork: X", {name: "X = 2\n"}),
    ]
    series = build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )
    swapped = edit(CALC, "    return a * b\n", "    return b * a\n")
    upstream.commit({"pkg/calc.py": swapped}, "v2", tag="v2")
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    assert result.code == ExitCode.NOT_APPLIED, result.out + result.err
    assert statuses(report)[1:] == ["dropped", "blocked"]
    assert report["steps"][2]["detail"] == "needs 0001, which did not apply"


def test_a_knock_on_check_reads_its_files_at_once(tmp_path, upstream):
    """Two missing patches touching the file a failing patch edits: the files are read from
    the branch in one call, each once (each read was a git process; on a real fork a stop
    read the same file three times, in the lane and again in the per-patch path)."""
    from rebaser.carry.knockon import needed_patch
    from rebaser.series.patches import load_series

    series = load_series(series_with_a_knock_on(tmp_path, upstream))
    first, doubled, commented, _ = series.patches
    reads: list[list[str]] = []

    def read(paths: list[str]):
        reads.append(paths)
        return {path: CALC for path in paths}

    # 0001 is looked at first (the latest missing one), needed not; then 0002, which is.
    assert needed_patch(commented, [doubled, first], read) is doubled
    assert reads == [["pkg/calc.py"]]
    reads.clear()
    assert needed_patch(commented, [], read) is None
    assert reads == []  # nothing to read: no process


DOC_AND_DOUBLE = [("fork: document add", ADD_DOC), ("fork: double mul", DOUBLE_MUL)]


def kept_going_onto_swapped_mul(rebaser, tmp_path, upstream, versions) -> tuple[Path, dict]:
    """The series of `versions` on v1 (its @base), applied with --keep-going onto a v2 that
    swaps mul's operands (0002, doubling them, conflicts): the series and the report."""
    base = git(upstream.path, "rev-parse", "v1")
    series = calc_series(tmp_path, upstream, versions, extra_directives=f"@base git:{base}\n")
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )
    return series, apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")[1]


def retried_by_hand(rebaser, series: Path, tree: Path) -> None:
    """`retry 0002`, its conflict in mul resolved by hand as the patch meant it, staged."""
    assert rebaser("retry", "0002", "--series", series, "--repo", tree).code == ExitCode.NOT_APPLIED
    calc = (tree / "pkg/calc.py").read_text()
    resolved = "    return 2 * a * b\n".join(
        [calc.split("<<<<<<<")[0], calc.split(">>>>>>>")[1].split("\n", 1)[1]]
    )
    (tree / "pkg/calc.py").write_text(resolved)
    git(tree, "add", "pkg/calc.py")


def test_refresh_after_a_retry_keeps_the_patches_left_off_in_their_order(
    rebaser, tmp_path, upstream
):
    """0002 retried lands at the branch's tip; 0003 and 0005 (each blocked on the one before)
    stay left off. refresh put 0005 back after 0004, before the 0003 it needs, so the next
    apply reported 0003 needing 0005."""
    series, report = kept_going_onto_swapped_mul(
        rebaser,
        tmp_path,
        upstream,
        [
            *DOC_AND_DOUBLE,
            ("fork: say why", COMMENTED),
            ("fork: check div", CHECKED),
            ("fork: say it twice", edit(CHECKED, "# doubled\n", "# doubled, twice\n")),
        ],
    )
    assert statuses(report) == ["laid", "clean", "dropped", "blocked", "clean", "blocked"]
    tree = Path(report["worktree"])
    retried_by_hand(rebaser, series, tree)
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.NOT_APPLIED
    refreshed = rebaser("refresh", "--series", series, "--repo", tree)
    assert refreshed.code == ExitCode.OK, refreshed.err
    listed = [line for line in series.read_text().splitlines() if line.endswith(".patch")]
    assert [name[:4] for name in listed] == ["0001", "0004", "0002", "0003", "0005"]
    again, data = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going", "--force")
    assert again.code == ExitCode.OK, again.out
    assert len(statuses(data)) == 6 and not {"dropped", "blocked"} & set(statuses(data))


def test_skip_names_the_work_of_yours_it_sets_aside(rebaser, tmp_path, upstream):
    """skip sets the worktree back to the stop; a review's untracked file and edit of a file
    the patch does not touch vanished with no word of where they went."""
    series = series_with_a_knock_on(tmp_path, upstream)
    _, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    tree = Path(report["worktree"])
    (tree / "notes.txt").write_text("mine\n")
    (tree / "pkg/__init__.py").write_text("# edited\n")
    (tree / "staged.txt").write_text("added\n")  # staged or committed count too (a review)
    git(tree, "add", "staged.txt")
    (tree / "staged.txt").write_text("added, then edited\n")  # "AM": a new file, once
    (tree / "README").write_text("committed\n")  # new too, though committed since the stop
    git(tree, "add", "README")
    git(tree, "commit", "-qm", "mine", "--", "README")
    skipped = rebaser("skip", "--repo", upstream.path)
    assert skipped.code == ExitCode.NOT_APPLIED, skipped.err
    backup = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    said = " ".join(skipped.out.split())
    assert (
        f"set aside at {backup}: changes to pkg/__init__.py and new files README, notes.txt, "
        "staged.txt" in said
    ), said
    assert f"git checkout {backup} -- <path>" in said
    assert git(upstream.path, "show", f"{backup}:notes.txt") == "mine"
    assert not (tree / "notes.txt").exists()


def test_skip_names_a_commit_since_the_stop_that_the_files_undo(rebaser, tmp_path, upstream):
    """A commit made at the stop, its change then undone in the files: the files are as at
    the stop, yet skip takes the commit off the branch, and says so (a review)."""
    series = series_with_a_knock_on(tmp_path, upstream)
    _, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    tree = Path(report["worktree"])
    before = (tree / "pkg/__init__.py").read_text()
    (tree / "pkg/__init__.py").write_text("# mine\n")
    git(tree, "commit", "-qm", "mine", "--", "pkg/__init__.py")
    (tree / "pkg/__init__.py").write_text(before)
    skipped = rebaser("skip", "--repo", upstream.path)
    assert skipped.code == ExitCode.NOT_APPLIED, skipped.err
    backup = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    said = " ".join(skipped.out.split())
    assert f"skip: set aside at {backup}: changes to pkg/__init__.py" in said, said
    assert git(upstream.path, "show", f"{backup}~1:pkg/__init__.py") == "# mine"


def two_patches_the_first_stopping(tmp_path, upstream) -> Path:
    """0001 conflicts with v2 (mul's operands swapped); 0002 (add's docstring) applies
    without it."""
    base = git(upstream.path, "rev-parse", "v1")
    series = calc_series(
        tmp_path,
        upstream,
        [("fork: double mul", DOUBLED), ("fork: document add", DOUBLE_MUL)],
        extra_directives=f"@base git:{base}\n",
    )
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )
    return series


@pytest.mark.parametrize("undone", ["checkout --ours", "staged, then undone in the file"])
def test_skip_clears_what_only_the_index_holds(rebaser, tmp_path, upstream, undone):
    """The files as at the stop, the index not: upstream's side taken with `git checkout
    --ours` (the conflict still in the index), or a change staged and then undone in the
    file. A skip that looked only at the files left the index so: the next checkout refused
    it, or verification found the change (a review)."""
    series = two_patches_the_first_stopping(tmp_path, upstream)
    stopped, report = apply_onto_v2(rebaser, tmp_path, series, upstream)
    assert "stopped at 0001" in stopped.out, stopped.out
    tree = Path(report["worktree"])
    if undone == "checkout --ours":
        git(tree, "checkout", "--ours", "--", "pkg/calc.py")
    else:
        git(tree, "reset", "-q", "--hard")
        before = (tree / "pkg/__init__.py").read_text()
        (tree / "pkg/__init__.py").write_text("# staged\n")
        git(tree, "add", "pkg/__init__.py")
        (tree / "pkg/__init__.py").write_text(before)
    skipped = rebaser("skip", "--repo", upstream.path)
    assert skipped.code == ExitCode.NOT_APPLIED, skipped.out + skipped.err
    assert git(tree, "status", "--porcelain") == ""


@pytest.mark.parametrize("lane", [[], ["--no-fast-lane"]])
def test_a_pick_empty_only_without_a_patch_left_off_is_blocked_not_in_upstream(
    rebaser, tmp_path, upstream, lane
):
    """0001 adds X, 0002 removes it (and conflicts with upstream elsewhere), 0003 adds it
    back. With 0002 left off, 0003's pick is empty: it was called `in upstream`, and
    refresh deleted it, though upstream never had X (a review, on the real fork)."""
    upstream.commit({"f.txt": "one\n", "g.txt": "two\n"}, "base", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork", "base")
    upstream.commit({"f.txt": "one\nX\n"}, "fork: add X")
    upstream.commit({"f.txt": "one\n", "g.txt": "two, the fork's\n"}, "fork: drop X, reword two")
    upstream.commit({"f.txt": "one\nX\n"}, "fork: X again")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"f.txt": "one\n", "g.txt": "two, upstream's\n"}, "new", tag="new")
    series = tmp_path / "s" / "series"
    imported = rebaser(
        "import", "--repo", upstream.path, "--range", "base..fork", "--series-dir", series.parent
    )
    assert imported.code == ExitCode.OK, imported.err
    report = tmp_path / "r.json"
    result = rebaser(*apply_args(series, upstream, "new", "--keep-going", "--json", report, *lane))
    assert result.code == ExitCode.NOT_APPLIED, result.out
    data = json.loads(report.read_text())
    assert statuses(data) == ["laid", "clean", "dropped", "blocked"], result.out
    assert data["steps"][3]["detail"] == "needs 0002, which did not apply"
    refreshed = rebaser("refresh", "--series", series, "--repo", data["worktree"])
    assert refreshed.code == ExitCode.OK, refreshed.err
    assert "removed" not in refreshed.out and (series.parent / "0003-x-again.patch").is_file()

    # Interactively, `skip` of 0002 stops at 0003 the same way: not as "in upstream", and
    # `continue` with nothing to take names `skip` as the way on (a review).
    stopped = rebaser(*apply_args(series, upstream, "new", "--force", "--json", report, *lane))
    assert stopped.code == ExitCode.NOT_APPLIED
    skipped = rebaser("skip", "--repo", upstream.path, "--json", report)
    assert skipped.code == ExitCode.NOT_APPLIED and "stopped at 0003-x-again.patch" in skipped.out
    row = json.loads(report.read_text())["steps"][-1]
    assert row["status"] == "failed" and "looks made already" in row["detail"], row
    taken = rebaser("continue", "--repo", upstream.path)
    assert taken.code == ExitCode.USAGE and "`rebaser skip`" in taken.err, taken.err
    assert rebaser("skip", "--repo", upstream.path).code == ExitCode.NOT_APPLIED


def test_refresh_after_a_retry_puts_a_patch_left_off_after_the_one_it_needs(
    rebaser, tmp_path, upstream
):
    """0002 retried lands at the tip; 0004 (left off, it edits 0002's line) went back after
    0003, before the 0002 it needs, and the next apply called it a real conflict (a review
    of the fix above)."""
    doubled_and_checked = edit(DOUBLE_MUL, "    return a / b\n", "    assert b\n    return a / b\n")
    series, report = kept_going_onto_swapped_mul(
        rebaser,
        tmp_path,
        upstream,
        [
            *DOC_AND_DOUBLE,
            ("fork: check div", doubled_and_checked),
            ("fork: say why", edit(doubled_and_checked, "2 * a * b\n", "2 * a * b  # doubled\n")),
        ],
    )
    assert statuses(report) == ["laid", "clean", "dropped", "clean", "blocked"]
    tree = Path(report["worktree"])
    retried_by_hand(rebaser, series, tree)
    rebaser("continue", "--repo", upstream.path)
    assert rebaser("refresh", "--series", series, "--repo", tree).code == ExitCode.OK
    listed = [line[:4] for line in series.read_text().splitlines() if line.endswith(".patch")]
    assert listed == ["0001", "0003", "0002", "0004"]


def test_an_empty_pick_beside_an_unrelated_patch_left_off_is_upstream_s(
    rebaser, tmp_path, upstream
):
    """0001 (left off) and 0002 share a file but not a line: 0002's empty pick is upstream's
    (v2 made its change), not for want of 0001 (a review of the fix above)."""
    checked = edit(CALC, "    return a / b\n", "    assert b\n    return a / b\n")
    series = calc_series(
        tmp_path,
        upstream,
        [
            ("fork: double mul", DOUBLE_MUL),
            (
                "fork: check div",
                edit(DOUBLE_MUL, "    return a / b\n", "    assert b\n    return a / b\n"),
            ),
        ],
    )
    upstream.commit(
        {"pkg/calc.py": edit(checked, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )
    _, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    assert statuses(report) == ["laid", "dropped", "in upstream"], report["steps"]
