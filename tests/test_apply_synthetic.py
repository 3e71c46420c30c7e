"""`rebaser apply/continue/abort/status` on small synthetic upstream repositories: every way
an apply can go, and that nothing of the user's is ever lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest
from synthetic import ADD_DOC, CALC, Change, apply, build_series, edit, git, two_patch_series

from rebaser.errors import ExitCode

MUL_TWICE = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")


def worktree_of(result_json: Path) -> Path:
    return Path(json.loads(result_json.read_text())["worktree"])


def test_clean_apply_creates_a_branch_and_leaves_the_checkout_alone(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    head_before = git(upstream.path, "rev-parse", "HEAD")
    report = tmp_path / "report.json"
    result = apply(rebaser, series, upstream, "v1", "--json", report)
    assert result.code == ExitCode.OK, result.err
    data = json.loads(report.read_text())
    assert [s["status"] for s in data["steps"]] == ["laid", "clean", "clean"]
    assert data["branch"] == "forkkit/demo/v1" and data["exit_code"] == 0
    assert all(check["ok"] for check in data["checks"])
    assert git(upstream.path, "rev-parse", "HEAD") == head_before
    assert git(upstream.path, "status", "--porcelain") == ""
    tree = worktree_of(report)
    assert "2 * a * b" in (tree / "pkg/calc.py").read_text()
    subjects = git(tree, "log", "--format=%s", "v1..HEAD").splitlines()
    assert subjects == ["demo: double mul", "demo: document add", "forkkit: overlay (0 files)"]
    assert (
        git(tree, "log", "-1", "--format=%an <%ae>|%aD")
        == "Test Author <test@example.com>|Mon, 2 Nov 2026 10:00:00 +0000"
    )


def test_a_file_named_head_upstream_is_no_revision(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    upstream.commit({"HEAD": "a file of the project\n"}, "v2: a file named HEAD", tag="v2")
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report, "--keep-going")
    assert result.code == ExitCode.OK, result.out + result.err
    assert all(check["ok"] for check in json.loads(report.read_text())["checks"])


def test_offset_is_reported(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    upstream.commit({"pkg/calc.py": "import math\n\n" + CALC}, "v2: import at the top", tag="v2")
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v2", "--json", report).code == ExitCode.OK
    steps = json.loads(report.read_text())["steps"]
    assert steps[1]["status"] == "offset" and "offset +2" in steps[1]["detail"]


def test_context_drift_is_merged_three_way(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    # v2 rewrites a line inside the first patch's context (not next to its change):
    # the exact apply fails, a 3-way merge with the base blob succeeds.
    drifted = edit(
        CALC, '"""A tiny upstream module."""\n\n', '"""A tiny upstream module."""\n# a - b\n'
    )
    upstream.commit({"pkg/calc.py": drifted}, "v2", tag="v2")
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report)
    assert result.code == ExitCode.OK, result.out
    statuses = [s["status"] for s in json.loads(report.read_text())["steps"]]
    assert "3-way" in statuses
    text = (worktree_of(report) / "pkg/calc.py").read_text()
    assert '"""Sum."""' in text and "# a - b" in text and "2 * a * b" in text


def conflicting_upstream(upstream):
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}, "v2", tag="v2"
    )


# The user's fix of the conflict on v2: both patches' changes on upstream's swapped operands.
CONFLICT_FIXED = edit(ADD_DOC, "    return a * b\n", "    return 2 * b * a\n")


def stopped_apply(rebaser, tmp_path, upstream, series: Optional[Path] = None) -> Path:
    """The two-patch series (or `series`) applied onto a v2 that conflicts with its second
    patch, stopped there; the worktree."""
    series = series or two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v2", "--json", report).code == ExitCode.NOT_APPLIED
    return worktree_of(report)


def test_conflict_stops_with_a_resumable_state_then_continue(
    rebaser, tmp_path, upstream, monkeypatch
):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report)
    assert result.code == ExitCode.NOT_APPLIED
    data = json.loads(report.read_text())
    assert data["stop"]["patch"] == "0002-change-2.patch"
    assert data["stop"]["conflicts"] == ["pkg/calc.py"]
    assert "stopped at 0002-change-2.patch" in result.out and "rebaser continue" in result.out
    tree = worktree_of(report)
    assert "<<<<<<<" in (tree / "pkg/calc.py").read_text()

    status = rebaser("status", "--repo", upstream.path)
    assert status.code == 0 and "stopped at 0002-change-2.patch" in status.out

    early = rebaser("continue", "--repo", upstream.path)
    assert early.code == ExitCode.USAGE and "conflicts are not resolved" in early.err

    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    monkeypatch.chdir(tree)  # found from the current directory, no --repo needed
    done = rebaser("continue", "--json", report)
    assert done.code == ExitCode.OK, done.out + done.err
    data = json.loads(report.read_text())
    assert [s["status"] for s in data["steps"]] == ["laid", "clean", "manual"]
    assert git(tree, "log", "-1", "--format=%s") == "demo: double mul"
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"


def test_abort_restores_everything_and_keeps_the_work(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "notes.txt").write_text("half-done fix\n")
    result = rebaser("abort", "--repo", upstream.path)
    assert result.code == 0 and "refs/forkkit/backups/forkkit/demo/v2/aborted-" in result.out
    assert not tree.exists()
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    backup = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    assert git(upstream.path, "show", f"{backup}:notes.txt") == "half-done fix"
    assert git(upstream.path, "log", "-1", "--format=%s", backup).startswith(
        "forkkit: work in progress"
    )
    # Nothing is left in progress: a new apply starts cleanly.
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"
    assert apply(rebaser, series, upstream, "v1").code == ExitCode.OK


def test_an_apply_in_progress_blocks_a_second_one(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    assert apply(rebaser, series, upstream, "v2").code == ExitCode.NOT_APPLIED
    again = apply(rebaser, series, upstream, "v1")
    assert again.code == ExitCode.USAGE and "an apply is in progress" in again.err
    assert "rebaser continue" in again.err


def test_continue_without_a_fix_says_what_is_missing(rebaser, tmp_path, upstream):
    tree = stopped_apply(rebaser, tmp_path, upstream)
    git(tree, "reset", "-q", "--hard", "HEAD")  # the user throws the conflict away
    result = rebaser("continue", "--repo", upstream.path)
    assert result.code == ExitCode.USAGE and "still not applied" in result.err


def test_existing_branch_needs_force_and_is_backed_up(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    assert apply(rebaser, series, upstream, "v1").code == ExitCode.OK
    again = apply(rebaser, series, upstream, "v1")
    assert again.code == ExitCode.USAGE and "already exists" in again.err and "--force" in again.err
    # A review pasted the other way it offered, `git branch -D`: git refuses a branch its
    # worktree holds (and a PyPI base's branch is in the cache's repository).
    assert "branch -D" not in again.err, again.err
    forced = apply(rebaser, series, upstream, "v1", "--force")
    assert forced.code == ExitCode.OK
    backups = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    assert backups.count("replaced-") == 1
    # and it says where the replaced branch went (a review looked for it)
    assert f"the branch it replaced is kept at {backups}" in " ".join(forced.out.split())


def test_dirty_worktree_is_never_touched(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = worktree_of(report)
    (tree / "pkg/calc.py").write_text("my local edit\n")
    result = apply(rebaser, series, upstream, "v1", "--force")
    assert result.code == ExitCode.USAGE and "uncommitted changes" in result.err
    assert (tree / "pkg/calc.py").read_text() == "my local edit\n"


def test_users_dirty_checkout_stays_as_it_was(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    (upstream.path / "pkg/calc.py").write_text("work in progress\n")
    (upstream.path / "scratch.txt").write_text("untracked\n")
    assert apply(rebaser, series, upstream, "v1").code == ExitCode.OK
    assert (upstream.path / "pkg/calc.py").read_text() == "work in progress\n"
    assert (upstream.path / "scratch.txt").read_text() == "untracked\n"
    assert git(upstream.path, "rev-parse", "--abbrev-ref", "HEAD") == "main"


def test_a_branch_checked_out_by_the_user_is_not_removed(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    git(upstream.path, "worktree", "remove", str(worktree_of(report)))
    git(upstream.path, "checkout", "-q", "forkkit/demo/v1")
    result = apply(rebaser, series, upstream, "v1", "--force")
    assert result.code == ExitCode.USAGE and "rebaser did not create" in result.err


def test_unknown_base_suggests_close_names(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    result = apply(rebaser, series, upstream, "v11")
    assert result.code == ExitCode.USAGE
    assert "unknown base 'v11'" in result.err and "did you mean: v1" in result.err


_TRUNCATED = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@example.com>
Subject: [PATCH] a hunk that ends early

---
diff --git a/pkg/calc.py b/pkg/calc.py
--- a/pkg/calc.py
+++ b/pkg/calc.py
@@ -1,5 +1,5 @@
 import math
-X = 1
+X = 2
"""


@pytest.mark.parametrize(
    "series_text, message",
    [
        ("@name x\n@frobnicate 1\n0001-change-1.patch\n", "unknown series directive @frobnicate"),
        ("@name x\n0009-missing.patch\n", "patch file 0009-missing.patch not found"),
        ("0001-change-1.patch\n0001-change-1.patch\n", "listed twice"),
        ("# nothing\n", "the series lists no patches"),
        ("0001-change-1.patch -p1\n", "unexpected text in series line"),
        ("0001-change-1.patch\n@name late\n", "@name after the first patch"),
        ("not-a-patch.txt\n", "not a git-format patch"),
        ("0001-change-1.patch\n0002-truncated.patch\n", "cannot parse the diff"),
    ],
)
def test_malformed_series_is_a_usage_error_with_a_location(
    rebaser, tmp_path, upstream, series_text, message
):
    series = two_patch_series(tmp_path, upstream)
    (series.parent / "not-a-patch.txt").write_text("hello\n")
    (series.parent / "0002-truncated.patch").write_text(_TRUNCATED)
    series.write_text(series_text)
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert message in result.err
    assert "where:" in result.err


def test_unknown_codemod_name_is_rejected_before_anything_happens(rebaser, tmp_path, upstream):
    series = build_series(
        tmp_path / "p", upstream, "v1", [Change("x", {"pkg/calc.py": ADD_DOC}, codemod="no_such")]
    )
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE and "unknown codemod 'no_such'" in result.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""


def test_a_patch_that_breaks_compilation_fails_verification(rebaser, tmp_path, upstream):
    broken = edit(CALC, "def neg(a):", "def neg(a:")
    series = build_series(
        tmp_path / "p", upstream, "v1", [Change("demo: typo", {"pkg/calc.py": broken})]
    )
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v1", "--json", report)
    assert result.code == ExitCode.VERIFY_FAILED
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert not checks["python compiles"]["ok"]
    assert checks["python compiles"]["problems"][0].startswith("pkg/calc.py:20:")
    # Fix it on the branch and continue: verification runs again.
    tree = worktree_of(report)
    (tree / "pkg/calc.py").write_text(CALC)
    git(tree, "commit", "-qam", "fix the typo")
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK


def test_missing_promised_symbol_fails_verification(rebaser, tmp_path, upstream):
    change = Change(
        "demo: doc",
        {"pkg/calc.py": ADD_DOC},
        symbols=[
            "pkg/calc.py::add(b)",
            "pkg/calc.py::add(c)",
            "pkg/calc.py::power",
            "pkg/calc.py::neg->abs",
            "pkg/calc.py::neg(b) | pkg/calc.py::add->abs",
            "pkg/calc.py::neg(b) | pkg/calc.py::add(b)",  # one shape of two is enough
        ],
    )
    series = build_series(tmp_path / "p", upstream, "v1", [change])
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.VERIFY_FAILED
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert checks["promised symbols exist"]["problems"] == [
        "pkg/calc.py::add(c): no parameter 'c'",
        "pkg/calc.py::power: no 'power'",
        "pkg/calc.py::neg->abs: does not call abs",
        "pkg/calc.py::neg(b) | pkg/calc.py::add->abs: no parameter 'b'; does not call abs",
    ]


OVERLAY_TESTS = {
    "pkg/extra.py": "def triple(x):\n    return 3 * x\n",
    "tests/test_extra.py": """
        from pkg.calc import mul
        from pkg.extra import triple

        def test_triple():
            assert triple(2) == 6

        def test_doubled_mul():
            assert mul(2, 3) == 12

        def test_skipped():
            import pytest
            pytest.skip("not here")
    """,
}


def test_tests_run_in_the_patched_tree_with_counts(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream, overlay=OVERLAY_TESTS)
    report = tmp_path / "r.json"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1", "--json", report
    )
    assert result.code == ExitCode.OK, result.out
    (suite,) = json.loads(report.read_text())["suites"]
    assert (suite["name"], suite["passed"], suite["failed"], suite["skipped"]) == (
        "overlay (cpu)",
        2,
        0,
        1,
    )
    assert git(worktree_of(report), "status", "--porcelain") == ""  # no caches left in the tree


def test_failing_tests_give_their_exit_code(rebaser, tmp_path, upstream):
    overlay = dict(
        OVERLAY_TESTS, **{"tests/test_extra.py": "def test_fails():\n    assert 1 == 2\n"}
    )
    series = two_patch_series(tmp_path, upstream, overlay=overlay)
    report = tmp_path / "r.json"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1", "--json", report
    )
    assert result.code == ExitCode.TESTS_FAILED
    (suite,) = json.loads(report.read_text())["suites"]
    assert suite["failed"] == 1 and "test_fails" in suite["failures"][0]
    assert "tests failed" in result.out


def test_overlay_clash_with_upstream_stops_then_continues_after_a_merge(
    rebaser, tmp_path, upstream
):
    series = two_patch_series(tmp_path, upstream, overlay={"pkg/calc.py": "clash\n"})
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v1", "--json", report)
    assert result.code == ExitCode.NOT_APPLIED
    assert "upstream now has files at overlay paths" in result.out
    tree = worktree_of(report)
    (tree / "pkg/calc.py").write_text(CALC + "\n# merged with the overlay's clash\n")
    git(tree, "add", "pkg/calc.py")
    done = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert done.code == ExitCode.OK, done.out + done.err
    assert [s["status"] for s in json.loads(report.read_text())["steps"]] == [
        "manual",
        "clean",
        "clean",
    ]
    assert (
        git(tree, "log", "--format=%s", "v1..HEAD").splitlines()[-1]
        == "forkkit: overlay (merged by hand)"
    )


def test_the_stop_record_in_state_json_keeps_its_format(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    assert apply(rebaser, series, upstream, "v2").code == ExitCode.NOT_APPLIED
    state_file = upstream.path / ".git" / "forkkit" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["stopped"] == {
        "phase": "apply",
        "patch": "0002-change-2.patch",
        "reason": state["stopped"]["reason"],
        "conflicts": ["pkg/calc.py"],
        "hunks": state["stopped"]["hunks"],
    }
    assert [row["status"] for row in state["steps"]] == ["laid", "clean"]
    status = rebaser("status", "--repo", upstream.path, "--json", tmp_path / "s.json")
    assert status.code == 0
    viewed = json.loads((tmp_path / "s.json").read_text())
    assert viewed["stopped"] == state["stopped"]
    assert viewed["running"] is None  # stopped, not interrupted: nothing is under way

    state["stopped"]["severity"] = "high"  # a field this version does not know
    state_file.write_text(json.dumps(state))
    refused = rebaser("status", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE
    assert "cannot be read: unknown stop field(s): severity" in refused.err


def test_a_repository_that_does_not_exist_is_named_so(rebaser, tmp_path):
    result = rebaser("apply", "--repo", tmp_path / "nowhere", "--base", "v1", "--test", "none")
    assert result.code == ExitCode.USAGE and f"{tmp_path / 'nowhere'} does not exist" in result.err


def test_a_tree_for_a_base_is_named_so(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    tree = git(upstream.path, "rev-parse", "v1^{tree}")
    result = apply(rebaser, series, upstream, tree)
    assert result.code == ExitCode.USAGE and f"base '{tree}' is a tree, not a commit" in result.err
