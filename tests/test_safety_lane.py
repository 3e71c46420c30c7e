"""Issue 18: the fast lane's recovery and its scratch repositories under faults. Nothing of
the user's is lost after an interrupted lane, and a lane never blocks or harms another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault
from synthetic import git
from test_fast_lane import fork_and_tip

from rebaser.errors import ExitCode

BACKUPS = "refs/forkkit/backups"


def lane_args(series: Path, upstream, *extra: str) -> list:
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip"]
    return [*args, "--test", "none", "--keep-going", *extra]


def state_of(upstream) -> dict:
    return json.loads((upstream.path / ".git" / "forkkit" / "state.json").read_text())


def backed_up(upstream, path: str) -> dict[str, str]:
    """`path` as each backup ref that has it holds it."""
    found = {}
    for ref in git(upstream.path, "for-each-ref", "--format=%(refname)", BACKUPS).splitlines():
        if git(upstream.path, "ls-tree", "--name-only", ref, "--", path) == path:
            found[ref] = git(upstream.path, "cat-file", "blob", f"{ref}:{path}") + "\n"
    return found


# Interrupted inside the lane: Ctrl-C once git's sequencer ran (the scratch repository goes,
# its marker stays), kill -9 just before the lane's last checkout (the worktree's files are
# written by then, so the test does not depend on the thread that writes them).
LANE_FAULTS = {
    "ctrl-c after the sequencer": (
        FaultPoint("rebaser.steps.fastlane:_sequence", "after"),
        "interrupt",
    ),
    "kill -9 before the last checkout": (
        FaultPoint("rebaser.steps.fastlane:_move_branch", "before"),
        "kill",
    ),
}


@pytest.mark.parametrize("fault", LANE_FAULTS)
@pytest.mark.parametrize("command", ["abort", "continue"])
def test_edits_after_an_interrupted_lane_are_kept(rebaser, tmp_path, upstream, fault, command):
    """Case 1: the user edits a tracked file and adds one after the lane was interrupted;
    `abort` and `continue` back them up before anything resets the worktree."""
    series = fork_and_tip(upstream, tmp_path)
    point, how = LANE_FAULTS[fault]
    died = run_with_fault(point, lane_args(series, upstream), how=how)
    assert died.returncode in (137, 130), died.stdout + died.stderr
    worktree = Path(state_of(upstream)["worktree"])
    edited = (worktree / "pkg/calc.py").read_text() + "# my own edit\n"
    (worktree / "pkg/calc.py").write_text(edited)
    (worktree / "notes.txt").write_text("my notes\n")

    result = rebaser(command, "--repo", upstream.path)
    assert result.code in (ExitCode.OK, ExitCode.NOT_APPLIED), result.out + result.err
    kept_edit = backed_up(upstream, "pkg/calc.py")
    kept_new = backed_up(upstream, "notes.txt")
    holding = [
        ref for ref in kept_new if kept_new[ref] == "my notes\n" and kept_edit.get(ref) == edited
    ]
    assert len(holding) == 1, (kept_edit, kept_new)
    said = result.out + result.err
    assert holding[0] in said, said  # the message names where the work is
