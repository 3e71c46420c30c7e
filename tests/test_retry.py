"""`rebaser retry <patch>` after a `--keep-going` pass: one patch left off the branch back in
the worktree with its conflict; `continue` records the resolution and verifies; no second
apply of the series."""

from __future__ import annotations

import json
from pathlib import Path

from synthetic import git
from test_keep_going import apply_onto_v2, series_with_a_knock_on, statuses

from rebaser.carry.collision import Bisector
from rebaser.carry.triage import Triage, Upstream
from rebaser.errors import ExitCode

BRANCH = "forkkit/demo/v2"


def kept_going(rebaser, tmp_path, upstream):
    """0002 dropped (it conflicts with v2), 0003 blocked on it; the rest on the branch."""
    series = series_with_a_knock_on(tmp_path, upstream)
    result, report = apply_onto_v2(rebaser, tmp_path, series, upstream, "--keep-going")
    assert statuses(report) == ["laid", "clean", "dropped", "blocked", "clean"]
    return series, Path(report["worktree"])


def test_retry_leaves_the_conflict_and_continue_records_it_without_a_second_apply(
    rebaser, tmp_path, upstream
):
    series, tree = kept_going(rebaser, tmp_path, upstream)
    tip = git(tree, "rev-parse", "HEAD")
    retried = rebaser(
        "retry", "0002", "--series", series, "--repo", tree, "--json", tmp_path / "r.json"
    )
    assert retried.code == ExitCode.NOT_APPLIED, retried.err
    assert "stopped at 0002-change-2.patch" in retried.out
    assert "<<<<<<<" in (tree / "pkg/calc.py").read_text()
    assert git(tree, "rev-parse", "HEAD") == tip  # the branch as the apply left it
    report = json.loads((tmp_path / "r.json").read_text())
    assert [row["name"] for row in report["steps"]] == [
        "0003-change-3.patch",
        "0002-change-2.patch",
    ]
    stopped = report["steps"][-1]
    assert stopped["status"] == "failed" and stopped["collides_with"]["subject"] == "v2"

    (tree / "pkg/calc.py").write_text(
        (tree / "pkg/calc.py").read_text().split("<<<<<<<")[0]
        + "    return 2 * a * b\n"
        + (tree / "pkg/calc.py").read_text().split(">>>>>>>")[1].split("\n", 1)[1]
    )
    git(tree, "add", "pkg/calc.py")
    resumed = rebaser("continue", "--repo", upstream.path, "--json", tmp_path / "c.json")
    assert resumed.code == ExitCode.NOT_APPLIED, resumed.out  # 0003 is still missing
    data = json.loads((tmp_path / "c.json").read_text())
    assert statuses(data) == ["blocked", "manual"]
    assert "1 patch not applied: 0003-change-3.patch (blocked)" in data["outcome"]
    assert all(check["ok"] for check in data["checks"])
    assert "resolution(s) recorded" in data["steps"][-1]["detail"]
    assert (series.parent / "resolutions" / "0002-change-2.patch").is_dir()
    # one new commit on the branch: the fixed patch, with its identity
    assert git(tree, "rev-list", "--count", f"{tip}..HEAD") == "1"
    assert "Forkkit-Patch: 0002-change-2.patch" in git(tree, "log", "-1", "--format=%B")
    left_off = git(upstream.path, "cat-file", "blob", f"refs/forkkit/left-off/{BRANCH}")
    assert left_off == "0003-change-3.patch\tblocked"

    # 0003 needed 0002: now on the branch, it applies at once; nothing is missing any more
    last = rebaser("retry", "0003-change-3.patch", "--series", series, "--repo", tree)
    assert last.code == ExitCode.OK, last.out
    assert "applied, verified" in last.out
    assert git(upstream.path, "for-each-ref", "refs/forkkit/left-off") == ""
    assert "# doubled" in (tree / "pkg/calc.py").read_text()
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"


def test_abort_of_a_retry_keeps_the_branch_and_sets_the_work_aside(rebaser, tmp_path, upstream):
    series, tree = kept_going(rebaser, tmp_path, upstream)
    tip = git(tree, "rev-parse", "HEAD")
    retried = rebaser("retry", "2", "--series", series, "--repo", tree)
    assert retried.code == ExitCode.NOT_APPLIED
    assert "`rebaser abort` to set the work on it aside (the branch stays as it was)" in retried.out
    (tree / "pkg/calc.py").write_text("half-done\n")
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == ExitCode.OK
    assert "retry of 0002-change-2.patch abandoned" in aborted.out
    assert git(tree, "rev-parse", "HEAD") == tip and git(tree, "status", "--porcelain") == ""
    kept = git(
        upstream.path, "for-each-ref", "--format=%(refname)", f"refs/forkkit/backups/{BRANCH}"
    )
    assert "/retry-" in kept
    assert git(upstream.path, "show", f"{kept.split()[0]}:pkg/calc.py") == "half-done"
    assert git(upstream.path, "rev-parse", BRANCH) == tip


def test_retry_of_a_patch_that_is_not_left_off_is_refused(rebaser, tmp_path, upstream):
    series, tree = kept_going(rebaser, tmp_path, upstream)
    refused = rebaser("retry", "0001", "--series", series, "--repo", tree)
    assert refused.code == ExitCode.USAGE
    assert "0001 is not a patch left off branch forkkit/demo/v2" in refused.err
    assert "0002-change-2.patch (dropped), 0003-change-3.patch (blocked)" in refused.err


def test_retry_refuses_a_dirty_worktree(rebaser, tmp_path, upstream):
    series, tree = kept_going(rebaser, tmp_path, upstream)
    (tree / "notes.txt").write_text("mine\n")
    refused = rebaser("retry", "0002", "--series", series, "--repo", tree)
    assert refused.code == ExitCode.USAGE and "uncommitted changes" in refused.err
    assert (tree / "notes.txt").read_text() == "mine\n"


def test_retry_reuses_the_colliding_commit_the_apply_found(
    rebaser, tmp_path, upstream, monkeypatch
):
    """Each retry (and skip, continue) triages the run again: the bisection of every stopped
    patch cost 0.6 s of a 1.1 s retry on a Megatron-size tree. What the apply found is kept
    in the repository's memo, named by the commits it depends on."""
    series, tree = kept_going(rebaser, tmp_path, upstream)

    def refuse(*args, **kwargs):
        raise AssertionError("the retry asked upstream what the apply had found")

    monkeypatch.setattr(Bisector, "first_colliding", refuse)
    monkeypatch.setattr(Upstream, "subjects_touching", refuse)
    monkeypatch.setattr(Upstream, "word_rarity", refuse)
    monkeypatch.setattr(Upstream, "defined", refuse)
    retried = rebaser(
        "retry", "0002", "--series", series, "--repo", tree, "--json", tmp_path / "r.json"
    )
    assert retried.code == ExitCode.NOT_APPLIED, retried.err
    stopped = json.loads((tmp_path / "r.json").read_text())["steps"][-1]
    assert stopped["name"] == "0002-change-2.patch"
    assert stopped["collides_with"]["subject"] == "v2"


def test_retry_probes_only_the_patch_it_retries(rebaser, tmp_path, upstream, monkeypatch):
    """The retry's report lists the other patches left off as rows without their stops (so
    without their conflicts): the triage bisected each of them again, 131 merges and 1.3 s
    of a 1.9 s retry on the real fork, to say what the apply that left them off had said."""
    series, tree = kept_going(rebaser, tmp_path, upstream)
    probed = []
    collide = Triage._collide

    def recording(self, row, earlier):
        probed.append(row.patch.name)
        return collide(self, row, earlier)

    monkeypatch.setattr(Triage, "_collide", recording)
    retried = rebaser(
        "retry", "0003", "--series", series, "--repo", tree, "--json", tmp_path / "r.json"
    )
    assert retried.code == ExitCode.NOT_APPLIED, retried.err
    assert probed == ["0003-change-3.patch"]
    rows = json.loads((tmp_path / "r.json").read_text())["steps"]
    assert [(row["name"], row["status"]) for row in rows] == [
        ("0002-change-2.patch", "dropped"),
        ("0003-change-3.patch", "failed"),
    ]
    assert rows[0]["proposal"] == "keep" and rows[0]["collides_with"] is None


def test_a_retry_names_no_none_for_the_blocked_patch(rebaser, tmp_path, upstream):
    """A review: after `retry 0002`, the row of 0003 (blocked on 0002) read "needs None
    first": the retry's rows do not say which patch it needs."""
    series, tree = kept_going(rebaser, tmp_path, upstream)
    report = tmp_path / "retry.json"
    rebaser("retry", "0002", "--series", series, "--repo", tree, "--json", report)
    reasons = [row.get("reason", "") for row in json.loads(report.read_text())["steps"]]
    assert not any("None" in reason for reason in reasons), reasons
