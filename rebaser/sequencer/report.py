"""What a run reports, as plain data: one row per step, the checks and the test suites, the
outcome line with the next steps for each exit code; and what `status` shows of an apply
in progress. The commands print it (commands/output.py) and write it as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

from rebaser.errors import ExitCode
from rebaser.wording import counted
from rebaser.series.patches import number_of
from rebaser.steps.records import StepRow, Stop
from rebaser.steps.testrun import SuiteResult
from rebaser.steps.checks import Check


@dataclass
class Report:
    command: str
    series: str
    upstream: str
    base_sha: str
    branch: Optional[str] = None
    worktree: Optional[str] = None
    steps: list[StepRow] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    suites: list[SuiteResult] = field(default_factory=list)
    outcome: str = ""
    exit_code: int = int(ExitCode.OK)
    next_steps: list[str] = field(default_factory=list)
    stop: Optional[Stop] = None
    notices: list[str] = field(default_factory=list)  # said once: e.g. the user's work set aside
    # Where the apply was asked to write its JSON report (`apply --json`): `continue` and
    # `skip` write there again. Not part of the report.
    json_target: Optional[str] = field(default=None, repr=False)

    def stops(self, code: str = "") -> list[tuple[str, Stop]]:
        """Every stop of the run with a title: each patch left off the branch (`0002-x.patch
        dropped`), then the one it ended at (`stopped at 0002-x.patch`); `code` quotes names."""
        titled = [
            (f"{code}{row.name}{code} {row.status}", row.stop) for row in self.steps if row.stop
        ]
        if self.stop:
            titled.append((f"stopped at {code}{self.stop.patch}{code}", self.stop))
        return titled

    def json_text(self) -> str:
        """The JSON report as every file of it is written: indented, one trailing newline."""
        return json.dumps(self.to_json(), indent=2) + "\n"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("json_target")
        for suite in data["suites"]:
            suite.pop("outcomes", None)
            suite.pop("read", None)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Report":
        """A report read back from `to_json` (`verify --merge`); a field this version does
        not know, or a missing one, is a TypeError."""
        return cls(
            **{
                **data,
                "steps": [StepRow(**row) for row in data["steps"]],
                "checks": [Check(**check) for check in data["checks"]],
                "suites": [SuiteResult(**suite) for suite in data["suites"]],
                "stop": Stop.from_json(data["stop"]) if data["stop"] else None,
            }
        )


def outcome_text(
    code: ExitCode,
    stop: Optional[Stop],
    branch: str,
    worktree: str,
    suites: list[SuiteResult],
    left_off: Sequence[StepRow] = (),
    retry: bool = False,
    series: str = "",
) -> tuple[str, list[str]]:
    """The outcome line and what to do next, for a run that ended with `code` (`left_off`:
    the rows of patches it left off the branch; `retry`: a `rebaser retry`, whose abort
    keeps the branch; `series`: what a command needs to name the series, config.py's
    series_argument)."""
    if code == ExitCode.NOT_APPLIED and stop is None and left_off:
        names = ", ".join(f"{row.name} ({row.status})" for row in left_off)
        return (
            f"{counted(len(left_off), 'patch')} not applied: {names}; the rest applied, verified",
            [
                f"the other patches are on branch {branch} in {worktree}; tests were not run",
                f"`rebaser retry {number_of(left_off[0].name)}{series}` in that worktree "
                "brings a patch left off back with its conflict; resolve it and `rebaser "
                "continue`",
                f"or fix the series by hand on that branch and `rebaser refresh{series}`, then "
                "apply again",
            ],
        )
    if code == ExitCode.NOT_APPLIED:
        patch = stop.patch if stop else "?"
        abort = (
            "or `rebaser abort` to set the work on it aside (the branch stays as it was)"
            if retry
            else "or `rebaser abort` to drop the branch (your work is kept in a ref)"
        )
        return f"did not apply: stopped at {patch}", [
            f"fix it in {worktree} (conflict markers or .rej files show what failed), `git add` the result",
            f"then `rebaser continue`; `rebaser skip` leaves this patch off and goes on; {abort}",
        ]
    if code == ExitCode.VERIFY_FAILED:
        return "applied, but verification failed", [
            f"fix the problems on branch {branch} in {worktree} and commit, then `rebaser continue`",
            "or `rebaser abort`",
        ]
    if code == ExitCode.TESTS_FAILED:
        return "applied and verified; tests failed", [
            f"the patched tree is on branch {branch} in {worktree}; rerun there with "
            f"`PYTHONPATH=. python -m pytest -p rebaser.testing.pytest_plugin <test>`",
        ]
    tested = (
        "tests passed" if any(suite.status == "passed" for suite in suites) else "tests not run"
    )
    # As each suite's counts say them: tests that need a GPU, and whole GPU test files.
    notes = [note for suite in suites for note in suite.tests if note.gpu_only]
    files = sum(note.outcome == "not run" for note in notes)
    gpu = [f"{len(notes) - files} need a GPU"] if len(notes) > files else []
    gpu += [counted(files, "GPU test file")] if files else []
    tested += f" ({' and '.join(gpu)}: not run)" if gpu else ""
    return f"applied, verified, {tested}", [f"the patched tree is on branch {branch} in {worktree}"]


@dataclass
class StatusView:
    """`rebaser status --json`: what an apply in progress has done and where it stands. A
    documented view (docs/architecture.md, "status --json"), not the state file."""

    branch: str
    worktree: str
    repo: str
    upstream: str
    base_sha: str
    series: str
    steps: list[StepRow]
    stopped: Optional[Stop]
    running: Optional[str]  # the step under way when it was interrupted (or is running)
    notes: list[str]  # the truth about the worktree, and what can be done next

    def to_json(self) -> dict[str, Any]:
        return {"in_progress": True, **asdict(self)}
