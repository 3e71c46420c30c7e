"""The step that applies one patch: the attempts (steps/attempts.py), a recorded resolution
of its conflicts, then a commit, a stop for the user, or (going on) the patch left off.

A patch that fails because it needs one that is already missing is `blocked` and names it,
instead of blaming upstream (carry/knockon.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from rebaser.carry import resolutions
from rebaser.carry.knockon import emptied_by, head_reader, needed_patch
from rebaser.repo import late_checkout
from rebaser.repo.git import Git
from rebaser.series.patches import Patch, Series
from rebaser.steps.attempts import PatchOutcome, apply_patch
from rebaser.steps.records import StepResult, StepRow, StepStatus, Stop, StopPhase, patch_row
from rebaser.steps.step import SeriesContext, StepContext


class PatchStep:
    def __init__(self, patch: Patch) -> None:
        self.patch = patch
        self.name = patch.name

    def run(self, context: StepContext) -> StepResult:
        worktree, patch = context.worktree, self.patch
        late_checkout.finish(worktree, context.git_dir)  # a patch applied alone reads the files
        knock_on = _KnockOn(patch, context.missing, worktree)
        # A patch that needs a missing one is not merged by syntax: its conflicts are knock-ons.
        carry = replace(context.carry, structured=lambda _patch: knock_on.needed() is None)
        outcome = apply_patch(worktree, patch, carry)
        if not outcome.applied and outcome.conflicts and outcome.left:
            outcome = _replay_resolution(worktree, patch, context.series, outcome)
        row = patch_row(patch, outcome.status, outcome.detail, outcome.superseded)
        if not outcome.applied:
            return _failed(context, patch, outcome, row, knock_on.needed())
        if outcome.status != StepStatus.IN_UPSTREAM and _nothing_staged(worktree):
            # e.g. a 3-way merge that changed nothing
            outcome = PatchOutcome(StepStatus.IN_UPSTREAM, "its change is already there")
            row = replace(row, status=outcome.status, detail=outcome.detail)
        if outcome.status == StepStatus.IN_UPSTREAM:
            if (needed := empty_for_want_of(patch, context.missing, context.carry)) is not None:
                outcome = emptied(outcome, needed)
                row = replace(row, status=outcome.status, detail=outcome.detail)
                return _failed(context, patch, outcome, row, needed)
            return StepResult(row, context.head)
        return StepResult(row, worktree.commit(patch.message, author=patch.author, date=patch.date))


def _failed(
    context: StepContext, patch: Patch, outcome: PatchOutcome, row: StepRow, needed: Optional[Patch]
) -> StepResult:
    """A stop for the user; going on (--keep-going), the patch left off the branch, the stop
    kept in its row. Blocked when it needs a patch already left off (`needed`)."""
    worktree = context.worktree
    left_row, stop = left_off(patch, outcome, row, needed)
    if not context.keep_going:
        return StepResult(row, context.head, stop)
    if outcome.left:  # what the patch got to is in the worktree (else it is clean already)
        worktree.discard_changes()
    return StepResult(left_row, context.head)


def left_off(
    patch: Patch, outcome: PatchOutcome, row: StepRow, needed: Optional[Patch]
) -> tuple[StepRow, Stop]:
    """A failed patch's stop, and its row when it is left off the branch: `blocked` when it
    needs `needed` (a patch left off before it, carry/knockon.py), else `dropped`."""
    if needed is not None:
        stop = Stop(StopPhase.APPLY, patch.name, f"needs {needed.number}, which did not apply")
    else:
        hunks = [report.describe() for report in outcome.hunks]
        stop = Stop(StopPhase.APPLY, patch.name, outcome.detail, outcome.conflicts, hunks)
    status = StepStatus.BLOCKED if needed is not None else StepStatus.DROPPED
    return replace(row, status=status, detail=stop.reason, stop=stop), stop


def empty_for_want_of(patch: Patch, missing: list[Patch], carry: SeriesContext) -> Optional[Patch]:
    """For a patch found already made on the branch: the missing patch that may have made
    it so (carry/knockon.emptied_by), unless an upstream commit made the same change."""
    needed = emptied_by(patch, missing)  # the cheaper question first
    if needed is None or (carry.history and carry.history.commit_with_same_change(patch)):
        return None
    return needed


def emptied(outcome: PatchOutcome, needed: Patch) -> PatchOutcome:
    """A failure, where `outcome` said upstream had the change: the patch `needed` (left
    off) may have removed what this one adds back."""
    return PatchOutcome(
        StepStatus.FAILED,
        f"its change looks made already ({outcome.detail.split(':')[0]}), but {needed.number}, "
        "left off, removes what it adds back: upstream may not have it",
    )


def _replay_resolution(
    worktree: Git, patch: Patch, series: Series, outcome: PatchOutcome
) -> PatchOutcome:
    """A conflict stop the series has a recorded resolution for goes on by itself; any other
    is snapshotted, so `continue` can record how the user resolves it."""
    replayed = resolutions.replay(worktree, patch, series)
    if replayed:
        return PatchOutcome(StepStatus.RESOLUTION_REPLAYED, replayed.detail)
    resolutions.snapshot(worktree, outcome.conflicts)  # a replay that fails changes nothing
    if replayed.detail:
        outcome.detail = f"{outcome.detail}; {replayed.detail}"
    return outcome


def _nothing_staged(worktree: Git) -> bool:
    return worktree.run("diff", "--cached", "--quiet", check=False).ok


class _KnockOn:
    """The missing patch this one needs (carry/knockon.py), asked at most once: only when
    the patch does not apply as it is."""

    def __init__(self, patch: Patch, missing: list[Patch], worktree: Git) -> None:
        self.patch, self.missing, self.worktree = patch, missing, worktree
        self._asked = False
        self._needed: Optional[Patch] = None

    def needed(self) -> Optional[Patch]:
        if not self._asked and self.missing:
            self._needed = needed_patch(self.patch, self.missing, head_reader(self.worktree))
        self._asked = True
        return self._needed
