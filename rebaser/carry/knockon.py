"""Knock-on failures: a patch that fails only because an earlier patch is missing.

When a patch is dropped or skipped, later patches may edit lines that only it added. Their
failure is not upstream's doing, and the report must say which patch they need. Nor is an
empty pick then proof that upstream has a patch's change: the missing patch may be what
took away what this one adds back.
"""

from __future__ import annotations

from typing import Callable, Optional

from rebaser.repo.git import Git
from rebaser.series.patches import Patch
from rebaser.carry.difflines import file_lines, present_lines
from rebaser.carry.rawdiff import decoded, parse_diff


# Files' texts on the branch, read at once (None: no such file).
Reader = Callable[[list[str]], dict[str, Optional[str]]]


def needed_patch(patch: Patch, missing: list[Patch], read: Reader) -> Optional[Patch]:
    """The latest missing patch that added lines (or a file) this patch's preimage needs and
    the branch lacks (`read` gives the files' texts there); None when the patch fails for
    reasons of its own."""
    needs = {path: lines for path, lines in file_lines(patch).items() if not lines.created}
    shared = {path for earlier in missing for path in file_lines(earlier) if path in needs}
    texts = read(sorted(shared)) if shared else {}  # one git process for them all
    for earlier in reversed(missing):
        for path, lines in file_lines(earlier).items():
            if path not in needs:
                continue
            text = texts[path]
            if lines.created and text is None:
                return earlier
            if (needs[path].expected & lines.added) - present_lines(text):
                return earlier
    return None


def head_reader(git: Git) -> Reader:
    """The files' texts at `git`'s HEAD (where a pick stopped, the branch before it)."""

    def read(paths: list[str]) -> dict[str, Optional[str]]:
        found = git.blobs([f"HEAD:{path}" for path in paths])
        return {path: decoded(found[f"HEAD:{path}"]) for path in paths}

    return read


def emptied_by(patch: Patch, missing: list[Patch]) -> Optional[Patch]:
    """The latest missing patch that removed a line this one adds, in a file of both: with
    it missing, this one's pick may be empty (or it may reverse-apply) because that line
    is still there, not because upstream made the change."""
    adds = _changed_lines(patch, b"+")
    for other in reversed(missing):
        shared = set(patch.touched_paths) & set(other.touched_paths)
        if not shared:
            continue
        removed = _changed_lines(other, b"-")
        if adds is None or removed is None:  # a diff rawdiff cannot read: by its files
            return other
        if any(adds.get(path, set()) & removed.get(path, set()) for path in shared):
            return other
    return None


def _changed_lines(patch: Patch, sign: bytes) -> Optional[dict[str, set[bytes]]]:
    """The lines a patch adds (b"+") or removes (b"-"), stripped, per file; None when
    rawdiff cannot read its diff."""
    files = parse_diff(patch.raw)
    if files is None:
        return None
    return {
        diff.path: {
            text.strip() for hunk in diff.hunks for kind, text in hunk.lines if kind == sign
        }
        for diff in files
    }
