"""The user's part at a stop: taking their fix (`continue`) or setting their work aside
(`skip`). Nothing of theirs is lost: what cannot be taken is refused with a message, what
is set aside goes to a backup ref first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from rebaser.carry import resolutions
from rebaser.errors import RebaserError
from rebaser.repo import refs
from rebaser.repo.git import Git, committer_env
from rebaser.sequencer import recovery
from rebaser.series.patches import Patch, Series, identity, with_identity
from rebaser.steps.checks import find_conflict_markers
from rebaser.steps.records import StepRow, StepStatus


def take_fix(
    worktree: Git,
    name: str,
    patch: Optional[Patch],
    series: Series,
    stopped_at: str,
    status: Optional[list[str]] = None,
) -> StepRow:
    """The step `name` (applying `patch`, if any), fixed by hand since the branch stood at
    `stopped_at`: the staged fix is committed with the patch's message, or the commit the
    user made is taken (with the patch's identity trailer). Its row. `status`: the
    worktree's status lines when the caller has just read them (a `git status` of 3,300
    files is not asked twice)."""
    _refuse_unfinished(worktree, name, status)
    head = worktree.out("rev-parse", "HEAD")
    moved = head != stopped_at  # most fixes are staged on the commit the apply stopped at
    if moved:
        _refuse_lost_commits(worktree, name, stopped_at)
    staged = worktree.changed_paths("--cached")
    if moved:
        _refuse_several_commits(worktree, name, stopped_at, bool(staged))
    if staged:
        first = series.patches[0]
        # A step of its own (the overlay: "forkkit: overlay (merged by hand)") says so.
        message = patch.message if patch else f"forkkit: {name} (merged by hand)\n"
        worktree.commit(message, author=(patch or first).author, date=(patch or first).date)
    elif not moved:
        raise RebaserError(
            f"{name} is still not applied: nothing was staged or committed since the stop",
            where=str(worktree.path),
            next_step="make the patch's change there and `git add` it (or commit it), then "
            "continue; `rebaser skip` leaves it off; or `rebaser abort`",
        )
    elif patch is not None:
        _carry_identity(worktree, patch)
    subject = worktree.out("log", "-1", "--format=%s")
    files = patch.touched_paths if patch else []
    return StepRow(name, StepStatus.MANUAL, f"fixed by hand: {subject}", files)


def _refuse_lost_commits(worktree: Git, name: str, stopped_at: str) -> None:
    """The fix goes on top of where the branch stood at the stop: a HEAD that is not
    (`git reset` one commit too far, `git commit --amend` of the patch before) would get
    the step's identity on another commit, and lose what the branch held. Asked only of a
    HEAD that moved: git's ancestry walk took 20 to 30 ms even for the commit itself
    (commits the lane wrote are not in the commit-graph)."""
    if worktree.run("merge-base", "--is-ancestor", stopped_at, "HEAD", check=False).ok:
        return
    raise RebaserError(
        f"the branch no longer holds the commit the apply stopped at ({stopped_at[:12]}): "
        f"HEAD moved off it (a reset too far, or an amend?), so {name} cannot be taken "
        "from it",
        where=str(worktree.path),
        next_step=f"`git reset --soft {stopped_at[:12]}` puts HEAD back and keeps your "
        "changes staged; then `rebaser continue` (or `rebaser skip`, `rebaser abort`)",
    )


def _refuse_several_commits(worktree: Git, name: str, stopped_at: str, staged: bool) -> None:
    """A step is one commit: of several made since the stop (changes staged on top of one
    would be another), which is the fix? The patch's identity went to the last, so
    `refresh` wrote another commit's change into the patch's file and the fix out as a
    patch of its own."""
    made = worktree.out("rev-list", "--first-parent", f"{stopped_at}..HEAD").split()
    if len(made) + staged < 2:
        return
    listed = worktree.out("log", "--first-parent", "--format=  %h %s", f"{stopped_at}..HEAD")
    also = ", and changes are staged on top" if staged else ""
    raise RebaserError(
        f"{len(made)} commit(s) were made since the stop{also}, and {name} is one step: "
        f"which is its fix cannot be told\n{listed}",
        where=str(worktree.path),
        next_step=f"`git reset --soft {stopped_at[:12]}` keeps their changes staged, to commit "
        "as one (or leave staged), then `rebaser continue`; a change of your own beyond the "
        "patch can be committed after the apply ends (`rebaser refresh` exports it as a patch)",
    )


def record_resolution(worktree: Git, patch: Patch, series: Series) -> str:
    """After the user's fix of a conflict stop: remember it beside the series; what to add
    to the row's detail."""
    recorded, beyond = resolutions.record(worktree, patch, series)
    said = ""
    if recorded:
        folder = resolutions.folder_for(series, patch).relative_to(series.patches_dir)
        said = f"; {len(recorded)} resolution(s) recorded in {folder}/"
    if beyond:
        said += (
            f"; not recorded: the fix of {', '.join(beyond)} changed lines outside its "
            "conflicts too (a replay would lose them)"
        )
    return said


@dataclass(frozen=True)
class SetAside:
    """Where `skip` put the work done since the stop, and which of it is the user's own:
    changes to files the patch does not touch, and new files (not the stop's .rej files)."""

    ref: str
    changed: list[str]
    new: list[str]

    def describe(self) -> str:
        if not self.changed and not self.new:
            return f"the work on it is kept at {self.ref}"
        yours = [f"changes to {', '.join(self.changed)}"] if self.changed else []
        yours += [f"new files {', '.join(self.new)}"] if self.new else []
        return (
            f"set aside at {self.ref}: {' and '.join(yours)} (`git checkout {self.ref} -- "
            "<path>` brings one back)"
        )


def set_aside(
    worktree: Git, branch: str, patch: Patch, stopped_at: str, noted: Callable[[str], None]
) -> Optional[SetAside]:
    """Back the branch up to where it stopped; anything done since goes to a backup ref,
    `noted` before anything is reset (None when nothing was done)."""
    head = worktree.out("rev-parse", "HEAD")
    message = f"forkkit: work on {patch.name} set aside by rebaser skip\n"
    # The worktree is read once, by the snapshot (a `git status` before it read all 3,300
    # files of a real fork's tree too); what changed since the stop, committed or not, is
    # its tree against the stop's.
    kept = recovery.snapshot(worktree, message)
    listed = worktree.run(
        "diff-tree", "-r", "-z", "--name-status", "--no-renames", stopped_at, kept
    ).stdout.split("\0")
    changes = list(zip(listed[0::2], listed[1::2]))  # (A, M, D or T; the path)
    if not changes and head == stopped_at:
        # Every file as at the stop, untracked ones too; the index may not be (a conflict
        # `checkout --ours` left, a change staged and undone): nothing to keep, and the
        # next checkout would refuse that index.
        worktree.run("reset", "--quiet", "--hard", stopped_at, "--")
        return None
    backup = _unused(worktree, refs.backup(branch, f"skipped-{patch.number}"))
    worktree.run("update-ref", backup, kept)
    noted(backup)
    worktree.discard_changes(stopped_at)  # untracked files are in the backup
    # What the patch does not touch is the user's: new files (not the stop's .rej files)
    # and changed ones, committed since the stop or not, and the files of commits made
    # since the stop (taken off the branch, though the files may be as at the stop again).
    touched = set(patch.touched_paths)
    yours = [(status, path) for status, path in changes if path not in touched]
    new = [path for status, path in yours if status == "A" and not path.endswith(".rej")]
    changed = [path for status, path in yours if status != "A"]
    if head != stopped_at:
        committed = worktree.run("diff", "--name-only", "-z", stopped_at, head).stdout
        seen = touched | set(new) | set(changed)
        changed += [path for path in committed.split("\0") if path and path not in seen]
    return SetAside(backup, sorted(changed), sorted(new))


def _unused(worktree: Git, ref: str) -> str:
    """`ref`, or `ref-2`, `ref-3`... where a ref of that name exists (made in the same
    second: a skip killed after it set the work aside, then run again)."""
    name, number = ref, 1
    while worktree.run("rev-parse", "--verify", "--quiet", name, check=False).ok:
        number += 1
        name = f"{ref}-{number}"
    return name


def _refuse_unfinished(worktree: Git, name: str, status: Optional[list[str]] = None) -> None:
    """Conflicts, rejected hunks, markers or unstaged changes: not a fix yet."""
    where = str(worktree.path)
    if unmerged := worktree.unmerged_paths():
        raise RebaserError(
            f"{name}: conflicts are not resolved yet in {', '.join(unmerged)}",
            where=where,
            next_step="edit those files, `git add` them, then `rebaser continue`",
        )
    if status is None:
        status = worktree.status_porcelain()
    rejects = [line[3:] for line in status if line.endswith(".rej")]
    if rejects:
        raise RebaserError(
            f"{name}: rejected hunks are still lying around: {', '.join(rejects)}",
            where=where,
            next_step="apply them by hand, delete the .rej files, `git add` your changes, "
            "then `rebaser continue`",
        )
    staged = worktree.changed_paths("--cached")
    files = [path for path in staged if (worktree.path / path).is_file()]
    markers = find_conflict_markers(worktree.path, files)
    if not markers.ok:
        raise RebaserError(
            f"{name}: conflict markers left in {'; '.join(markers.problems[:3])}",
            where=where,
            next_step="resolve them, `git add`, then `rebaser continue`",
        )
    if unstaged := worktree.changed_paths():
        raise RebaserError(
            f"{name}: unstaged changes in {', '.join(unstaged)}",
            where=where,
            next_step="`git add` what belongs to the patch (or `git checkout --` the rest), "
            "then `rebaser continue`",
        )


def _carry_identity(worktree: Git, patch: Patch) -> None:
    """The user committed the fix themselves: add the patch's identity trailer to that
    commit, so `refresh` writes it back to the patch's own file."""
    message = worktree.run("log", "-1", "--format=%B").stdout
    if identity(message) is not None:
        return
    worktree.run(
        "commit",
        "--amend",
        "--quiet",
        "--no-verify",
        "--cleanup=verbatim",
        "-F",
        "-",
        env=committer_env(worktree.out("log", "-1", "--format=%cD")),
        stdin=with_identity(message, patch.name).encode(),
    )
