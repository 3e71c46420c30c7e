"""The stable patch export shared by `refresh` and `import`.

The export is stable and minimal, as Electron's patch tooling does it: no commit hashes
(zero-commit), no diffstat, no signature, no numbering, full blob ids (3-way merges need
them) and fixed diff options whatever the user's git config says. The author date travels
with each patch through apply, so re-exporting an unchanged series is byte-identical and a
changed one differs only where it changed.

A patch's identity (its file name) travels in a `Forkkit-Patch:` trailer on the commit an
apply makes; the exported file never carries it (the file name is the identity there).
"""

from __future__ import annotations

import re

from rebaser.repo.git import Git, commit_tree
from rebaser.series.patches import PATCH_TRAILER, strip_identity

# The diff itself (also how fastbuild compares a commit with its patch)...
DIFF_FLAGS = (
    "--full-index",
    "--binary",
    "--no-renames",
    "--no-color",
    "--diff-algorithm=myers",
    "--unified=3",
)
# ... and the mail around it.
_EXPORT_FLAGS = (
    "--stdout",
    "--zero-commit",
    "--no-signature",
    "--no-stat",
    "--keep-subject",
    "--no-numbered",
    "--no-thread",
    "--encoding=UTF-8",
    *DIFF_FLAGS,
)
_FROM_LINE_RE = re.compile(r"^From 0{40} Mon Sep 17 00:00:00 2001\nFrom: ", re.MULTILINE)
EXPORT_CONFIG = ("-c", "format.signOff=false", "-c", "core.quotePath=true")


def export_patch(git: Git, sha: str) -> str:
    """One commit as a stable git-format patch, without its `Forkkit-Patch:` trailer."""
    message = git.run("log", "-1", "--format=%B", sha).stdout
    if f"{PATCH_TRAILER}:" in message:
        sha = _without_identity(git, sha, strip_identity(message))
    return git.run(*EXPORT_CONFIG, "format-patch", "-1", sha, *_EXPORT_FLAGS).stdout


def export_range(git: Git, base: str, tip: str) -> str:
    """Every non-empty commit of base..tip exported as export_patch would, in one call
    (trailers left in: the caller re-exports the commits that carry one)."""
    return git.run(*EXPORT_CONFIG, "format-patch", f"{base}..{tip}", *_EXPORT_FLAGS).stdout


def split_patches(stream: str) -> list[str]:
    """format-patch --stdout output, one text per patch (each starts with its From line);
    the blank line git puts between two patches belongs to neither."""
    starts = [match.start() for match in _FROM_LINE_RE.finditer(stream)]
    ends = [start - 1 for start in starts[1:]] + [len(stream)]
    return [stream[a:b] for a, b in zip(starts, ends)]


def patch_file_name(number: int, subject: str) -> str:
    """`NNNN-<slug of the subject>.patch`, the subject's `area:` prefix left out."""
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower().split(":", 1)[-1]).strip("-")[:48]
    return f"{number:04d}-{slug or 'patch'}.patch"


def _without_identity(git: Git, sha: str, message: str) -> str:
    """The same commit (tree, parents, author) with `message`."""
    fields = git.out("log", "-1", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%P", sha)
    name, email, date, parents = fields.split("\0")
    return commit_tree(
        git, f"{sha}^{{tree}}", parents.split(), message, author=(name, email), date=date
    )
