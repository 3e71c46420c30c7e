"""`rebaser refresh`: re-export the series (and overlay) from a resolved branch.

The export is stable and minimal, as Electron's patch tooling does it: no commit hashes
(zero-commit), no diffstat, no signature, no numbering, full blob ids (3-way merges need
them) and fixed diff options whatever the user's git config says. The author date travels
with each patch through apply, so re-exporting an unchanged series is byte-identical and a
changed one differs only where it changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rebaser.errors import RebaserError
from rebaser.git import Git, find_repo
from rebaser.series import Series, load_series

OVERLAY_SUBJECT = "forkkit: overlay"
_EXPORT_FLAGS = (
    "--stdout",
    "--zero-commit",
    "--full-index",
    "--no-signature",
    "--no-stat",
    "--keep-subject",
    "--no-numbered",
    "--no-renames",
    "--no-color",
    "--diff-algorithm=myers",
    "--unified=3",
    "--no-thread",
    "--encoding=UTF-8",
)
_EXPORT_CONFIG = ("-c", "format.signOff=false", "-c", "core.quotePath=true")


@dataclass
class ExportedFile:
    """A file refresh wrote (or would write) and how it changed."""

    path: str
    status: str  # unchanged | updated | new | removed


def export_patch(git: Git, sha: str) -> str:
    """One commit as a stable git-format patch."""
    return git.run(*_EXPORT_CONFIG, "format-patch", "-1", sha, *_EXPORT_FLAGS).stdout


def branch_commits(git: Git, branch: str) -> tuple[Optional[str], list[str]]:
    """The overlay commit (or None) and the patch commits after it, oldest first."""
    log = git.out("log", "--reverse", "--format=%H %s", "--first-parent", branch)
    lines = [line.split(" ", 1) for line in log.splitlines()]
    overlay = [i for i, (_, subject) in enumerate(lines) if subject.startswith(OVERLAY_SUBJECT)]
    if not overlay:
        raise RebaserError(
            f"branch {branch} has no '{OVERLAY_SUBJECT}' commit, so its series cannot be found",
            next_step="refresh a branch made by `rebaser apply`",
        )
    start = overlay[-1]
    return lines[start][0], [sha for sha, _ in lines[start + 1 :]]


def refresh(
    series_file: Path, repo: Optional[Path], branch: Optional[str], *, write: bool
) -> list[ExportedFile]:
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
    overlay_sha, patch_shas = branch_commits(git, branch)
    changes = _refresh_overlay(series, git, overlay_sha, branch, write=write)
    names = _patch_names(series, [git.out("log", "-1", "--format=%s", sha) for sha in patch_shas])
    for name, sha in zip(names, patch_shas):
        changes.append(_write(series.patches_dir / name, export_patch(git, sha), write=write))
    for stale in [p.name for p in series.patches if p.name not in names]:
        changes.append(ExportedFile(f"patches/{stale}", "removed"))
        if write:
            (series.patches_dir / stale).unlink()
    if [p.name for p in series.patches] != names:
        changes.append(_write(series.file, _series_text(series, names), write=write))
    return changes


def _refresh_overlay(
    series: Series, git: Git, overlay_sha: Optional[str], branch: str, *, write: bool
) -> list[ExportedFile]:
    if series.overlay_dir is None or overlay_sha is None:
        return []
    laid = git.out(
        "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", overlay_sha
    ).splitlines()
    changes = []
    for path in laid:
        shown = git.run("show", f"{branch}:{path}", check=False)
        if not shown.ok:
            continue
        changes.append(
            _write(series.overlay_dir / path, shown.stdout, write=write, label=f"overlay/{path}")
        )
    return changes


def _write(path: Path, text: str, *, write: bool, label: Optional[str] = None) -> ExportedFile:
    label = label or f"{path.parent.name}/{path.name}"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return ExportedFile(label, "unchanged")
    status = "updated" if path.exists() else "new"
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return ExportedFile(label, status)


def _patch_names(series: Series, subjects: list[str]) -> list[str]:
    """Keep the series' names in order; name extra commits NNNN-<subject>.patch."""
    names = [patch.name for patch in series.patches][: len(subjects)]
    for number, subject in enumerate(subjects[len(names) :], start=len(names) + 1):
        slug = re.sub(r"[^a-z0-9]+", "-", subject.lower().split(":", 1)[-1]).strip("-")[:48]
        names.append(f"{number:04d}-{slug or 'patch'}.patch")
    return names


def _series_text(series: Series, names: list[str]) -> str:
    """The series file with its patch lines replaced, comments and directives kept."""
    kept, inserted = [], False
    old = {patch.name for patch in series.patches}
    for line in series.file.read_text(encoding="utf-8").splitlines():
        if line.split("#", 1)[0].strip() in old:
            if not inserted:
                kept.extend(names)
                inserted = True
            continue
        kept.append(line)
    if not inserted:
        kept.extend(names)
    return "\n".join(kept) + "\n"
