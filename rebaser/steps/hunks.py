"""Why a hunk does not apply: where its context was expected, and what upstream has there now."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import unidiff

_MAX_DIFF_LINES = 24


@dataclass
class HunkReport:
    file: str
    header: str  # "@@ -1383,6 +1383,11 @@ ..." as in the patch
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
        return (
            f"{where}: {self.header} does not match; closest upstream text here "
            f"({self.similarity:.0%} similar):\n" + "\n".join(self.current_vs_expected)
        )


def diagnose(patch_text: str, tree: Path) -> list[HunkReport]:
    """Check every hunk of a patch against the files in `tree`."""
    reports = []
    for patched in unidiff.PatchSet(patch_text):
        path = patched.source_file[2:] if patched.source_file.startswith("a/") else patched.path
        target = tree / path
        if patched.is_added_file:
            continue
        if not target.exists():
            for hunk in patched:
                reports.append(HunkReport(path, _header(hunk), False, 0, 0.0, []))
            continue
        current = target.read_text(encoding="utf-8", errors="replace").splitlines()
        for hunk in patched:
            expected = [line.value.rstrip("\n") for line in hunk.source_lines()]
            reports.append(_locate(path, hunk, expected, current))
    return reports


def _locate(path: str, hunk: unidiff.Hunk, expected: list[str], current: list[str]) -> HunkReport:
    size = len(expected)
    best_at, best_ratio = 0, -1.0
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(expected)
    for start in range(0, max(1, len(current) - size + 1)):
        window = current[start : start + size]
        if window == expected:
            return HunkReport(path, _header(hunk), True, start + 1, 1.0, [])
        matcher.set_seq1(window)
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_at, best_ratio = start, ratio
    window = current[best_at : best_at + size]
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
    return HunkReport(path, _header(hunk), False, best_at + 1, max(best_ratio, 0.0), diff)


def _header(hunk: unidiff.Hunk) -> str:
    return (
        f"@@ -{hunk.source_start},{hunk.source_length} "
        f"+{hunk.target_start},{hunk.target_length} @@"
    )
