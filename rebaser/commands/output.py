"""What the commands print and write: the only module that imports rich.

Results go to stdout, progress and errors to stderr. In a terminal rich draws tables and a
spinner; in CI logs lines are wide and never wrap paths. Every JSON file rebaser writes is
written by `write_json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Union

from rebaser.errors import RebaserError, machine_refused

if TYPE_CHECKING:  # only named here: a command that prints no report never loads them
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from rebaser.sequencer.machine import Progress
    from rebaser.sequencer.report import Report
    from rebaser.steps.records import StepRow
    from rebaser.steps.testrun import SuiteResult

Part = Union[str, tuple[str, str]]  # plain text, or (text, style)

_STYLES = {
    "clean": "green",
    "offset": "green",
    "laid": "green",
    "ok": "green",
    "passed": "green",
    "3-way": "yellow",
    "cherry-pick": "yellow",
    "structured merge": "yellow",
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
    "keep": "green",
    "drop": "bold red",
}


class Output:
    """A command's two streams. Lines to a log (not a terminal) are written plainly: such a
    command never loads rich unless it draws a table (rich is a quarter of a small import's
    time)."""

    def __init__(self) -> None:
        self._consoles: dict[bool, Console] = {}

    @property
    def out(self) -> Console:
        return self._console(stderr=False)

    @property
    def err(self) -> Console:
        return self._console(stderr=True)

    def _console(self, *, stderr: bool) -> Console:
        if stderr not in self._consoles:
            self._consoles[stderr] = _console(stderr=stderr)
        return self._consoles[stderr]

    def say(self, *parts: Part) -> None:
        """One line on stdout, from plain and styled parts."""
        if _plain(sys.stdout):
            print("".join(part if isinstance(part, str) else part[0] for part in parts))
            return
        self.out.print(Text.assemble(*parts))

    def report(self, report: Report) -> None:
        _render_report(report, self.out)

    def table(self, title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A table whose cells are statuses (styled as in the report) or text."""
        out = self.out
        table = Table(title=title, header_style="bold")
        for name in header:
            table.add_column(name, overflow="fold")
        for row in rows:
            table.add_row(*map(styled, row))
        out.print(table)

    def error(self, error: RebaserError) -> None:
        self._err_line(("error:", "bold red"), " ", error.what)
        if error.where:
            self._err_line(f"  where: {error.where}")
        if error.next_step:
            self._err_line(f"  next: {error.next_step}")

    def failure(self, message: str) -> None:
        """An unexpected failure (a bug): one line on stderr."""
        self._err_line(("error:", "bold red"), " ", message)

    def notice(self, message: str) -> None:
        self._err_line(message)

    def _err_line(self, *parts: Part) -> None:
        if _plain(sys.stderr):
            text = "".join(part if isinstance(part, str) else part[0] for part in parts)
            print(text, file=sys.stderr)
            return
        self.err.print(Text.assemble(*parts))

    @contextlib.contextmanager
    def progress(self) -> Iterator[Progress]:
        """Report long steps: a live spinner on a terminal, timestamped lines otherwise (CI)."""
        started = time.monotonic()
        if not _plain(sys.stderr) and self.err.is_terminal:
            with self.err.status("starting") as status:
                yield lambda message: status.update(
                    f"{message} [{time.monotonic() - started:.0f} s]"
                )
        else:
            yield lambda message: self._err_line(f"[{time.monotonic() - started:6.1f} s] {message}")


def _plain(stream: Any) -> bool:
    """A log rather than a terminal (rich would write the same characters there)."""
    forced = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    return not stream.isatty() and not any(os.environ.get(name) for name in forced)


def styled(status: str) -> Text:
    return Text(status, style=_STYLES.get(status, ""))


def write_json(path: Path, data: Any) -> None:
    """Every JSON file rebaser writes: indented, one trailing newline, folders made."""
    write_text(path, json.dumps(data, indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    """A Markdown summary or another text file a command was asked for; folders made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")  # Markdown: UTF-8 whatever the locale
    except OSError as exc:  # checked before the work (check_writable): the disk filled since
        raise machine_refused(
            f"cannot write {path} (the work itself is done, above)",
            exc,
            path,
            "free space there (or choose another file), then run the command again",
        ) from None


def check_writable(path: Path, option: str) -> None:
    """Refuse, before any work, a file a command was asked to write that it could not
    (a folder there, a read-only or missing way to it): exit 2. Nothing is created."""
    if str(path) == "-":  # not standard output: that carries the report
        raise RebaserError(
            f"{option} - : rebaser writes it to a file, not to standard output",
            next_step=f"give {option} a file name (e.g. {option} report.json)",
        )
    problem = ""
    try:
        if path.is_dir():
            problem = "is a folder"
        elif path.exists() or path.is_symlink():  # non-blocking: a FIFO nobody reads
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        else:
            ancestor = next(folder for folder in path.parents if folder.exists())
            if not ancestor.is_dir():
                problem = f"cannot be made: {ancestor} is not a folder"
            else:
                with tempfile.TemporaryFile(dir=ancestor):
                    pass
    except OSError as exc:
        problem = f"cannot be written: {exc.strerror or exc}"
    if problem:
        raise RebaserError(
            f"{option} {path} {problem}",
            where=str(path),
            next_step=f"give {option} a file in a folder you can write to",
        )


_RICH_LOADING = threading.Lock()


def _load_rich() -> None:
    """rich's classes, on first use (by way of a console: every drawing starts there)."""
    global Console, Table, Text, _Console
    with _RICH_LOADING:  # load_rich_meanwhile() may be at it
        if "_Console" in globals():
            return
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        class _Console(Console):
            """rich's console, except that a closed pipe is not rich's to end the process
            over (its own exit code, 1, means "tests failed" here): cli says it, with exit 5."""

            def on_broken_pipe(self) -> None:
                self.quiet = True
                raise BrokenPipeError("the output was closed before rebaser ended")


def load_rich_meanwhile() -> None:
    """Load rich in a thread while the command waits on git: 50 ms of a `skip` that came
    between its last git process and its report. A failure is met again, and said, when
    the report loads it."""

    def load() -> None:
        with contextlib.suppress(Exception):
            _load_rich()

    threading.Thread(target=load, name="forkkit-rich", daemon=True).start()


def _console(*, stderr: bool) -> Console:
    """Rich on a terminal; in CI logs, wide lines that never wrap paths.

    No markup: what rebaser prints quotes code (`Optional[torch.Tensor]`), which rich would
    take for style tags; styles are given as Text styles instead.
    """
    _load_rich()
    console = _Console(stderr=stderr, highlight=False, markup=False)
    if not console.is_terminal:
        console = _Console(stderr=stderr, highlight=False, markup=False, width=160, soft_wrap=True)
    return console


def _render_report(report: Report, console: Console) -> None:
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
    console.print(_report_table(report))
    triage = _triage_table(report)
    if triage is not None:
        console.print(triage)
    for suite in report.suites:
        _render_tests(suite, console)
    for title, stop in report.stops():
        console.print(Text.assemble((title, "bold red"), f": {stop.reason}"))
        for line in stop.hunks:
            console.print(Text(line))
    for notice in report.notices:
        console.print(Text(notice, style="bold"))
    style = "green" if report.exit_code == 0 else "bold red"
    console.print(Text.assemble((report.outcome, style), f" (exit {report.exit_code})"))
    for step in report.next_steps:
        console.print(Text(f"next: {step}"))


def triage_groups(report: Report) -> list[tuple[str, list[StepRow]]]:
    """The patch rows of a run with stops or a patch to review, grouped so a maintainer
    starts with what needs a decision: the stopped patches to keep (resolve them), those a
    test fails from (review them), then the proposed drops (confirm them), then what
    applied. Empty for a run with none of these."""
    from rebaser.steps.records import LEFT_OFF  # loaded with the report it groups

    rows = [row for row in report.steps if row.proposal]
    stopped = {row.name for row in rows if row.status in LEFT_OFF or row.status == "failed"}
    if not stopped and not any(row.proposal in ("drop", "review") for row in rows):
        return []
    groups: dict[str, list[StepRow]] = {title: [] for title in _GROUPS}
    for row in rows:
        groups[_group(row, row.name in stopped)].append(row)
    return [(title, members) for title, members in groups.items() if members]


_GROUPS = (
    "resolve: stopped, proposed to keep",
    "review: a test fails from it on",
    "confirm: proposed to drop",
    "applied, proposed to keep",
)


def _group(row: StepRow, stopped: bool) -> str:
    if row.proposal == "review":
        return _GROUPS[1]
    if row.proposal == "drop":
        return _GROUPS[2]
    return _GROUPS[0] if stopped else _GROUPS[3]


def collided(row: StepRow) -> str:
    """`<sha> <subject>: <what>` of a stopped patch's colliding upstream commit."""
    found = row.collides_with
    return f"{found.sha[:12]} {found.subject}: {found.what}" if found else ""


def _triage_table(report: Report) -> Optional[Table]:
    groups = triage_groups(report)
    if not groups:
        return None
    table = Table(title="triage", show_header=True, header_style="bold", expand=False)
    for name in ("patch", "result", "proposal", "reason", "collides with"):
        table.add_column(name, overflow="fold")
    for title, rows in groups:
        table.add_section()
        table.add_row(Text(title, style="bold"), "", "", "", "")
        for row in rows:
            table.add_row(
                row.name,
                styled(row.status),
                styled(row.proposal or ""),
                Text(row.reason),
                Text(collided(row)),
            )
    return table


_SHOWN = 10  # tests of one kind shown per suite; the JSON report has them all


def _render_tests(suite: "SuiteResult", console: Console) -> None:
    """Every test of the suite that did not pass, by verdict (regressions first), each with
    its reason; the run's own failure when it gave no tests."""
    if not suite.tests:
        for failure in suite.failures[:_SHOWN]:
            console.print(Text.assemble("  ", (suite.name, "red"), " ", failure))
        return
    verdicts = sorted({note.verdict for note in suite.tests}, key=lambda v: v != "regression")
    for verdict in verdicts:
        notes = [note for note in suite.tests if note.verdict == verdict]
        style = "bold red" if verdict in ("regression", "") else "yellow"
        title = f"{suite.name} - {verdict or 'did not pass'} ({len(notes)})"
        console.print(Text.assemble("  ", (title, style)))
        for note in notes[:_SHOWN]:
            blame = f" [fails from {note.blame} on]" if note.blame else ""
            reason = f": {note.reason}" if note.reason else ""
            console.print(Text(f"    {note.outcome} {note.test}{blame}{reason}"))
        if len(notes) > _SHOWN:
            console.print(Text(f"    ... and {len(notes) - _SHOWN} more (all in the JSON report)"))


def _report_table(report: Report) -> Table:
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("step")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for step in report.steps:
        files = ", ".join(Path(f).name for f in step.files) if len(step.files) <= 3 else ""
        hunks = f" ({step.hunks} hunk{'s' if step.hunks > 1 else ''})" if step.hunks else ""
        detail = "; ".join(filter(None, [f"{files}{hunks}" if files else "", step.detail]))
        if step.proposal == "review":  # keep and drop: in the triage's table, with reasons
            detail += f"; proposal: review ({step.reason})"
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
    return table
