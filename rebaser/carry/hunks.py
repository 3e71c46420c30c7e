"""Why a hunk does not apply: where its context was expected, and what upstream has there now.

Only hunks git itself rejects are described (and, after a 3-way merge, only those in files
left with conflicts). A hint points at upstream text only when it resembles the hunk's
context enough to help; below that the report says nothing similar is left.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import unidiff

from rebaser.carry.rawdiff import decoded, parse_diff, rejected_hunks
from rebaser.repo.git import Git
from rebaser.series.patches import parsed_diff

Reader = Callable[[str], Optional[str]]  # a file's text, None when there is no such file

_MAX_DIFF_LINES = 24
MIN_SIMILARITY = 0.5  # below this the "closest" text is noise, not a lead
_REJECTED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.MULTILINE)
_COMMON_LINE = 200  # a line found more often than this (blank, `return x`) places nothing
_CANDIDATES = 32  # best-voted window starts scored per hunk, besides the nominal one


@dataclass
class HunkReport:
    file: str
    header: str  # "@@ -1383,6 +1383,11 @@ ..." as in the patch
    start: int  # the hunk's first line in the file the patch was made against
    applies: bool
    found_at: int  # 1-based line of the best match in the current file (0: file missing)
    similarity: float
    current_vs_expected: list[str]  # unified diff: the patch's context vs upstream now

    def describe(self) -> str:
        if self.found_at == 0:
            return f"{self.file}: the file does not exist upstream"
        where = f"{self.file}:{self.found_at}"
        if self.applies:
            return f"{where}: {self.header} still matches here"
        if self.similarity < MIN_SIMILARITY:
            return (
                f"{self.file}: {self.header} does not match, and nothing upstream resembles its "
                "context (rewritten or removed?)"
            )
        return (
            f"{where}: {self.header} does not match; closest upstream text here "
            f"({self.similarity:.0%} similar):\n" + "\n".join(self.current_vs_expected)
        )


def failing_hunks(worktree: Git, patch_file: Path, conflicts: Sequence[str]) -> list[HunkReport]:
    """The hunks of a patch that git rejects on the worktree, each located and described.

    `conflicts`: files a 3-way merge left conflicted; when given, hunks in other files
    merged and are not reported.
    """
    check = worktree.run("apply", "--check", "--reject", "--verbose", str(patch_file), check=False)
    rejected = {(path, int(line)) for path, line in _REJECTED_RE.findall(check.stderr)}
    text = patch_file.read_bytes().decode("utf-8", errors="replace")  # its lines as written
    return _kept(diagnose(text, worktree.path, conflicts), rejected)


def hunks_in_texts(
    patch_raw: bytes, texts: Mapping[str, Optional[bytes]], conflicts: Sequence[str]
) -> Optional[list[HunkReport]]:
    """What failing_hunks says, from the files' bytes as the branch holds them (path ->
    bytes, None: no such file) instead of git and a clean worktree: the rejected hunks are
    found as `git apply --reject` finds them (rawdiff). None when rawdiff cannot read the
    patch (a rename, a binary or quoted path): then only git can tell."""
    files = parse_diff(patch_raw)
    if files is None:
        return None
    rejected = {
        (diff.path, hunk.old_start)
        for diff in files
        if not conflicts or diff.path in conflicts
        if (text := texts.get(diff.path)) is not None and not diff.created
        for hunk in rejected_hunks(text, diff)
    }

    return _kept(
        diagnose_with(
            patch_raw.decode("utf-8", errors="replace"),
            lambda path: decoded(texts.get(path)),
            conflicts,
        ),
        rejected,
    )


def _kept(reports: list[HunkReport], rejected: set[tuple[str, int]]) -> list[HunkReport]:
    """The hunks git rejected, and those not found at all (diagnose was given the files in
    conflict, when there are any: it reports theirs only)."""
    return [
        report
        for report in reports
        if report.found_at == 0 or (report.file, report.start) in rejected
    ]


def diagnose(patch_text: str, tree: Path, only: Sequence[str] = ()) -> list[HunkReport]:
    """Check every hunk of a patch against the files in `tree` (of the files `only`, if
    given)."""

    def read(path: str) -> Optional[str]:
        target = tree / path
        return target.read_text(encoding="utf-8", errors="replace") if target.exists() else None

    return diagnose_with(patch_text, read, only)


def diagnose_with(patch_text: str, read: Reader, only: Sequence[str] = ()) -> list[HunkReport]:
    """Check every hunk of a patch against the files `read` gives (of the files `only`, if
    given: a stop reports the hunks of its conflicted files, and locating the others in a
    3,000-line module costs as much as theirs)."""
    reports = []
    for patched in parsed_diff(_sections_for(patch_text, only)):
        path = patched.source_file[2:] if patched.source_file.startswith("a/") else patched.path
        if patched.is_added_file or (only and path not in only):
            continue
        text = read(path)
        if text is None:
            for hunk in patched:
                reports.append(
                    HunkReport(path, _header(hunk), hunk.source_start, False, 0, 0.0, [])
                )
            continue
        current = _indexed(text)
        for hunk in patched:
            expected = [line.value.rstrip("\n") for line in hunk.source_lines()]
            reports.append(_locate(path, hunk, expected, current))
    return reports


def _sections_for(patch_text: str, only: Sequence[str]) -> str:
    """The patch's file sections whose `diff --git` line may name one of `only` (the whole
    patch where none is given): unidiff reads each section alone, and reading a long patch
    whole for one conflicted file cost more than locating its hunks. A section whose names
    git quoted is always kept; the files are told exactly once read."""
    if not only:
        return patch_text
    sections = re.split(r"(?m)^(?=diff --git )", patch_text)[1:]  # lines end at "\n" only
    return "".join(
        section
        for section in sections
        if '"' in (header := section.partition("\n")[0]) or any(path in header for path in only)
    )


@functools.lru_cache(maxsize=32)  # the same file at the same tip, at stop after stop
def _indexed(text: str) -> "_IndexedFile":
    return _IndexedFile(text.splitlines())


class _IndexedFile:
    """A file's lines with the positions of each (whitespace-normalised) line, so locating a
    hunk costs about its own size, not the file's: 600 hunks in a 30,000-line file took 29 s
    when every hunk scanned every window."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.positions: dict[str, list[int]] = defaultdict(list)
        for number, line in enumerate(lines):
            self.positions[_normal(line)].append(number)

    def candidates(self, expected: list[str], nominal: int) -> list[int]:
        """Window starts worth scoring: the nominal one, and where the hunk's distinctive
        lines line up (starts voted for by the most lines)."""
        last_start = max(0, len(self.lines) - len(expected))
        votes: Counter[int] = Counter()
        for offset, line in enumerate(expected):
            found = self.positions.get(_normal(line), [])
            if len(found) <= _COMMON_LINE:
                votes.update(min(max(0, at - offset), last_start) for at in found)
        starts = [start for start, _ in votes.most_common(_CANDIDATES)]
        return sorted({min(max(0, nominal), last_start), *starts})


def _locate(
    path: str, hunk: unidiff.Hunk, expected: list[str], current: _IndexedFile
) -> HunkReport:
    size = len(expected)
    best_at, best_ratio = 0, -1.0
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(expected)
    for start in current.candidates(expected, hunk.source_start - 1):
        window = current.lines[start : start + size]
        if window == expected:
            return HunkReport(path, _header(hunk), hunk.source_start, True, start + 1, 1.0, [])
        matcher.set_seq1(window)
        # ratio() <= quick_ratio() <= real_quick_ratio(): a window whose bound cannot beat
        # the best so far is not worth difflib's full match (the same answer, a third of
        # the time on a real fork's stops).
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_at, best_ratio = start, ratio
    window = current.lines[best_at : best_at + size]
    diff = list(
        difflib.unified_diff(
            expected,
            window,
            "patch expects",
            f"upstream now (line {best_at + 1})",
            lineterm="",
            n=1,
        )
    )[:_MAX_DIFF_LINES]
    return HunkReport(
        path, _header(hunk), hunk.source_start, False, best_at + 1, max(best_ratio, 0.0), diff
    )


def _normal(line: str) -> str:
    return " ".join(line.split())


def _header(hunk: unidiff.Hunk) -> str:
    return (
        f"@@ -{hunk.source_start},{hunk.source_length} "
        f"+{hunk.target_start},{hunk.target_length} @@"
    )
