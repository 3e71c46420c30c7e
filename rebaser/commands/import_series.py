"""`rebaser import`: turn a fork's branch (BASE..TIP) into a series.

One stable git-format patch per commit (rebaser/series/export.py, the rules `refresh` uses), and a
series file naming the series and recording BASE as `@base git:<sha>`, so the patches'
preimages can be found again. The series is written into a temporary folder beside the
target and renamed into place at the end: an existing folder is never touched, and a failed
import leaves nothing behind (what a kill leaves, the next import removes: repo/tempdirs.py).
"""

from __future__ import annotations

import argparse
import errno
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from rebaser.commands.output import Output
from rebaser.wording import counted
from rebaser.errors import ExitCode, RebaserError
from rebaser.series.export import (
    check_message,
    export_patch,
    export_range,
    patch_file_name,
    split_patches,
)
from rebaser.repo import tempdirs
from rebaser.repo.git import Git, find_repo
from rebaser.series.patches import PATCH_TRAILER, is_test_file, load_series, valid_series_name

_LOG_FORMAT = "%x1e%H%x1f%P%x1f%h%x1f%s%x1f%B%x1f"  # records and fields split by ASCII separators


def run(args: argparse.Namespace) -> ExitCode:
    # absolute, but not resolved: a link given as --series-dir is refused, not followed
    series_dir = Path(os.path.abspath(args.series_dir))
    imported = import_range(args.repo, args.range, series_dir, args.name)
    out = Output()
    for empty in imported.skipped_empty:
        out.say(f"  skipped (changes nothing): {empty}")
    if imported.fork_tests:
        out.say(f"  {len(imported.fork_tests)} test files of the fork recorded (@fork-test)")
    for path in imported.unnamed_tests:
        out.say(f"  not recorded (a series file cannot name it): {path!r}")
    out.say(
        f"imported {counted(len(imported.patches), 'patch')} into {imported.series_file} "
        f"(@base git:{imported.base})"
    )
    return ExitCode.OK


@dataclass(frozen=True)
class Imported:
    series_file: Path
    base: str
    patches: list[str]
    skipped_empty: list[str]  # "<short sha> <subject>" of commits that change nothing
    fork_tests: list[str] = field(default_factory=list)  # recorded as @fork-test
    unnamed_tests: list[str] = field(default_factory=list)  # tests the series cannot name


def import_range(
    repo: Path, range_spec: str, series_dir: Path, name: Optional[str] = None
) -> Imported:
    git = _repository(repo)
    base, tip = _parse_range(git, range_spec)
    commits = _commits(git, base, tip, range_spec)
    name = valid_series_name(name or series_dir.name, "--name (default: the folder's name)")
    if series_dir.is_symlink():
        raise RebaserError(
            f"{series_dir} is a symlink (to {os.readlink(series_dir)}); import makes a new "
            "folder and never writes through a link",
            next_step="pass the folder itself as --series-dir, or a new path",
        )
    if series_dir.exists():
        raise RebaserError(
            f"{series_dir} already exists; import never overwrites a series",
            next_step="choose a new --series-dir, or remove that folder yourself",
        )
    try:
        series_dir.parent.mkdir(parents=True, exist_ok=True)
        # held while it is written: what a killed import left beside it goes first
        scratch = tempdirs.Owned(f".{series_dir.name}.import-", series_dir.parent)
    except OSError as exc:
        raise RebaserError(
            f"cannot make the series folder {series_dir}: {exc.strerror or exc}",
            where=str(exc.filename or series_dir.parent),
            next_step="choose a --series-dir in a folder you can write to",
            code=(
                ExitCode.ENVIRONMENT
                if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else ExitCode.USAGE
            ),
        ) from None
    try:
        imported = _write_series(git, commits, scratch.path, name, base)
        (scratch.path / tempdirs.OWNER).unlink()  # its lock file is no part of the series
        scratch.path.rename(series_dir)
    finally:
        scratch.release()
    return replace(imported, series_file=series_dir / "series")


def _repository(repo: Path) -> Git:
    git = find_repo(repo.expanduser())
    if git is None and (repo / "HEAD").is_file():
        git = Git(repo)  # a bare repository
    if git is None:
        raise RebaserError(
            f"{repo} is not a git repository", next_step="point --repo at the fork's clone"
        )
    return git


def _parse_range(git: Git, range_spec: str) -> tuple[str, str]:
    base_rev, dots, tip_rev = range_spec.partition("..")
    if not dots or not base_rev or not tip_rev or tip_rev.startswith("."):
        raise RebaserError(
            f"--range {range_spec!r} is not BASE..TIP",
            next_step="e.g. --range upstream/dev..my-fork (two dots, both ends named)",
        )
    both = git.run("rev-parse", f"{base_rev}^{{commit}}", f"{tip_rev}^{{commit}}", check=False)
    if both.ok and not base_rev.startswith("-") and not tip_rev.startswith("-"):
        base, tip = both.stdout.split()
        return base, tip
    for rev in (base_rev, tip_rev):  # one of them is unknown: say which
        if git.rev_parse(rev) is None:
            raise RebaserError(
                f"unknown revision {rev!r}: not a commit, tag or branch of this repository",
                where=str(git.path),
                next_step="fetch it first (git fetch), or check the spelling",
            )
    return git.rev_parse(base_rev), git.rev_parse(tip_rev)  # type: ignore[return-value]


def _not_on_top(git: Git, range_spec: str, base: str, tip: str) -> RebaserError:
    base_rev, _, tip_rev = range_spec.partition("..")
    fork_point = git.run("merge-base", base, tip, check=False).stdout.strip()
    hint = f"the branches meet at {fork_point[:12]}; " if fork_point else ""
    fix = f"{hint}pass --range $(git merge-base {base_rev} {tip_rev})..{tip_rev}"
    if fork_point == tip:  # the tip is below the base: that range would be empty
        fix = f"the ends look swapped: pass --range {tip_rev}..{base_rev}"
    return RebaserError(
        f"{base_rev} is not an ancestor of {tip_rev}, so {range_spec} is not one line of "
        "commits on top of a base",
        where=str(git.path),
        next_step=fix,
    )


@dataclass(frozen=True)
class _Commit:
    sha: str
    parents: list[str]
    short: str
    subject: str
    message: str
    empty: bool  # changes no file


def _commits(git: Git, base: str, tip: str, range_spec: str) -> list[_Commit]:
    """The range's commits, oldest first, from one `git log` whatever their number."""
    log = git.run(
        "log",
        "--reverse",
        "--no-renames",
        "--name-only",
        f"--format={_LOG_FORMAT}",
        f"{base}..{tip}",
    ).stdout
    commits = []
    for record in log.split("\x1e")[1:]:
        sha, parents, short, subject, message, files = record.split("\x1f")
        commits.append(_Commit(sha, parents.split(), short, subject, message, not files.strip()))
    merges = [commit for commit in commits if len(commit.parents) > 1]
    # Without merges, BASE is an ancestor of TIP exactly when the oldest commit sits on it.
    on_top = commits[0].parents == [base] if commits and not merges else base == tip
    if not on_top and not git.run("merge-base", "--is-ancestor", base, tip, check=False).ok:
        raise _not_on_top(git, range_spec, base, tip)
    if merges:
        raise RebaserError(
            f"{range_spec} holds {len(merges)} merge commit(s), which a patch series cannot "
            "carry: " + "; ".join(f"{commit.short} {commit.subject}" for commit in merges),
            where=str(git.path),
            next_step="linearise the branch first (e.g. git rebase BASE on a copy of it), "
            "then import that",
        )
    if not commits:
        raise RebaserError(
            f"{range_spec} holds no commits", next_step="check the order: --range BASE..TIP"
        )
    return commits


def _write_series(git: Git, commits: list[_Commit], folder: Path, name: str, base: str) -> Imported:
    kept = [commit for commit in commits if not commit.empty]
    skipped = [f"{commit.short} {commit.subject}" for commit in commits if commit.empty]
    if not kept:
        raise RebaserError("every commit in the range is empty; there is nothing to import")
    for commit in kept:
        check_message(commit.message, commit.short)
    texts = _exported(git, base, commits[-1].sha, kept)
    patches = []
    for commit, text in zip(kept, texts):
        file_name = patch_file_name(len(patches) + 1, commit.subject)
        (folder / file_name).write_text(text, encoding="utf-8")
        patches.append(file_name)
    series_file = folder / "series"
    tests, unnameable = _fork_tests(git, base, commits[-1].sha)
    lines = [
        f"# Imported by `rebaser import` from {counted(len(commits), 'commit')} on top of "
        f"{base[:12]}.",
        f"@name {name}",
        f"@base git:{base}",
        *(f"@fork-test {path}" for path in tests),
        *patches,
    ]
    series_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        load_series(series_file)  # what import writes, apply must be able to read
    except RebaserError as error:  # name the commit, not a file in a folder about to go
        made_from = dict(zip(patches, kept))
        if (commit := made_from.get(Path(error.where).name)) is None:
            raise
        raise RebaserError(
            f"commit {commit.short} ({commit.subject}) cannot be carried: {error.what}",
            where=str(git.path),
            next_step="fix that commit (its message and author must be UTF-8), then import again",
        ) from None
    return Imported(series_file, base, patches, skipped, tests, unnameable)


def _fork_tests(git: Git, base: str, tip: str) -> tuple[list[str], list[str]]:
    """The test files the range adds or changes, as TIP has them: `apply --test cpu` runs
    them in the patched tree. Also those the series file cannot name (`#` starts a comment
    there, a line break ends the line), which the command says it left out."""
    changed = git.run(
        "diff", "--name-only", "-z", "--no-renames", "--diff-filter=AMT", base, tip, "--"
    ).stdout
    tests = sorted(path for path in changed.split("\0") if is_test_file(path))
    unnameable = [path for path in tests if "#" in path or "\n" in path]
    return [path for path in tests if path not in unnameable], unnameable


def _exported(git: Git, base: str, tip: str, commits: list[_Commit]) -> list[str]:
    """Each commit's stable export: one `format-patch` of the range, split per commit. A
    commit carrying a `Forkkit-Patch:` trailer (or a split that does not come out one per
    commit) takes export_patch's per-commit path, which gives the same bytes."""
    texts = split_patches(export_range(git, base, tip))
    if len(texts) != len(commits):
        texts = [export_patch(git, commit.sha) for commit in commits]
    return [
        export_patch(git, commit.sha) if f"{PATCH_TRAILER}:" in commit.message else text
        for commit, text in zip(commits, texts)
    ]
