"""A git-format patch's diff, read byte for byte: each file's paths, blob ids, modes and hunks.

What the fast lane needs to build a patch's own commit without git (the blob ids of its
`index` lines) and to tell, without running `git apply`, whether the patch applies exactly
(apply_exactly: git apply's own search for a hunk's place, no fuzz). Anything this reader
does not know for certain (renames, quoted paths, abbreviated ids, binary hunks) makes it
answer None, and the caller takes git's own, slower path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

_INDEX_RE = re.compile(rb"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})(?: ([0-7]{6}))?$")
_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MODE_RE = re.compile(rb"^(new file|deleted file|old|new) mode ([0-7]{6})$")
_NO_NEWLINE = b"\\ No newline at end of file"
ABSENT = "0" * 40


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[tuple[bytes, bytes]]  # (b" ", b"-" or b"+", the line with its newline)

    @property
    def preimage(self) -> list[bytes]:
        return [text for kind, text in self.lines if kind != b"+"]

    @property
    def postimage(self) -> list[bytes]:
        return [text for kind, text in self.lines if kind != b"-"]

    @property
    def trailing_context(self) -> int:
        count = 0
        for kind, _ in reversed(self.lines):
            if kind != b" ":
                break
            count += 1
        return count


@dataclass
class FileDiff:
    path: str
    old_blob: str  # ABSENT for a created file
    new_blob: str  # ABSENT for a deleted file
    new_mode: Optional[str]  # None: unchanged
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def created(self) -> bool:
        return self.old_blob == ABSENT

    @property
    def deleted(self) -> bool:
        return self.new_blob == ABSENT


def diff_section(text: bytes) -> bytes:
    """The patch's diff: from its first `diff --git` line to the end."""
    at = text.find(b"\ndiff --git ")
    return text[at + 1 :] if at >= 0 else b""


def parse_diff(text: bytes) -> Optional[list[FileDiff]]:
    """Every file of the patch, or None when some part is beyond this reader."""
    sections = re.split(rb"^(?=diff --git )", diff_section(text), flags=re.MULTILINE)
    files = [_file(section) for section in sections if section]
    return None if not files or None in files else files  # type: ignore[return-value]


def _file(section: bytes) -> Optional[FileDiff]:
    lines = section.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    match = re.match(rb"^diff --git a/(\S+) b/(\S+)$", lines[0])
    if not match or match[1] != match[2]:
        return None  # a rename, a copy, or a path with spaces or quotes
    header = _extended_header(lines)
    if header is None:
        return None
    blobs, mode, number = header
    diff = FileDiff(match[1].decode(), *blobs, new_mode=mode)
    if number < len(lines):
        if lines[number : number + 2] != [b"--- " + _side(diff, b"a"), b"+++ " + _side(diff, b"b")]:
            return None
        number += 2
    while number < len(lines):
        hunk, number = _hunk(lines, number)
        if hunk is None:
            return None
        diff.hunks.append(hunk)
    return diff


def _extended_header(
    lines: list[bytes],
) -> Optional[tuple[tuple[str, str], Optional[str], int]]:
    """The blobs and mode the lines after `diff --git` name, and where they end; None for a
    header this reader does not take (binary, similarity, a mode change alone)."""
    blobs, mode, number = None, None, 1
    while number < len(lines) and not lines[number].startswith((b"@@", b"--- ")):
        line = lines[number]
        if found := _INDEX_RE.match(line):
            blobs = (found[1].decode(), found[2].decode())
            mode = found[3].decode() if found[3] else mode
        elif found := _MODE_RE.match(line):
            mode = found[2].decode() if found[1] != b"deleted file" else mode
        else:
            return None  # binary, similarity, or a header this reader does not know
        number += 1
    return (blobs, mode, number) if blobs is not None else None


def _side(diff: FileDiff, side: bytes) -> bytes:
    missing = diff.created if side == b"a" else diff.deleted
    return b"/dev/null" if missing else side + b"/" + diff.path.encode()


def _hunk(lines: list[bytes], number: int) -> tuple[Optional[Hunk], int]:
    match = _HUNK_RE.match(lines[number])
    if not match:
        return None, number
    old_count = int(match[2]) if match[2] is not None else 1
    new_count = int(match[4]) if match[4] is not None else 1
    hunk = Hunk(int(match[1]), int(match[3]), [])
    number += 1
    while old_count or new_count:
        if number >= len(lines) or not lines[number][:1] in (b" ", b"-", b"+"):
            return None, number
        kind, text = lines[number][:1], lines[number][1:] + b"\n"
        hunk.lines.append((kind, text))
        old_count -= kind != b"+"
        new_count -= kind != b"-"
        number += 1
        if number < len(lines) and lines[number] == _NO_NEWLINE:
            hunk.lines[-1] = (kind, text[:-1])
            number += 1
    if old_count < 0 or new_count < 0:
        return None, number
    return hunk, number


def decoded(data: Optional[bytes]) -> Optional[str]:
    """A file's bytes (None: no file) as the text the line checks read."""
    return data.decode("utf-8", errors="replace") if data is not None else None


def apply_exactly(text: Optional[bytes], diff: FileDiff) -> Optional[tuple[bytes, list[str]]]:
    """The file after `git apply` of this file's hunks (no fuzz), and git's offset notes
    ("hunk 1 at line 12 (offset +2)"); None where `git apply` would refuse."""
    if diff.created:  # git apply refuses to create a file that exists
        return _hunks_onto(b"", diff) if text is None else None
    if text is None:
        return None
    applied = _hunks_onto(text, diff)
    if applied is not None and diff.deleted and applied[0]:
        return None  # a deletion that leaves content behind
    return applied


def _hunks_onto(text: bytes, diff: FileDiff) -> Optional[tuple[bytes, list[str]]]:
    image = _Image(text)
    offsets = []
    for number, hunk in enumerate(diff.hunks, start=1):
        at, expected = image.place(hunk)
        if at < 0:
            return None
        if at != expected:
            offsets.append(f"hunk {number} at line {at + 1} (offset {at - expected:+d})")
    return b"".join(image.lines), offsets


def rejected_hunks(text: bytes, diff: FileDiff) -> list[Hunk]:
    """The hunks `git apply --reject` rejects on this file: each is placed as git places it
    (no fuzz), on the file as the hunks before it left it; a rejected one changes nothing."""
    image = _Image(text)
    return [hunk for hunk in diff.hunks if image.place(hunk)[0] < 0]


class _Image:
    """A file's lines as `git apply` patches them: lines a hunk wrote are not matched again."""

    def __init__(self, text: bytes) -> None:
        self.lines = text.splitlines(keepends=True)
        self.patched = [False] * len(self.lines)

    def place(self, hunk: Hunk) -> tuple[int, int]:
        """Apply `hunk` where git would: (the line it went to or -1, the line it expected)."""
        pre, post = hunk.preimage, hunk.postimage
        expected = hunk.new_start - 1 if hunk.new_start else 0
        at = _find(self.lines, self.patched, pre, expected, hunk)
        if at >= 0:
            self.lines[at : at + len(pre)] = post
            self.patched[at : at + len(pre)] = [True] * len(post)
        return at, expected


def _find(image: list[bytes], patched: list[bool], pre: list[bytes], line: int, hunk: Hunk) -> int:
    """git apply's find_pos: the nominal line, then alternately one further down and up."""
    match_beginning = hunk.old_start <= 1
    match_end = hunk.trailing_context == 0
    if match_beginning:
        line = 0
    elif match_end:
        line = len(image) - len(pre)
    if line < 0 or line > len(image):  # git compares unsigned: a negative line is past the end
        line = len(image)
    # git tries the lines in that order and takes the first that matches: the match nearest
    # the nominal line, the one below it on a tie. Only lines holding the preimage's first
    # line can match (found by list.index, in C: a rejected hunk used to test every line).
    starts = _starts(image, pre[0]) if pre else [line]
    matching = [
        at for at in starts if _matches(image, patched, pre, at, match_beginning, match_end)
    ]
    return min(matching, key=lambda at: (abs(at - line), at < line), default=-1)


def _starts(image: list[bytes], first: bytes) -> list[int]:
    found: list[int] = []
    try:
        while True:
            found.append(image.index(first, found[-1] + 1 if found else 0))
    except ValueError:
        return found


def _matches(
    image: list[bytes], patched: list[bool], pre: list[bytes], at: int, beginning: bool, end: bool
) -> bool:
    if at + len(pre) > len(image) or (end and at + len(pre) != len(image)):
        return False
    if beginning and at:
        return False
    return all(not patched[at + i] and image[at + i] == line for i, line in enumerate(pre))
