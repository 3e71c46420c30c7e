"""What `continue` and `abort` check and repair before they touch an apply in progress.

A stopped apply waits for the user; an interrupted one (kill -9, Ctrl-C, a crash) may have
left a step half done. Either way nothing of the user's is lost: files rebaser would reset
are refused before anything happens, or saved under refs/forkkit/backups/ first.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path
from typing import Optional

from rebaser.repo import late_checkout, tempdirs
from rebaser.repo import workspace
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo import refs
from rebaser.repo.git import Git, commit_tree
from rebaser.sequencer.state import ApplyState, BrokenState
from rebaser.steps import fastlane

_SHOWN = 8  # paths named in a message


def worktree_of(state: ApplyState) -> Git:
    """The apply's worktree, present and on the apply's branch, or a clear error."""
    path = Path(state.worktree)
    if not path.is_dir():
        raise RebaserError(
            f"the worktree {path} is missing (deleted?)",
            next_step="`rebaser abort` drops the apply (its commits are kept under "
            f"{refs.BACKUPS}/), then apply again",
        )
    workspace.check_is_worktree(path, Path(state.repo))
    git = Git(path)
    _leave_interrupted(git, state.branch)
    workspace.check_on_branch(git, state.branch)
    return git


def _leave_interrupted(worktree: Git, branch: str) -> None:
    """Back on the branch with every file written, whatever a kill left half done."""
    git_dir = workspace.worktree_git_dir(worktree.path)
    if (locked := _locked(git_dir, branch)) is not None:
        said, next_step = locked
        raise RebaserError(said, next_step=next_step, code=ExitCode.ENVIRONMENT)
    fastlane.leave_interrupted(git_dir)
    late_checkout.finish(worktree, git_dir)


def _locked(git_dir: Path, branch: str) -> Optional[tuple[str, str]]:
    """git's lock on the worktree's index, its HEAD or the branch, if there (what to say,
    what to do next): a git command of the user's runs there (a commit waiting for its
    editor holds them without having them open), or a git was killed with its rebaser
    (kill -9 of the process group). Which cannot be told safely, so rebaser touches nothing
    and says how to go on, where git's own error named neither."""
    named = git_dir / "commondir"  # a linked worktree's; the main one's git dir is common
    common = (git_dir / named.read_text().strip()).resolve() if named.is_file() else git_dir
    locks = [git_dir / "index.lock", git_dir / "HEAD.lock"]
    locks.append(common / "refs" / "heads" / f"{branch}.lock")
    lock = next((lock for lock in locks if lock.exists()), None)
    if lock is None:
        return None
    return (
        f"git's lock {lock} is there: a git command is running in the worktree (a commit "
        "waiting for its editor?), or one was killed",
        f"let that git command end; if none runs there, `rm {shlex.quote(str(lock))}`, then "
        "run the command again",
    )


def describe(state: ApplyState) -> list[str]:
    """What `status` says beyond the finished steps: the truth about the worktree, and
    what can be done next."""
    lines = []
    if not Path(state.worktree).is_dir():
        lines.append(f"the worktree {state.worktree} is missing (deleted?)")
        lines.append("next: `rebaser abort` drops the apply (its commits are kept in a ref)")
        return lines
    if not (Path(state.worktree) / ".git").exists():
        lines.append(f"the worktree {state.worktree} has lost its .git file")
        lines.append(f"next: `git worktree repair` in {state.repo} puts it back")
        return lines
    current = workspace.current_branch(Git(state.worktree))
    if current != state.branch:
        lines.append(f"the worktree is on {current or 'a detached HEAD'}, not on {state.branch}")
        lines.append(f"next: `git switch {state.branch}` there before continuing or aborting")
        return lines
    if locked := _locked(workspace.worktree_git_dir(Path(state.worktree)), state.branch):
        said, next_step = locked
        return [*lines, said, f"next: {next_step}"]
    if state.stopped and state.set_aside:
        lines.append(
            f"a `rebaser skip` was interrupted: what was done for {state.stopped.patch} since "
            f"the stop is kept at {state.set_aside}"
        )
        lines.append(
            "next: `rebaser skip` ends it; or take the fix back file by file (`git checkout "
            f"{state.set_aside} -- <path>`: the ref holds your untracked files too), then "
            "`rebaser continue`"
        )
    elif state.stopped:
        lines.append(
            "next: fix it there, `git add`, then `rebaser continue` (or `rebaser skip`, "
            "`rebaser abort`)"
        )
    else:
        lines.append(
            f"not stopped: interrupted during {state.running or 'the apply'} (or running now)"
        )
        if late_checkout.pending(workspace.worktree_git_dir(Path(state.worktree))):
            lines.append("the worktree's files are not written yet; `rebaser continue` writes them")
        lines.append(
            "next: `rebaser continue` redoes that step and goes on; `rebaser abort` drops the "
            "apply (its work is kept in a ref)"
        )
    return lines


def refuse_untracked(worktree: Git, step: str) -> list[str]:
    """A later stop resets the worktree: untracked files would be lost, so refuse them now.
    The worktree's status lines (for the next check, as long as nothing changes)."""
    status = worktree.status_porcelain()
    untracked = [line[3:] for line in status if line.startswith("?? ")]
    if untracked:
        shown = ", ".join(untracked[:_SHOWN]) + (", ..." if len(untracked) > _SHOWN else "")
        raise RebaserError(
            f"{step}: untracked files in the worktree: {shown}",
            where=str(worktree.path),
            next_step="`git add` those that belong to the fix; move the others out of the "
            "worktree (a later stop resets it); then `rebaser continue`",
        )
    return status


def restore_last_step(state: ApplyState, worktree: Git) -> Optional[str]:
    """After an interruption, go back to where the last finished step left the worktree.

    A half-laid overlay, a patch in the index but not committed, or committed before its
    step was recorded: all are redone from scratch. Whatever differs from that point is kept
    under a backup ref first, which is returned (None when nothing differed).
    """
    last = state.head or state.base_sha
    head = worktree.out("rev-parse", "HEAD")
    if head == last and not worktree.status_porcelain():
        return None
    backup = refs.backup(state.branch, "interrupted")
    worktree.run("update-ref", backup, snapshot(worktree, "forkkit: saved after an interruption\n"))
    worktree.discard_changes(last)  # untracked only; ignored files stay
    return backup


def snapshot(git: Git, message: str) -> str:
    """A commit of HEAD plus everything in the worktree (untracked files too), made with a
    private index: the worktree, its index and its branch stay as they are.

    The private index starts as a copy of the worktree's, whose file stats spare `add` from
    hashing every file again (0.2 s of a `skip` on a 3,000-file tree); conflicts in it
    are resolved by what the files hold."""
    own = workspace.worktree_git_dir(git.path) / "index"
    with tempdirs.owned("forkkit-index-") as folder:
        env = {"GIT_INDEX_FILE": str(folder / "index")}
        try:
            shutil.copyfile(own, env["GIT_INDEX_FILE"])
        except OSError:  # no index (killed before it was written): from HEAD
            git.run("read-tree", "HEAD", env=env)
        git.run("add", "--all", env=env)
        tree = git.out("write-tree", env=env)
    return commit_tree(git, tree, ["HEAD"], message, date=f"{int(time.time())} +0000")


def drop(repo: Git, branch: str, worktree: Path) -> str:
    """Remove the apply's branch and worktree, keeping every commit, change and ignored file
    under a backup ref; what is said about it."""
    saved = None
    if worktree.is_dir():
        workspace.check_is_worktree(worktree, repo.path)
        git = Git(worktree)
        _leave_interrupted(git, branch)
        workspace.check_on_branch(git, branch)
        saved = workspace.save_uncommitted(
            git, "forkkit: work in progress saved by rebaser abort\n"
        )
    backup = workspace.remove(repo, branch, reason="aborted")
    said = f"aborted: removed branch {branch} and worktree {worktree}"
    if backup:
        work = f" and your {saved.describe()}" if saved else ""
        said += f"; its commits{work} are kept at {backup}"
    return said


def abort_broken(broken: BrokenState) -> str:
    """`abort` with a state file that cannot be read: drop the apply it names, when its
    branch can still be read from it, and set the file aside."""
    legible = broken.salvage()
    said = ""
    if "branch" in legible and "worktree" in legible:
        said = drop(broken.repo, legible["branch"], Path(legible["worktree"])) + "; "
    else:
        ours = workspace.forkkit_branches(broken.repo)
        if ours:
            said = (
                f"the state did not say which apply it belonged to; branches of rebaser here: "
                f"{', '.join(ours)} (replace one with `rebaser apply --force`, or delete it with "
                "`git branch -D`); "
            )
    return said + f"the damaged state is kept at {broken.set_aside()}"
