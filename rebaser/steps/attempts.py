"""The ways one patch is tried, in order: exactly (perhaps at an offset), as a cherry-pick of
its own commit (or a 3-way apply), by its codemod; before a failure, whether upstream has it.

Never with fuzz: a fuzzy apply can put a hunk in the wrong place and still "succeed".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from rebaser.carry import structured
from rebaser.codemods import AnchorNotFound
from rebaser.repo.git import FOLLOW_RENAMES, Git
from rebaser.steps.records import StepStatus, cherry_picked
from rebaser.steps.step import SeriesContext
from rebaser.series.patches import Patch
from rebaser.carry.hunks import HunkReport, failing_hunks, hunks_in_texts
from rebaser.carry.in_upstream import files_under, reverse_applies, superseded_in

NO_CODEMOD = "the patch names no codemod"
EMPTY_PICK = "its cherry-pick is empty: upstream has its change"
_OFFSET_RE = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")

_CHERRY_PICK = (*FOLLOW_RENAMES, "cherry-pick", "--no-commit")


@dataclass
class PatchOutcome:
    status: StepStatus
    detail: str = ""
    conflicts: list[str] = field(default_factory=list)
    hunks: list[HunkReport] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # files that already had its lines
    left: bool = False  # a failed patch's partial state is in the worktree

    @property
    def applied(self) -> bool:
        return self.status != StepStatus.FAILED


def apply_patch(worktree: Git, patch: Patch, context: SeriesContext) -> PatchOutcome:
    """Change the worktree's index and files as the patch says; nothing is committed here.

    Exactly first (never fuzz), then a cherry-pick of the patch's own commit (ort, renames
    followed; an empty one means upstream has the change). When the series' base is not at
    hand: a reverse apply (upstream has it?), then a per-file 3-way apply. Then its codemod;
    a patch that fails all of them is left with conflict markers.
    """
    superseded = superseded_in(files_under(worktree.path), patch, worktree)
    commit = context.replay.pick_commit(patch) if context.replay else None
    applied = _apply_exactly(worktree, patch)
    if applied is not None and commit:
        applied = _as_ort_merges(worktree, patch, commit, applied)
    if applied is None:
        applied = _merged(worktree, patch, commit, lambda: context.structured(patch))
    if applied is None or not applied.applied:
        notes = applied.detail if applied is not None else ""
        return _after_git_failed(worktree, patch, context, commit, notes)
    if applied.status == StepStatus.IN_UPSTREAM:
        return in_upstream(patch, context, applied.detail)
    applied.superseded = superseded
    return applied


def _as_ort_merges(worktree: Git, patch: Patch, commit: str, exact: PatchOutcome) -> PatchOutcome:
    """The exact apply's result where ort's cherry-pick of the patch's commit makes the
    same tree, else ort's (git rebase's: an apply at an offset can land a hunk in another
    copy of its context, or recreate a folder upstream renamed; an empty pick is `in
    upstream`). Where ort conflicts, the exact apply's, as git apply would leave it."""
    applied_tree = worktree.out("write-tree")
    _undo(worktree)
    picked = _cherry_pick(worktree, patch, commit, lambda: False, elsewhere=True)
    if picked.status == StepStatus.FAILED:
        _undo(worktree)
        return _apply_exactly(worktree, patch) or exact
    return exact if worktree.out("write-tree") == applied_tree else picked


def _undo(worktree: Git) -> None:
    """Back to HEAD after an apply or a pick that added to the index only what it wrote: a
    hard reset removes those files, and no `git clean` runs (an untracked file of the
    user's, ignored at the stop, may no longer be ignored after an earlier patch)."""
    worktree.run("reset", "--quiet", "--hard", "HEAD", "--")


def _merged(
    worktree: Git, patch: Patch, commit: Optional[str], by_syntax: Callable[[], bool]
) -> Optional[PatchOutcome]:
    """A cherry-pick of the patch's own commit (an empty one tells what a reverse apply
    would); without one, a reverse apply, then a per-file 3-way apply. None or FAILED:
    conflicts."""
    if commit:
        return _cherry_pick(worktree, patch, commit, by_syntax)
    if reverse_applies(worktree, patch):
        return PatchOutcome(StepStatus.IN_UPSTREAM, "the patch reverse-applies: upstream has it")
    return _three_way(worktree, patch)


def _after_git_failed(
    worktree: Git, patch: Patch, context: SeriesContext, commit: Optional[str], notes: str = ""
) -> PatchOutcome:
    """git could not apply the patch: its codemod, then upstream's history, then a failure
    (left in the worktree for the user, or for a recorded resolution, when asked). `notes`:
    what the structured merge resolved and kept."""
    conflicts = worktree.unmerged_paths()
    reason = failure_reason("cherry-pick" if commit else "3-way merge", conflicts)
    reason = "; ".join(filter(None, [reason, notes]))
    # Conflicts git left (and what the structured merge did) stay as they are, for the user
    # or a recorded resolution: the hunks are told from the branch's own files. Doing the
    # merge again after a reset cost two resets and a second merge of a large tree per stop.
    texts = head_texts(worktree, patch) if conflicts else None
    hunks = hunks_in_texts(patch.raw, texts, conflicts) if texts is not None else None
    left = hunks is not None and patch.codemod is None
    if not left:  # the worktree was clean before this patch (the sequencer checks)
        worktree.discard_changes()
        hunks = failing_hunks(worktree, patch.path, conflicts) if hunks is None else hunks
    by_codemod, reason = _codemod(worktree, patch, context, reason)
    if by_codemod is not None:
        return by_codemod
    if (upstream := made_upstream(patch, context)) is not None:
        if left:
            worktree.discard_changes()
        return upstream
    # A codemod that gives up has written nothing (it changes its files in memory first).
    keep = context.leave_failed(patch)
    if keep and not left:
        _leave_for_user(worktree, patch, commit, conflicts, lambda: context.structured(patch))
    elif left and not keep:
        worktree.discard_changes()
    return PatchOutcome(StepStatus.FAILED, reason, conflicts=conflicts, hunks=hunks, left=keep)


def failure_reason(how: str, conflicts: list[str]) -> str:
    return f"{how} conflicts in " + ", ".join(conflicts) if conflicts else f"{how} failed"


def made_upstream(patch: Patch, context: SeriesContext) -> Optional[PatchOutcome]:
    """`in upstream` for a patch git could not apply when an upstream commit has its
    patch-id, else None."""
    if context.history and (upstream := context.history.commit_with_same_change(patch)):
        return PatchOutcome(
            StepStatus.IN_UPSTREAM,
            f"upstream commit {upstream[:12]} made the same change (and later ones conflict)",
        )
    return None


def head_texts(git: Git, patch: Patch, rev: str = "HEAD") -> Optional[dict[str, Optional[bytes]]]:
    """The files the patch touches as `rev` (the branch's tip) holds them (None: no such
    file); None for a path `cat-file --batch` cannot be asked about (one with a newline)."""
    if any("\n" in path for path in patch.touched_paths):
        return None
    found = git.blobs([f"{rev}:{path}" for path in patch.touched_paths])
    return {path: found[f"{rev}:{path}"] for path in patch.touched_paths}


def _codemod(
    worktree: Git, patch: Patch, context: SeriesContext, reason: str
) -> tuple[Optional[PatchOutcome], str]:
    """The patch's change made by its codemod (None when it has none or gave up), and the
    failure's reason with what the codemod said."""
    if patch.codemod is None:
        return None, f"{reason}; {NO_CODEMOD}"
    try:
        changed = context.codemods.run([patch.codemod], worktree.path, write=True)
    except AnchorNotFound as missing:
        return None, f"{reason}; codemod {patch.codemod}: {missing}"
    if not changed:
        found = f"{reason}; codemod {patch.codemod} found the change there"
        return in_upstream(patch, context, found), reason
    worktree.run("add", "--", *changed)
    made = f"{reason}; codemod {patch.codemod} changed {', '.join(changed)}"
    return PatchOutcome(StepStatus.CODEMOD, made), reason


def _apply_exactly(worktree: Git, patch: Patch) -> Optional[PatchOutcome]:
    # `git apply` is atomic: all hunks apply, or nothing changes.
    applied = worktree.run(
        "apply", "--verbose", "--index", "--whitespace=nowarn", str(patch.path), check=False
    )
    if not applied.ok:
        return None
    offsets = [
        f"hunk {n} at line {line} (offset {delta:+d})"
        for n, line, delta in (
            (int(a), int(b), int(c)) for a, b, c in _OFFSET_RE.findall(applied.stderr)
        )
    ]
    return PatchOutcome(StepStatus.OFFSET if offsets else StepStatus.CLEAN, "; ".join(offsets))


def _cherry_pick(
    worktree: Git,
    patch: Patch,
    commit: str,
    by_syntax: Callable[[], bool],
    elsewhere: bool = False,
) -> PatchOutcome:
    """Merge the patch's own commit onto HEAD with ort, then the structured merge of the
    Python files it left in conflict; FAILED on conflicts (left in place, what the
    structured merge did in the detail). `elsewhere`: git apply would have applied it."""
    picked, results = _pick(worktree, patch, commit, by_syntax)
    if not picked:
        return PatchOutcome(StepStatus.FAILED, structured.notes(results, applied=False))
    landed = worktree.changed_paths("--cached", "HEAD", "--")
    if not landed:
        return PatchOutcome(StepStatus.IN_UPSTREAM, EMPTY_PICK)
    moved = sorted(set(landed) - set(patch.touched_paths))
    if results:
        notes = structured.notes(results, applied=True)
        return PatchOutcome(StepStatus.STRUCTURED_MERGE, f"{cherry_picked(moved)}; {notes}")
    return PatchOutcome(StepStatus.CHERRY_PICK, cherry_picked(moved, elsewhere and not moved))


def _pick(
    worktree: Git, patch: Patch, commit: str, by_syntax: Callable[[], bool]
) -> tuple[bool, list[structured.FileResult]]:
    """`git cherry-pick --no-commit`; when it conflicts, the structured merge (`by_syntax`).
    Whether the merge is complete, and what the structured merge did."""
    if worktree.run(*_CHERRY_PICK, commit, check=False).ok:
        return True, []
    if not by_syntax():
        return False, []
    unmerged = structured.Unmerged.read(worktree)
    results = structured.resolve_conflicts(worktree, label=patch.name, unmerged=unmerged)
    return bool(results) and not unmerged.after(results), results


def _three_way(worktree: Git, patch: Patch) -> Optional[PatchOutcome]:
    """Per-file 3-way, for series whose base is not at hand (the blobs may still be)."""
    merged = worktree.run(
        "apply", "--3way", "--index", "--whitespace=nowarn", str(patch.path), check=False
    )
    if not merged.ok:
        return None
    return PatchOutcome(
        StepStatus.THREE_WAY, "context drifted; merged with the patch's preimage blobs"
    )


def in_upstream(patch: Patch, context: SeriesContext, why: str) -> PatchOutcome:
    upstream = context.history.commit_with_same_change(patch) if context.history else None
    named = f" (upstream commit {upstream[:12]})" if upstream else ""
    return PatchOutcome(StepStatus.IN_UPSTREAM, why + named)


def _leave_for_user(
    worktree: Git,
    patch: Patch,
    commit: Optional[str],
    conflicts: list[str],
    by_syntax: Callable[[], bool],
) -> None:
    """Leave the most useful partial state: conflict markers, else applied hunks + .rej files."""
    worktree.discard_changes()
    if conflicts and commit:
        _pick(worktree, patch, commit, by_syntax)
    elif conflicts:
        _three_way(worktree, patch)
    else:
        worktree.run("apply", "--reject", "--whitespace=nowarn", str(patch.path), check=False)
