"""The contract between the sequencer and its steps.

A step is anything with a `name` and a `run(context) -> StepResult`: the sequencer records
the step under way, runs it, keeps its row, moves the branch's tip to its `head` and saves
the state; a result with a `stop` makes the apply wait for the user (`continue`, `skip`,
`abort`). A step that applies a patch names it in `patch`, so that `skip` and the user's
fix know which patch they are about. docs/architecture.md, "Adding a step", shows one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol

from rebaser.carry.in_upstream import UpstreamHistory
from rebaser.carry.replay import Replay
from rebaser.codemods import Codemods
from rebaser.repo.git import Git
from rebaser.series.patches import Patch, Series
from rebaser.steps.records import StepResult


@dataclass
class SeriesContext:
    """What an apply knows beyond the worktree: the series' codemods, the patches' own
    commits and upstream's log."""

    codemods: Codemods
    replay: Optional[Replay] = None
    history: Optional[UpstreamHistory] = None
    # Whether a patch that fails is left in the worktree as far as it got (conflict markers,
    # .rej files): for the user at a stop, or for a recorded resolution to replay. An apply
    # that goes on (--keep-going) drops it at once otherwise: no point in redoing it.
    leave_failed: Callable[[Patch], bool] = lambda patch: True
    # Whether the structured merge (carry/structured.py) may finish a cherry-pick git left in
    # conflict: not for a patch that needs one already missing (its conflicts are knock-ons).
    structured: Callable[[Patch], bool] = lambda patch: True


@dataclass
class StepContext:
    """What a step works with: the apply's worktree and branch, the branch's tip before the
    step, the series and what is known about carrying it."""

    worktree: Git
    git_dir: Path  # the worktree's own git dir
    branch: str
    head: str
    series: Series
    carry: SeriesContext
    keep_going: bool = False  # a patch that fails is left off the branch instead of stopping
    missing: list[Patch] = field(default_factory=list)  # patches left off the branch so far


class Step(Protocol):
    name: str
    patch: Optional[Patch]  # the patch the step applies, if it applies one

    def run(self, context: StepContext) -> StepResult: ...
