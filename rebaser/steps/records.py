"""What a run records about its steps: each step's status, its row, where and why it
stopped, and the result a step hands back.

Both travel through state.json and the JSON report as plain strings and objects, so the
enum's values and the dataclass's field names are a file format: never rename them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Sequence

from rebaser.series.patches import Patch


class StepStatus(enum.StrEnum):
    """How a step of an apply ended (a `str`: JSON and reports show the value)."""

    LAID = "laid"  # the overlay's files were copied in
    CLEAN = "clean"
    OFFSET = "offset"
    THREE_WAY = "3-way"
    CHERRY_PICK = "cherry-pick"  # merged by git's ort machinery
    STRUCTURED_MERGE = "structured merge"  # ort's conflicts all resolved by carry/pymerge.py
    CODEMOD = "codemod"
    RESOLUTION_REPLAYED = "resolution replayed"
    IN_UPSTREAM = "in upstream"
    MANUAL = "manual"  # fixed by hand, then `rebaser continue`
    SKIPPED = "skipped"  # `rebaser skip`
    DROPPED = "dropped"  # --keep-going dropped a patch that did not apply
    BLOCKED = "blocked"  # needs a patch that did not apply
    FAILED = "failed"


# Patches an apply left off its branch: any of them makes it end with exit 3.
LEFT_OFF = frozenset({StepStatus.SKIPPED, StepStatus.DROPPED, StepStatus.BLOCKED})


class StopPhase(enum.StrEnum):
    APPLY = "apply"  # a step did not apply; the worktree holds the partial result
    VERIFY = "verify"  # everything applied, verification failed


@dataclass
class Stop:
    """Where an apply stopped and why: kept in state.json and shown in the report."""

    phase: StopPhase
    patch: str  # the step's name ("overlay", a patch file name, or "verification")
    reason: str
    conflicts: list[str] = field(default_factory=list)
    hunks: list[str] = field(default_factory=list)  # one description per failing hunk

    def __post_init__(self) -> None:
        self.phase = StopPhase(self.phase)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Stop":
        """Read a stop back (state.json, a JSON report); unknown keys are an error."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown stop field(s): {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass(frozen=True)
class Collision:
    """The upstream commit a stopped patch collides with (carry/collision.py): the first on
    upstream's first-parent history at which it stops applying, and what that commit did to
    the patch's files ("modified x.py; renamed y.py to z.py; moved f() to w.py")."""

    sha: str
    subject: str
    what: str


@dataclass
class StepRow:
    name: str
    status: StepStatus
    detail: str = ""
    files: list[str] = field(default_factory=list)
    hunks: int = 0
    stop: Optional[Stop] = None  # why a patch left off the branch did not apply
    # What a maintainer should do with the patch, and why in one line: the triage of a run
    # with stops (carry/triage.py) proposes "keep" or "drop" for every patch, with a stopped
    # patch's colliding upstream commit; "review" when a test that passes on the fork's
    # branch fails from this patch on (steps/testblame.py). None and "" on a row nothing
    # judged (a step that is not a patch, a run still in progress).
    proposal: Optional[str] = None
    reason: str = ""
    collides_with: Optional[Collision] = None

    def __post_init__(self) -> None:
        self.status = StepStatus(self.status)  # rows read back from state.json hold strings
        if isinstance(self.stop, dict):
            self.stop = Stop.from_json(self.stop)
        if isinstance(self.collides_with, dict):
            self.collides_with = Collision(**self.collides_with)


@dataclass(frozen=True)
class StepResult:
    """What a step hands back to the sequencer (as LibCST's codemod runner returns a result
    and never raises for an expected failure): its row for the report, the branch's tip after
    it (the same as before when it committed nothing), and a stop when the apply must wait
    for the user."""

    row: StepRow
    head: str
    stop: Optional[Stop] = None


def cherry_picked(renamed: Sequence[str] = (), elsewhere: bool = False) -> str:
    """The detail of a patch that git's ort merged (per patch or in a fast lane);
    `elsewhere`: git apply would have applied it, making another file."""
    where = f"; followed upstream's renames to {', '.join(renamed)}" if renamed else ""
    other = "; git apply's file differs from ort's (ort's kept, as git rebase keeps it)"
    return f"context drifted; merged by git's ort cherry-pick{where}{other if elsewhere else ''}"


def patch_row(patch: Patch, status: StepStatus, detail: str, superseded: Sequence[str]) -> StepRow:
    """A patch's row, per patch or in a fast lane: `superseded` names the files that already
    held every line it adds (a note: upstream may have made the change elsewhere)."""
    if superseded:
        note = "possibly superseded: upstream already has the lines it adds in "
        detail = "; ".join(filter(None, [detail, note + ", ".join(superseded)]))
    hunks = sum(change.hunks for change in patch.files)
    return StepRow(patch.name, status, detail, patch.touched_paths, hunks)
