"""The `rebaser` command line. Exit codes are rebaser.errors.ExitCode (see the README)."""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

from rebaser import __version__, crash
from rebaser.commands.output import Output, check_writable, load_rich_meanwhile
from rebaser.config import TEST_MODES, require_writable_cache
from rebaser.errors import MACHINE_ERRNOS, ExitCode, RebaserError, machine_failure


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
    verbs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply_cmd = verbs.add_parser("apply", help="apply the overlay and the series onto a base")
    _series_option(apply_cmd)
    _upstream_options(apply_cmd, "apply")
    apply_cmd.add_argument(
        "--base",
        help="the base revision: a sha, tag or branch of --repo, "
        "or a release version with --upstream",
    )
    apply_cmd.add_argument("--worktree", type=Path, help="where to check the new branch out")
    _test_option(apply_cmd, "cpu", "which tests to run in the patched tree (default: cpu)")
    apply_cmd.add_argument(
        "--force",
        action="store_true",
        help="replace the branch of an earlier apply (kept under refs/forkkit/backups/)",
    )
    _json_option(apply_cmd, "also write the report as JSON")
    apply_cmd.add_argument(
        "--keep-going",
        action="store_true",
        help="leave a patch that does not apply off the branch and go on; one report of every "
        "patch at the end (exit 3 when any is missing)",
    )
    apply_cmd.add_argument(
        "--no-fast-lane",
        action="store_true",
        help="carry every patch on its own instead of runs of them in one lane (the same "
        "branch and report, slower; for comparing the two)",
    )

    verify_cmd = verbs.add_parser(
        "verify", help="apply the series to several bases; one summary table"
    )
    what = verify_cmd.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--bases",
        nargs="+",
        metavar="BASE",
        help="pypi:megatron-core==X, or tags/shas/branches of --repo",
    )
    what.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="REPORT",
        help="apply nothing: merge the --json reports of earlier verify runs (one CI job per "
        "base) into one table, JSON and Markdown",
    )
    _series_option(verify_cmd)
    _repo_option(verify_cmd, _REPO_HELP["verify"])
    _test_option(verify_cmd, "cpu", "which tests to run on each base (default: cpu)")
    verify_cmd.add_argument("--keep", action="store_true", help="keep the throwaway branches")
    _json_option(verify_cmd, "write the matrix as JSON")
    verify_cmd.add_argument(
        "--markdown", type=Path, metavar="FILE", help="write a Markdown summary"
    )

    bisect_cmd = verbs.add_parser(
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

    resume_cmd = verbs.add_parser("continue", help="go on after fixing a stopped apply")
    _repo_option(resume_cmd, _REPO_HELP["in progress"])
    _json_option(resume_cmd, "write the report as JSON")

    skip_cmd = verbs.add_parser(
        "skip", help="leave the stopped patch off the branch and go on (the report says so)"
    )
    _repo_option(skip_cmd, _REPO_HELP["in progress"])
    _json_option(skip_cmd, "write the report as JSON")

    retry_cmd = verbs.add_parser(
        "retry",
        help="after an apply left patches off its branch: put one back in the worktree with its "
        "conflict; fix it, then `rebaser continue` (no second apply)",
    )
    retry_cmd.add_argument("patch", help="the patch left off: its file name, or its number (0003)")
    _series_option(retry_cmd)
    _repo_option(retry_cmd, _REPO_HELP["retry"])
    retry_cmd.add_argument(
        "--branch",
        help="the branch the apply made (default: the one checked out here, else the only one "
        "with patches left off)",
    )
    _test_option(retry_cmd, "none", "tests to run once no patch is missing (default: none)")
    _json_option(retry_cmd, "write the report as JSON")

    abort_cmd = verbs.add_parser("abort", help="drop a stopped apply (its work is kept in a ref)")
    _repo_option(abort_cmd, _REPO_HELP["in progress"])

    refresh_cmd = verbs.add_parser(
        "refresh", help="re-export the series and overlay from a resolved branch (stable output)"
    )
    _series_option(refresh_cmd, "the series file to update")
    _repo_option(refresh_cmd, _REPO_HELP["refresh"])
    refresh_cmd.add_argument(
        "--branch", help="the branch made by `rebaser apply` (default: the checked-out one)"
    )
    refresh_cmd.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 4 if the series differs from the branch",
    )
    refresh_cmd.add_argument(
        "--range-diff-markdown",
        type=Path,
        metavar="FILE",
        help="write what changed in the series (git range-diff) as Markdown, for a PR "
        "description (with --check too: the one file it writes)",
    )

    import_cmd = verbs.add_parser(
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

    status_cmd = verbs.add_parser("status", help="show where an interrupted apply stands")
    _repo_option(status_cmd, _REPO_HELP["in progress"])
    _json_option(status_cmd, "write the status as JSON")
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
    "retry": "the apply's worktree or its repository (default: the current folder)",
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


# Each command's module and function (commands/<verb>.py): `run(args) -> ExitCode`. Only
# the command given is imported: a `skip` at a stop never loads what `verify` needs.
_COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("apply", "run"),
    "continue": ("apply", "resume"),
    "skip": ("apply", "skip"),
    "retry": ("apply", "retry"),
    "abort": ("apply", "abort"),
    "status": ("apply", "status"),
    "verify": ("verify", "run"),
    "bisect": ("bisect", "run"),
    "refresh": ("refresh", "run"),
    "import": ("import_series", "run"),
}
# Commands that wait on git before they draw their report: rich loads meanwhile.
_GIT_BEFORE_A_REPORT = frozenset({"apply", "continue", "skip", "retry", "abort"})
# Commands that write the cache (releases, the registry of applies in progress).
_CACHE_WRITERS = frozenset({"apply", "continue", "retry", "abort", "verify", "bisect"})


# The files a command may be asked to write its results to (option attribute, spelling):
# checked before any work, so that hours of tests are not lost to a typo in a path.
_OUTPUTS = {
    "json": "--json",
    "markdown": "--markdown",
    "range_diff_markdown": "--range-diff-markdown",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    _lenient_output()
    try:
        args = build_parser().parse_args(argv)
        for name, option in _OUTPUTS.items():
            if (target := getattr(args, name, None)) is not None:
                check_writable(target, option)
        if args.command in _CACHE_WRITERS:
            require_writable_cache()
        module, function = _COMMANDS[args.command]
        command = getattr(importlib.import_module(f"rebaser.commands.{module}"), function)
        if args.command in _GIT_BEFORE_A_REPORT:
            load_rich_meanwhile()
        code = int(command(args))
        sys.stdout.flush()  # a closed pipe shows here, not in Python's own flush at exit
        return code
    except RebaserError as error:
        Output().error(error)
        return int(error.code)
    except KeyboardInterrupt as interrupted:
        Output().notice(f"interrupted {interrupted}".strip())
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:  # `rebaser status | head -1`: the reader went away
        return _reader_gone()
    except OSError as error:
        if isinstance(error, FileNotFoundError) and _current_folder_gone():
            gone = RebaserError(
                "the current folder no longer exists (a worktree `rebaser abort` or `apply "
                "--force` removed?)",
                next_step="cd into the repository (or pass --repo), then run the command again",
            )
            Output().error(gone)
            return int(gone.code)
        if error.errno not in MACHINE_ERRNOS:  # a file rebaser did not expect: a bug
            return _crashed(error, argv)
        Output().error(machine_failure(error))
        return int(ExitCode.ENVIRONMENT)
    except Exception as error:  # a bug: one line here, the traceback in a log file
        return _crashed(error, argv)


def _current_folder_gone() -> bool:
    """A shell can stay in a folder that `abort` or `apply --force` removed (a folder of
    the worktree): a command that needs it then finds nothing there."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def _lenient_output() -> None:
    """A file name that is not UTF-8 (git keeps names as bytes) is held as Python's escapes
    for its bytes: printed as `\\udce9`, never a crash after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _reader_gone() -> int:
    """stdout's reader closed it: nothing more can be said there; stderr says why, and
    Python's own flush at exit must not fail on it again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print("rebaser: its output was closed before it ended (broken pipe)", file=sys.stderr)
    return int(ExitCode.ENVIRONMENT)


def _crashed(error: BaseException, argv: Optional[Sequence[str]]) -> int:
    log = crash.write_log(error, list(argv if argv is not None else sys.argv[1:]))
    kept = f"the traceback is in {log}" if log else "no log could be written; traceback:"
    Output().failure(f"rebaser failed unexpectedly: {crash.summary(error)}; {kept}")
    if log is None:
        traceback.print_exception(error, file=sys.stderr)
    return int(ExitCode.INTERNAL)
