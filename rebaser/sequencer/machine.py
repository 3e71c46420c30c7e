"""The resumable apply, as git's sequencer runs a rebase: start, resume, skip, abort, status.

An apply runs a plan of steps (the overlay, then each patch of the series; steps/step.py
says what a step is), then verification, then the tests. After every step the state is
saved in the repository, so a stop (a patch that does not apply, a failed verification) or
an interruption can be continued or aborted. Each verb returns a plain Report; the commands
print it and write it as JSON.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

from rebaser.carry import resolutions
from rebaser.carry.in_upstream import UpstreamHistory
from rebaser.carry.replay import Replay, recorded_base
from rebaser.config import series_argument
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo import late_checkout, refs, workspace
from rebaser.repo.git import Git
from rebaser.repo.lock import repository_lock, throwaway_lock
from rebaser.repo.memo import memo
from rebaser.sequencer import fix, proposals, recovery
from rebaser.sequencer import retry as retrying
from rebaser.sequencer import state as state_store
from rebaser.sequencer.report import Report, StatusView, outcome_text
from rebaser.sequencer.state import ApplyState
from rebaser.series.confinement import check_upstream_paths
from rebaser.series.patches import Patch, Series, load_series
from rebaser.steps import fastlane
from rebaser.steps.checks import Check, verify
from rebaser.steps.lanestop import LaneJudge
from rebaser.steps.testblame import fork_suite, lineage, mark_for_review
from rebaser.steps.overlay import OverlayStep
from rebaser.steps.patching import PatchStep
from rebaser.steps.records import LEFT_OFF, StepResult, StepRow, StepStatus, Stop, StopPhase
from rebaser.steps.step import SeriesContext, Step, StepContext
from rebaser.steps.testrun import SuiteResult, check_interpreter, run_series_tests
from rebaser.upstream import Target, resolve_target

Progress = Callable[[str], None]
Plan = Callable[[Series], list[Step]]
VERIFY_PREFIX = "forkkit-verify"  # the branches of throwaway applies (verify, bisect)


def standard_plan(series: Series) -> list[Step]:
    """The overlay, then each patch of the series."""
    return [OverlayStep(), *(PatchStep(patch) for patch in series.patches)]


@dataclass
class ApplyOptions:
    series_file: Path
    repo: Optional[Path] = None
    upstream: Optional[str] = None
    base: Optional[str] = None
    worktree: Optional[Path] = None
    test: str = "cpu"
    force: bool = False
    json_report: Optional[Path] = None
    branch_prefix: str = "forkkit"
    python: str = sys.executable
    ephemeral: bool = False  # a throwaway apply (verify, bisect): its state stays in memory
    keep_going: bool = False  # drop a patch that does not apply and go on, instead of stopping
    fast_lane: bool = True  # carry runs of patches in one lane (steps/fastlane.py)
    triage: bool = True  # propose keep/drop for every patch of a run with stops (bisect: no)


def apply(options: ApplyOptions, progress: Progress, plan: Plan = standard_plan) -> Report:
    """`rebaser apply`: resolve the base, then start."""
    for path in (options.series_file, options.repo, options.worktree):
        workspace.require_utf8(path)
    series = load_series(options.series_file)
    for patch in series.patches:
        if patch.codemod:
            series.codemods.lookup(patch.codemod)
    check_interpreter(options.python, options.test, series.test_requires)
    progress(f"resolving upstream {options.upstream or options.repo or series.base}")
    target = resolve_target(
        repo=options.repo,
        upstream=options.upstream,
        base=options.base,
        default_upstream=series.base,
    )
    return start(target, series, options, progress, plan)


def start(
    target: Target,
    series: Series,
    options: ApplyOptions,
    progress: Progress,
    plan: Plan = standard_plan,
) -> Report:
    """Apply onto a resolved target (verify and bisect resolve their own bases)."""
    if options.ephemeral:  # throwaway branches, state in memory: nothing to serialise
        return _start(target, series, options, progress, plan)
    with repository_lock(target.git, "apply"):
        return _start(target, series, options, progress, plan)


def throwaway_apply(
    target: Target,
    series_file: Path,
    test: str,
    progress: Progress,
    *,
    keep: bool = False,
    keep_going: bool = False,
    triage: bool = True,
) -> Report:
    """Apply onto `target` on a throwaway branch (state in memory only, so an apply the user
    has in progress is never disturbed), removed afterwards unless `keep`; `triage`: propose
    keep/drop for its patches when some stop."""
    series = load_series(series_file)
    branch = workspace.branch_name(series.name, target.label, VERIFY_PREFIX)
    options = ApplyOptions(
        series_file=series_file,
        test=test,
        ephemeral=True,
        branch_prefix=VERIFY_PREFIX,
        keep_going=keep_going,
        triage=triage,
    )
    # One run per throwaway branch: a second verify of the same base would remove it.
    with throwaway_lock(target.git, branch, "verify or bisect"):
        with workspace.throwaway_branch(target.git, branch, keep=keep):
            report = start(target, series, options, progress)
    if not keep:  # no branch or worktree to send anyone to, nor an apply to continue
        report.branch = report.worktree = None
        report.next_steps = (
            [
                f"its throwaway branch is removed: `rebaser apply` onto {target.description} "
                "makes one to work on (or verify with --keep)"
            ]
            if report.exit_code
            else []
        )
    return report


def _start(
    target: Target, series: Series, options: ApplyOptions, progress: Progress, plan: Plan
) -> Report:
    if not options.ephemeral and (existing := state_store.load(target.git)) is not None:
        raise RebaserError(
            f"an apply is in progress in this repository (branch {existing.branch})",
            where=existing.worktree,
            next_step="finish it with `rebaser continue` (or `rebaser skip` its stopped patch), "
            "or drop it with `rebaser abort`",
        )
    workspace.require_utf8(target.git.path)
    if not options.ephemeral:
        state_store.check_registry(str(target.git.path))
    check_upstream_paths(target.git, target.base_sha, series.overlay_files())
    branch = workspace.branch_name(series.name, target.label, options.branch_prefix)
    carry = _series_context(series, target.git, target.base_sha, progress, options.keep_going)
    if carry.replay:
        carry.replay.prefetch()  # the patches' commits are built while the worktree is made
    progress(f"creating branch {branch}")
    space = workspace.create(
        target.git, branch, target.base_sha, options.worktree, force=options.force
    )
    state = ApplyState(
        series_file=str(series.file),
        repo=str(target.git.path),
        base_rev=target.base_rev,
        base_sha=target.base_sha,
        base_description=target.description,
        branch=space.branch,
        worktree=str(space.path),
        test=options.test,
        json_report=str(options.json_report) if options.json_report else None,
        python=options.python,
        ephemeral=options.ephemeral,
        head=target.base_sha,
        keep_going=options.keep_going,
        fast_lane=options.fast_lane,
        triage=options.triage,
    )
    state.save()
    report = _Run(state, series, plan(series), progress, "apply", carry).drive()
    if space.replaced:
        report.notices.append(f"--force: the branch it replaced is kept at {space.replaced}")
    return report


def resume(repo_hint: Optional[Path], progress: Progress, plan: Plan = standard_plan) -> Report:
    """`rebaser continue`: take the user's fix for the stopped step (or, after an
    interruption, redo the step that was under way) and go on."""
    with _locked_state(repo_hint, "continue") as state:
        series, steps = _planned(state, plan)
        worktree = recovery.worktree_of(state)
        if state.stopped is None:
            if backup := recovery.restore_last_step(state, worktree):
                progress(
                    "redoing the interrupted step; the worktree as it was (any changes "
                    f"made there since too) is kept at {backup}"
                )
        else:
            if state.stopped.phase == StopPhase.APPLY:
                _take_fix(state, series, steps[state.next_step], worktree)
            state.head = worktree.out("rev-parse", "HEAD")  # the user's fix is on the branch
        state.stopped, state.set_aside = None, None  # a skip's set-aside work: taken back
        state.save()
        return _Run(state, series, steps, progress, "continue").drive()


def retry(
    repo_hint: Optional[Path],
    patch: str,
    series_file: Path,
    progress: Progress,
    *,
    branch: Optional[str] = None,
    test: str = "none",
    json_report: Optional[Path] = None,
    plan: Plan = standard_plan,
) -> Report:
    """`rebaser retry <patch>`: one patch an apply left off its branch, tried again on the
    branch's tip; when it conflicts, the apply waits for the fix (sequencer/retry.py)."""
    repo, here = retrying.repository(repo_hint)
    series = load_series(series_file)
    with repository_lock(repo, "retry"):
        where = retrying.branch_of(repo, here, branch)
        steps = plan(series)
        report = str(json_report) if json_report else None
        state = retrying.prepare(repo, where, patch, series, steps, test, report)
        progress(f"retrying {steps[state.next_step].name} on {where}")
        return _Run(state, series, steps, progress, "retry").drive()


def _planned(state: ApplyState, plan: Plan) -> tuple[Series, list[Step]]:
    """The series of the apply in progress and its steps. The patches up to the one it
    stopped at must be those it carried: another there would be taken for it. Those after
    it may change, as `git rebase --edit-todo` allows."""
    series = _series_of(state)
    steps = plan(series)
    names = [step.name for step in steps]
    carried = dict(enumerate(row.name for row in state.steps)) if state.retry_step is None else {}
    if state.stopped is not None and state.stopped.phase == StopPhase.APPLY:
        carried[state.next_step] = state.stopped.patch
    for number, name in sorted(carried.items()):
        if number >= len(names) or names[number] != name:
            now = names[number] if number < len(names) else "nothing"
            where = f"stopped at {state.stopped.patch}" if state.stopped else "started"
            raise RebaserError(
                f"the series changed since the apply {where}: where it had {name}, the "
                f"series file now lists {now}",
                where=state.series_file,
                next_step="put the lines up to that patch back as they were (later ones may "
                "change), then run the command again; or `rebaser abort`",
            )
    return series, steps


def _series_of(state: ApplyState) -> Series:
    """The series the apply in progress was started with, where it was then."""
    file = Path(state.series_file)
    if not file.is_file():
        raise RebaserError(
            f"the series this apply uses is gone: {file} (moved or removed since the apply "
            "started)",
            where=state.worktree,
            next_step="put it back there and run the command again; or `rebaser abort` "
            "(your work is kept in a ref)",
        )
    return load_series(file)


def skip(repo_hint: Optional[Path], progress: Progress, plan: Plan = standard_plan) -> Report:
    """`rebaser skip`: leave the stopped patch off the branch and go on. Whatever was done
    for it since the stop is kept in a backup ref; the report still counts it as missing."""
    with _locked_state(repo_hint, "skip") as state:
        series, steps = _planned(state, plan)
        step = steps[state.next_step] if state.stopped else None
        if state.stopped is None or state.stopped.phase != StopPhase.APPLY or step.patch is None:
            raise RebaserError(
                "only a stopped patch can be skipped"
                + (f"; the apply stopped at {state.stopped.patch}" if state.stopped else ""),
                where=state.worktree,
                next_step="`rebaser continue` after fixing it, or `rebaser abort`",
            )
        worktree = recovery.worktree_of(state)  # refuses a branch the user switched to

        def noted(ref: str) -> None:  # a kill from here on leaves the ref named (status)
            state.set_aside = ref
            state.save()

        earlier = state.set_aside  # a skip killed after it set the work aside
        kept = fix.set_aside(worktree, state.branch, step.patch, state.stopped_head, noted)
        before = f"what an interrupted skip set aside is kept at {earlier}" if earlier else ""
        said = "; ".join(filter(None, [kept.describe() if kept else "", before]))
        detail = "skipped by `rebaser skip`" + (f"; {said}" if said else "")
        row = StepRow(
            step.name, StepStatus.SKIPPED, detail, step.patch.touched_paths, stop=state.stopped
        )
        state.stopped, state.set_aside = None, None
        run = _Run(state, series, steps, progress, "skip")
        run.record(StepResult(row, state.stopped_head))
        report = run.drive()
        if kept and (kept.changed or kept.new) or earlier:
            report.notices.append(f"skip: {said}")
        return report


def abort(repo_hint: Optional[Path]) -> str:
    """`rebaser abort`: remove the branch and worktree; keep every commit and change in a ref.

    Works whatever happened meanwhile: a deleted worktree, a damaged state file."""
    try:
        with _locked_state(repo_hint, "abort") as state:
            if state.retry_step is not None:  # the branch was there before: it stays
                return retrying.abandon(state)
            said = recovery.drop(state.repo_git, state.branch, Path(state.worktree))
            state.clear()
            return said
    except state_store.BrokenState as broken:
        return recovery.abort_broken(broken)


def status(repo_hint: Optional[Path]) -> Optional[StatusView]:
    """The apply in progress (in `repo_hint`, or found as `continue` finds it), or None."""
    try:
        state = state_store.find_in_progress(repo_hint)
    except state_store.InProgressElsewhere:
        raise  # the caller says where
    except state_store.NothingInProgress:
        return None
    return StatusView(
        branch=state.branch,
        worktree=state.worktree,
        repo=state.repo,
        upstream=state.base_description,
        base_sha=state.base_sha,
        series=state.series_file,
        steps=state.steps,
        stopped=state.stopped,
        running=None if state.stopped else state.running,  # a stop is no interruption
        notes=recovery.describe(state),
    )


@contextlib.contextmanager
def _locked_state(repo_hint: Optional[Path], command: str) -> Iterator[ApplyState]:
    """The apply in progress, read again once its repository's lock is held."""
    found = state_store.find_in_progress(repo_hint)
    with repository_lock(found.repo_git, command):
        state = state_store.load(found.repo_git)
        if state is None:
            raise state_store.NothingInProgress(
                "the apply was finished or aborted meanwhile", where=found.repo
            )
        yield state


def _take_fix(state: ApplyState, series: Series, step: Step, worktree: Git) -> None:
    """The user's fix of the stopped step becomes its row (and, after a conflict, the
    series remembers how it was resolved)."""
    status = recovery.refuse_untracked(worktree, state.stopped.patch)
    row = fix.take_fix(worktree, step.name, step.patch, series, state.stopped_head, status)
    if step.patch is not None:
        row.detail += fix.record_resolution(worktree, step.patch, series)
    state.steps.append(row)
    state.next_step += 1


class _Run:
    """One drive of the plan, from the state's next step to the end or a stop."""

    def __init__(
        self,
        state: ApplyState,
        series: Series,
        plan: list[Step],
        progress: Progress,
        command: str,
        carry: Optional[SeriesContext] = None,
    ) -> None:
        self.state, self.series, self.plan = state, series, plan
        self.progress, self.command = progress, command
        self.carry = carry  # built at once by apply (to prefetch the commits), else lazily
        self._triage_ahead: Optional[Callable[[], Optional[proposals.Triaged]]] = None
        self._beside: Optional[proposals.BesideTheLane] = None
        self.worktree = Git(state.worktree)
        self.git_dir = workspace.worktree_git_dir(self.worktree.path)

    def drive(self) -> Report:
        """The rest of the plan, then verification and tests; after a Ctrl-C, says what can
        be done with the apply it leaves."""
        try:
            if self.carry is None:
                self.carry = _series_context(
                    self.series,
                    self.state.repo_git,
                    self.state.base_sha,
                    self.progress,
                    self.state.keep_going,
                )
            return self._steps() or self._verify_and_test()
        except KeyboardInterrupt:
            if self.state.ephemeral:
                raise
            raise KeyboardInterrupt(
                f"during {self.state.running or 'the apply'} of branch {self.state.branch}: "
                "`rebaser status` shows what was done; `rebaser continue` goes on from the last "
                "finished step, `rebaser abort` drops the apply (its work is kept in a ref)"
            ) from None
        finally:
            if self._beside is not None:  # a run that fails leaves no thread waiting
                self._beside.cancel()

    def _steps(self) -> Optional[Report]:
        """Run the plan's steps; the report when one stops."""
        state = self.state
        lane_at, lane_wait = 1, 1  # the first step a fast lane may start at; see below
        end = len(self.plan) if state.retry_step is None else state.retry_step + 1
        while state.next_step < end:
            if state.fast_lane and state.next_step >= lane_at and self.carry.replay:
                started = state.next_step
                self._fast_lane()
                # The patch the lane stopped at takes the long way. Stops come in runs on a
                # real fork, and a lane that carried nothing cost a sequencer start for no
                # patch: each such lane doubles how many patches take the long way before
                # the next one.
                lane_wait = 1 if state.next_step > started else lane_wait * 2
                lane_at = state.next_step + lane_wait
                continue
            step = self.plan[state.next_step]
            self.progress(step.name)
            self._starting(step.name)
            result = step.run(self._context())
            if result.stop is not None:
                return self._stopped(result)
            self.record(result)
        return None

    def record(self, *results: StepResult) -> None:
        """Finished steps: their rows, the branch's new tip, the state saved (once)."""
        state = self.state
        for result in results:
            state.steps.append(result.row)
            state.next_step += 1
            state.head = result.head
        if any(result.row.status in LEFT_OFF for result in results) or state.retry_step is not None:
            self._record_left_off()  # so refresh keeps them
        state.save()

    def _record_left_off(self) -> None:
        missing = {row.name: row.status for row in self.state.steps if row.status in LEFT_OFF}
        refs.record_left_off(self.worktree, self.state.branch, missing)

    def _context(self) -> StepContext:
        return StepContext(
            worktree=self.worktree,
            git_dir=self.git_dir,
            branch=self.state.branch,
            head=self.state.head or self.state.base_sha,
            series=self.series,
            carry=self.carry,
            keep_going=self.state.keep_going,
            missing=self._missing(),
        )

    def _stopped(self, result: StepResult) -> Report:
        """Wait for the user: the worktree's files written, the stop saved."""
        state = self.state
        late_checkout.finish(self.worktree, self.git_dir)  # the user fixes it in the files
        state.stopped = result.stop
        state.stopped_head = result.head
        state.save()
        return self._finish([*state.steps, result.row], [], [], ExitCode.NOT_APPLIED)

    def _fast_lane(self) -> None:
        """Carry the patches from the next step on in one lane (steps/fastlane.py), as far
        as their own commits are at hand and git goes."""
        patches = self._patch_run()
        first = self.series.patches.index(patches[0]) if patches else 0
        commits = self.carry.replay.commits()[first : first + len(patches)]
        if not commits:
            return
        patches = patches[: len(commits)]
        self.progress(f"{patches[0].name} .. {patches[-1].name} (one lane)")
        self._starting(patches[0].name)
        head = self.state.head or self.worktree.out("rev-parse", "HEAD")
        branch = self.state.branch
        # Going on past failures, the lane judges the patches git stops at by itself.
        context = self._context()
        judge = LaneJudge(context) if self.state.keep_going else None
        if judge is not None and (beside := self._triage_beside()) is not None:
            judge = beside.watching(judge, self.state.steps, patches)
        carried, handed = fastlane.carry(
            self.worktree, self.git_dir, branch, head, patches, commits, context.missing, judge
        )
        self.record(*carried)
        if handed is not None and judge is None:
            self._triage_before_the_stop(handed)

    def _replay_for_early_triage(self) -> Optional[Replay]:
        """The patches' own commits a triage started early bisects with; None where none
        starts early (no triage, or a retry: it bisects only the patch it retries)."""
        state, replay = self.state, self.carry.replay if self.carry else None
        if not state.triage or state.retry_step is not None:
            return None
        return replay

    def _triage_beside(self) -> Optional[proposals.BesideTheLane]:
        """The triage of the patches a lane leaves off, run beside it (an apply that goes
        on past failures)."""
        if (replay := self._replay_for_early_triage()) is None:
            return None
        if self._beside is None:
            state = self.state
            self._beside = proposals.BesideTheLane(
                self.series, state.repo_git, self.git_dir, state.base_sha, replay
            )
        return self._beside

    def _triaged_beside(self) -> None:
        """Until the triage beside the lanes has answered (the triage after them reads its
        answers in the memo)."""
        if self._beside is not None:
            said, self._beside = self._beside.wait(), None
            if said:
                self.progress(said)

    def _triage_before_the_stop(self, handed: fastlane.Handed) -> None:
        """The patch the lane left in conflict is about to stop on the per-patch path (in
        the worktree: git processes, mostly): its triage starts meanwhile."""
        state, replay = self.state, self._replay_for_early_triage()
        step = self.plan[state.next_step] if state.next_step < len(self.plan) else None
        if replay is None:
            return
        if step is None or step.patch is not handed.patch:  # the lane was cut before it
            return
        self._triage_ahead = proposals.ahead(
            list(state.steps),
            self.series,
            state.repo_git,
            self.git_dir,
            state.base_sha,
            replay,
            handed,
        )

    def _patch_run(self) -> list[Patch]:
        """The patches of the plan's steps from the next one on, while they follow each other
        in the series (a lane carries their commits, a first-parent chain)."""
        position = {patch.name: number for number, patch in enumerate(self.series.patches)}
        run: list[Patch] = []
        for step in self.plan[self.state.next_step :]:
            follows = not run or position.get(step.patch.name if step.patch else "") == (
                position[run[-1].name] + 1
            )
            if step.patch is None or not follows:
                break
            run.append(step.patch)
        return run

    def _starting(self, step: str) -> None:
        """Record the step under way, so that after an interruption `status` can name it."""
        self.state.running = step
        self.state.save()

    def _missing(self) -> list[Patch]:
        """The patches so far that are not on the branch (dropped, blocked or skipped)."""
        names = {row.name for row in self.state.steps if row.status in LEFT_OFF}
        return [patch for patch in self.series.patches if patch.name in names]

    def _verify_and_test(self) -> Report:
        state = self.state
        self.progress("verifying")
        self._starting("verification")
        late_checkout.finish(self.worktree, self.git_dir)
        if state.retry_step is not None:  # a fix taken by `continue` is no longer missing
            self._record_left_off()
        missing = self._missing()
        applied = replace(self.series, patches=[p for p in self.series.patches if p not in missing])
        checks = verify(self.worktree, state.base_sha, applied)
        self._triaged_beside()  # before the state goes: Ctrl-C here leaves a `continue`
        if not all(check.ok for check in checks):
            state.stopped = Stop(StopPhase.VERIFY, "verification", "verification failed")
            state.save()
            return self._finish(state.steps, checks, [], ExitCode.VERIFY_FAILED)
        if missing:  # a partial series: its tests say nothing about the series
            return self._ended(checks, [], ExitCode.NOT_APPLIED)
        suites: list[SuiteResult] = []
        if state.test != "none":
            self._starting("tests")
            suites = run_series_tests(
                self.series,
                Path(state.worktree),
                state.repo_git,
                state.base_sha,
                mode=state.test,
                python=state.python,
                progress=self.progress,
                fork=self._fork_tests,
            )
        failed = any(suite.status == "failed" for suite in suites)
        code = ExitCode.TESTS_FAILED if failed else ExitCode.OK
        return self._ended(checks, suites, code)

    def _ended(self, checks: list[Check], suites: list[SuiteResult], code: ExitCode) -> Report:
        """The report of an apply that has ended, written where the apply was asked to
        (`--json`) before its state goes: a Ctrl-C until then leaves a `continue` (which
        verifies again), never an ended branch without its report. An error while the
        report is made (the triage's git failing) ends the apply all the same. The command
        writes the report again with its notices, and says so where it cannot."""
        try:
            report = self._finish(self.state.steps, checks, suites, code)
        except Exception:  # not a Ctrl-C
            self.state.clear()
            raise
        if report.json_target:
            with contextlib.suppress(OSError):
                target = Path(report.json_target)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(report.json_text(), encoding="utf-8")
        self.state.clear()
        return report

    def _proposed(self, rows: list[StepRow]) -> list[StepRow]:
        """The rows with keep/drop proposals (sequencer/proposals.py); a retry's branch
        holds the patches that have no row here."""
        state = self.state
        known = self._triage_ahead() if self._triage_ahead is not None else None
        self._triaged_beside()
        listed = {row.name for row in rows}
        on_branch = [p.name for p in self.series.patches if p.name not in listed]
        return proposals.annotate(
            rows,
            self.series,
            state.repo_git,
            self.git_dir,
            state.base_sha,
            self.carry.replay if self.carry else None,
            self.progress,
            stopped=state.stopped,
            on_branch=on_branch if state.retry_step is not None else (),
            retried=self.plan[state.retry_step].name if state.retry_step is not None else None,
            known=known,
        )

    def _fork_tests(self) -> Optional[SuiteResult]:
        """The fork's own tests, judged against its branch (steps/testblame.py)."""
        state = self.state
        found = lineage(self.worktree, state.base_sha, self.series, self.carry)
        return fork_suite(
            self.series,
            Path(state.worktree),
            state.repo_git,
            state.base_sha,
            found,
            python=state.python,
            gpu=state.test == "gpu",
            progress=self.progress,
        )

    def _finish(
        self, rows: list[StepRow], checks: list[Check], suites: list[SuiteResult], code: ExitCode
    ) -> Report:
        state = self.state
        if state.triage:
            rows = self._proposed(rows)
        # A test that passes on the fork's branch and fails from a patch on outweighs the
        # triage's keep: that patch is proposed for review (steps/testblame.py).
        mark_for_review(rows, suites, self.series)
        report = Report(
            command=self.command,
            series=self.series.name,
            upstream=state.base_description,
            base_sha=state.base_sha,
            branch=state.branch,
            worktree=state.worktree,
            steps=rows,
            checks=checks,
            suites=suites,
            exit_code=int(code),
            json_target=state.json_report,
        )
        left_off = [row for row in rows if row.status in LEFT_OFF]
        report.outcome, report.next_steps = outcome_text(
            code,
            state.stopped,
            state.branch,
            state.worktree,
            suites,
            left_off,
            retry=state.retry_step is not None,
            series=series_argument(self.series.file),
        )
        if code == ExitCode.NOT_APPLIED and state.stopped:
            report.stop = state.stopped
        return report


def _series_context(
    series: Series, repo: Git, new_base: str, progress: Progress, keep_going: bool
) -> SeriesContext:
    """The patches' own commits on the series' recorded base (for cherry-picks), the
    upstream history since that base (to recognise patches upstream already has), and which
    failed patches stay in the worktree (at a stop all; going on, those with a recorded
    resolution to try)."""
    base = recorded_base(series, repo, progress)
    replay = Replay(repo, base, series.patches) if base else None
    # Keyed by everything the listing depends on: commits and the series' files.
    files = sorted("\0".join(sorted(patch.touched_paths)) for patch in series.patches)
    known = memo(repo, "upstream", str(base), new_base, *files)
    history = UpstreamHistory(repo, base, new_base, series.patches, known)
    leave_failed = (
        (lambda patch: resolutions.recorded_for(series, patch))
        if keep_going
        else (lambda patch: True)
    )
    return SeriesContext(series.codemods, replay, history, leave_failed)
