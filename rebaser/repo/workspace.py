"""The branch and worktree an apply writes to, created without touching the user's checkout.

Everything happens in a separate `git worktree` on a new branch. An existing branch or
worktree of an earlier apply is replaced only with --force, never when it has uncommitted
changes, and its commits are kept under refs/forkkit/backups/ first.

Throwaway work (verify's and bisect's applies, the tree `git bisect` walks) uses
`throwaway_branch` and `detached`, which always clean up. The base checkout for upstream
tests is `exported`: no worktree is registered, so even a kill leaves none behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from rebaser.repo import late_checkout, refs, tempdirs
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo.git import FORKKIT_AUTHOR, Git
from rebaser.wording import counted

_MARKER = "forkkit-worktree"
_REMOVING = ".forkkit-removing-"  # a worktree's folder moved aside to be removed


@dataclass(frozen=True)
class Workspace:
    branch: str
    path: Path
    replaced: Optional[str] = None  # the backup ref of the branch --force replaced

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
    """A new branch at `base_sha`, in a new worktree whose files are not written yet. Refs
    that an earlier branch of that name left beside it (where its series started, which
    patches it lacked) go."""
    path = (path or default_worktree_path(repo, branch)).resolve()
    ref = f"refs/heads/{branch}"
    replaced = remove(repo, branch, reason="replaced") if force and repo.ref_exists(ref) else None
    if path.parent.is_dir():  # what an interrupted removal of a worktree there left aside
        tempdirs.sweep(path.parent, _REMOVING)
    try:  # before the branch exists: a refusal leaves nothing behind
        _check_folder(path)
    except RebaserError:
        if repo.ref_exists(ref):  # an earlier apply's branch and worktree: say that first
            raise _exists(repo, branch) from None
        raise
    # One transaction, which fails when the branch exists: no check-then-create race.
    made = repo.run(
        "update-ref",
        "-m",
        f"branch: Created from {base_sha}",
        "--stdin",
        stdin=f"start\ncreate {ref} {base_sha}\n{refs.deletes_beside(branch)}commit\n".encode(),
        check=False,
    )
    if not made.ok:
        if repo.ref_exists(ref):
            raise _exists(repo, branch)
        raise RebaserError(
            f"cannot create branch {branch}: {made.stderr.strip()}",
            where=str(repo.path),
            code=ExitCode.ENVIRONMENT,
        )
    # Said before the worktree exists (a kill may come before its marker): it is ours.
    intent = _intent(repo, path)
    intent.parent.mkdir(parents=True, exist_ok=True)
    intent.write_text(f"{path}\n")
    try:  # its files are written when a step needs them (late_checkout)
        repo.run("worktree", "add", "--quiet", "--no-checkout", str(path), branch)
    except BaseException:  # a failure or a Ctrl-C: no branch without its worktree
        repo.run("update-ref", "-d", ref, base_sha, check=False)
        intent.unlink(missing_ok=True)
        raise
    git_dir = worktree_git_dir(path)
    (git_dir / _MARKER).write_text(branch + "\n")
    intent.unlink()
    late_checkout.begin(Git(path), git_dir)
    return Workspace(branch, path, replaced)


def _intent(repo: Git, path: Path) -> Path:
    """Where `create` notes a worktree it is about to add (gone once its marker is in)."""
    key = hashlib.sha1(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return forkkit_dir(repo) / "creating" / key


def _exists(repo: Git, branch: str) -> RebaserError:
    return RebaserError(
        f"branch {branch} already exists (from an earlier apply?)",
        where=str(repo.path),
        next_step="pass --force to replace it (its commits are kept under "
        f"{refs.BACKUPS}/, its worktree removed)",
    )


def _check_folder(path: Path) -> None:
    """The worktree's folder: absent or empty, and makeable (its parents are created)."""
    try:
        in_use = path.exists() and (not path.is_dir() or any(path.iterdir()))
        if not in_use:
            path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a name too long, a read-only folder, a file on the way
        raise RebaserError(
            f"cannot make the worktree's folder {path}: {exc.strerror}",
            next_step="choose a --worktree in a folder you can write to",
        ) from None
    if in_use:
        raise RebaserError(
            f"worktree folder {path} exists and is not an empty folder",
            next_step="choose another --worktree, or remove what is there",
        )


def _forget_beside(repo: Git, branch: str) -> None:
    """Drop the refs beside a removed branch (its commits stay in the branch's backup)."""
    repo.run("update-ref", "--stdin", stdin=refs.deletes_beside(branch).encode(), check=False)


def remove(repo: Git, branch: str, *, reason: str) -> Optional[str]:
    """Remove the branch and its worktree, keeping the commits under a backup ref.

    Refuses when the worktree has uncommitted changes or is the user's main checkout.
    Returns the backup ref, if one was written.
    """
    where = _registered_worktree(repo, branch)
    if where is not None:
        if not _is_forkkit_worktree(repo, where):
            raise RebaserError(
                f"branch {branch} is checked out in {where}, which rebaser did not create",
                next_step="switch that checkout to another branch first",
            )
        # One an interrupted apply left before its files were written: write them, so that
        # git's answer below is about changes, not about files not there yet.
        late_checkout.finish(Git(where), worktree_git_dir(where))
        dirty = Git(where).status_porcelain()
        if dirty:
            raise RebaserError(
                f"the worktree {where} of {branch} has uncommitted changes; rebaser never "
                "touches a dirty checkout",
                where=", ".join(line[3:] for line in dirty[:5]),
                next_step="commit or stash them there, or remove that worktree yourself",
            )
        save_uncommitted(Git(where), f"forkkit: ignored files kept by rebaser ({reason})\n")
        _remove_worktree(repo, where)
    backup = None
    if repo.ref_exists(f"refs/heads/{branch}"):
        backup = refs.backup(branch, reason)
        repo.run("update-ref", backup, f"refs/heads/{branch}")
        repo.run("branch", "--quiet", "-D", branch)
    _forget_beside(repo, branch)
    repo.run("worktree", "prune")
    return backup


def discard(repo: Git, branch: str) -> None:
    """Remove a throwaway branch (verify, bisect) and its worktree, whatever they hold."""
    where = checked_out_at(repo, branch)
    if where is not None:
        if not _is_forkkit_worktree(repo, where):
            raise RebaserError(
                f"branch {branch} is checked out in {where}, which rebaser did not create"
            )
        _remove_worktree(repo, where)
    if repo.ref_exists(f"refs/heads/{branch}"):
        repo.run("branch", "--quiet", "-D", branch)
    _forget_beside(repo, branch)
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
    """A detached worktree at `sha` in a temporary folder, removed after the block. Those a
    kill left in this repository (no living process holds their folder) go first."""
    prefix = f"forkkit-{purpose}-"
    _remove_orphaned_detached(repo, prefix)
    with tempdirs.owned(prefix) as folder:
        tree = folder / "tree"
        repo.run("worktree", "add", "--quiet", "--detach", str(tree), sha)
        try:
            yield tree
        finally:
            repo.run("worktree", "remove", "--force", str(tree), check=False)


def _remove_orphaned_detached(repo: Git, prefix: str) -> None:
    """The worktrees registered here in `<tmp>/<prefix>*/tree` whose process is gone."""
    root = os.path.realpath(tempfile.gettempdir())
    for line in repo.out("worktree", "list", "--porcelain").splitlines():
        tree = Path(line[len("worktree ") :]) if line.startswith("worktree ") else None
        if tree is None or tree.name != "tree" or not tree.parent.name.startswith(prefix):
            continue
        if os.path.realpath(tree.parent.parent) == root and not tempdirs.held(tree.parent):
            repo.run("worktree", "remove", "--force", str(tree), check=False)
            shutil.rmtree(tree.parent, ignore_errors=True)


@contextlib.contextmanager
def exported(repo: Git, sha: str, purpose: str) -> Iterator[Path]:
    """The files of `sha` in a temporary folder, removed after the block. Written with a
    private index, so nothing is registered in the repository: a kill leaves no worktree
    of rebaser's behind in it, and the next export removes the folder it left."""
    with tempdirs.owned(f"forkkit-{purpose}-") as folder:
        tree = folder / "tree"
        tree.mkdir()
        index = {"GIT_INDEX_FILE": str(folder / "index")}
        repo.run("--work-tree", str(tree), "checkout", sha, "--", ".", env=index)
        yield tree


def save_uncommitted(git: Git, message: str) -> Optional[SavedFiles]:
    """Commit everything uncommitted in the worktree, conflicts and ignored files (logs,
    results) included, so that removing the worktree loses nothing. None if nothing was."""
    ignored = [line[3:] for line in _status(git, "--ignored") if line.startswith("!! ")]
    changed = _status(git)
    if not changed and not ignored:
        return None
    git.run("add", "--all", "--force")
    git.commit(message, author=FORKKIT_AUTHOR, date=f"{int(time.time())} +0000")
    return SavedFiles(len(changed), ignored)


@dataclass(frozen=True)
class SavedFiles:
    changed: int
    ignored: list[str]

    def describe(self) -> str:
        parts = [f"{counted(self.changed, 'uncommitted change')}"] if self.changed else []
        if self.ignored:
            shown = ", ".join(self.ignored[:3]) + (", ..." if len(self.ignored) > 3 else "")
            parts.append(f"{counted(len(self.ignored), 'ignored file')} ({shown})")
        return " and ".join(parts)


def require_utf8(path: Optional[Path]) -> None:
    """rebaser keeps paths in JSON and git's text output: refuse one it cannot spell."""
    if path is None:
        return
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        spelled = os.fsencode(path).decode("utf-8", errors="backslashreplace")
        raise RebaserError(
            f"the path {spelled} is not valid UTF-8; rebaser cannot keep track of it",
            next_step="rename the folder, or clone the repository to a UTF-8 path",
        ) from None


def current_branch(git: Git) -> Optional[str]:
    """The branch checked out in a worktree; None when HEAD is detached."""
    result = git.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return result.stdout.strip() if result.ok else None


def check_is_worktree(path: Path, repo: Path) -> None:
    """Refuse a worktree folder whose `.git` file is gone: git would take the repository
    above it for it (an apply's worktree lives inside the repository's git dir)."""
    if not (path / ".git").exists():
        raise RebaserError(
            f"the worktree {path} has lost its .git file: git no longer sees it as a worktree",
            next_step=f"run `git worktree repair` in {repo} to put it back, then run the "
            "command again",
        )


def check_on_branch(git: Git, branch: str) -> None:
    """Refuse to commit in or remove a worktree the user switched to another branch."""
    current = current_branch(git)
    if current != branch:
        on = f"on branch {current}" if current else "on a detached HEAD"
        raise RebaserError(
            f"the worktree {git.path} is {on}, not on the apply's branch {branch}; rebaser "
            "commits only onto its own branch",
            next_step=f"run `git switch {branch}` there (commits on {current or 'HEAD'} stay "
            "where they are), then run the command again",
        )


def forkkit_branches(repo: Git) -> list[str]:
    """The branches checked out in worktrees rebaser created."""
    branches, current = [], None
    for line in repo.out("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line.startswith("branch refs/heads/") and current and current.is_dir():
            if _is_forkkit_worktree(repo, current):
                branches.append(line[len("branch refs/heads/") :])
    return branches


def _status(git: Git, *options: str) -> list[str]:
    out = git.run("status", "--porcelain=v1", "--untracked-files=all", *options).stdout
    return [line for line in out.splitlines() if line.strip()]


def _remove_worktree(repo: Git, where: Path) -> None:
    """The worktree's folder moved aside in one rename, git told to forget it, then the
    folder removed: `git worktree remove` deletes file by file, and a Ctrl-C in it left a
    half-deleted worktree no command would take (its `.git` file gone, or files missing
    that read as uncommitted changes). What a kill leaves aside, the next removal sweeps."""
    aside = tempdirs.Owned(_REMOVING, where.parent)  # a kill's leftovers go first
    try:
        os.rename(where, aside.path / where.name)
    except OSError:  # e.g. a folder a process holds open on some systems: git's way
        aside.release()
        repo.run("worktree", "remove", "--force", str(where))
    else:
        repo.run("worktree", "prune")  # its folder is gone: git forgets it
        aside.release()
    _intent(repo, where).unlink(missing_ok=True)


def _registered_worktree(repo: Git, branch: str) -> Optional[Path]:
    """Where `branch` is checked out; a worktree whose folder was deleted is pruned first."""
    where = checked_out_at(repo, branch)
    if where is not None and not where.exists():
        repo.run("worktree", "prune")
        where = checked_out_at(repo, branch)
    return where


def _is_forkkit_worktree(repo: Git, path: Path) -> bool:
    """Whether rebaser created this worktree: a marker in the worktree's git dir, or (killed
    before the marker was written) the note `create` left before adding it."""
    return (worktree_git_dir(path) / _MARKER).exists() or _intent(repo, path).is_file()


def _worktree_git_dir(path: Path) -> Path:
    return Path(Git(path).out("rev-parse", "--absolute-git-dir"))


def worktree_git_dir(path: Path) -> Path:
    """A linked worktree's own git dir, read from its `.git` file (no git process)."""
    dot_git = path / ".git"
    if dot_git.is_file() and (text := dot_git.read_text()).startswith("gitdir: "):
        return (path / text[len("gitdir: ") :].strip()).resolve()
    return _worktree_git_dir(path)
