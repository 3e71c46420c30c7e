"""`rebaser apply`, and the verbs of an apply in progress: `continue`, `skip`, `abort`,
`status`. Each runs the sequencer, prints its report and writes its JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from rebaser.commands.output import Output, write_json, write_text
from rebaser.config import series_file
from rebaser.errors import ExitCode
from rebaser.sequencer import machine
from rebaser.sequencer.report import Report
from rebaser.sequencer.state import InProgressElsewhere


def run(args: argparse.Namespace) -> ExitCode:
    options = machine.ApplyOptions(
        series_file=series_file(args.series),
        repo=args.repo,
        upstream=args.upstream,
        base=args.base,
        worktree=args.worktree,
        test=args.test,
        force=args.force,
        json_report=args.json.resolve() if args.json else None,
        keep_going=args.keep_going,
        fast_lane=not args.no_fast_lane,
    )
    out = Output()
    with out.progress() as progress:
        report = machine.apply(options, progress)
    return _shown(report, out, args.json)


def resume(args: argparse.Namespace) -> ExitCode:
    """`rebaser continue`."""
    out = Output()
    with out.progress() as progress:
        report = machine.resume(args.repo, progress)
    return _shown(report, out, args.json)


def retry(args: argparse.Namespace) -> ExitCode:
    """`rebaser retry <patch>`."""
    out = Output()
    with out.progress() as progress:
        report = machine.retry(
            args.repo,
            args.patch,
            series_file(args.series),
            progress,
            branch=args.branch,
            test=args.test,
            json_report=args.json.resolve() if args.json else None,
        )
    return _shown(report, out, None)


def skip(args: argparse.Namespace) -> ExitCode:
    out = Output()
    with out.progress() as progress:
        report = machine.skip(args.repo, progress)
    return _shown(report, out, args.json)


def abort(args: argparse.Namespace) -> ExitCode:
    Output().say(machine.abort(args.repo))
    return ExitCode.OK


def status(args: argparse.Namespace) -> ExitCode:
    out = Output()
    try:
        view = machine.status(args.repo)
    except InProgressElsewhere as elsewhere:  # none here; one in another repository
        if args.json:
            write_json(args.json, {"in_progress": False})
        out.say(f"{elsewhere.what}: {elsewhere.next_step}")
        return ExitCode.OK
    if args.json:
        write_json(args.json, view.to_json() if view else {"in_progress": False})
    if view is None:
        out.say("no apply in progress")
        return ExitCode.OK
    out.say(f"apply in progress: branch {view.branch} onto {view.upstream}")
    out.say(f"  worktree: {view.worktree}")
    for row in view.steps:
        out.say(f"  done: {row.name} ({row.status})")
    if view.stopped:
        out.say(f"  stopped at {view.stopped.patch}: {view.stopped.reason}")
        for line in view.stopped.hunks:
            out.say("    " + line.replace("\n", "\n    "))
    for line in view.notes:
        out.say(f"  {line}")
    return ExitCode.OK


def _shown(report: Report, out: Output, asked: Optional[Path]) -> ExitCode:
    """Write the report's JSON where the apply was asked to (`apply --json`, kept for its
    `continue`) and where this command is asked to, then print it."""
    targets = {Path(target).resolve() for target in (report.json_target, asked) if target}
    for target in targets:
        write_text(target, report.json_text())
    out.report(report)
    return ExitCode(report.exit_code)
