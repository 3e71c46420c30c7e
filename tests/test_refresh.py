"""`rebaser refresh`: stable, minimal re-export of the series from a branch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT
from fake_pypi import wheel_bytes
from synthetic import CALC, DOUBLE_MUL, Change, build_series, calc_series, edit, git
from test_apply_synthetic import (
    ADD_DOC,
    CONFLICT_FIXED,
    apply,
    stopped_apply,
    two_patch_series,
)

from rebaser.commands.rangediff import PairRow, _paired_by_name
from rebaser.errors import ExitCode


def project_copy(tmp_path: Path) -> Path:
    """The real series and overlay, copied so refresh may write them."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT / "patches", root / "patches")
    shutil.copytree(PROJECT / "megatron_overlay", root / "megatron_overlay")
    return root / "patches" / "series"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.network
def test_reexport_of_an_unchanged_series_is_byte_identical(rebaser, tmp_path):
    series = project_copy(tmp_path)
    before = snapshot(series.parent.parent)
    report = tmp_path / "r.json"
    assert (
        rebaser("apply", "--series", series, "--test", "none", "--json", report).code == ExitCode.OK
    )
    worktree = json.loads(report.read_text())["worktree"]
    result = rebaser("refresh", "--series", series, "--repo", worktree)
    overlay = [p for p in (series.parent.parent / "megatron_overlay").rglob("*.py")]
    exported = len(overlay) + len(list(series.parent.glob("*.patch")))
    assert result.code == ExitCode.OK
    assert f"refresh: 0 of {exported} files changed" in result.out
    assert snapshot(series.parent.parent) == before
    assert rebaser("refresh", "--series", series, "--repo", worktree, "--check").code == ExitCode.OK


def test_manual_fix_is_exported_and_the_refreshed_series_applies_cleanly(
    rebaser, tmp_path, upstream
):
    v1 = git(upstream.path, "rev-parse", "v1")
    series = two_patch_series(tmp_path, upstream, extra_directives=f"@base git:{v1}\n")
    first_patch = (series.parent / "0001-change-1.patch").read_bytes()
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK

    check = rebaser("refresh", "--series", series, "--repo", tree, "--check")
    # What it would do, never "updated" (a review read that as written).
    assert (
        check.code == ExitCode.VERIFY_FAILED
        and "to update patches/0002-change-2.patch" in check.out
        and "updated" not in check.out
    )
    markdown = tmp_path / "range-diff.md"
    result = rebaser(
        "refresh", "--series", series, "--repo", tree, "--range-diff-markdown", markdown
    )
    assert result.code == ExitCode.OK
    # What changed in the series, as git range-diff tells it: patch 1 the same, patch 2 not.
    assert "range-diff (old series → branch):" in result.out
    assert "-+    return 2 * a * b" in result.out and "++    return 2 * b * a" in result.out
    assert markdown.read_text().splitlines()[2:7] == [
        "1 unchanged, 1 changed.",
        "",
        "| old patch | new patch | |",
        "|---|---|---|",
        "| 0001-change-1.patch | 0001-change-1.patch | unchanged |",
    ]
    assert "| 0002-change-2.patch | 0002-change-2.patch | changed |" in markdown.read_text()
    # Patch 1 is the same change on a new base: only its blob ids (the index line) move.
    old, new = (
        first_patch.decode().splitlines(),
        (series.parent / "0001-change-1.patch").read_text().splitlines(),
    )
    assert [(a, b) for a, b in zip(old, new) if a != b] == [
        (a, b) for a, b in zip(old, new) if a.startswith("index ") and b.startswith("index ")
    ] and len(old) == len(new)
    refreshed = (series.parent / "0002-change-2.patch").read_text()
    assert (
        "+    return 2 * b * a" in refreshed
        and "From 0000000000000000000000000000000000000000" in refreshed
    )
    assert "Subject: demo: double mul" in refreshed
    # The patches are v2's now, and so is @base: the next apply rebuilds them on v2 (on v1,
    # the one a review found left, they no longer apply and a cherry-pick is lost).
    v2 = git(upstream.path, "rev-parse", "v2")
    assert f"@base git:{v2}" in series.read_text().splitlines()
    assert "updated   patches/series" in result.out

    # The refreshed series applies to v2 without help, and a second refresh changes nothing.
    report2 = tmp_path / "r2.json"
    result = apply(rebaser, series, upstream, "v2", "--force", "--json", report2)
    assert result.code == ExitCode.OK
    assert [s["status"] for s in json.loads(report2.read_text())["steps"]] == [
        "laid",
        "clean",
        "clean",
    ]
    again = rebaser(
        "refresh", "--series", series, "--repo", json.loads(report2.read_text())["worktree"]
    )
    assert "0 of 2 files changed" in again.out


def test_overlay_edits_and_new_commits_are_exported(rebaser, tmp_path, upstream):
    series = calc_series(
        tmp_path,
        upstream,
        [("demo: doc", ADD_DOC)],
        overlay={"pkg/extra.py": "def triple(x):\n    return 3 * x\n"},
    )
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    (tree / "pkg/extra.py").write_text("def triple(x):\n    return x * 3\n")
    (tree / "pkg/calc.py").write_text(edit(ADD_DOC, "def neg(a):", "def negate(a):"))
    git(tree, "commit", "-qam", "demo: rename neg")
    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert result.code == ExitCode.OK
    assert (
        "updated   overlay/pkg/extra.py" in result.out
        and "new       patches/0002-rename-neg.patch" in result.out
    )
    assert (
        series.parent.parent / "overlay/pkg/extra.py"
    ).read_text() == "def triple(x):\n    return x * 3\n"
    assert series.read_text().splitlines()[-2:] == ["0001-change-1.patch", "0002-rename-neg.patch"]
    assert series.read_text().startswith("# synthetic series\n@name demo\n")


def test_refresh_needs_a_branch_made_by_apply(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    result = rebaser("refresh", "--series", series, "--repo", upstream.path, "--branch", "main")
    assert result.code == ExitCode.USAGE and "no refs/forkkit/series-start/ ref" in result.err


def three_patch_series(tmp_path, upstream):
    versions = [
        ("demo: document add", ADD_DOC),
        ("demo: double mul", DOUBLE_MUL),
        ("demo: negate twice", edit(DOUBLE_MUL, "-a\n", "-(-(-a))\n")),
    ]
    return calc_series(tmp_path, upstream, versions)


def test_a_patch_dropped_on_the_branch_keeps_its_file_and_the_next_keeps_its_own(
    rebaser, tmp_path, upstream
):
    """Keyed by position, refresh wrote patch 3's diff into patch 2's file when 2 was dropped."""
    series = three_patch_series(tmp_path, upstream)
    third = (series.parent / "0003-change-3.patch").read_bytes()
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    # Drop patch 2 from the branch, as `rebaser skip` or --keep-going leave it.
    git(tree, "rebase", "-q", "--onto", "HEAD~2", "HEAD~1")
    assert "Forkkit-Patch: 0003-change-3.patch" in git(tree, "log", "-1", "--format=%B")

    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert result.code == ExitCode.OK, result.err
    assert "removed   patches/0002-change-2.patch" in result.out
    assert "no range-diff: the series names no @base to rebuild it on" in result.out
    assert not (series.parent / "0002-change-2.patch").exists()
    # Patch 3 is exported into its own file; only its preimage blob id moved.
    new_third = (series.parent / "0003-change-3.patch").read_text().splitlines()
    changed = [(a, b) for a, b in zip(third.decode().splitlines(), new_third) if a != b]
    assert len(changed) == 1 and changed[0][0].startswith("index "), changed
    assert series.read_text().splitlines()[-2:] == ["0001-change-1.patch", "0003-change-3.patch"]


def test_series_start_is_read_from_a_ref_not_from_a_subject(rebaser, tmp_path, upstream):
    series = three_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    overlay = git(tree, "rev-parse", "HEAD~3")
    assert git(upstream.path, "rev-parse", "refs/forkkit/series-start/forkkit/demo/v1") == overlay
    # A patch whose subject looks like the overlay's no longer cuts the series short.
    git(tree, "commit", "-q", "--allow-empty", "-m", "forkkit: overlay (notes)")
    (tree / "pkg/extra.py").write_text("X = 1\n")
    git(tree, "add", "pkg/extra.py")
    git(tree, "commit", "-qm", "demo: add extra")
    result = rebaser("refresh", "--series", series, "--repo", tree, "--check")
    assert "unchanged patches/0003-change-3.patch" in result.out, result.out
    assert "to add    patches/0005-add-extra.patch" in result.out

    # A branch from before the ref is still found by its overlay commit's subject.
    git(tree, "reset", "-q", "--hard", "HEAD~2")
    git(upstream.path, "update-ref", "-d", "refs/forkkit/series-start/forkkit/demo/v1")
    old = rebaser("refresh", "--series", series, "--repo", tree, "--check")
    assert old.code == ExitCode.OK and "0 of 3 files would change" in old.out, old.out


def test_a_fix_the_user_committed_goes_back_to_its_patch_file(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "commit", "-qam", "demo: double mul, on top of the swap")
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK
    assert git(tree, "log", "-1", "--format=%B").endswith("Forkkit-Patch: 0002-change-2.patch")
    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert "updated   patches/0002-change-2.patch" in result.out and "new " not in result.out
    refreshed = (series.parent / "0002-change-2.patch").read_text()
    assert "Subject: demo: double mul, on top of the swap" in refreshed
    assert "Forkkit-Patch" not in refreshed


def test_refresh_refuses_a_series_the_branch_was_not_made_from(rebaser, tmp_path, upstream):
    """A review ran `refresh` with no --series in a branch of another series: the default
    series' patches were deleted and the other series' written over them."""
    series = three_patch_series(tmp_path, upstream)
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    other = build_series(
        tmp_path / "other", upstream, "v1", [Change("other: note", {"pkg/note.py": "N = 1\n"})],
        name="other",
    )  # fmt: skip
    (other.parent / "0001-change-1.patch").rename(other.parent / "0001-note.patch")
    other.write_text(other.read_text().replace("0001-change-1.patch", "0001-note.patch"))
    before = snapshot(other.parent)
    for check in ([], ["--check"]):
        result = rebaser("refresh", "--series", other, "--repo", tree, *check)
        assert result.code == ExitCode.USAGE, result.out
        assert "was made from series demo, not other" in result.err, result.err
        assert "--series" in result.err
    assert snapshot(other.parent) == before
    # A branch from before the overlay commit named its series: its patches' identities
    # tell, and none of them is in the other series.
    start = git(tree, "rev-parse", "refs/forkkit/series-start/forkkit/demo/v1")
    git(upstream.path, "update-ref", "-d", "refs/forkkit/series-start/forkkit/demo/v1")
    git(tree, "replace", start, git(tree, "commit-tree", f"{start}^{{tree}}", "-p", f"{start}^",
                                    "-m", "forkkit: overlay (0 files)"))  # fmt: skip
    result = rebaser("refresh", "--series", other, "--repo", tree)
    assert (
        result.code == ExitCode.USAGE and "names none of the patches of series other" in result.err
    ), result.err
    assert snapshot(other.parent) == before


CALC_SUB = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: T <t@t>
Date: Mon, 2 Nov 2026 10:00:00 +0000
Subject: calc: sub

---
diff --git a/megatron/core/calc.py b/megatron/core/calc.py
--- a/megatron/core/calc.py
+++ b/megatron/core/calc.py
@@ -1,2 +1,5 @@
 def add(a, b):
     return a + b
+
+def sub(a, b):
+    return a - b
--
"""


@pytest.mark.parametrize("recorded", ["pypi:megatron-core==9.9.0", "git:" + "1" * 40])
def test_refresh_moves_a_release_base_to_the_release_the_branch_is_on(
    rebaser, tmp_path, fake_pypi, isolated_cache, recorded
):
    """A series applied to 9.9.1 and refreshed: its patches are 9.9.1's, so @base says 9.9.1
    (it stayed as it was: a review; then a git: base became the cache's own commit, which
    no clone has: a review of that)."""
    fake_pypi.wheels["9.9.1"] = wheel_bytes("9.9.1", extra={"megatron/core/new.py": "N = 1\n"})
    folder = tmp_path / "patches"
    folder.mkdir()
    (folder / "0001-sub.patch").write_text(CALC_SUB)
    series = folder / "series"
    series.write_text(f"@name rel\n@base {recorded}\n0001-sub.patch\n")
    report = tmp_path / "r.json"
    applied = rebaser("apply", "--series", series, "--upstream", "pypi:megatron-core==9.9.1",
                      "--test", "none", "--json", report)  # fmt: skip
    assert applied.code == ExitCode.OK, applied.out + applied.err
    worktree = json.loads(report.read_text())["worktree"]
    assert rebaser("refresh", "--series", series, "--repo", worktree).code == ExitCode.OK
    assert "@base pypi:megatron-core==9.9.1" in series.read_text().splitlines()
    again = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert again.code == ExitCode.OK, again.out


# -- found by a hostile review (docs/safety.md, "Reviewed as a hostile user (fourth pass)") --


def applied_on_v1(rebaser, tmp_path, upstream) -> tuple[Path, Path]:
    """The two-patch series applied onto v1: the series file, the worktree."""
    series = two_patch_series(tmp_path, upstream)
    report = tmp_path / "applied.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    return series, Path(json.loads(report.read_text())["worktree"])


def test_what_refresh_replaces_or_removes_is_kept_in_a_ref(rebaser, tmp_path, upstream):
    """A patch written by hand and listed after the apply, and an uncommitted edit of a
    patch file: refresh removed the one (it existed nowhere else) and overwrote the other,
    with no word of it."""
    series, tree = applied_on_v1(rebaser, tmp_path, upstream)
    folder = series.parent
    mine = (folder / "0002-change-2.patch").read_bytes().replace(b"change 2", b"mine")
    (folder / "0003-mine.patch").write_bytes(mine)
    series.write_text(series.read_text() + "0003-mine.patch\n")
    edited = (folder / "0001-change-1.patch").read_bytes() + b"my note\n"
    (folder / "0001-change-1.patch").write_bytes(edited)
    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert result.code == ExitCode.OK, result.out + result.err
    assert not (folder / "0003-mine.patch").exists()  # not on the branch: removed, as before
    ref = re.search(r"as they were before are kept at (\S+)", result.out)[1]
    for name, old in (("0003-mine.patch", mine), ("0001-change-1.patch", edited)):
        kept = subprocess.run(
            ["git", "cat-file", "blob", f"{ref}:{folder.name}/{name}"],
            cwd=tree, capture_output=True, check=True,
        ).stdout  # fmt: skip
        assert kept == old, name
    again = rebaser("refresh", "--series", series, "--repo", tree)
    assert "as they were before" not in again.out  # nothing replaced: no backup


def test_refresh_refuses_a_merge_on_the_branch(rebaser, tmp_path, upstream):
    """A merge of upstream into the branch became a bogus patch (a copy of another one, with
    its trailer) instead of a refusal."""
    series, tree = applied_on_v1(rebaser, tmp_path, upstream)
    before = snapshot(series.parent)
    upstream.commit({"pkg/other.py": "X = 1\n"}, "upstream moves on", tag="v3")
    git(tree, "merge", "-q", "--no-edit", "v3")
    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "merge commit" in result.err, result.err
    assert "git rebase" in result.err, result.err
    assert snapshot(series.parent) == before


def test_a_commit_without_a_trailer_keeps_its_patch_file(rebaser, tmp_path, upstream):
    """A commit made by hand (no trailer) went to a new numbered patch on every refresh
    (0003, then 0004, ...): `refresh --check` never passed."""
    series, tree = applied_on_v1(rebaser, tmp_path, upstream)
    (tree / "pkg/new.py").write_text("NEW = 1\n")
    git(tree, "add", "pkg/new.py")
    git(tree, "commit", "-q", "-m", "demo: add new.py")
    first = rebaser("refresh", "--series", series, "--repo", tree)
    assert "new       patches/0003-add-new-py.patch" in first.out, first.out
    check = rebaser("refresh", "--series", series, "--repo", tree, "--check")
    assert check.code == ExitCode.OK, check.out
    assert series.read_text().splitlines()[-1] == "0003-add-new-py.patch"


def test_refresh_keeps_the_series_files_comments_where_they_were(rebaser, tmp_path, upstream):
    """Rewriting the series file dropped a patch line's own comment and moved the comment
    lines between patches below them all."""
    series, tree = applied_on_v1(rebaser, tmp_path, upstream)
    text = series.read_text()
    text = text.replace("0001-change-1.patch\n", "# part A\n0001-change-1.patch   # team A\n\n")
    text = text.replace("0002-change-2.patch\n", "# part B\n0002-change-2.patch\n")
    series.write_text(text)
    (tree / "pkg/new.py").write_text("NEW = 1\n")
    git(tree, "add", "pkg/new.py")
    git(tree, "commit", "-q", "-m", "demo: add new.py")
    assert rebaser("refresh", "--series", series, "--repo", tree).code == ExitCode.OK
    assert series.read_text().endswith(
        "# part A\n0001-change-1.patch   # team A\n\n# part B\n0002-change-2.patch\n"
        "0003-add-new-py.patch\n"
    ), series.read_text()


def test_a_patch_rewritten_at_its_stop_is_one_changed_row(rebaser, tmp_path, upstream):
    """A review: a patch resolved at its stop into a different change read as "1 removed, 1
    added" in the PR's Markdown (git range-diff pairs commits by how alike their diffs are);
    the same patch file is one patch, changed."""
    v1 = git(upstream.path, "rev-parse", "v1")
    series = two_patch_series(tmp_path, upstream, extra_directives=f"@base git:{v1}\n")
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    rewritten = CONFLICT_FIXED.replace("    return 2 * b * a\n", "    return b * a\n") + "".join(
        f"\n\ndef scaled_{n}(a, b):\n    return {n} * mul(a, b)\n" for n in range(2, 12)
    )
    (tree / "pkg/calc.py").write_text(rewritten)
    git(tree, "add", "pkg/calc.py")
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK
    markdown = tmp_path / "range-diff.md"
    result = rebaser(
        "refresh", "--series", series, "--repo", tree, "--range-diff-markdown", markdown
    )
    assert result.code == ExitCode.OK, result.err
    text = markdown.read_text()
    assert "| 0002-change-2.patch | 0002-change-2.patch | changed |" in text, text
    assert "removed" not in text.split("<details>")[0] and "1 unchanged, 1 changed." in text


def test_the_patch_table_pairs_each_patch_with_its_own_name():
    """On the real fork (radixark miles-main onto NVIDIA dev, refresh after `apply
    --keep-going`), git range-diff paired the branch's 0016 with the old 0024 (alike diffs)
    and left the old 0016 "removed": a patch file of the same name is the same patch
    (its Forkkit-Patch trailer), paired with itself first; git's pairing stands for the
    rest, a renamed patch included."""
    rows = [
        PairRow("0016-a.patch", None, "removed"),
        PairRow("0024-b.patch", "0016-a.patch", "changed"),
        PairRow("0014-c.patch", "0014-c.patch", "unchanged"),
        PairRow("0029-d.patch", None, "removed"),
        PairRow(None, "0029-d.patch", "added"),
        PairRow("0003-old-name.patch", "0003-new-name.patch", "changed"),
        PairRow("0005-e.patch", "0031-f.patch", "changed"),
        PairRow(None, "0005-e.patch", "added"),
    ]
    assert _paired_by_name(rows) == [
        PairRow("0016-a.patch", "0016-a.patch", "changed"),
        PairRow("0024-b.patch", None, "removed"),
        PairRow("0014-c.patch", "0014-c.patch", "unchanged"),
        PairRow("0029-d.patch", "0029-d.patch", "changed"),
        PairRow("0003-old-name.patch", "0003-new-name.patch", "changed"),
        PairRow(None, "0031-f.patch", "added"),
        PairRow("0005-e.patch", "0005-e.patch", "changed"),
    ]


def test_uncommitted_changes_on_the_branch_are_refused_by_refresh(rebaser, tmp_path, upstream):
    """A review: a fix left uncommitted in the branch's worktree was not exported, and both
    `refresh` and `refresh --check` said the series was up to date (exit 0)."""
    series = calc_series(tmp_path, upstream, [("demo: doc", ADD_DOC)])
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v1", "--json", report).code == ExitCode.OK
    tree = Path(json.loads(report.read_text())["worktree"])
    (tree / "pkg/calc.py").write_text(edit(ADD_DOC, "def neg(a):", "def negate(a):"))
    before = snapshot(series.parent)
    for check in ([], ["--check"]):
        refused = rebaser("refresh", "--series", series, "--repo", tree, *check)
        assert refused.code == ExitCode.USAGE, refused.out + refused.err
        assert "uncommitted changes on forkkit/demo/v1: pkg/calc.py" in refused.err
    assert snapshot(series.parent) == before


def test_a_branch_without_patches_has_no_range_diff_and_says_why(rebaser, tmp_path, upstream):
    """A review: with every patch left off the branch, `refresh --check` printed git
    range-diff's whole usage text (an empty range is refused)."""
    v1 = git(upstream.path, "rev-parse", "v1")
    series = calc_series(
        tmp_path, upstream, [("demo: doc", ADD_DOC)], extra_directives=f"@base git:{v1}\n"
    )
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "def add(a, b):\n", "def add(a, b):  # v2\n")}, "v2", tag="v2"
    )
    report = tmp_path / "r.json"
    apply(rebaser, series, upstream, "v2", "--keep-going", "--json", report)
    tree = Path(json.loads(report.read_text())["worktree"])
    checked = rebaser("refresh", "--series", series, "--repo", tree, "--check")
    assert "no range-diff: the branch holds none of the patches" in checked.out, checked.out
    assert "usage:" not in checked.out + checked.err
