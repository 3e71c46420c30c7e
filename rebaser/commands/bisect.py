"""`rebaser bisect`: the first upstream commit at which the series stops applying (or its
tests start failing).

`git bisect run` walks the history in a throwaway detached worktree, so the user's checkout
and branches are never touched; at each step a probe applies the series onto the commit
under test in another throwaway worktree (like `rebaser verify`). For PyPI releases the
history is a chain of one commit per release, built deterministically in the cache.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from packaging.version import InvalidVersion, Version

from rebaser.commands.output import Output, write_json
from rebaser.config import series_file
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo import refs, workspace
from rebaser.repo.git import Git, commit_tree
from rebaser.sequencer import machine
from rebaser.sequencer.report import Report
from rebaser.series.patches import load_series
from rebaser.steps.testrun import check_interpreter
from rebaser.upstream import PypiSpec, Target, pypi_cache, resolve_target
from rebaser.upstream.pypi_index import release_versions

# `git bisect run` exit codes: good, bad, cannot test, abort.
_GOOD, _BAD, _SKIP, _ABORT = 0, 1, 125, 128


@dataclass
class BisectResult:
    culprit: str
    subject: str
    report: Report  # the series applied onto the culprit: what broke


def run(args: argparse.Namespace) -> ExitCode:
    out = Output()
    with out.progress() as progress:
        found = bisect(
            series_file(args.series),
            repo=args.repo,
            upstream=args.upstream,
            good=args.good,
            bad=args.bad,
            test=args.test,
            progress=progress,
        )
    if args.json:
        data = {"culprit": found.culprit, "subject": found.subject}
        write_json(args.json, {**data, "report": found.report.to_json()})
    out.say("first bad commit: ", (found.culprit, "bold"), " ", found.subject)
    report = found.report
    out.say(f"there: {report.outcome}")
    if report.stop:
        out.say(f"  {report.stop.patch}: {report.stop.reason}")
        for line in report.stop.hunks[:4]:
            out.say("  " + line.replace("\n", "\n  "))
    for check in report.checks:
        if not check.ok:
            out.say(f"  verify {check.name}: {'; '.join(check.problems[:3])}")
    for suite in report.suites:
        for failure in suite.failures[:5]:
            out.say(f"  {suite.name}: {failure}")
    return ExitCode.OK


def bisect(
    series_file: Path,
    *,
    repo: Optional[Path],
    upstream: Optional[str],
    good: str,
    bad: str,
    test: str,
    progress: machine.Progress,
) -> BisectResult:
    check_interpreter(sys.executable, test, load_series(series_file).test_requires)
    if upstream is not None:
        git, good_sha, bad_sha = _pypi_history(upstream, good, bad, progress)
    else:
        if repo is None:
            raise RebaserError("bisect needs --repo PATH or --upstream pypi:megatron-core")
        git = resolve_target(repo=repo, upstream=None, base=good, default_upstream=None).git
        good_sha, bad_sha = git.rev_parse(good), git.rev_parse(bad)
        if good_sha is None or bad_sha is None:
            raise RebaserError(
                f"unknown revision {good if good_sha is None else bad!r}", where=str(git.path)
            )
    if not git.run("merge-base", "--is-ancestor", good_sha, bad_sha, check=False).ok:
        raise RebaserError(f"{good} is not an ancestor of {bad}", next_step="give an older --good")

    progress(f"checking the good end {good}")
    if (report := probe(series_file, git, good_sha, test)).exit_code != 0:
        raise RebaserError(
            f"the series does not pass at the good revision {good}: {report.outcome}",
            next_step="pick a --good revision where `rebaser apply` succeeds",
        )
    progress(f"checking the bad end {bad}")
    if probe(series_file, git, bad_sha, test).exit_code == 0:
        raise RebaserError(f"the series passes at the bad revision {bad}: nothing to bisect")

    with workspace.detached(git, bad_sha, "bisect") as tree:
        walker = Git(tree)
        walker.run("bisect", "start", "--first-parent", bad_sha, good_sha)
        progress("git bisect run (each step applies the series in a throwaway worktree)")
        command = [
            sys.executable,
            "-m",
            "rebaser.commands.bisect",
            "--series",
            str(series_file),
            "--repo",
            str(git.path),
            "--test",
            test,
        ]
        result = walker.run("bisect", "run", *command, check=False)
        walker.run("bisect", "reset", "--quiet", check=False)
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", result.stdout, re.MULTILINE)
    if not found:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        raise RebaserError(
            "git bisect did not find a first bad commit: " + " | ".join(tail),
            code=ExitCode.ENVIRONMENT,
        )
    culprit = found.group(1)
    progress(f"culprit {culprit[:12]}: collecting what broke")
    return BisectResult(
        culprit,
        git.out("log", "-1", "--format=%s", culprit),
        probe(series_file, git, culprit, test),
    )


def probe(series_file: Path, git: Git, sha: str, test: str) -> Report:
    """Apply the series onto one commit in a throwaway worktree."""
    target = Target(git, sha, sha, sha[:12], str(git.path))  # the report adds the sha
    return machine.throwaway_apply(target, series_file, test, lambda _message: None, triage=False)


def _pypi_history(
    upstream: str, good: str, bad: str, progress: machine.Progress
) -> tuple[Git, str, str]:
    """Releases good..bad as a linear chain of commits (one per release) in the cache."""
    spec = PypiSpec.parse(upstream)
    if spec is None or spec.version is not None:
        raise RebaserError(
            "bisect over PyPI takes --upstream pypi:PACKAGE (no version) and versions as --good/--bad"
        )
    try:
        low, high = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise RebaserError(
            f"--good/--bad must be release versions with --upstream: {exc}"
        ) from None
    cache = pypi_cache(spec.package)
    versions = [v for v in release_versions(spec.package) if low <= Version(v) <= high]
    if good not in versions or bad not in versions:
        raise RebaserError(
            f"{spec.package} {good} or {bad} is not a release on PyPI; releases: {', '.join(versions)}"
        )
    parent: Optional[str] = None
    chain = {}
    for version in versions:
        progress(f"materialising {spec.package} {version}")
        release = cache.materialise(version)
        date = cache.git.out("log", "-1", "--format=%cd", "--date=raw", release.sha)
        parent = commit_tree(
            cache.git,
            f"{release.sha}^{{tree}}",
            [parent] if parent else [],
            f"{spec.package} {version} from PyPI\n",
            date=date,
        )
        chain[version] = parent
    assert parent is not None
    cache.git.run("update-ref", refs.pypi_history(spec.package), parent)
    return cache.git, chain[good], chain[bad]


def _probe_main() -> int:
    """Entry point for `git bisect run`: test the commit checked out in the current folder."""
    parser = argparse.ArgumentParser(prog="python -m rebaser.commands.bisect")
    parser.add_argument("--series", type=Path, required=True)
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--test", default="none")
    args = parser.parse_args()
    sha = Git(Path.cwd()).out("rev-parse", "HEAD")
    try:
        report = probe(args.series, Git(args.repo), sha, args.test)
    except RebaserError as error:
        print(f"probe {sha[:12]}: {error}", file=sys.stderr)
        return _ABORT if error.code == ExitCode.ENVIRONMENT else _SKIP
    print(f"probe {sha[:12]}: {report.outcome}")
    return _GOOD if report.exit_code == 0 else _BAD


if __name__ == "__main__":
    raise SystemExit(_probe_main())
