"""`rebaser refresh`: re-export the series (and overlay) from a resolved branch.

Each commit after the series start (repo/refs.py) is exported by the stable rules of
series/export.py into the file its `Forkkit-Patch:` trailer names, so a patch skipped or
dropped on the branch never lends its file name to the next one. Commits without the trailer
(made by hand) become new patches at the end; a branch where no commit has it (made before
the trailer existed) is read by position, as before.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from rebaser.carry import resolutions
from rebaser.commands.output import Output, write_text
from rebaser.commands.rangediff import RangeDiff, range_diff, to_markdown
from rebaser.config import series_file
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo import refs, tempdirs
from rebaser.repo.git import Git, commit_tree, find_repo
from rebaser.repo.lock import repository_lock
from rebaser.sequencer import state as state_store
from rebaser.series.export import export_patch, patch_file_name
from rebaser.series.patches import Series, identity, load_series, number_of, series_named


# What --check says of a file it would write: it writes nothing.
_WOULD = {"updated": "to update", "new": "to add", "removed": "to remove"}


def run(args: argparse.Namespace) -> ExitCode:
    refreshed = refresh(series_file(args.series), args.repo, args.branch, write=not args.check)
    out = Output()
    for change in refreshed.files:
        status = _WOULD.get(change.status, change.status) if args.check else change.status
        line = f"  {status:9} {change.path}"
        out.say(line if change.status == "unchanged" else (line, "bold"))
    changed = [c for c in refreshed.files if c.status.split()[0] not in ("unchanged", "kept")]
    verb = "would change" if args.check else "changed"
    out.say(f"refresh: {len(changed)} of {len(refreshed.files)} files {verb}")
    if refreshed.warning:
        out.say((refreshed.warning, "bold"))
    if refreshed.kept_at:
        out.say(
            f"the series files as they were before are kept at {refreshed.kept_at} "
            f"(`git show {refreshed.kept_at}:<path>`)"
        )
    diff = refreshed.range_diff
    if diff.note:
        out.say(diff.note)
    elif diff.changed:
        out.say("range-diff (old series → branch):")
        out.say(diff.text.rstrip("\n"))
    if args.range_diff_markdown:
        write_text(args.range_diff_markdown, to_markdown(diff, "Patch series changes"))
    return ExitCode.VERIFY_FAILED if args.check and changed else ExitCode.OK


@dataclass
class ExportedFile:
    """A file refresh wrote (or would write) and how it changed."""

    path: str
    status: str  # unchanged | updated | new | removed | kept (...): left off the branch
    on_disk: Optional[Path] = None  # the file (or folder) an update or removal replaces


@dataclass(frozen=True)
class BranchCommit:
    sha: str
    subject: str
    identity: Optional[str]  # the patch file it was made from (Forkkit-Patch trailer)


def branch_commits(git: Git, branch: str) -> tuple[str, list[BranchCommit]]:
    """The overlay commit and the patch commits after it, oldest first."""
    start = refs.find_series_start(git, branch)
    if start is None:
        raise RebaserError(
            f"branch {branch} has no {refs.SERIES_START}/ ref and no "
            f"'{refs.OVERLAY_SUBJECT}' commit, so its series cannot be found",
            next_step="refresh a branch made by `rebaser apply`",
        )
    log = git.out(
        "log", "--reverse", "--first-parent", "--format=%H %P%x00%B%x01", f"{start}..{branch}"
    )
    commits, merges = [], []
    for entry in filter(None, (part.strip("\n") for part in log.split("\x01"))):
        shas, _, message = entry.partition("\0")
        sha, *parents = shas.split()
        commits.append(BranchCommit(sha, message.split("\n", 1)[0], identity(message)))
        if len(parents) > 1:
            merges.append(commits[-1])
    if merges:  # a patch is one commit's change: format-patch would export another commit
        named = ", ".join(f"{c.sha[:12]} ({c.subject})" for c in merges[:3])
        raise RebaserError(
            f"branch {branch} holds a merge commit after its series start: {named}; a series "
            "is one patch a commit",
            next_step="rebase the branch instead of merging (`git rebase` onto what you "
            "merged), or apply the series onto the new base; then refresh",
        )
    return start, commits


@dataclass
class Refreshed:
    files: list[ExportedFile]
    range_diff: RangeDiff  # the old series (the files before) against the branch's commits
    kept_at: Optional[str] = None  # the backup ref of the files it replaced or removed
    warning: str = ""  # what the series loses (patches left off, kept on a base that moved)


def refresh(
    series_file: Path, repo: Optional[Path], branch: Optional[str], *, write: bool
) -> Refreshed:
    series = load_series(series_file)
    git = find_repo(repo or Path.cwd())
    if git is None:
        raise RebaserError(
            f"{repo or Path.cwd()} is not in a git repository", next_step="pass --repo"
        )
    if branch is None:
        branch = git.out("rev-parse", "--abbrev-ref", "HEAD")
        if branch == "HEAD":
            raise RebaserError("no branch is checked out here", next_step="pass --branch NAME")
    elif git.rev_parse(f"refs/heads/{branch}") is None:
        raise RebaserError(
            f"no branch {branch} in {git.path}",
            next_step="name a branch made by `rebaser apply` (`git branch --list 'forkkit/*'` "
            "lists them), or pass --repo for the repository that has it",
        )
    if not write:
        _refuse_uncommitted(git, branch)
        return _export(series, git, branch)[0]
    with repository_lock(git, "refresh"):
        _refuse_a_stopped_apply(git, branch)
        _refuse_uncommitted(git, branch)
        refreshed, writes = _export(series, git, branch)
        refreshed.kept_at = _keep_what_it_replaces(git, branch, series, refreshed.files)
        for write_one in writes:  # in order: a removed patch's records before its file
            write_one()
        return refreshed


def _keep_what_it_replaces(
    git: Git, branch: str, series: Series, files: list[ExportedFile]
) -> Optional[str]:
    """The bytes of every file refresh is about to overwrite or remove, in a commit under
    refs/forkkit/backups/ (a patch file edited or added by hand since the apply may exist
    nowhere else); its ref, or None when nothing is replaced."""
    replaced = [
        path
        for change in files
        if change.status in ("updated", "removed") and change.on_disk is not None
        for path in ([change.on_disk] if change.on_disk.is_file() else _files_in(change.on_disk))
    ]
    if not replaced:
        return None
    top = series.file.parent.parent
    named = [os.path.relpath(path, top) for path in replaced]
    named = [n if not n.startswith("..") else str(p).lstrip("/") for n, p in zip(named, replaced)]
    paths = "".join(f"{path}\n" for path in replaced).encode()
    shas = git.run("hash-object", "-w", "--stdin-paths", stdin=paths).stdout
    with tempdirs.owned("forkkit-index-") as folder:
        env = {"GIT_INDEX_FILE": str(folder / "index")}
        listing = "".join(f"100644 {sha}\t{name}\n" for sha, name in zip(shas.split(), named))
        git.run("update-index", "--add", "--index-info", env=env, stdin=listing.encode())
        tree = git.out("write-tree", env=env)
    commit = commit_tree(git, tree, [], "forkkit: series files replaced by refresh\n")
    ref = refs.backup(branch, "refresh")
    git.run("update-ref", ref, commit)
    return ref


def _files_in(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def _refuse_uncommitted(git: Git, branch: str) -> None:
    """Refresh exports the branch's commits: a fix still uncommitted in its worktree would
    be left out while the series read "up to date" (`--check` too)."""
    if git.out("rev-parse", "--abbrev-ref", "HEAD") != branch:
        return  # the branch is not checked out here: its commits are all there is
    unfinished = state_store.load(git)
    if unfinished is not None and unfinished.branch == branch:
        return  # a stop's changes: `--check` shows the difference, a refresh is refused
    changed = git.changed_paths("HEAD", "--")
    if changed:
        raise RebaserError(
            f"uncommitted changes on {branch}: {', '.join(changed[:5])}"
            + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            + "; refresh exports the branch's commits",
            where=str(git.path),
            next_step="commit them (into the patch they belong to: `git commit --fixup`, "
            "then `git rebase -i --autosquash`; or as a commit of their own, a new patch) or "
            "set them aside (`git stash`), then refresh",
        )


def _refuse_a_stopped_apply(git: Git, branch: str) -> None:
    """A stopped apply's branch lacks the patches after the stop: exporting it would delete
    them from the series."""
    unfinished = state_store.load(git)
    if unfinished is not None and unfinished.branch == branch:
        where = f"stopped at {unfinished.stopped.patch}" if unfinished.stopped else "running"
        raise RebaserError(
            f"the apply on {branch} is not finished ({where}); refreshing now would drop the "
            "patches it has not applied yet from the series",
            where=unfinished.worktree,
            next_step="finish it with `rebaser continue` (or `rebaser abort`), then refresh; "
            "`refresh --check` shows the difference without writing",
        )


Writes = list[Callable[[], None]]


def _export(series: Series, git: Git, branch: str) -> tuple[Refreshed, Writes]:
    """What refresh changes, and the writes that change it, in order (nothing written yet:
    `--check` runs none, a refresh keeps what they replace first)."""
    writes: Writes = []
    overlay_sha, commits = branch_commits(git, branch)
    kept = refs.read_left_off(git, branch)  # the apply left them off; they still need work
    _refuse_another_series(series, git, branch, overlay_sha, commits, kept)
    texts = [export_patch(git, commit.sha) for commit in commits]  # a refusal writes nothing
    changes = _refresh_overlay(series, git, overlay_sha, branch, writes)
    entries = _patch_entries(series, commits, texts)  # paths from the series' folder
    changed = range_diff(
        git, series, [(c.sha, Path(entry).name) for c, entry in zip(commits, entries)], overlay_sha
    )
    for entry, text in zip(entries, texts):
        changes.append(_write(series.patches_dir / entry, text, writes))
    folder = series.patches_dir.name  # the series' own folder, not always patches/
    for name, status in kept.items():
        changes.append(ExportedFile(f"{folder}/{name}", f"kept ({status} on the branch)"))
    for stale in [p for p in series.patches if p.entry not in entries and p.name not in kept]:
        file = series.patches_dir / stale.entry
        changes.append(ExportedFile(f"{folder}/{stale.entry}", "removed", file))
        records = series.patches_dir / resolutions.FOLDER / stale.name  # replayed for it only
        if records.is_dir() or records.is_symlink():
            label = f"{folder}/{resolutions.FOLDER}/{stale.name}/"
            changes.append(
                ExportedFile(label, "removed", None if records.is_symlink() else records)
            )
        # the records first: a refresh that fails there lists them again
        writes += [partial(_remove_folder, records), file.unlink]
    entries = _with_left_off(series, entries, kept)
    base = _moved_base(series, git, overlay_sha)
    if [p.entry for p in series.patches] != entries or base:
        changes.append(_write(series.file, _series_text(series, entries, base), writes))
    return Refreshed(changes, changed, warning=_left_on_the_old_base(series, kept, base)), writes


def _left_on_the_old_base(series: Series, kept: dict[str, str], base: Optional[str]) -> str:
    """The patches left off the branch stay as they were, made on the old `@base`: once it
    moves, their diffs no longer apply on it. An apply still merges them with the blobs
    they name, where the repository has them, but cannot tell what upstream did to them."""
    listed = [patch.name for patch in series.patches if patch.name in kept]
    if not base or not listed:
        return ""
    numbers = ", ".join(number_of(name) for name in listed)
    return (
        f"warning: {numbers} (left off the branch) stay as they were, made on the old @base; "
        f"on {base} an apply merges them with the blobs they name but cannot tell what "
        "upstream did to them (their proposal: review). To have them judged, bring each onto "
        f"the branch first (`rebaser retry {number_of(listed[0])}` in its worktree, resolve, "
        "`rebaser continue`), then refresh"
    )


def _moved_base(series: Series, git: Git, overlay_sha: str) -> Optional[str]:
    """The series' new `@base` when the branch was built on another one (its patches are
    exported against that base now): `pypi:<package>==<version>` for a release's commit in
    rebaser's cache (its tag says which), else `git:<sha>` for a series that names a commit
    of this repository. None when it did not move, or cannot be said so that an apply
    finds it (a release series on a clone's commit; "the latest release" stays)."""
    if series.base is None or (series.base.release and series.base.release.version is None):
        return None
    base_sha = git.out("rev-parse", f"{overlay_sha}^")
    tags = git.out("tag", "--points-at", base_sha, "--list", "pypi/*").split()
    if tags:
        _, package, version = tags[0].split("/", 2)
        moved = f"pypi:{package}=={version}"
        return None if moved == str(series.base) else moved
    if series.base.commit is None or (recorded := git.rev_parse(series.base.commit)) is None:
        return None
    return None if recorded == base_sha else f"git:{base_sha}"


def _refuse_another_series(
    series: Series,
    git: Git,
    branch: str,
    overlay_sha: str,
    commits: list[BranchCommit],
    kept: dict[str, str],
) -> None:
    """Exporting a branch into a series it was not made from would delete that series'
    patches and write the branch's over them. The overlay commit names its series; on a
    branch from before it did, a series none of whose patches the branch's commits name
    (nor the patches it left off) is another one."""
    fix = (
        "pass the series the apply used (--series), or check the branch (--branch) "
        "and the repository (--repo)"
    )
    made_from = series_named(git.out("log", "-1", "--format=%B", overlay_sha))
    if made_from is not None and made_from != series.name:
        raise RebaserError(
            f"branch {branch} was made from series {made_from}, not {series.name} "
            f"({series.file})",
            next_step=fix,
        )
    named = {c.identity for c in commits if c.identity} | set(kept)
    if made_from is None and named and not named & {p.name for p in series.patches}:
        raise RebaserError(
            f"branch {branch} names none of the patches of series {series.name} "
            f"({series.file}): it was made from another series",
            next_step=fix,
        )


def _remove_folder(path: Path) -> None:
    """A folder of the series, or the link that stands for it (what it points to stays)."""
    try:
        if path.is_symlink():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    except OSError as exc:
        raise RebaserError(
            f"cannot remove {path}: {exc.strerror}",
            next_step="remove it yourself (the patch it was recorded for left the series), "
            "then refresh again",
        ) from None


def _refresh_overlay(
    series: Series, git: Git, overlay_sha: Optional[str], branch: str, writes: Writes
) -> list[ExportedFile]:
    if series.overlay_dir is None or overlay_sha is None:
        return []
    # -z: names as they are (git quotes a name with a tab, a quote or a non-ASCII letter)
    listing = git.output_bytes(
        "diff-tree", "-z", "--no-commit-id", "--name-only", "-r", "--root", overlay_sha
    )
    laid = [os.fsdecode(name) for name in listing.split(b"\0") if name]
    changes = []
    for path in laid:
        if not git.run("cat-file", "-e", f"{branch}:{path}", check=False).ok:
            continue  # removed on the branch
        data = git.output_bytes("cat-file", "blob", f"{branch}:{path}")  # bytes as committed
        changes.append(_write(series.overlay_dir / path, data, writes, label=f"overlay/{path}"))
    return changes


def _write(
    path: Path, data: str | bytes, writes: Writes, label: Optional[str] = None
) -> ExportedFile:
    """The write of `data` (text as UTF-8) to `path`, added to `writes` unless the file
    holds exactly that already."""
    label = label or f"{path.parent.name}/{path.name}"
    data = data.encode("utf-8") if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == data:
        return ExportedFile(label, "unchanged")
    status = "updated" if path.exists() or path.is_symlink() else "new"
    writes.append(partial(_replace, path, data))
    return ExportedFile(label, status, path if path.is_file() and not path.is_symlink() else None)


def _replace(path: Path, data: bytes) -> None:
    """`path` holds `data` afterwards: a new file renamed over it, so that a link there is
    replaced, never written through (and a failure leaves the old file whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # a new file
    fresh = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        mode = path.stat().st_mode if path.exists() and not path.is_symlink() else 0o100644
        fresh.chmod(stat.S_IMODE(mode))  # a file's mode stays; a new one is rw-r--r--
        fresh.replace(path)
    finally:
        fresh.unlink(missing_ok=True)


def _patch_entries(series: Series, commits: list[BranchCommit], texts: list[str]) -> list[str]:
    """The file each commit goes to (its path from the series' folder): the listed patch its
    identity names, or a patch file beside the series that it names; a commit without one
    (or whose patch an earlier commit took) goes to the listed patch that already holds its
    text (an earlier refresh wrote it there); others, and those whose trailer names
    anything else (a path, the series file), get NNNN-<subject>.patch."""
    listed = {patch.name: patch.entry for patch in series.patches}
    if not any(commit.identity for commit in commits):
        # A branch from before identities: the series' names in order, as it was applied.
        entries = [patch.entry for patch in series.patches][: len(commits)]
        return entries + _new_names(commits[len(entries) :], taken=entries)
    entries: list[Optional[str]] = []
    for commit in commits:
        entry = listed.get(commit.identity or "") or _plain_patch_name(commit.identity)
        entries.append(entry if entry not in entries else None)
    for number, text in enumerate(texts):
        if entries[number] is None:
            entries[number] = next(
                (e for e in listed.values() if e not in entries and _holds(series, e, text)), None
            )
    taken = [entry for entry in entries if entry] + list(listed.values())
    new = iter(_new_names([c for c, e in zip(commits, entries) if e is None], taken=taken))
    return [entry or next(new) for entry in entries]


def _holds(series: Series, entry: str, text: str) -> bool:
    path = series.patches_dir / entry
    return path.is_file() and path.read_bytes() == text.encode("utf-8")


def _plain_patch_name(identity: Optional[str]) -> Optional[str]:
    """`identity` when it can name a new patch file beside the series: a `.patch` file name,
    not hidden, no folder (a commit's trailer is text anyone may have written)."""
    if identity and _PLAIN_PATCH_RE.match(identity):
        return identity
    return None


_PLAIN_PATCH_RE = re.compile(r"^[^./\\\x00-\x1f][^/\\\x00-\x1f]*\.patch$")


def _with_left_off(series: Series, entries: list[str], kept: dict[str, str]) -> list[str]:
    """The branch's patch entries with the patches it left off put back after every patch
    the series has before them (each may need any of those: a retried patch sits at the
    branch's tip, and what followed it in the series and still waits must follow it)."""
    order = list(entries)
    for position, patch in enumerate(series.patches):
        if patch.name in kept and patch.entry not in order:
            earlier = [p.entry for p in series.patches[:position] if p.entry in order]
            order.insert(max((order.index(e) for e in earlier), default=-1) + 1, patch.entry)
    return order


def _new_names(commits: list[BranchCommit], *, taken: list[str]) -> list[str]:
    """Numbered after every number in use, so a new patch never takes an existing file."""
    numbers = [int(m[1]) for name in taken if (m := re.match(r"(\d+)-", Path(name).name))]
    first = max(numbers, default=0) + 1
    return [patch_file_name(first + i, commit.subject) for i, commit in enumerate(commits)]


def _series_text(series: Series, entries: list[str], base: Optional[str]) -> str:
    """The series file with its patch lines listing `entries` in place: the k-th patch line
    lists the k-th entry, with the comment the line that listed that patch had (patches
    beyond the old lines follow the last one); its `@base` replaced when `base`; comments,
    blank lines and other directives where they were."""
    old = {patch.entry for patch in series.patches}
    lines = series.file.read_text(encoding="utf-8").splitlines()
    slots, comments = [], {}
    for number, line in enumerate(lines):
        listed = line.split("#", 1)[0]
        if listed.strip() and not listed.strip().startswith("@"):
            if (entry := os.path.normpath(listed.strip())) in old:
                slots.append(number)
                comments[entry] = line[len(listed.rstrip()) :]  # "   # why" (or "")
    rest = iter(entries)
    kept = []
    for number, line in enumerate(lines):
        if base and line.split("#", 1)[0].split()[:1] == ["@base"]:
            kept.append(f"@base {base}")
        elif number not in slots:
            kept.append(line)
        else:
            taken = [next(rest, None)] + (list(rest) if number == slots[-1] else [])
            kept.extend(entry + comments.get(entry, "") for entry in taken if entry)
    if not slots:
        kept.extend(entries)
    return "\n".join(kept) + "\n"
