"""Issue 18: the fast lane's recovery and its scratch repositories under faults. Nothing of
the user's is lost after an interrupted lane, and a lane never blocks or harms another."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault, start_paused, wait_for_file
from synthetic import SyntheticUpstream, git
from test_fast_lane import fork_and_tip

from rebaser.errors import ExitCode
from rebaser.repo import scratch
from rebaser.steps import fastlane

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


def lane_of(upstream) -> Path:
    """The scratch repository the apply in progress in `upstream` runs its lane in."""
    worktree = Path(state_of(upstream)["worktree"])
    git_dir = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    return Path((git_dir / fastlane.MARKER).read_text().splitlines()[1])


def steps_of(report: Path) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in json.loads(report.read_text())["steps"]]


def test_a_lane_in_another_pid_namespace_leaves_a_running_lane_alone(tmp_path, upstream):
    """Case 14: an apply in another PID namespace sharing /dev/shm (a container run with
    --ipc=host) took a running lane's scratch repository for an orphan (its pid did not
    exist there) and deleted it. The lock its process holds says it lives."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    series = fork_and_tip(upstream, tmp_path)
    twin = SyntheticUpstream(tmp_path / "twin")
    shutil.copytree(upstream.path, twin.path, symlinks=True)
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    point = FaultPoint("rebaser.steps.fastlane:_sequence", "before")
    first = start_paused(
        point, lane_args(series, upstream, "--json", tmp_path / "a.json"), paused, resume
    )
    try:
        wait_for_file(paused, first)
        lane = lane_of(upstream)
        assert lane.is_dir()
        other = ["unshare", "--pid", "--fork", sys.executable, "-m", "rebaser"]
        other += map(str, lane_args(series, twin, "--json", tmp_path / "b.json"))
        second = subprocess.run(other, capture_output=True, text=True, timeout=600)
        if "unshare failed" in second.stderr or "unshare:" in second.stderr:
            pytest.skip(f"cannot make a PID namespace here: {second.stderr.strip()}")
        assert second.returncode == ExitCode.NOT_APPLIED, second.stdout + second.stderr
        assert lane.is_dir(), "the other namespace's apply removed a running lane"
    finally:
        resume.write_text("go")
        out, err = first.communicate(timeout=600)
    assert first.returncode == ExitCode.NOT_APPLIED, out + err
    assert steps_of(tmp_path / "a.json") == steps_of(tmp_path / "b.json")
    assert not lane.exists()


SHM_CASES = {
    # a few kB: nothing fits (Docker gives 64 MB, which the lane may fill)
    "tiny": ("size=8k", ""),
    # full: PyTorch jobs fill it with their tensors
    "full": ("size=40m", "head -c 41943040 /dev/zero > /dev/shm/filler 2>/dev/null;"),
    # room by its size, none once the lane starts writing (the floor is lifted to get there)
    "fills up as the lane starts": ("size=8k", ""),
}


@pytest.mark.parametrize("case", SHM_CASES)
def test_a_small_or_full_dev_shm_falls_back_to_disk(tmp_path, upstream, case):
    """Case 13: apply and continue stopped with a raw `No space left on device`; the lane
    now runs on disk, with the same result."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    series = fork_and_tip(upstream, tmp_path)
    twin = SyntheticUpstream(tmp_path / "twin")
    shutil.copytree(upstream.path, twin.path, symlinks=True)
    expected = tmp_path / "expected.json"
    ordinary = subprocess.run(
        [sys.executable, "-m", "rebaser", *map(str, lane_args(series, twin, "--json", expected))],
        capture_output=True,
        text=True,
    )
    assert ordinary.returncode == ExitCode.NOT_APPLIED, ordinary.stderr
    size, fill = SHM_CASES[case]
    floor = "import rebaser.repo.scratch as s; s._MEMORY_FLOOR = 0; " if "fills" in case else ""
    driver = f"import sys; {floor}from rebaser.cli import main; sys.exit(main(sys.argv[1:]))"
    report = tmp_path / "report.json"
    cli = " ".join(
        shlex.quote(str(part))
        for part in [sys.executable, "-c", driver, *lane_args(series, upstream, "--json", report)]
    )
    script = f"mount -t tmpfs -o {size} tmpfs /dev/shm || exit 99; {fill} exec {cli}"
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True
    )
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"cannot mount a private /dev/shm here: {done.stderr.strip()}")
    assert done.returncode == ExitCode.NOT_APPLIED, done.stdout + done.stderr
    assert "No space left" not in done.stderr
    assert steps_of(report) == steps_of(expected)


def test_continue_removes_a_killed_lane_in_dev_shm_when_it_is_short_of_room_now(
    rebaser, tmp_path, upstream, monkeypatch
):
    """Review: the scratch repository a kill left in /dev/shm is removed by `continue` even
    when /dev/shm has too little room for a new lane now (the new one runs on disk)."""
    if not scratch._MEMORY.is_dir():
        pytest.skip("no /dev/shm here")
    series = fork_and_tip(upstream, tmp_path)
    died = run_with_fault(
        FaultPoint("rebaser.steps.fastlane:_sequence", "after"), lane_args(series, upstream)
    )
    assert died.returncode == 137, died.stdout + died.stderr
    lane = lane_of(upstream)
    assert lane.parent == scratch._MEMORY and lane.is_dir()
    monkeypatch.setattr(scratch, "_MEMORY_FLOOR", 1 << 62)  # no room now, as a full /dev/shm
    done = rebaser("continue", "--repo", upstream.path)
    assert done.code == ExitCode.NOT_APPLIED, done.out + done.err
    assert not lane.exists()
