"""The report of a run: one row per step, as a rich table in a terminal and as JSON for CI,
and the outcome line with the next steps for each exit code."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rebaser.errors import ExitCode
from rebaser.steps.records import StepRow, Stop
from rebaser.steps.testrun import SuiteResult
from rebaser.steps.checks import Check

_STYLES = {
    "clean": "green",
    "offset": "green",
    "laid": "green",
    "ok": "green",
    "passed": "green",
    "3-way": "yellow",
    "cherry-pick": "yellow",
    "codemod": "yellow",
    "resolution replayed": "yellow",
    "in upstream": "yellow",
    "manual": "yellow",
    "skipped": "bold red",
    "dropped": "bold red",
    "blocked": "bold red",
    "failed": "bold red",
    "not run": "dim",
    "pending": "dim",
}


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

    def stops(self, code: str = "") -> list[tuple[str, Stop]]:
        """Every stop of the run with a title: each patch left off the branch (`0002-x.patch
        dropped`), then the one it ended at (`stopped at 0002-x.patch`); `code` quotes names."""
        titled = [
            (f"{code}{row.name}{code} {row.status}", row.stop) for row in self.steps if row.stop
        ]
        if self.stop:
            titled.append((f"stopped at {code}{self.stop.patch}{code}", self.stop))
        return titled

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for suite in data["suites"]:
            suite.pop("outcomes", None)
        return data

    def write_json(self, path: Path) -> None:
        write_json(path, self.to_json())


def write_json(path: Path, data: Any) -> None:
    """Every JSON file rebaser writes: indented, one trailing newline, folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def styled(status: str) -> Text:
    return Text(status, style=_STYLES.get(status, ""))


def render(report: Report, console: Console) -> None:
    console.print(
        Text.assemble(
            (f"rebaser {report.command}", "bold"),
            ": series ",
            (report.series, "cyan"),
            f" onto {report.upstream} ({report.base_sha[:12]})",
        )
    )
    if report.branch:
        console.print(
            Text.assemble("branch ", (report.branch, "cyan"), f"  worktree {report.worktree}")
        )
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("step")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for step in report.steps:
        files = ", ".join(Path(f).name for f in step.files) if len(step.files) <= 3 else ""
        hunks = f" ({step.hunks} hunk{'s' if step.hunks > 1 else ''})" if step.hunks else ""
        detail = "; ".join(filter(None, [f"{files}{hunks}" if files else "", step.detail]))
        table.add_row(step.name, styled(step.status), Text(detail))
    for check in report.checks:
        problems = "; ".join(check.problems[:3])
        table.add_row(
            f"verify: {check.name}",
            styled("ok" if check.ok else "failed"),
            Text(check.detail + (f": {problems}" if problems else "")),
        )
    for suite in report.suites:
        detail = f"{suite.counts} in {suite.seconds:.1f} s" if suite.status != "not run" else ""
        detail = "; ".join(filter(None, [detail, suite.note]))
        table.add_row(f"tests: {suite.name}", styled(suite.status), Text(detail))
    console.print(table)
    for suite in report.suites:
        for failure in suite.failures[:10]:
            console.print(Text.assemble("  ", (suite.name, "red"), " ", failure))
    for title, stop in report.stops():
        console.print(Text.assemble((title, "bold red"), f": {stop.reason}"))
        for line in stop.hunks:
            console.print(Text(line))
    style = "green" if report.exit_code == 0 else "bold red"
    console.print(Text.assemble((report.outcome, style), f" (exit {report.exit_code})"))
    for step in report.next_steps:
        console.print(Text(f"next: {step}"))


def outcome_text(
    code: ExitCode,
    stop: Optional[Stop],
    branch: str,
    worktree: str,
    suites: list[SuiteResult],
    left_off: Sequence[StepRow] = (),
) -> tuple[str, list[str]]:
    """The outcome line and what to do next, for a run that ended with `code` (`left_off`:
    the rows of patches it left off the branch)."""
    if code == ExitCode.NOT_APPLIED and stop is None and left_off:
        names = ", ".join(f"{row.name} ({row.status})" for row in left_off)
        return f"{len(left_off)} patches not applied: {names}; the rest applied, verified", [
            f"the other patches are on branch {branch} in {worktree}; tests were not run",
            "fix the series (rebase the patches left off onto this base, e.g. by hand on that "
            "branch and `rebaser refresh`), then apply again",
        ]
    if code == ExitCode.NOT_APPLIED:
        patch = stop.patch if stop else "?"
        return f"did not apply: stopped at {patch}", [
            f"fix it in {worktree} (conflict markers or .rej files show what failed), `git add` the result",
            "then `rebaser continue`; `rebaser skip` leaves this patch off and goes on; "
            "or `rebaser abort` to drop the branch (your work is kept in a ref)",
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
    return f"applied, verified, {tested}", [f"the patched tree is on branch {branch} in {worktree}"]
