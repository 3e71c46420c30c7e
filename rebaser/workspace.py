"""The branch and worktree an apply writes to, created without touching the user's checkout.

Everything happens in a separate `git worktree` on a new branch. An existing branch or
worktree of an earlier apply is replaced only with --force, never when it has uncommitted
changes, and its commits are kept under refs/forkkit/backups/ first.

Throwaway work (verify's and bisect's applies, the base checkout for upstream tests, the
tree `git bisect` walks) uses `throwaway_branch` and `detached`, which always clean up.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from rebaser.errors import RebaserError
from rebaser.git import FORKKIT_AUTHOR, Git

BACKUP_PREFIX = "refs/forkkit/backups"
_MARKER = "forkkit-worktree"


@dataclass(frozen=True)
class Workspace:
    branch: str
    path: Path

    @property
    def git(self) -> Git:
        return Git(self.path)


def forkkit_dir(repo: Git) -> Path:
    """rebaser's own folder inside a repository's git dir (state, worktrees, reports)."""
    return repo.common_dir() / "forkkit"


def branch_name(series_name: str, label: str, prefix: str = "forkkit") -> str:
    return f"{prefix}/{series_name}/{label}"


def default_worktree_path(repo: Git, branch: str) -> Path:
    return forkkit_dir(repo) / "worktrees" / branch.replace("/", "--")


def checked_out_at(repo: Git, branch: str) -> Optional[Path]:
    """The worktree where `branch` is checked out, if any."""
    current: Optional[Path] = None
    for line in repo.out("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


def create(
    repo: Git, branch: str, base_sha: str, path: Optional[Path] = None, *, force: bool = False
) -> Workspace:
    """A new branch at `base_sha`, checked out in a new worktree."""
    path = (path or default_worktree_path(repo, branch)).resolve()
    if repo.ref_exists(f"refs/heads/{branch}"):
        if not force:
            raise RebaserError(
                f"branch {branch} already exists (from an earlier apply?)",
                where=str(repo.path),
                next_step="pass --force to replace it (its commits are kept under "
                f"{BACKUP_PREFIX}/), or delete it with git branch -D {branch}",
            )
        remove(repo, branch, reason="replaced")
    if path.exists() and any(path.iterdir()):
        raise RebaserError(
            f"worktree folder {path} exists and is not empty",
            next_step="choose another --worktree, or remove that folder",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.run("worktree", "add", "--quiet", "-b", branch, str(path), base_sha)
    (_worktree_git_dir(path) / _MARKER).write_text(branch + "\n")
    return Workspace(branch, path)


def remove(repo: Git, branch: str, *, reason: str) -> Optional[str]:
    """Remove the branch and its worktree, keeping the commits under a backup ref.

    Refuses when the worktree has uncommitted changes or is the user's main checkout.
    Returns the backup ref, if one was written.
    """
    where = checked_out_at(repo, branch)
    if where is not None:
        if not _is_forkkit_worktree(where):
            raise RebaserError(
                f"branch {branch} is checked out in {where}, which rebaser did not create",
                next_step="switch that checkout to another branch first",
            )
        dirty = Git(where).status_porcelain()
        if dirty:
            raise RebaserError(
                f"the worktree {where} of {branch} has uncommitted changes; rebaser never "
                "touches a dirty checkout",
                where=", ".join(line[3:] for line in dirty[:5]),
                next_step="commit or stash them there, or remove that worktree yourself",
            )
        repo.run("worktree", "remove", "--force", str(where))
    backup = None
    if repo.ref_exists(f"refs/heads/{branch}"):
        backup = f"{BACKUP_PREFIX}/{branch}/{reason}-{time.strftime('%Y%m%d-%H%M%S')}"
        repo.run("update-ref", backup, f"refs/heads/{branch}")
        repo.run("branch", "--quiet", "-D", branch)
    repo.run("worktree", "prune")
    return backup


def discard(repo: Git, branch: str) -> None:
    """Remove a throwaway branch (verify, bisect) and its worktree, whatever they hold."""
    where = checked_out_at(repo, branch)
    if where is not None:
        if not _is_forkkit_worktree(where):
            raise RebaserError(
                f"branch {branch} is checked out in {where}, which rebaser did not create"
            )
        repo.run("worktree", "remove", "--force", str(where))
    if repo.ref_exists(f"refs/heads/{branch}"):
        repo.run("branch", "--quiet", "-D", branch)
    repo.run("worktree", "prune")


@contextlib.contextmanager
def throwaway_branch(repo: Git, branch: str, *, keep: bool = False) -> Iterator[None]:
    """A branch (and worktree) that does not outlive the block, unless `keep`.

    Leftovers of an interrupted earlier run of the same branch are removed first.
    """
    discard(repo, branch)
    try:
        yield
    finally:
        if not keep:
            discard(repo, branch)


@contextlib.contextmanager
def detached(repo: Git, sha: str, purpose: str) -> Iterator[Path]:
    """A detached worktree at `sha` in a temporary folder, removed after the block."""
    folder = Path(tempfile.mkdtemp(prefix=f"forkkit-{purpose}-"))
    tree = folder / "tree"
    repo.run("worktree", "add", "--quiet", "--detach", str(tree), sha)
    try:
        yield tree
    finally:
        repo.run("worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(folder, ignore_errors=True)


def save_work_in_progress(workspace: Workspace) -> bool:
    """Commit everything uncommitted in the worktree (conflicts included) so nothing is lost."""
    git = workspace.git
    if not git.status_porcelain():
        return False
    git.run("add", "--all")
    git.commit(
        "forkkit: work in progress saved by rebaser abort\n",
        author=FORKKIT_AUTHOR,
        date=f"{int(time.time())} +0000",
    )
    return True


def _is_forkkit_worktree(path: Path) -> bool:
    """Whether rebaser created this worktree (it leaves a marker in the worktree's git dir)."""
    return (_worktree_git_dir(path) / _MARKER).exists()


def _worktree_git_dir(path: Path) -> Path:
    return Path(Git(path).out("rev-parse", "--absolute-git-dir"))
