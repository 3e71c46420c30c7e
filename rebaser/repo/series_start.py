"""Where a series starts on its branch: a ref, `refs/forkkit/series-start/<branch>`.

An apply points it at the overlay commit it lays; the patches follow that commit. `refresh`
reads the ref; branches made before the ref existed are still found by the overlay commit's
subject.
"""

from __future__ import annotations

from typing import Optional

from rebaser.repo.git import Git

PREFIX = "refs/forkkit/series-start"
OVERLAY_SUBJECT = "forkkit: overlay"


def ref_name(branch: str) -> str:
    return f"{PREFIX}/{branch.removeprefix('refs/heads/')}"


def start(worktree: Git, branch: str, sha: str, reflog: str) -> None:
    """Move `branch` (checked out in `worktree`) to the overlay commit `sha` and mark the
    series' start there, in one transaction."""
    moves = f"start\nupdate refs/heads/{branch} {sha}\nupdate {ref_name(branch)} {sha}\ncommit\n"
    worktree.run("update-ref", "-m", reflog, "--stdin", stdin=moves.encode())


def find(repo: Git, branch: str) -> Optional[str]:
    """The commit the series starts after on `branch` (its overlay commit), or None."""
    marked = repo.rev_parse(ref_name(branch))
    if marked is not None and _is_ancestor(repo, marked, branch):
        return marked
    # A branch from before the ref: the last overlay commit on its first-parent line.
    log = repo.out("log", "--format=%H %s", "--first-parent", branch)
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if subject.startswith(OVERLAY_SUBJECT):
            return sha
    return None


def _is_ancestor(repo: Git, ancestor: str, rev: str) -> bool:
    return repo.run("merge-base", "--is-ancestor", ancestor, rev, check=False).ok
