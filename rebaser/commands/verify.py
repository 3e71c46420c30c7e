"""`rebaser verify --bases ...`: the series against several upstream bases at once.

Each base gets a throwaway apply (branch `forkkit-verify/...`, state kept in memory only, so
an apply the user has in progress is never disturbed); the results form one table per base
and patch, printed for a terminal and written as JSON and Markdown for CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from rebaser.commands.output import Output, collided, triage_groups, write_json, write_text
from rebaser.config import series_file
from rebaser.errors import ExitCode, RebaserError
from rebaser.sequencer import machine
from rebaser.sequencer.report import Report
from rebaser.series.patches import load_series
from rebaser.steps.testrun import SuiteResult, check_interpreter
from rebaser.upstream import PypiSpec, Target, resolve_pypi, resolve_target

# The exit code of a matrix is its most serious row's.
_SEVERITY = (
    ExitCode.NOT_APPLIED,
    ExitCode.VERIFY_FAILED,
    ExitCode.TESTS_FAILED,
    ExitCode.ENVIRONMENT,
    ExitCode.USAGE,
)


@dataclass
class BaseResult:
    base: str
    exit_code: int
    report: Optional[Report] = None
    error: Optional[str] = None


def resolve_base(base: str, repo: Optional[Path]) -> Target:
    """`pypi:megatron-core==X`, or a revision of --repo (verify_bases has checked there is
    one)."""
    spec = PypiSpec.parse(base)
    if spec is not None:
        return resolve_pypi(spec)
    return resolve_target(repo=repo, upstream=None, base=base, default_upstream=None)


def run(args: argparse.Namespace) -> ExitCode:
    out = Output()
    if args.merge:  # one CI job per base: their reports become one matrix
        results = [result for path in args.merge for result in read_matrix(path)]
        _refuse_mixed(results)
    else:
        with out.progress() as progress:
            results = verify_bases(
                series_file(args.series), args.bases, args.repo, args.test, progress, keep=args.keep
            )
    if args.json:
        write_json(args.json, matrix_json(results))
    if args.markdown:
        write_text(args.markdown, matrix_markdown(results))
    steps = _columns(results)
    counted = len(steps) > _TERMINAL_COLUMNS  # a column a patch would leave no room
    names = [name.split("-")[0] if name[:4].isdigit() else name for name in steps]
    header = [
        "base",
        *(["steps"] if counted else names),
        "verify",
        "tests (pass/fail/error/skip)",
        "outcome",
    ]
    rows = []
    for result in results:
        cells, verify, tests, outcome = _row(result, steps)
        shown = [_counts(cells)] if counted else cells
        rows.append([result.base, *shown, verify, tests, outcome])
    out.table("series against upstream bases", header, rows)
    for result in results:
        for title, stop in result.report.stops() if result.report else []:
            out.say((result.base, "bold"), f" {title}: {stop.reason}")
        for step in result.report.next_steps if result.report else []:
            out.say((result.base, "bold"), f" next: {step}")
    return matrix_exit_code(results)


_TERMINAL_COLUMNS = 8  # patch columns a terminal table shows; past it, statuses counted


def _counts(cells: Sequence[str]) -> str:
    """ "10 clean, 2 dropped": the steps' statuses counted, most first."""
    counts = Counter(cell for cell in cells if cell != "-")
    return ", ".join(f"{count} {status}" for status, count in counts.most_common()) or "-"


def _refuse_mixed(results: Sequence[BaseResult]) -> None:
    """One matrix is one series over bases, each once."""
    series = sorted({result.report.series for result in results if result.report})
    if len(series) > 1:
        raise RebaserError(
            f"reports of different series: {', '.join(series)}",
            next_step="merge the reports of one series",
        )
    # A base's CPU and GPU jobs are two rows (their suites differ); the same run twice is not.
    runs = [
        (result.base, tuple(s.name for s in result.report.suites) if result.report else ())
        for result in results
    ]
    if twice := sorted({base for base, suites in runs if runs.count((base, suites)) > 1}):
        raise RebaserError(
            f"base {', '.join(twice)} is in more than one report, with the same tests",
            next_step="merge one report per base and test mode",
        )


def verify_bases(
    series_file: Path,
    bases: Sequence[str],
    repo: Optional[Path],
    test: str,
    progress: machine.Progress,
    *,
    keep: bool = False,
) -> list[BaseResult]:
    check_interpreter(sys.executable, test, load_series(series_file).test_requires)
    if repo is None and (revisions := [base for base in bases if PypiSpec.parse(base) is None]):
        raise RebaserError(  # said before the other bases take minutes each
            f"{', '.join(map(repr, revisions))}: not pypi:PACKAGE==VERSION, so a revision of "
            "a clone, and no --repo names one",
            next_step="pass --repo PATH, or write each base as pypi:megatron-core==X",
        )
    results = []
    for base in bases:
        progress(f"base {base}")
        try:
            report = machine.throwaway_apply(
                resolve_base(base, repo),
                series_file,
                test,
                lambda message, base=base: progress(f"{base}: {message}"),
                keep=keep,
                keep_going=True,  # every patch's outcome on every base, in one pass
            )
            results.append(BaseResult(base, report.exit_code, report))
        except RebaserError as error:
            results.append(BaseResult(base, int(error.code), error=str(error).replace("\n", "; ")))
    return results


def matrix_exit_code(results: Sequence[BaseResult]) -> ExitCode:
    codes = {result.exit_code for result in results}
    return next((code for code in _SEVERITY if code in codes), ExitCode.OK)


def _columns(results: Sequence[BaseResult]) -> list[str]:
    names: list[str] = []
    for result in results:
        for step in result.report.steps if result.report else []:
            if step.name not in names:
                names.append(step.name)
    return names


def _row(result: BaseResult, steps: list[str]) -> tuple[list[str], str, str, str]:
    if result.report is None:
        return ["-"] * len(steps), "-", "-", f"error: {result.error}"
    by_name = {step.name: step.status for step in result.report.steps}
    verify = (
        "-"
        if not result.report.checks
        else ("ok" if all(c.ok for c in result.report.checks) else "failed")
    )
    tests = (
        "; ".join(
            f"{s.name}: {s.status} ({s.passed}/{s.failed}/{s.errors}/{s.skipped})"
            for s in result.report.suites
        )
        or "-"
    )
    return [by_name.get(name, "-") for name in steps], verify, tests, result.report.outcome


def matrix_markdown(results: Sequence[BaseResult]) -> str:
    steps = _columns(results)
    header = ["base", *steps, "verify", "tests (pass/fail/error/skip)", "outcome"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        cells, verify, tests, outcome = _row(result, steps)
        lines.append("| " + " | ".join([f"`{result.base}`", *cells, verify, tests, outcome]) + " |")
    for result in results:
        lines += _triage_markdown(result)
        for title, stop in result.report.stops("`") if result.report else []:
            lines += ["", f"**{result.base}** {title}: {stop.reason}"]
            lines += ["", "```", *stop.hunks[:5], "```"] if stop.hunks else []
        for suite in result.report.suites if result.report else []:
            lines += _tests_markdown(result.base, suite)
    verdict = (
        "all bases pass"
        if matrix_exit_code(results) == ExitCode.OK
        else "the series needs attention"
    )
    return "\n".join([f"### dsa-forkkit: {verdict}", "", *lines]) + "\n"


def _triage_markdown(result: BaseResult) -> list[str]:
    """A base's keep/drop proposals, grouped as the terminal shows them."""
    groups = triage_groups(result.report) if result.report else []
    if not groups:
        return []
    lines = ["", f"#### triage on `{result.base}`"]
    for title, rows in groups:
        lines += ["", f"**{title}**", ""]
        for row in rows:
            where = f" — collides with {collided(row)}" if row.collides_with else ""
            lines.append(f"- `{row.name}` ({row.status}): **{row.proposal}**, {row.reason}{where}")
    return lines


def read_matrix(path: Path) -> list[BaseResult]:
    """The rows of a matrix `matrix_json` wrote."""
    try:
        return [
            BaseResult(
                row["base"],
                row["exit_code"],
                Report.from_json(row["report"]) if row["report"] else None,
                row["error"],
            )
            for row in json.loads(path.read_bytes())["bases"]
        ]
    except OSError as exc:
        raise RebaserError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, TypeError, KeyError) as exc:  # not JSON, or another shape
        raise RebaserError(
            f"{path} is not the JSON report of `rebaser verify` ({type(exc).__name__}: {exc})",
            next_step="pass the files `rebaser verify --json` wrote, by the same rebaser version",
        ) from None


def _tests_markdown(base: str, suite: SuiteResult) -> list[str]:
    """A suite's tests that did not pass, each with its outcome, verdict and reason (in a
    folded block: on CPU, dozens of upstream tests need a GPU)."""
    if not suite.tests:
        return []
    verdicts = Counter(note.verdict or "did not pass" for note in suite.tests)
    summary = ", ".join(f"{count} {verdict}" for verdict, count in verdicts.items())
    lines = ["", f"<details><summary><b>{base}</b> {suite.name}: {summary}</summary>", ""]
    for note in suite.tests:
        blame = f" (fails from `{note.blame}` on)" if note.blame else ""
        lines.append(f"- {note.outcome} `{note.test}`{blame}: {note.reason} — {note.verdict}")
    return [*lines, "", "</details>"]


def matrix_json(results: Sequence[BaseResult]) -> dict:
    return {
        "exit_code": int(matrix_exit_code(results)),
        "bases": [
            {
                "base": r.base,
                "exit_code": r.exit_code,
                "error": r.error,
                "report": r.report.to_json() if r.report else None,
            }
            for r in results
        ],
    }
