"""`rebaser retry <patch>`: after an apply that left patches off its branch (`--keep-going`,
`skip`), one of them back in the worktree, with its conflict, for the maintainer to resolve.

No second apply: the branch stays as the first one left it, the state of an apply stopped
at that one patch is written (its other missing patches counted as before), and the patch's
step runs on the branch's tip (exact, cherry-pick with the structured merge, recorded
resolutions, codemod). `continue` then takes the fix as at any stop (recording the
resolution beside the series), verifies the branch and ends; `skip` leaves the patch off
again; `abort` sets the work on it aside and leaves the branch as it was.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from rebaser.errors import RebaserError
from rebaser.repo import refs, workspace
from rebaser.repo.git import Git, find_repo
from rebaser.sequencer import recovery
from rebaser.sequencer import state as state_store
from rebaser.sequencer.state import ApplyState
from rebaser.series.patches import Series
from rebaser.steps.records import StepRow
from rebaser.steps.step import Step


def repository(hint: Optional[Path]) -> tuple[Git, Git]:
    """(the repository, the checkout `hint` names or the current folder is in)."""
    here = find_repo(hint or Path.cwd())
    if here is None:
        raise RebaserError(
            f"{hint or Path.cwd()} is not in a git repository",
            next_step="run it in the apply's worktree, or pass --repo",
        )
    common = here.common_dir()
    return Git(common.parent if common.name == ".git" else common), here


def branch_of(repo: Git, here: Git, given: Optional[str]) -> str:
    """The branch to retry on: --branch, else the checkout's when patches are left off it,
    else the only branch with patches left off."""
    if given:
        return given.removeprefix("refs/heads/")
    current = here.run("symbolic-ref", "--short", "-q", "HEAD", check=False).stdout.strip()
    if current and refs.read_left_off(repo, current):
        return current
    listed = repo.out("for-each-ref", "--format=%(refname)", refs.LEFT_OFF).splitlines()
    branches = [ref.removeprefix(f"{refs.LEFT_OFF}/") for ref in listed]
    if len(branches) != 1:
        raise RebaserError(
            "which branch? "
            + (
                f"patches are left off {', '.join(branches)}"
                if branches
                else "no branch here has patches left off"
            ),
            where=str(repo.path),
            next_step="pass --branch (the branch `rebaser apply --keep-going` made)",
        )
    return branches[0]


def prepare(
    repo: Git,
    branch: str,
    wanted: str,
    series: Series,
    plan: list[Step],
    test: str,
    json_report: Optional[str],
) -> ApplyState:
    """The state of an apply stopped before `wanted` on `branch`, saved (the caller holds
    the repository's lock)."""
    if (existing := state_store.load(repo)) is not None:
        raise RebaserError(
            f"an apply is in progress in this repository (branch {existing.branch})",
            where=existing.worktree,
            next_step="finish it with `rebaser continue`, or drop it with `rebaser abort`",
        )
    left = refs.read_left_off(repo, branch)
    name = _patch_name(wanted, left, branch)
    if not branch.split("/")[1:2] == [series.name]:
        made_from = f"from series {branch.split('/')[1]}, " if branch.count("/") >= 2 else ""
        raise RebaserError(
            f"branch {branch} was made {made_from}not from series {series.name} "
            f"({series.file})",
            next_step="pass the series the apply used (--series PATH to its series file)",
        )
    number = next((n for n, step in enumerate(plan) if step.name == name), None)
    if number is None:
        raise RebaserError(f"{name} is not in the series {series.file}", next_step="pass --series")
    worktree = _worktree(repo, branch)
    start = refs.find_series_start(repo, branch)
    if start is None:
        raise RebaserError(f"branch {branch} has no series start (not made by rebaser apply?)")
    files = {patch.name: patch.touched_paths for patch in series.patches}
    rows = [
        StepRow(other, status, "left off the branch by an earlier apply", files.get(other, []))
        for other, status in left.items()
        if other != name
    ]
    base = repo.out("rev-parse", f"{start}^")
    state = ApplyState(
        series_file=str(series.file),
        repo=str(repo.path),
        base_rev=base,
        base_sha=base,
        base_description=branch.split("/", 2)[-1],
        branch=branch,
        worktree=str(worktree.path),
        test=test,
        json_report=json_report,
        python=sys.executable,
        next_step=number,
        steps=rows,
        head=worktree.out("rev-parse", "HEAD"),
        fast_lane=False,
        retry_step=number,
    )
    state.save()
    return state


def _patch_name(wanted: str, left: dict[str, str], branch: str) -> str:
    """The left-off patch a file name or number (`0003`, `3`) names."""
    found = [
        name
        for name in left
        if name == wanted or (wanted.isdigit() and name.split("-", 1)[0] == wanted.zfill(4))
    ]
    if len(found) != 1:
        shown = ", ".join(f"{name} ({status})" for name, status in left.items()) or "none"
        raise RebaserError(
            f"{wanted} is not a patch left off branch {branch}",
            next_step=f"retry one of those left off: {shown}",
        )
    return found[0]


def _worktree(repo: Git, branch: str) -> Git:
    path = workspace.checked_out_at(repo, branch)
    if path is None or not path.is_dir():
        raise RebaserError(
            f"branch {branch} is not checked out in a worktree",
            next_step="apply the series again (`rebaser apply --keep-going --force`)",
        )
    worktree = Git(path)
    if dirty := worktree.status_porcelain():
        raise RebaserError(
            f"the worktree {path} has uncommitted changes",
            where=", ".join(line[3:] for line in dirty[:5]),
            next_step="commit or stash them first; rebaser never touches a dirty checkout",
        )
    return worktree


def abandon(state: ApplyState) -> str:
    """`abort` of a retry: the work on the patch goes to a backup ref, the branch and its
    worktree stay as the apply before left them (its worktree deleted: the branch)."""
    patch = state.stopped.patch if state.stopped else "the patch"
    if not Path(state.worktree).is_dir():
        return _abandon_without_worktree(state, patch)
    worktree = recovery.worktree_of(state)  # refuses a branch the user switched to
    stopped_at = state.stopped_head or state.head or worktree.out("rev-parse", "HEAD")
    kept = None
    head = worktree.out("rev-parse", "HEAD")
    dirty = bool(worktree.status_porcelain())
    if dirty or head != stopped_at:
        message = f"forkkit: work on {patch} set aside by rebaser abort\n"
        saved = recovery.snapshot(worktree, message) if dirty else head
        kept = refs.backup(state.branch, "retry")
        worktree.run("update-ref", kept, saved)
    worktree.discard_changes(stopped_at)
    state.clear()
    said = f"retry of {patch} abandoned: branch {state.branch} is as the apply left it"
    return said + (f"; the work on it is kept at {kept}" if kept else "")


def _abandon_without_worktree(state: ApplyState, patch: str) -> str:
    """The worktree was deleted: the branch goes back to where the retry stopped (a commit
    made since is kept in a backup ref), git forgets the folder, the state goes."""
    repo = state.repo_git
    ref = f"refs/heads/{state.branch}"
    stopped_at, tip = state.stopped_head or state.head, repo.rev_parse(ref)
    kept = None
    if stopped_at and tip and tip != stopped_at:
        kept = refs.backup(state.branch, "retry")
        repo.run("update-ref", kept, tip)
        repo.run("update-ref", ref, stopped_at, tip)
    repo.run("worktree", "prune")
    state.clear()
    said = (
        f"retry of {patch} abandoned: its worktree {state.worktree} is missing (deleted?); "
        f"branch {state.branch} is as the apply left it"
    )
    return said + (f"; the commit made on it since is kept at {kept}" if kept else "")
