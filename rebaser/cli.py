"""The `rebaser` command line. Exit codes are rebaser.errors.ExitCode (see the README)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, Optional, Sequence

from rich.console import Console
from rich.text import Text

from rebaser import __version__, crash
from rebaser.commands import bisect
from rebaser.sequencer import machine as engine
from rebaser.commands import import_series as importer
from rebaser.commands import verify as matrix
from rebaser.sequencer import recovery
from rebaser.config import default_series, require_writable_cache
from rebaser.errors import ExitCode, RebaserError
from rebaser.commands.rangediff import to_markdown
from rebaser.commands.refresh import refresh
from rebaser.sequencer.report import render, write_json
from rebaser.steps.testrun import TEST_MODES

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rebaser",
        description="Carry the dsa-forkkit patch series onto upstream Megatron-LM: apply, "
        "verify and test it.",
        epilog="exit codes: 0 applied, verified, tests green; 1 tests failed; 2 bad usage or "
        "refused; 3 a patch did not apply (continue/skip/abort) or was left off the branch; 4 verification failed; "
        "5 environment (git, PyPI, test interpreter); 6 rebaser failed unexpectedly (traceback "
        "in a log it names); 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply = commands.add_parser("apply", help="apply the overlay and the series onto a base")
    _series_option(apply)
    _upstream_options(apply, "apply")
    apply.add_argument(
        "--base",
        help="the base revision: a sha, tag or branch of --repo, "
        "or a release version with --upstream",
    )
    apply.add_argument("--worktree", type=Path, help="where to check the new branch out")
    _test_option(apply, "cpu", "which tests to run in the patched tree (default: cpu)")
    apply.add_argument(
        "--force",
        action="store_true",
        help="replace the branch of an earlier apply (kept under refs/forkkit/backups/)",
    )
    _json_option(apply, "also write the report as JSON")
    apply.add_argument(
        "--keep-going",
        action="store_true",
        help="leave a patch that does not apply off the branch and go on; one report of every "
        "patch at the end (exit 3 when any is missing)",
    )

    verify = commands.add_parser(
        "verify", help="apply the series to several bases; one summary table"
    )
    verify.add_argument(
        "--bases",
        nargs="+",
        required=True,
        metavar="BASE",
        help="pypi:megatron-core==X, or tags/shas/branches of --repo",
    )
    _series_option(verify)
    _repo_option(verify, _REPO_HELP["verify"])
    _test_option(verify, "cpu", "which tests to run on each base (default: cpu)")
    verify.add_argument("--keep", action="store_true", help="keep the throwaway branches")
    _json_option(verify, "write the matrix as JSON")
    verify.add_argument("--markdown", type=Path, metavar="FILE", help="write a Markdown summary")

    bisect_cmd = commands.add_parser(
        "bisect", help="find the first upstream commit that breaks the series"
    )
    bisect_cmd.add_argument(
        "--good", required=True, help="a revision (or release) where the series passes"
    )
    bisect_cmd.add_argument(
        "--bad", required=True, help="a later revision (or release) where it fails"
    )
    _series_option(bisect_cmd)
    _upstream_options(bisect_cmd, "bisect")
    _test_option(
        bisect_cmd, "none", "also count failing tests as breaking (default: apply + verify only)"
    )
    _json_option(bisect_cmd, "write the result as JSON")

    resume = commands.add_parser("continue", help="go on after fixing a stopped apply")
    _repo_option(resume, _REPO_HELP["in progress"])
    _json_option(resume, "write the report as JSON")

    skip = commands.add_parser(
        "skip", help="leave the stopped patch off the branch and go on (the report says so)"
    )
    _repo_option(skip, _REPO_HELP["in progress"])
    _json_option(skip, "write the report as JSON")

    abort = commands.add_parser("abort", help="drop a stopped apply (its work is kept in a ref)")
    _repo_option(abort, _REPO_HELP["in progress"])

    refresh = commands.add_parser(
        "refresh", help="re-export the series and overlay from a resolved branch (stable output)"
    )
    _series_option(refresh, "the series file to update")
    _repo_option(refresh, _REPO_HELP["refresh"])
    refresh.add_argument(
        "--branch", help="the branch made by `rebaser apply` (default: the checked-out one)"
    )
    refresh.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 4 if the series differs from the branch",
    )
    refresh.add_argument(
        "--range-diff-markdown",
        type=Path,
        metavar="FILE",
        help="write what changed in the series (git range-diff) as Markdown, for a PR description",
    )

    import_cmd = commands.add_parser(
        "import", help="turn a fork's branch (BASE..TIP) into a series: one patch per commit"
    )
    import_cmd.add_argument("--repo", type=Path, required=True, help=_REPO_HELP["import"])
    import_cmd.add_argument(
        "--range",
        required=True,
        metavar="BASE..TIP",
        help="the commits to import: on top of BASE (recorded as @base), up to TIP",
    )
    import_cmd.add_argument(
        "--series-dir", type=Path, required=True, help="a new folder for the patches and series"
    )
    import_cmd.add_argument("--name", help="the series' @name (default: the folder's name)")

    status = commands.add_parser("status", help="show where an interrupted apply stands")
    _repo_option(status, _REPO_HELP["in progress"])
    _json_option(status, "write the status as JSON")
    return parser


# What --repo names, one meaning per command (always a git repository).
_REPO_HELP = {
    "apply": "a git clone of upstream to apply in (branch and worktree are made there); "
    "without it, the PyPI release of --upstream or of the series' @base",
    "verify": "a git clone of upstream, whose revisions --bases names",
    "bisect": "a git clone of upstream, whose history is bisected (or use --upstream)",
    "in progress": "the repository the apply runs in: the --repo it was given, or for a PyPI "
    "base the cache repository (default: the current folder's, else the only apply in progress)",
    "refresh": "the repository (or a worktree of it) holding --branch "
    "(default: the current folder)",
    "import": "the fork's git clone, holding both ends of --range",
}


def _series_option(parser: argparse.ArgumentParser, what: str = "the series file") -> None:
    parser.add_argument(
        "--series",
        type=Path,
        default=None,
        help=f"{what} (default: $DSA_FORKKIT_SERIES, else patches/series of this checkout)",
    )


def _repo_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--repo", type=Path, help=help_text)


# --upstream of the commands that take upstream from a clone or from PyPI: (metavar, help).
_UPSTREAM_HELP = {
    "apply": (
        "pypi:megatron-core==X",
        "materialise upstream from a PyPI release (default: the series' @base)",
    ),
    "bisect": (
        "pypi:megatron-core",
        "bisect over PyPI releases (one commit each) instead of a clone",
    ),
}


def _upstream_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Where upstream comes from: a git clone (--repo) or PyPI releases (--upstream)."""
    _repo_option(parser, _REPO_HELP[command])
    metavar, help_text = _UPSTREAM_HELP[command]
    parser.add_argument("--upstream", metavar=metavar, help=help_text)


def _test_option(parser: argparse.ArgumentParser, default: str, help_text: str) -> None:
    parser.add_argument("--test", choices=TEST_MODES, default=default, help=help_text)


def _json_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--json", type=Path, metavar="FILE", help=help_text)


def _series_file(args: argparse.Namespace) -> Path:
    return (args.series or default_series()).resolve()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    out = _console(stderr=False)
    err = _console(stderr=True)
    try:
        return _dispatch(args, out, err)
    except RebaserError as error:
        err.print(Text.assemble(("error:", "bold red"), " ", error.what))
        if error.where:
            err.print(f"  where: {error.where}", highlight=False)
        if error.next_step:
            err.print(f"  next: {error.next_step}", highlight=False)
        return int(error.code)
    except KeyboardInterrupt as interrupted:
        err.print(f"interrupted {interrupted}".strip(), highlight=False)
        return int(ExitCode.INTERRUPTED)
    except Exception as error:  # a bug: one line here, the traceback in a log file
        log = crash.write_log(error, list(argv if argv is not None else sys.argv[1:]))
        kept = f"the traceback is in {log}" if log else "no log could be written; traceback:"
        err.print(
            Text.assemble(
                ("error:", "bold red"),
                f" rebaser failed unexpectedly: {crash.summary(error)}; {kept}",
            )
        )
        if log is None:
            traceback.print_exception(error, file=sys.stderr)
        return int(ExitCode.INTERNAL)


def _console(*, stderr: bool) -> Console:
    """Rich on a terminal; in CI logs, wide lines that never wrap paths.

    No markup: what rebaser prints quotes code (`Optional[torch.Tensor]`), which rich would
    take for style tags; styles are given as Text styles instead.
    """
    console = Console(stderr=stderr, highlight=False, markup=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, markup=False, width=160, soft_wrap=True)
    return console


# Commands that write the cache (releases, the registry of applies in progress).
_CACHE_WRITERS = frozenset({"apply", "continue", "abort", "verify", "bisect"})


def _dispatch(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.command in _CACHE_WRITERS:
        require_writable_cache()
    if args.command == "apply":
        options = engine.ApplyOptions(
            series_file=_series_file(args),
            repo=args.repo,
            upstream=args.upstream,
            base=args.base,
            worktree=args.worktree,
            test=args.test,
            force=args.force,
            json_report=args.json.resolve() if args.json else None,
            keep_going=args.keep_going,
        )
        with progress(err) as step:
            report = engine.apply(options, step)
        render(report, out)
        return report.exit_code
    if args.command in ("continue", "skip"):
        go_on = engine.resume if args.command == "continue" else engine.skip
        with progress(err) as step:
            report = go_on(args.repo, step)
        if args.json:
            report.write_json(args.json)
        render(report, out)
        return report.exit_code
    if args.command == "abort":
        out.print(engine.abort(args.repo))
        return int(ExitCode.OK)
    if args.command == "status":
        return _status(args, out)
    if args.command == "refresh":
        return _refresh(args, out)
    if args.command == "import":
        return _import(args, out)
    if args.command == "bisect":
        return _bisect(args, out, err)
    if args.command == "verify":
        with progress(err) as step:
            results = matrix.verify_bases(
                _series_file(args),
                args.bases,
                args.repo,
                args.test,
                step,
                keep=args.keep,
            )
        matrix.write_outputs(results, args.json, args.markdown)
        matrix.render_matrix(results, out)
        return matrix.matrix_exit_code(results)
    raise AssertionError(args.command)


def _bisect(args: argparse.Namespace, out: Console, err: Console) -> int:
    with progress(err) as step:
        found = bisect.bisect(
            _series_file(args),
            repo=args.repo,
            upstream=args.upstream,
            good=args.good,
            bad=args.bad,
            test=args.test,
            progress=step,
        )
    out.print(Text.assemble("first bad commit: ", (found.culprit, "bold"), " ", found.subject))
    out.print(f"there: {found.report.outcome}")
    if found.report.stop:
        out.print(f"  {found.report.stop.patch}: {found.report.stop.reason}")
        for line in found.report.stop.hunks[:4]:
            out.print("  " + line.replace("\n", "\n  "))
    for check in found.report.checks:
        if not check.ok:
            out.print(f"  verify {check.name}: {'; '.join(check.problems[:3])}")
    for suite in found.report.suites:
        for failure in suite.failures[:5]:
            out.print(f"  {suite.name}: {failure}")
    if args.json:
        write_json(
            args.json,
            {"culprit": found.culprit, "subject": found.subject, "report": found.report.to_json()},
        )
    return int(ExitCode.OK)


def _refresh(args: argparse.Namespace, out: Console) -> int:
    refreshed = refresh(_series_file(args), args.repo, args.branch, write=not args.check)
    for change in refreshed.files:
        out.print(
            f"  {change.status:9} {change.path}",
            style=None if change.status == "unchanged" else "bold",
        )
    changed = [c for c in refreshed.files if c.status.split()[0] not in ("unchanged", "kept")]
    verb = "would change" if args.check else "changed"
    out.print(f"refresh: {len(changed)} of {len(refreshed.files)} files {verb}")
    diff = refreshed.range_diff
    if diff.note:
        out.print(diff.note)
    elif diff.changed:
        out.print("range-diff (old series → branch):")
        out.print(diff.text.rstrip("\n"), markup=False)
    if args.range_diff_markdown:
        args.range_diff_markdown.write_text(to_markdown(diff, "Patch series changes"))
    return int(ExitCode.VERIFY_FAILED if args.check and changed else ExitCode.OK)


def _import(args: argparse.Namespace, out: Console) -> int:
    imported = importer.import_range(args.repo, args.range, args.series_dir.resolve(), args.name)
    for empty in imported.skipped_empty:
        out.print(f"  skipped (changes nothing): {empty}")
    out.print(
        f"imported {len(imported.patches)} patches into {imported.series_file} "
        f"(@base git:{imported.base})"
    )
    return int(ExitCode.OK)


def _status(args: argparse.Namespace, out: Console) -> int:
    state = engine.status(args.repo)
    if args.json:
        write_json(args.json, asdict(state) if state else {"in_progress": False})
    if state is None:
        out.print("no apply in progress")
        return int(ExitCode.OK)
    out.print(f"apply in progress: branch {state.branch} onto {state.base_description}")
    out.print(f"  worktree: {state.worktree}")
    for row in state.steps:
        out.print(f"  done: {row['name']} ({row['status']})")
    if state.stopped:
        out.print(f"  stopped at {state.stopped.patch}: {state.stopped.reason}")
        for line in state.stopped.hunks:
            out.print("    " + line.replace("\n", "\n    "))
    for line in recovery.describe(state):
        out.print(f"  {line}")
    return int(ExitCode.OK)


@contextlib.contextmanager
def progress(console: Console) -> Iterator:
    """Report long steps: a live spinner on a terminal, timestamped lines otherwise (CI)."""
    started = time.monotonic()
    if console.is_terminal:
        with console.status("starting") as status:
            yield lambda message: status.update(f"{message} [{time.monotonic() - started:.0f} s]")
    else:
        yield lambda message: console.print(f"[{time.monotonic() - started:6.1f} s] {message}")
