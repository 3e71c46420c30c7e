"""A patch the fast lane's `git rebase` stopped at, judged inside the lane when the apply
goes on past failures (--keep-going, every `verify`).

On a real fork most patches may stop: one lane a stop, each taking the per-patch path in
the worktree (a merge, resets of a 3,000-file tree, the hunks checked by git), cost more than
the whole `git rebase --skip` loop a maintainer would run. Such a patch's row needs no
worktree: the lane holds the branch's files (the commit it stopped on), the files in
conflict and the patch's diff. So the patch is judged there, as the per-patch path would
judge it, and the lane goes on past it, as `git rebase --skip` would.

Only where the per-patch path could end otherwise does the lane end instead, leaving the
patch to it: a codemod to try, a recorded resolution to replay, an exact apply that would
succeed (git apply comes before the merge there), a diff rawdiff cannot read, or a stop
that is neither a conflict nor an empty pick.
"""

from __future__ import annotations

from typing import Callable, Optional

from rebaser.carry.hunks import hunks_in_texts
from rebaser.carry.knockon import needed_patch
from rebaser.carry.rawdiff import apply_exactly, decoded, parse_diff
from rebaser.repo.git import Git
from rebaser.series.patches import Patch
from rebaser.steps.attempts import (
    EMPTY_PICK,
    NO_CODEMOD,
    PatchOutcome,
    failure_reason,
    head_texts,
    in_upstream,
    made_upstream,
)
from rebaser.steps.patching import emptied, empty_for_want_of, left_off
from rebaser.steps.records import StepRow, StepStatus, patch_row
from rebaser.steps.step import StepContext

Verdict = Callable[[], Optional[StepRow]]


class LaneJudge:
    """Judges the patches one lane stops at; remembers those it leaves off the branch (a
    later patch may need one of them: `blocked`)."""

    def __init__(self, context: StepContext) -> None:
        self.carry = context.carry
        self.missing = list(context.missing)

    def __call__(
        self, patch: Patch, lane: Git, head: str, notes: str, conflicts: list[str]
    ) -> Optional[Verdict]:
        """Where the lane stopped at `patch` on `head` (the commit it stood on; `notes`: what
        the structured merge resolved and kept there; `conflicts`: the files still in
        conflict, none for an empty pick): None when only the per-patch path can tell what
        becomes of it; else what gives its row, or None after all (the lane is cut there).
        It reads only objects, so the lane goes on while the rows are worked out (in one
        thread, in the order of the patches: a later one may need an earlier one)."""
        if patch.codemod or self.carry.leave_failed(patch):
            return None
        return lambda: self._row(patch, lane, head, sorted(conflicts), notes)

    def _row(
        self, patch: Patch, lane: Git, head: str, conflicts: list[str], notes: str
    ) -> Optional[StepRow]:
        files = parse_diff(patch.raw)
        texts = head_texts(lane, patch, head)
        if files is None or texts is None:
            return None
        # Its files in conflict first: `git apply` refuses one of those, as a rule.
        tried = sorted(files, key=lambda diff: diff.path not in conflicts)
        if all(apply_exactly(texts.get(diff.path), diff) is not None for diff in tried):
            return None  # `git apply` would take it exactly, before any merge
        if not conflicts:  # an empty pick
            outcome = in_upstream(patch, self.carry, EMPTY_PICK)
            row = patch_row(patch, outcome.status, outcome.detail, [])
            if (needed := empty_for_want_of(patch, self.missing, self.carry)) is None:
                return row
            row, _ = left_off(patch, emptied(outcome, needed), row, needed)
            self.missing.append(patch)
            return row
        upstream = made_upstream(patch, self.carry)
        if upstream is not None:
            return patch_row(patch, upstream.status, upstream.detail, [])
        hunks = hunks_in_texts(patch.raw, texts, conflicts) or []  # the diff was read above
        reason = "; ".join(
            filter(None, [failure_reason("cherry-pick", conflicts), notes, NO_CODEMOD])
        )
        outcome = PatchOutcome(StepStatus.FAILED, reason, conflicts=conflicts, hunks=hunks)
        row = patch_row(patch, StepStatus.FAILED, reason, [])

        def read(paths: list[str]) -> dict[str, Optional[str]]:
            return {path: decoded(texts.get(path)) for path in paths}

        row, _ = left_off(patch, outcome, row, needed_patch(patch, self.missing, read))
        self.missing.append(patch)
        return row
