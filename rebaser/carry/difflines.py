"""The lines a patch expects and the lines it adds, per file, compared by content.

Only meaningful lines count: `)`, `else:` or `return` exist everywhere, so a line needs two
words to say anything about where a change came from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from rebaser.series.patches import Patch, parsed_diff

_WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True)
class FileLines:
    created: bool  # the patch creates the file
    expected: frozenset[str]  # context and removed lines (its preimage)
    added: frozenset[str]


def meaningful(line: str) -> bool:
    return len(_WORD_RE.findall(line)) >= 2


def file_lines(patch: Patch) -> dict[str, FileLines]:
    """Per file the patch changes (deleted files left out), stripped meaningful lines."""
    return _file_lines(patch.raw)


@functools.lru_cache(maxsize=256)  # asked again for every later patch that fails
def _file_lines(raw: bytes) -> dict[str, FileLines]:
    result = {}
    for patched in parsed_diff(raw.decode("utf-8")):
        if patched.is_removed_file:
            continue
        lines = [line for hunk in patched for line in hunk if meaningful(line.value)]
        result[patched.path] = FileLines(
            created=patched.is_added_file,
            expected=frozenset(line.value.strip() for line in lines if not line.is_added),
            added=frozenset(line.value.strip() for line in lines if line.is_added),
        )
    return result


def present_lines(text: Optional[str]) -> frozenset[str]:
    """The stripped lines of a file's text (none for a file that does not exist)."""
    return frozenset(line.strip() for line in (text or "").splitlines())
