"""The triage of a run's patches (carry/triage.py) put on its report's rows: a keep/drop
proposal with a reason on every patch row and, on every patch that stopped, the upstream
commit it collides with (bisected in a scratch repository, carry/collision.py).

It runs only when the run has a stop: on the happy path every row gets its proposal
without a git process. Its git work starts early where it can: beside the fast lane as it
leaves patches off (BesideTheLane), beside the per-patch path as a patch stops (ahead()).
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.carry import triage
from rebaser.carry.collision import Bisector
from rebaser.carry.replay import Replay
from rebaser.repo import processes, scratch
from rebaser.repo.git import Git
from rebaser.repo.memo import memo
from rebaser.wording import counted
from rebaser.series.patches import Patch, Series
from rebaser.steps.attempts import PatchOutcome
from rebaser.steps.fastlane import Handed, Judge
from rebaser.steps.patching import left_off
from rebaser.steps.records import LEFT_OFF, Collision, StepRow, StepStatus, Stop, patch_row

_NEEDS = re.compile(r"^needs (\S+), which did not apply")


@dataclass(frozen=True)
class Triaged:
    """The verdicts on a run's rows, and what they were worked out from."""

    judged: list[tuple]  # triage.Row.read() of each row judged
    verdicts: dict[str, triage.Verdict]
    said: str  # the progress line: how many stops, merges and seconds


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
    known: Optional[Triaged] = None,
) -> list[StepRow]:
    """The rows with their proposals (rows that are not the series' patches unchanged).
    `stopped`: where the run waits for the user (its row holds no stop); `on_branch`:
    patches on the branch that have no row (a retry's), counted as applied; `retried`: the
    patch a retry tried again, the only one bisected (the others' rows hold no stop: the
    apply that left them off said where they collide); `known`: a triage worked out ahead
    (ahead()), taken when it judged what these rows say."""
    by_name = {row.name: row for row in rows}
    judged = _judged(series, by_name, stopped, on_branch)
    if not any(row.patch.name in by_name for row in judged):
        return rows
    if known is not None and known.judged == [row.read() for row in judged]:
        verdicts = known.verdicts
        progress(f"{known.said} (beside the stop)")
    else:
        found = _triaged(judged, series, repo, git_dir, target, replay, retried)
        verdicts = found.verdicts
        if found.said:
            progress(found.said)
    return [_with(row, verdicts.get(row.name)) for row in rows]


def _triaged(
    judged: list[triage.Row],
    series: Series,
    repo: Git,
    git_dir: Path,
    target: str,
    replay: Optional[Replay],
    retried: Optional[str] = None,
) -> Triaged:
    stops = [row for row in judged if row.status in triage.STOPPED]
    read = [row.read() for row in judged]
    if not stops or replay is None:
        return Triaged(read, {row.patch.name: _light(row) for row in judged}, "")
    started = time.monotonic()
    memo_for = partial(memo, repo)
    upstream = triage.Upstream(repo, replay.base_sha, target, memo_for)
    with (
        scratch.repository(git_dir, target) as lane,
        Bisector(lane, replay.base_sha, target, replay.commit_of, upstream.log) as bisector,
    ):
        bisect = None if retried is None else {retried}
        # Which stopped patches' diffs do not apply on the recorded base: asked in series
        # order (a later command's replay may not have built their commits yet).
        for row in stops:
            replay.commit_of(row.patch)
        triaged = triage.Triage(upstream, bisector, memo_for, replay.did_not_apply)
        verdicts = triaged.judge(judged, bisect, later=series.patches)
    said = (
        f"triage: {counted(len(stops), 'stopped patch')}, {counted(bisector.merges, 'merge')}, "
        f"{time.monotonic() - started:.1f} s"
    )
    return Triaged(read, verdicts, said)


def ahead(
    rows: list[StepRow],
    series: Series,
    repo: Git,
    git_dir: Path,
    target: str,
    replay: Replay,
    handed: Handed,
) -> Callable[[], Optional[Triaged]]:
    """Start the triage of the stop a patch is about to make (as the fast lane met it: its
    conflicts, or the missing patch it needs) while the per-patch path makes it in the
    worktree. Returns a wait for it: its verdicts, for annotate(known=...), which takes
    them only where the rows say what it guessed; otherwise what it asked of upstream is in
    the memo (named by everything each answer depends on), and a wrong guess costs only
    time."""
    row = patch_row(handed.patch, StepStatus.FAILED, "", [])
    failed = PatchOutcome(StepStatus.FAILED, "", conflicts=handed.conflicts)
    _, stop = left_off(handed.patch, failed, row, handed.needs)
    guessed = [*rows, row]
    found: list[Triaged] = []

    def triage_ahead() -> None:
        # Any failure here the triage after the stop meets again, and reports.
        with contextlib.suppress(Exception):
            judged = _judged(series, {row.name: row for row in guessed}, stop, ())
            found.append(_triaged(judged, series, repo, git_dir, target, replay))

    thread = threading.Thread(target=triage_ahead, name="forkkit-triage-ahead")
    thread.start()

    def wait() -> Optional[Triaged]:
        thread.join()
        return found[0] if found else None

    return wait


class BesideTheLane:
    """The triage of the patches a lane leaves off (going on past failures), worked out
    while the lane goes on: its git sequencer and structured merges keep one core busy, the
    triage's bisections and greps are git processes too. What it finds goes to the memo,
    named by everything each answer depends on, where the triage after verification finds
    it; a guess the rows later contradict (a lane cut before a patch it carried) costs
    only time. One thread for the whole run, and one for the greps of the series' names:
    they start at the first patch left off. Once the lane has ended, its cores answer too."""

    def __init__(self, series: Series, repo: Git, git_dir: Path, target: str, replay: Replay):
        self.series, self.repo, self.git_dir = series, repo, git_dir
        self.target, self.replay = target, replay
        self._asked: queue.SimpleQueue[Optional[tuple[triage.Row, list[triage.Row]]]] = (
            queue.SimpleQueue()
        )
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._answered: set[str] = set()  # the stopped patches asked about
        self._merges = 0  # the bisection's
        # The threads answering beside the first, and what they answer with (none yet, or
        # none any more once the bisector is closed).
        self._hands: list[threading.Thread] = []
        self._triaged: Optional[triage.Triage] = None
        self._hands_lock = threading.Lock()

    def watching(self, judge: Judge, rows: Sequence[StepRow], lane: Sequence[Patch]) -> Judge:
        """`judge` for the lane carrying `lane` after `rows`: each patch it leaves off is
        triaged beside it, the lane's earlier patches counted as carried unless judged."""
        known = {row.name: row for row in rows}
        for patch in lane:
            known[patch.name] = patch_row(patch, StepStatus.CLEAN, "", [])

        def watched(
            patch: Patch, at: Git, head: str, notes: str, conflicts: list[str]
        ) -> Optional[Callable[[], Optional[StepRow]]]:
            verdict = judge(patch, at, head, notes, conflicts)
            if verdict is None:
                return None

            def row() -> Optional[StepRow]:  # in the lane's judging thread, in series order
                found = verdict()
                if found is not None:
                    known[patch.name] = found
                    if found.status in LEFT_OFF:
                        self._ask(patch, known)
                return found

            return row

        return watched

    def _ask(self, patch: Patch, known: dict[str, StepRow]) -> None:
        judged = _judged(self.series, known, None, ())
        mine = next(at for at, row in enumerate(judged) if row.patch.name == patch.name)
        self._asked.put((judged[mine], judged[:mine]))
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="forkkit-triage-beside")
            self._thread.start()

    def _work(self) -> None:
        # Any failure here the triage after verification meets again, and reports.
        with contextlib.suppress(Exception):
            memo_for = partial(memo, self.repo)
            # The greps run beside the lane and the bisections: a thread each core they leave.
            upstream = triage.Upstream(
                self.repo, self.replay.base_sha, self.target, memo_for, threads=_spare_cores()
            )
            with (
                scratch.repository(self.git_dir, self.target) as lane,
                Bisector(
                    lane,
                    self.replay.base_sha,
                    self.target,
                    self.replay.commit_of,
                    upstream.log,
                    ways=max(1, min(3, _spare_cores() // 2)),
                ) as bisector,
            ):
                triaged = triage.Triage(upstream, bisector, memo_for)
                # The greps for the names beside the bisections, as judge() runs them: once
                # the lane ends, the last answers are asked two at a time.
                names = threading.Thread(
                    target=_quietly(triaged.ask_names),
                    args=(self.series.patches,),
                    name="forkkit-triage-names",
                )
                names.start()
                # On a machine with cores to spare, stopped patches are bisected side by
                # side (each thread its own merge process), each in rounds of probes made
                # at once: one after the other, the last ones were the apply's end on 16
                # cores.
                with self._hands_lock:
                    self._triaged = triaged
                    self._more_hands(_spare_cores())
                try:
                    self._answer(triaged)
                finally:
                    self._join_hands()
                    self._merges = bisector.merges
                    names.join()

    def _more_hands(self, answering: int) -> None:
        """Threads answering beside the first, up to `answering` in all (under the lock)."""
        if self._triaged is None:
            return
        for _ in range(answering - 1 - len(self._hands)):
            hand = threading.Thread(
                target=_quietly(self._answer), args=(self._triaged,), name="forkkit-triage-more"
            )
            hand.start()
            self._hands.append(hand)

    def _join_hands(self) -> None:
        """Until every thread answering beside the first has ended; none starts after."""
        while True:
            with self._hands_lock:
                running = [hand for hand in self._hands if hand.is_alive()]
                if not running:
                    self._triaged = None
                    return
            for hand in running:
                hand.join()

    def _answer(self, triaged: triage.Triage) -> None:
        """Ask about each stopped patch taken off the queue, up to its end (a None, put back
        for the other threads) or a cancel."""
        while not self._stopping.is_set() and (asked := self._asked.get()):
            triaged.ask_stopped(*asked)
            self._answered.add(asked[0].patch.name)
        self._asked.put(None)

    def wait(self) -> str:
        """Until every patch asked about is answered: the triage after the lane then finds
        its answers in the memo. What was done, for the progress line ("" nothing)."""
        started = time.monotonic()
        # On two cores the lane's own core was the only one the bisections did not have:
        # 22 stopped patches left 1.3 s of them, one after the other, after it had ended.
        with self._hands_lock:
            self._more_hands(_answering_after_the_lane())
        self._finish()
        if not self._answered:
            return ""
        return (
            f"triage beside the lane: {counted(len(self._answered), 'stopped patch')}, "
            f"{counted(self._merges, 'merge')}, waited {time.monotonic() - started:.1f} s"
        )

    def cancel(self) -> None:
        """Stop after the answer under way (a run that ends without its triage)."""
        self._stopping.set()
        self._finish()

    def _finish(self) -> None:
        self._asked.put(None)
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _spare_cores() -> int:
    """Threads for the bisections beside the lane: the cores the lane (this process and its
    git), its judge and the greps leave, at most six (each a merge process reading
    upstream's trees); at least one."""
    return max(1, min(6, processes.cores() - 3))


def _answering_after_the_lane() -> int:
    """Threads for the bisections once the lane has ended (this process only waits): one a
    core, at most six as beside it."""
    return min(6, processes.cores())


def _quietly(ask: Callable[..., None]) -> Callable[..., None]:
    """`ask` whose failure is left to the triage after the lane, which meets it again."""

    def asked(*args: object) -> None:
        with contextlib.suppress(Exception):
            ask(*args)

    return asked


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
