"""Knock-on failures: a patch that fails only because an earlier patch is missing.

When a patch is dropped or skipped, later patches may edit lines that only it added. Their
failure is not upstream's doing, and the report must say which patch they need. Nor is an
empty pick then proof that upstream has a patch's change: the missing patch may be what
took away what this one adds back.
"""

from __future__ import annotations

from typing import Callable, Optional

from rebaser.series.patches import Patch
from rebaser.carry.difflines import file_lines, present_lines


def needed_patch(
    patch: Patch, missing: list[Patch], read: Callable[[str], Optional[str]]
) -> Optional[Patch]:
    """The latest missing patch that added lines (or a file) this patch's preimage needs and
    the branch lacks (`read` gives a file's text there, None when it does not exist); None
    when the patch fails for reasons of its own."""
    needs = {path: lines for path, lines in file_lines(patch).items() if not lines.created}
    # Missing patches often touch the same file; each read is a git process.
    texts: dict[str, Optional[str]] = {}
    for earlier in reversed(missing):
        for path, lines in file_lines(earlier).items():
            if path not in needs:
                continue
            if path not in texts:
                texts[path] = read(path)
            text = texts[path]
            if lines.created and text is None:
                return earlier
            if (needs[path].expected & lines.added) - present_lines(text):
                return earlier
    return None


def emptied_by(patch: Patch, missing: list[Patch]) -> Optional[Patch]:
    """The latest missing patch that touches a file of this one: a pick that is empty (or a
    patch that reverse-applies) with it missing may be empty because of it (it removed
    what this one adds back), not because upstream has the change."""
    files = set(patch.touched_paths)
    return next((other for other in reversed(missing) if files & set(other.touched_paths)), None)
