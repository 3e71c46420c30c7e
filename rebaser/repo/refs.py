"""Every ref rebaser writes, named here and nowhere else: all live under `refs/forkkit/`.

    refs/forkkit/backups/<branch>/<what>-<time>   work kept when a branch is replaced,
                                                   aborted, skipped or interrupted
    refs/forkkit/series-start/<branch>            the overlay commit a series starts after
    refs/forkkit/left-off/<branch>                a blob: the patches the branch lacks
    refs/forkkit/replay/<key>                     the patches' own commits (carry/replay.py)
    refs/forkkit/bases/pypi/<package>/<version>   a PyPI base fetched into a clone
    refs/forkkit/history/<package>                PyPI releases as one chain (bisect)

The refs beside a branch (series start, left off) go with the branch, in one transaction.
"""

from __future__ import annotations

import time
from typing import Optional

from rebaser.repo.git import Git

ROOT = "refs/forkkit"
BACKUPS = f"{ROOT}/backups"
REPLAY = f"{ROOT}/replay"
SERIES_START = f"{ROOT}/series-start"
LEFT_OFF = f"{ROOT}/left-off"
OVERLAY_SUBJECT = "forkkit: overlay"  # how branches from before the series-start ref mark it


def backup(branch: str, what: str) -> str:
    """A new backup ref for `branch`: `what` says why (`aborted`, `skipped-0003`, ...)."""
    return f"{BACKUPS}/{branch}/{what}-{time.strftime('%Y%m%d-%H%M%S')}"


def replay(key: str) -> str:
    return f"{REPLAY}/{key}"


def pypi_base(package: str, version: str) -> str:
    return f"{ROOT}/bases/pypi/{package}/{version}"


def pypi_history(package: str) -> str:
    return f"{ROOT}/history/{package}"


def series_start(branch: str) -> str:
    return f"{SERIES_START}/{branch.removeprefix('refs/heads/')}"


def left_off(branch: str) -> str:
    return f"{LEFT_OFF}/{branch}"


def start_series(worktree: Git, branch: str, sha: str, reflog: str) -> None:
    """Move `branch` (checked out in `worktree`) to the overlay commit `sha` and mark the
    series' start there, in one transaction."""
    moves = (
        f"start\nupdate refs/heads/{branch} {sha}\nupdate {series_start(branch)} {sha}\ncommit\n"
    )
    worktree.run("update-ref", "-m", reflog, "--stdin", stdin=moves.encode())


def find_series_start(repo: Git, branch: str) -> Optional[str]:
    """The commit the series starts after on `branch` (its overlay commit), or None."""
    marked = repo.rev_parse(series_start(branch))
    if (
        marked is not None
        and repo.run("merge-base", "--is-ancestor", marked, branch, check=False).ok
    ):
        return marked
    # A branch from before the ref: the last overlay commit on its first-parent line.
    log = repo.out("log", "--format=%H %s", "--first-parent", branch)
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if subject.startswith(OVERLAY_SUBJECT):
            return sha
    return None


def record_left_off(git: Git, branch: str, patches: dict[str, str]) -> None:
    """Beside the branch, the patches it lacks and still needs (file name → status), so that
    `refresh` keeps them in the series while a patch that is `in upstream` leaves it."""
    ref = left_off(branch)
    if not patches:
        git.run("update-ref", "-d", ref, check=False)
        return
    text = "".join(f"{name}\t{status}\n" for name, status in patches.items())
    blob = git.run("hash-object", "-w", "--stdin", stdin=text.encode()).stdout.strip()
    git.run("update-ref", ref, blob)


def read_left_off(git: Git, branch: str) -> dict[str, str]:
    shown = git.run("cat-file", "blob", left_off(branch), check=False)
    if not shown.ok:
        return {}
    return dict(line.split("\t", 1) for line in shown.stdout.splitlines() if "\t" in line)


def deletes_beside(branch: str) -> str:
    """`update-ref --stdin` lines that drop the refs beside a branch."""
    return "".join(f"delete {ref}\n" for ref in (series_start(branch), left_off(branch)))
