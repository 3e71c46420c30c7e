"""apply / continue / abort / status: the state machine around the steps.

An apply walks a fixed list of steps: the overlay, then each patch of the series, then
verification, then tests. After every step the state is saved in the repository, so a
stop (a patch that does not apply, a failed verification) can be continued or aborted.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

from rebaser.sequencer import recovery
from rebaser.sequencer import state as state_store
from rebaser.repo import late_checkout
from rebaser.carry import resolutions
from rebaser.repo import workspace
from rebaser.series.confinement import check_upstream_paths
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo import refs
from rebaser.repo.git import Git, committer_env
from rebaser.steps.records import LEFT_OFF, StepRow, StepStatus, Stop, StopPhase
from rebaser.repo.lock import repository_lock
from rebaser.sequencer.report import Report, outcome_text
from rebaser.series.patches import Patch, Series, identity, load_series, with_identity
from rebaser.sequencer.state import ApplyState
from rebaser.steps import fastlane
from rebaser.carry.knockon import needed_patch
from rebaser.steps.overlay import OVERLAY_STEP, lay_overlay
from rebaser.steps.patching import PatchOutcome, SeriesContext, apply_patch
from rebaser.carry.replay import Replay, recorded_base
from rebaser.steps.testrun import SuiteResult, check_interpreter, run_series_tests
from rebaser.steps.checks import find_conflict_markers, verify
from rebaser.carry.in_upstream import UpstreamHistory
from rebaser.upstream import Target, resolve_target

Progress = Callable[[str], None]
FAST_LANE = True  # carry runs of patches in one git rebase (tests compare with it off)


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


def apply(options: ApplyOptions, progress: Progress) -> Report:
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
    return apply_to(target, series, options, progress)


def apply_to(target: Target, series: Series, options: ApplyOptions, progress: Progress) -> Report:
    """Apply onto a resolved target (verify and bisect resolve their own bases)."""
    if options.ephemeral:  # throwaway branches, state in memory: nothing to serialise
        return _start(target, series, options, progress)
    with repository_lock(target.git, "apply"):
        return _start(target, series, options, progress)


def _start(target: Target, series: Series, options: ApplyOptions, progress: Progress) -> Report:
    if not options.ephemeral and (existing := state_store.load(target.git)) is not None:
        raise RebaserError(
            f"an apply is in progress in this repository (branch {existing.branch})",
            where=existing.worktree,
            next_step="finish it with `rebaser continue`, or drop it with `rebaser abort`",
        )
    workspace.require_utf8(target.git.path)
    if not options.ephemeral:
        state_store.check_registry(str(target.git.path))
    check_upstream_paths(target.git, target.base_sha, series.overlay_files())
    branch = workspace.branch_name(series.name, target.label, options.branch_prefix)
    context = _series_context(series, target.git, target.base_sha, progress, options.keep_going)
    if context.replay:
        context.replay.prefetch()  # the patches' commits are built while the worktree is made
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
    )
    state.save()
    return _driven(state, series, progress, "apply", context)


def resume(repo_hint: Optional[Path], progress: Progress) -> Report:
    """`rebaser continue`: take the user's fix for the stopped step (or, after an
    interruption, redo the step that was under way) and go on."""
    with _locked_state(repo_hint, "continue") as state:
        series = load_series(Path(state.series_file))
        worktree = recovery.worktree_of(state)
        if state.stopped is None:
            if backup := recovery.restore_last_step(state, worktree):
                progress(f"redoing the interrupted step; what it had left is kept at {backup}")
        else:
            if state.stopped.phase == StopPhase.APPLY:
                recovery.refuse_untracked(worktree, state.stopped.patch)
                _take_manual_fix(state, series, worktree)
                _record_resolution(state, series, worktree)
            state.head = worktree.out("rev-parse", "HEAD")  # the user's fix is part of the branch
        state.stopped = None
        state.save()
        return _driven(state, series, progress, "continue")


def skip(repo_hint: Optional[Path], progress: Progress) -> Report:
    """`rebaser skip`: leave the stopped patch off the branch and go on. Whatever was done
    for it since the stop is kept in a backup ref; the report still counts it as missing."""
    with _locked_state(repo_hint, "skip") as state:
        if state.stopped is None or state.stopped.phase != StopPhase.APPLY or state.next_step == 0:
            raise RebaserError(
                "only a stopped patch can be skipped"
                + (f"; the apply stopped at {state.stopped.patch}" if state.stopped else ""),
                where=state.worktree,
                next_step="`rebaser continue` after fixing it, or `rebaser abort`",
            )
        series = load_series(Path(state.series_file))
        patch = series.patches[state.next_step - 1]
        kept = _set_aside(Git(state.worktree), state, patch)
        detail = "skipped by `rebaser skip`" + (
            f"; the work on it is kept at {kept}" if kept else ""
        )
        row = StepRow(
            patch.name, StepStatus.SKIPPED, detail, patch.touched_paths, stop=state.stopped
        )
        state.steps.append(asdict(row))
        state.next_step += 1
        _record_left_off(state, Git(state.worktree))
        state.stopped = None
        state.head = state.stopped_head
        state.save()
        return _driven(state, series, progress, "skip")


def _set_aside(worktree: Git, state: ApplyState, patch: Patch) -> Optional[str]:
    """Back the branch up to where it stopped; anything done since goes to a backup ref."""
    head = worktree.out("rev-parse", "HEAD")
    dirty = bool(worktree.status_porcelain())
    backup = None
    if dirty or head != state.stopped_head:
        message = f"forkkit: work on {patch.name} set aside by rebaser skip\n"
        kept = recovery.snapshot(worktree, message) if dirty else head
        backup = refs.backup(state.branch, f"skipped-{_number(patch)}")
        worktree.run("update-ref", backup, kept)
    worktree.discard_changes(state.stopped_head)  # untracked files are in the backup
    return backup


def abort(repo_hint: Optional[Path]) -> str:
    """`rebaser abort`: remove the branch and worktree; keep every commit and change in a ref.

    Works whatever happened meanwhile: a deleted worktree, a damaged state file."""
    try:
        with _locked_state(repo_hint, "abort") as state:
            said = recovery.drop(state.repo_git, state.branch, Path(state.worktree))
            state.clear()
            return said
    except state_store.BrokenState as broken:
        return recovery.abort_broken(broken)


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


def status(repo_hint: Optional[Path]) -> Optional[ApplyState]:
    """The apply in progress (in `repo_hint`, or found as `continue` finds it), or None."""
    try:
        return state_store.find_in_progress(repo_hint)
    except state_store.NothingInProgress:
        return None


# -- the step machine ---------------------------------------------------------------------


def _drive(
    state: ApplyState, series: Series, progress: Progress, command: str, context: SeriesContext
) -> Report:
    worktree = Git(state.worktree)
    git_dir = workspace.worktree_git_dir(worktree.path)
    steps = [OVERLAY_STEP, *(patch.name for patch in series.patches)]
    lane_at, lane_wait = 1, 1  # the first step a fast lane may start at; see below
    while state.next_step < len(steps):
        if FAST_LANE and state.next_step >= lane_at and context.replay:
            started = state.next_step
            _fast_lane(state, series, worktree, git_dir, context.replay, progress)
            # The patch the lane stopped at takes the long way. Stops come in runs on a real
            # fork, and a lane that carried nothing cost a sequencer start for no patch: each
            # such lane doubles how many patches take the long way before the next one.
            lane_wait = 1 if state.next_step > started else lane_wait * 2
            lane_at = state.next_step + lane_wait
            continue
        name = steps[state.next_step]
        progress(name)
        _starting(state, name)
        head: Optional[str] = None  # the branch's tip after the step, where known already
        if name == OVERLAY_STEP:
            row, head = lay_overlay(series, worktree, state.branch)
            stop = Stop(StopPhase.APPLY, name, row.detail) if head is None else None
        else:
            late_checkout.finish(worktree, git_dir)  # a patch applied alone reads the files
            patch = series.patches[state.next_step - 1]
            outcome = apply_patch(worktree, patch, context)
            if not outcome.applied and outcome.conflicts and outcome.left:
                outcome = _replay_resolution(worktree, patch, series, outcome)
            row = StepRow(
                patch.name,
                outcome.status,
                _with_notes(outcome),
                patch.touched_paths,
                sum(change.hunks for change in patch.files),
            )
            stop = None
            if not outcome.applied:
                stop, blocked = _stop_record(state, series, worktree, patch, outcome)
                if state.keep_going:
                    row = _left_off(row, stop, worktree, blocked=blocked, left=outcome.left)
                    stop = None
            elif outcome.status != StepStatus.IN_UPSTREAM:
                if _nothing_staged(worktree):  # e.g. a 3-way merge that changed nothing
                    row.status, row.detail = StepStatus.IN_UPSTREAM, "its change is already there"
                else:
                    worktree.commit(patch.message, author=patch.author, date=patch.date)
        if stop is not None:
            late_checkout.finish(worktree, git_dir)  # the user fixes it in the files
            state.stopped = stop
            state.stopped_head = worktree.out("rev-parse", "HEAD")
            state.save()
            return _finish(
                state, series, [*_rows(state), row], [], [], command, ExitCode.NOT_APPLIED
            )
        state.steps.append(asdict(row))
        state.next_step += 1
        state.head = head or worktree.out("rev-parse", "HEAD")
        if row.status in LEFT_OFF:
            _record_left_off(state, worktree)
        state.save()

    progress("verifying")
    _starting(state, "verification")
    late_checkout.finish(worktree, git_dir)
    missing = _missing(state, series)
    applied = replace(series, patches=[p for p in series.patches if p not in missing])
    checks = verify(worktree, state.base_sha, applied)
    if not all(check.ok for check in checks):
        state.stopped = Stop(StopPhase.VERIFY, "verification", "verification failed")
        state.save()
        return _finish(state, series, _rows(state), checks, [], command, ExitCode.VERIFY_FAILED)
    if missing:  # a partial series: its tests say nothing about the series
        state.clear()
        return _finish(state, series, _rows(state), checks, [], command, ExitCode.NOT_APPLIED)
    if state.test != "none":
        _starting(state, "tests")
    suites = (
        run_series_tests(
            series,
            Path(state.worktree),
            state.repo_git,
            state.base_sha,
            mode=state.test,
            python=state.python,
            progress=progress,
        )
        if state.test != "none"
        else []
    )
    state.clear()
    code = (
        ExitCode.TESTS_FAILED if any(suite.status == "failed" for suite in suites) else ExitCode.OK
    )
    return _finish(state, series, _rows(state), checks, suites, command, code)


def _fast_lane(
    state: ApplyState,
    series: Series,
    worktree: Git,
    git_dir: Path,
    replay: Replay,
    progress: Progress,
) -> None:
    """Carry the patches from the next step on in one git sequencer run (steps/fastlane.py),
    as far as their own commits are at hand and git goes."""
    first = state.next_step - 1
    commits = replay.commits()[first:]
    if not commits:
        return
    patches = series.patches[first : first + len(commits)]
    progress(f"{patches[0].name} .. {patches[-1].name} (one git rebase)")
    _starting(state, patches[0].name)
    head = state.head or worktree.out("rev-parse", "HEAD")
    lane = fastlane.carry(worktree, git_dir, state.branch, head, patches, commits)
    state.steps += [asdict(row) for row in lane.rows]
    state.next_step += len(lane.rows)
    state.head = lane.head
    state.save()


def _starting(state: ApplyState, step: str) -> None:
    """Record the step under way, so that after an interruption `status` can name it."""
    state.running = step
    state.save()


def _nothing_staged(worktree: Git) -> bool:
    return worktree.run("diff", "--cached", "--quiet", check=False).ok


def _driven(
    state: ApplyState,
    series: Series,
    progress: Progress,
    command: str,
    context: Optional[SeriesContext] = None,
) -> Report:
    """_drive, saying after a Ctrl-C what can be done with the apply it leaves. `context`
    when the caller has it already (apply builds it early to prefetch the commits)."""
    try:
        if context is None:
            context = _series_context(
                series, Git(state.repo), state.base_sha, progress, state.keep_going
            )
        return _drive(state, series, progress, command, context)
    except KeyboardInterrupt:
        if state.ephemeral:
            raise
        raise KeyboardInterrupt(
            f"during {state.running or 'the apply'} of branch {state.branch}: `rebaser status` "
            "shows what was done; `rebaser continue` goes on from the last finished step, "
            "`rebaser abort` drops the apply (its work is kept in a ref)"
        ) from None


def _stop_record(
    state: ApplyState, series: Series, worktree: Git, patch: Patch, outcome: PatchOutcome
) -> tuple[Stop, bool]:
    """Why the patch did not apply, and whether only because it needs a patch left off the
    branch (then it says which, instead of blaming upstream)."""
    needed = needed_patch(patch, _missing(state, series), _head_reader(worktree))
    if needed is not None:
        return (
            Stop(StopPhase.APPLY, patch.name, f"needs {_number(needed)}, which did not apply"),
            True,
        )
    hunks = [report.describe() for report in outcome.hunks]
    return Stop(StopPhase.APPLY, patch.name, outcome.detail, outcome.conflicts, hunks), False


def _left_off(row: StepRow, stop: Stop, worktree: Git, *, blocked: bool, left: bool) -> StepRow:
    """--keep-going: the failed patch leaves the branch as it was; the row keeps the stop.
    `left`: what the patch got to is in the worktree (else it is clean already)."""
    if left:
        worktree.discard_changes()
    status = StepStatus.BLOCKED if blocked else StepStatus.DROPPED
    return replace(row, status=status, detail=stop.reason, stop=stop)


def _missing(state: ApplyState, series: Series) -> list[Patch]:
    """The patches so far that are not on the branch (dropped, blocked or skipped)."""
    names = {row["name"] for row in state.steps if row["status"] in LEFT_OFF}
    return [patch for patch in series.patches if patch.name in names]


def _record_left_off(state: ApplyState, worktree: Git) -> None:
    """Beside the branch: which patches it lacks, so refresh keeps them in the series."""
    missing = {row["name"]: row["status"] for row in state.steps if row["status"] in LEFT_OFF}
    refs.record_left_off(worktree, state.branch, missing)


def _head_reader(worktree: Git) -> Callable[[str], Optional[str]]:
    """A file's text at HEAD (the worktree may hold conflict markers), or None."""

    def read(path: str) -> Optional[str]:
        shown = worktree.run("show", f"HEAD:{path}", check=False)
        return shown.stdout if shown.ok else None

    return read


def _number(patch: Patch) -> str:
    """`0011` for 0011-fix-things.patch: how people name patches of a series."""
    head = patch.name.split("-", 1)[0]
    return head if head.isdigit() else patch.name


def _rows(state: ApplyState) -> list[StepRow]:
    return [StepRow(**row) for row in state.steps]


def _take_manual_fix(state: ApplyState, series: Series, worktree: Git) -> None:
    patch = series.patches[state.next_step - 1] if state.next_step > 0 else None
    name = patch.name if patch else OVERLAY_STEP
    if unmerged := worktree.unmerged_paths():
        raise RebaserError(
            f"{name}: conflicts are not resolved yet in {', '.join(unmerged)}",
            where=state.worktree,
            next_step="edit those files, `git add` them, then `rebaser continue`",
        )
    rejects = [line[3:] for line in worktree.status_porcelain() if line.endswith(".rej")]
    if rejects:
        raise RebaserError(
            f"{name}: rejected hunks are still lying around: {', '.join(rejects)}",
            where=state.worktree,
            next_step="apply them by hand, delete the .rej files, `git add` your changes, then continue",
        )
    staged = worktree.out("diff", "--cached", "--name-only").split()
    markers = find_conflict_markers(
        worktree.path, [p for p in staged if (worktree.path / p).is_file()]
    )
    if not markers.ok:
        raise RebaserError(
            f"{name}: conflict markers left in {'; '.join(markers.problems[:3])}",
            where=state.worktree,
            next_step="resolve them, `git add`, then continue",
        )
    unstaged = worktree.out("diff", "--name-only").split()
    if unstaged:
        raise RebaserError(
            f"{name}: unstaged changes in {', '.join(unstaged)}",
            where=state.worktree,
            next_step="`git add` what belongs to the patch (or `git checkout --` the rest), then continue",
        )
    head = worktree.out("rev-parse", "HEAD")
    if staged:
        first = series.patches[0]
        message = patch.message if patch else f"{refs.OVERLAY_SUBJECT} (merged by hand)\n"
        worktree.commit(message, author=(patch or first).author, date=(patch or first).date)
    elif head == state.stopped_head:
        raise RebaserError(
            f"{name} is still not applied: nothing was staged or committed since the stop",
            where=state.worktree,
            next_step="make the patch's change there and `git add` it (or commit it), then continue; "
            "or `rebaser abort`",
        )
    elif patch is not None:
        _carry_identity(worktree, patch)
    subject = worktree.out("log", "-1", "--format=%s")
    state.steps.append(
        asdict(
            StepRow(
                name,
                StepStatus.MANUAL,
                f"fixed by hand: {subject}",
                patch.touched_paths if patch else [],
            )
        )
    )
    state.next_step += 1


def _carry_identity(worktree: Git, patch: Patch) -> None:
    """The user committed the fix themselves: add the patch's identity trailer to that commit,
    so `refresh` writes it back to the patch's own file."""
    message = worktree.run("log", "-1", "--format=%B").stdout
    if identity(message) is not None:
        return
    env = committer_env(worktree.out("log", "-1", "--format=%cD"))
    amended = with_identity(message, patch.name).encode()
    worktree.run(
        "commit",
        "--amend",
        "--quiet",
        "--no-verify",
        "--cleanup=verbatim",
        "-F",
        "-",
        env=env,
        stdin=amended,
    )


def _replay_resolution(
    worktree: Git, patch: Patch, series: Series, outcome: PatchOutcome
) -> PatchOutcome:
    """A conflict stop the series has a recorded resolution for goes on by itself; any other
    is snapshotted, so `continue` can record how the user resolves it."""
    replayed = resolutions.replay(worktree, patch, series)
    if replayed:
        return PatchOutcome(StepStatus.RESOLUTION_REPLAYED, replayed.detail)
    resolutions.snapshot(worktree)
    if replayed.detail:
        outcome.detail = f"{outcome.detail}; {replayed.detail}"
    return outcome


def _record_resolution(state: ApplyState, series: Series, worktree: Git) -> None:
    """After the user's fix of a conflict stop: remember it beside the series."""
    if state.next_step < 2:  # the stop was the overlay, not a patch
        return
    patch = series.patches[state.next_step - 2]
    recorded = resolutions.record(worktree, patch, series)
    if recorded:
        folder = resolutions.folder_for(series, patch).relative_to(series.patches_dir)
        state.steps[-1]["detail"] += f"; {len(recorded)} resolution(s) recorded in {folder}/"


def _series_context(
    series: Series, repo: Git, new_base: str, progress: Progress, keep_going: bool
) -> SeriesContext:
    """The patches' own commits on the series' recorded base (for cherry-picks), the
    upstream history since that base (to recognise patches upstream already has), and which
    failed patches stay in the worktree (at a stop all; going on, those with a recorded
    resolution to try)."""
    base = recorded_base(series, repo, progress)
    replay = Replay(repo, base, series.patches) if base else None
    files = [patch.touched_paths for patch in series.patches]
    history = UpstreamHistory(repo, base, new_base, files)
    leave_failed = (
        (lambda patch: resolutions.recorded_for(series, patch))
        if keep_going
        else (lambda patch: True)
    )
    return SeriesContext(series.codemods, replay, history, leave_failed)


def _with_notes(outcome: PatchOutcome) -> str:
    if not outcome.superseded:
        return outcome.detail
    note = "possibly superseded: upstream already has the lines it adds in " + ", ".join(
        outcome.superseded
    )
    return "; ".join(filter(None, [outcome.detail, note]))


def _finish(
    state: ApplyState,
    series: Series,
    rows: list[StepRow],
    checks: list,
    suites: list[SuiteResult],
    command: str,
    code: ExitCode,
) -> Report:
    report = Report(
        command=command,
        series=series.name,
        upstream=state.base_description,
        base_sha=state.base_sha,
        branch=state.branch,
        worktree=state.worktree,
        steps=rows,
        checks=checks,
        suites=suites,
        exit_code=int(code),
    )
    left_off = [row for row in rows if row.status in LEFT_OFF]
    report.outcome, report.next_steps = outcome_text(
        code, state.stopped, state.branch, state.worktree, suites, left_off
    )
    if code == ExitCode.NOT_APPLIED and state.stopped:
        report.stop = state.stopped
    if state.json_report:
        report.write_json(Path(state.json_report))
    return report
