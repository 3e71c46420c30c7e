"""The triage of a run's patches (carry/triage.py) put on its report's rows: a keep/drop
proposal with a reason on every patch row and, on every patch that stopped, the upstream
commit it collides with (bisected in a scratch repository, carry/collision.py).

It runs only when the run has a stop: on the happy path every row gets its proposal
without a git process.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.carry import triage
from rebaser.carry.collision import Bisector
from rebaser.carry.replay import Replay
from rebaser.repo import scratch
from rebaser.repo.git import Git
from rebaser.repo.memo import memo
from rebaser.series.patches import Patch, Series
from rebaser.steps.records import Collision, StepRow, StepStatus, Stop, StopPhase, patch_row

_NEEDS = re.compile(r"^needs (\S+), which did not apply")


def annotate(
    rows: list[StepRow],
    series: Series,
    repo: Git,
    git_dir: Path,
    target: str,
    replay: Optional[Replay],
    progress: Callable[[str], None],
    *,
    stopped: Optional[Stop] = None,
    on_branch: Sequence[str] = (),
    retried: Optional[str] = None,
) -> list[StepRow]:
    """The rows with their proposals (rows that are not the series' patches unchanged).
    `stopped`: where the run waits for the user (its row holds no stop); `on_branch`:
    patches on the branch that have no row (a retry's), counted as applied; `retried`: the
    patch a retry tried again, the only one bisected (the others' rows hold no stop: the
    apply that left them off said where they collide)."""
    by_name = {row.name: row for row in rows}
    judged = _judged(series, by_name, stopped, on_branch)
    if not any(row.patch.name in by_name for row in judged):
        return rows
    stops = [row for row in judged if row.status in triage.STOPPED]
    if not stops or replay is None:
        verdicts = {row.patch.name: _light(row) for row in judged}
    else:
        started = time.monotonic()
        memo_for = partial(memo, repo)
        upstream = triage.Upstream(repo, replay.base_sha, target, memo_for)
        with (
            scratch.repository(git_dir, target) as lane,
            Bisector(lane, replay.base_sha, target, replay.commit_of) as bisector,
        ):
            bisect = None if retried is None else {retried}
            triaged = triage.Triage(upstream, bisector, memo_for)
            verdicts = triaged.judge(judged, bisect, later=series.patches)
        progress(
            f"triage: {len(stops)} stopped patches, {bisector.merges} merges, "
            f"{time.monotonic() - started:.1f} s"
        )
    return [_with(row, verdicts.get(row.name)) for row in rows]


def ahead(
    rows: list[StepRow],
    series: Series,
    repo: Git,
    git_dir: Path,
    target: str,
    replay: Replay,
    patch: Patch,
    conflicts: list[str],
) -> Callable[[], None]:
    """Start the triage of the stop a patch is about to make (conflicts in `conflicts`, as
    the fast lane met them) while the per-patch path makes it in the worktree; what it asks
    of upstream goes to the memo, named by everything the answers depend on, where the
    triage after the stop finds it: a guess that proves wrong costs only time. Returns a
    wait for it, to call before that triage (it reads the same memo entries)."""
    row = patch_row(patch, StepStatus.FAILED, "", [])
    stop = Stop(StopPhase.APPLY, patch.name, "", conflicts)

    def triage_ahead() -> None:
        # Any failure here the triage after the stop meets again, and reports.
        with contextlib.suppress(Exception):
            annotate([*rows, row], series, repo, git_dir, target, replay, _quiet, stopped=stop)

    thread = threading.Thread(target=triage_ahead, name="forkkit-triage-ahead")
    thread.start()
    return thread.join


def _quiet(_: str) -> None:
    pass


def _judged(
    series: Series, rows: dict[str, StepRow], stopped: Optional[Stop], on_branch: Sequence[str]
) -> list[triage.Row]:
    """What the triage reads of each row, in the series' order (a patch's earlier ones
    come first)."""
    judged = []
    for patch in series.patches:
        row = rows.get(patch.name)
        if row is not None:
            stop = stopped if stopped is not None and stopped.patch == patch.name else row.stop
            conflicts = list(stop.conflicts) if stop else []
            judged.append(
                triage.Row(patch, str(row.status), row.detail, conflicts, _needs(row, stop))
            )
        elif patch.name in on_branch:
            judged.append(triage.Row(patch, "clean", "on the branch", [], None))
    return judged


def _needs(row: StepRow, stop: Optional[Stop]) -> Optional[str]:
    found = _NEEDS.match(stop.reason if stop else row.detail)
    return found.group(1) if found else None


def _light(row: triage.Row) -> triage.Verdict:
    """The proposal that needs no look at upstream: a run without stops."""
    if row.status == "in upstream":
        return triage.Verdict(triage.DROP, f"in upstream: {row.detail}")
    return triage.Verdict(triage.KEEP, triage.keep_reason(row, None, []))


def _with(row: StepRow, verdict: Optional[triage.Verdict]) -> StepRow:
    if verdict is None:
        return row
    collision = Collision(*verdict.collision) if verdict.collision else None
    stop = row.stop
    if stop is not None and row.status == "blocked" and verdict.own_conflicts:
        also = f"; on its own it also conflicts in {', '.join(verdict.own_conflicts)}"
        stop = replace(stop, reason=stop.reason + also, conflicts=verdict.own_conflicts)
    detail = stop.reason if stop is not None and row.status == "blocked" else row.detail
    return replace(
        row,
        detail=detail,
        stop=stop,
        proposal=verdict.proposal,
        reason=verdict.reason,
        collides_with=collision,
    )
