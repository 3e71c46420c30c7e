"""A step of one's own, through the public interfaces only (docs/architecture.md, "Adding a
step"): the sequencer runs it, records its row, moves the branch, stops for the user where
it says so, takes the user's fix on `continue`, and reports it, with no change elsewhere."""

from __future__ import annotations

from pathlib import Path

from synthetic import git, two_patch_series

from rebaser.errors import ExitCode
from rebaser.repo.git import FORKKIT_AUTHOR
from rebaser.sequencer import machine
from rebaser.series.patches import Series
from rebaser.steps.records import StepResult, StepRow, StepStatus, Stop, StopPhase
from rebaser.steps.step import Step, StepContext


class Stamp:
    """Writes VERSION_STAMP with the series' name and commits it."""

    name = "stamp"
    patch = None

    def run(self, context: StepContext) -> StepResult:
        worktree = context.worktree
        (worktree.path / "VERSION_STAMP").write_text(f"{context.series.name}\n")
        worktree.run("add", "VERSION_STAMP")
        head = worktree.commit("stamp the series\n", author=FORKKIT_AUTHOR, date="1700000000 +0000")
        return StepResult(StepRow(self.name, StepStatus.CLEAN, "stamped", ["VERSION_STAMP"]), head)


class Gate:
    """Stops until someone has put an APPROVED file on the branch."""

    name = "gate"
    patch = None

    def run(self, context: StepContext) -> StepResult:
        approved = context.worktree.run("cat-file", "-e", "HEAD:APPROVED", check=False).ok
        if approved:
            return StepResult(StepRow(self.name, StepStatus.CLEAN, "approved"), context.head)
        row = StepRow(self.name, StepStatus.FAILED, "waiting for APPROVED")
        return StepResult(row, context.head, Stop(StopPhase.APPLY, self.name, "not approved"))


def with_steps(*extra: Step):
    def plan(series: Series) -> list[Step]:
        return [*machine.standard_plan(series), *extra]

    return plan


def options(series, upstream) -> machine.ApplyOptions:
    return machine.ApplyOptions(series_file=series, repo=upstream.path, base="v1", test="none")


def test_a_step_of_ones_own_runs_after_the_patches_and_is_reported(tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    report = machine.apply(options(series, upstream), lambda _: None, with_steps(Stamp()))
    assert report.exit_code == ExitCode.OK, report.outcome
    assert [(row.name, row.status) for row in report.steps][-2:] == [
        ("0002-change-2.patch", "clean"),
        ("stamp", "clean"),
    ]
    assert git(upstream.path, "show", f"{report.branch}:VERSION_STAMP") == "demo"
    assert all(check.ok for check in report.checks)


def test_a_step_that_stops_waits_for_the_user_and_goes_on_with_continue(tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    plan = with_steps(Gate(), Stamp())
    stopped = machine.apply(options(series, upstream), lambda _: None, plan)
    assert stopped.exit_code == ExitCode.NOT_APPLIED
    assert stopped.stop.patch == "gate" and stopped.stop.reason == "not approved"
    view = machine.status(upstream.path)
    assert view.stopped.patch == "gate" and [row.name for row in view.steps][-1].endswith(".patch")

    (Path(stopped.worktree) / "APPROVED").write_text("yes\n")
    git(stopped.worktree, "add", "APPROVED")
    done = machine.resume(upstream.path, lambda _: None, plan)
    assert done.exit_code == ExitCode.OK, done.outcome
    assert [(row.name, row.status) for row in done.steps][-2:] == [
        ("gate", "manual"),
        ("stamp", "clean"),
    ]
    subjects = git(upstream.path, "log", "--format=%s", "-2", done.branch).splitlines()
    assert subjects == ["stamp the series", "forkkit: gate (merged by hand)"]
    assert machine.status(upstream.path) is None
