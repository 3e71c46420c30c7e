"""Issue 18: no dead ends, and exit codes that mean what the README says. A kill at any point
of making the worktree leaves something `apply --force` replaces; failures of the machine
(a read-only repository, a full disk) are exit 5 and failures of what was asked (a folder or
a link where rebaser's files go, an output it cannot write, a name too long) exit 2, each
with what to do; exit 6 is left for rebaser's own bugs."""

from __future__ import annotations

import json

from faults import FaultPoint, run_with_fault
from synthetic import git, two_patch_series

from rebaser.errors import ExitCode


def test_a_kill_between_worktree_add_and_its_marker_is_replaced_by_force(
    rebaser, tmp_path, upstream
):
    """Case 11: killed after `git worktree add`, before rebaser's marker: `apply --force`
    called the worktree one "rebaser did not create" and nothing recovered."""
    series = two_patch_series(tmp_path, upstream)
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "v1", "--test", "none"]
    died = run_with_fault(FaultPoint("rebaser.repo.workspace:worktree_git_dir", "before"), args)
    assert died.returncode == 137, died.stdout + died.stderr
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 2
    again = rebaser(*args)
    assert again.code == ExitCode.USAGE and "pass --force" in again.err, again.err
    report = tmp_path / "r.json"
    forced = rebaser(*args, "--force", "--json", report)
    assert forced.code == ExitCode.OK, forced.out + forced.err
    assert [s["status"] for s in json.loads(report.read_text())["steps"]] == [
        "laid",
        "clean",
        "clean",
    ]
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 2  # the new one only
