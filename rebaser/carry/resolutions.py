"""Remembered resolutions: a conflict a maintainer resolved once is resolved again by itself.

Like git rerere, but the record travels with the series (committed beside it), so CI and
colleagues replay it too:

    <series folder>/resolutions/<patch file>/<conflict id>/preimage    the conflict, normalised
    <series folder>/resolutions/<patch file>/<conflict id>/postimage   what it was resolved to

A conflict is normalised as rerere does it: marker labels and the common-ancestor section
dropped, the two sides in sorted order; its id is the one rerere gives it. When a patch stops
with conflicts, the files with their markers are snapshotted (in the worktree's git dir: the
index stages are gone once the user runs `git add`); `continue` pairs each snapshotted
conflict with the text that replaced it in the commit and records it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from rebaser.carry import linematch
from rebaser.repo.git import Git
from rebaser.series.confinement import RECORDS, read_record, record_parts, write_record_folder
from rebaser.series.patches import Patch, Series

FOLDER = RECORDS
_SNAPSHOT = "forkkit-conflicts.json"
_OURS, _BASE, _THEIRS, _END = "<<<<<<<", "|||||||", "=======", ">>>>>>>"


@dataclass(frozen=True)
class Conflict:
    """One conflict region of a file: its two sides, and where it sits (line indices)."""

    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    start: int
    end: int  # one past the closing marker

    @property
    def preimage(self) -> str:
        first, second = sorted(["".join(self.ours), "".join(self.theirs)])
        return f"{_OURS}\n{first}{_THEIRS}\n{second}{_END}\n"

    @property
    def id(self) -> str:
        """rerere's id for a one-conflict file: SHA-1 of both sides, sorted, NUL-terminated."""
        first, second = sorted(["".join(self.ours), "".join(self.theirs)])
        return hashlib.sha1(f"{first}\0{second}\0".encode()).hexdigest()


@dataclass(frozen=True)
class Replay:
    """What replay did: `replayed` is true when every conflict had a recorded resolution."""

    replayed: bool
    detail: str = ""  # for the report: what was replayed, or why a record did not match

    def __bool__(self) -> bool:
        return self.replayed


def folder_for(series: Series, patch: Patch) -> Path:
    return series.patches_dir / FOLDER / patch.name


def recorded_for(series: Series, patch: Patch) -> bool:
    """Whether the series holds resolutions of the patch's conflicts."""
    return folder_for(series, patch).is_dir()


def replay(worktree: Git, patch: Patch, series: Series) -> Replay:
    """Resolve the worktree's conflicts from the series' records, all or nothing; `git add`."""
    records = folder_for(series, patch)
    if not recorded_for(series, patch):  # most patches: no git process asked
        return Replay(False)
    paths = worktree.unmerged_paths()
    if not paths:
        return Replay(False)
    resolved: dict[str, str] = {}
    total = unknown = 0
    for path in paths:
        lines = _read_lines(worktree.path / path)
        conflicts = parse_conflicts(lines) if lines is not None else []
        if not conflicts:  # e.g. modified on one side, deleted on the other: no text to match
            unknown += 1
            continue
        found = {c.id: text for c in conflicts if (text := _recorded(series, patch, c)) is not None}
        total += len(conflicts)
        missing = [c for c in conflicts if c.id not in found]
        unknown += len(missing)
        if not missing:
            resolved[path] = _substitute(lines, conflicts, found)
    if unknown:
        return Replay(
            False,
            f"a recorded resolution exists ({records.relative_to(series.patches_dir)}) but did "
            f"not match: {unknown} of {max(total, unknown)} conflicts are new",
        )
    for path, text in resolved.items():
        (worktree.path / path).write_text(text, encoding="utf-8")
    worktree.run("add", "--", *paths)
    return Replay(True, f"{total} recorded conflict resolution(s) in {', '.join(paths)}")


def snapshot(worktree: Git, conflicts: Sequence[str]) -> None:
    """Keep the conflicted files (`conflicts`, the worktree's unmerged paths, which the stop
    has just listed) as they are at the stop, for `record` after the user's fix."""
    files = {}
    for path in conflicts:
        lines = _read_lines(worktree.path / path)
        if lines is not None and parse_conflicts(lines):
            files[path] = "".join(lines)
    target = _snapshot_file(worktree)
    if files:
        target.write_text(json.dumps(files, indent=1) + "\n", encoding="utf-8")
    else:
        target.unlink(missing_ok=True)


def record(worktree: Git, patch: Patch, series: Series) -> tuple[list[str], list[str]]:
    """Record how the committed fix (HEAD) resolved the snapshotted conflicts: their ids,
    and the files not recorded because the fix changed lines outside their conflicts too
    (a record holds a conflict's text only: replayed, those edits would be lost, or a line
    edited next to a conflict kept twice; git rerere merges the whole file instead)."""
    source = _snapshot_file(worktree)
    if not source.is_file():
        return [], []
    try:
        files = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        files = None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        source.unlink()  # not a snapshot rebaser wrote: nothing to record from it
        return [], []
    recorded, beyond = [], []
    for path, marked in files.items():
        shown = worktree.run("show", f"HEAD:{path}", check=False)
        if not shown.ok:  # the fix deleted the file: nothing to replay
            continue
        marked_lines = marked.splitlines(keepends=True)
        resolved_lines = shown.stdout.splitlines(keepends=True)
        pairs = _resolutions(marked_lines, resolved_lines)
        texts = {conflict.id: text for conflict, text in pairs}
        if _substitute(marked_lines, [c for c, _ in pairs], texts) != shown.stdout:
            beyond.append(path)
            continue
        for conflict, text in pairs:
            record_files = {"preimage": conflict.preimage, "postimage": text}
            write_record_folder(series.patches_dir, patch.name, conflict.id, record_files)
            recorded.append(conflict.id)
    source.unlink()
    return recorded, beyond


def parse_conflicts(lines: list[str]) -> list[Conflict]:
    """The conflict regions in a file's lines (merge and diff3 styles; labels ignored)."""
    conflicts: list[Conflict] = []
    section: Optional[str] = None
    start, ours, theirs = 0, [], []  # type: ignore[var-annotated]
    for number, line in enumerate(lines):
        marker = _marker(line)
        if marker == _OURS and section is None:
            section, start, ours, theirs = "ours", number, [], []
        elif marker == _BASE and section == "ours":
            section = "base"
        elif marker == _THEIRS and section in ("ours", "base"):
            section = "theirs"
        elif marker == _END and section == "theirs":
            conflicts.append(Conflict(tuple(ours), tuple(theirs), start, number + 1))
            section = None
        elif section == "ours":
            ours.append(line)
        elif section == "theirs":
            theirs.append(line)
    return conflicts


def _marker(line: str) -> Optional[str]:
    head = line[:7]
    if head in (_OURS, _BASE, _THEIRS, _END) and line[7:8] in ("", " ", "\n"):
        return head
    return None


def _resolutions(marked: list[str], resolved: list[str]) -> list[tuple[Conflict, str]]:
    """Each conflict of `marked` with the text that took its place in `resolved`.

    Lines outside the conflicts align with the resolved file (marker lines never do, so no
    aligned block crosses a conflict's edge); what lies between the aligned blocks around a
    conflict is its resolution.
    """
    blocks = linematch.matching_blocks(marked, resolved)
    pairs = []
    for conflict in parse_conflicts(marked):
        before = [b.b + b.size for b in blocks if b.size and b.a + b.size <= conflict.start]
        after = [b.b for b in blocks if b.size and b.a >= conflict.end]
        text = "".join(resolved[max(before, default=0) : min(after, default=len(resolved))])
        pairs.append((conflict, text))
    return pairs


def _recorded(series: Series, patch: Patch, conflict: Conflict) -> Optional[str]:
    """The recorded resolution of `conflict`, read without following a link; None when
    there is none."""
    pre, post = (record_parts(patch.name, conflict.id, name) for name in ("preimage", "postimage"))
    if not series.patches_dir.joinpath(*pre).parent.is_dir():
        return None
    if read_record(series.patches_dir, pre) != conflict.preimage:
        return None  # a hash collision, or an edited record: never replay it
    return read_record(series.patches_dir, post)


def _substitute(lines: list[str], conflicts: list[Conflict], texts: dict[str, str]) -> str:
    out, at = [], 0
    for conflict in conflicts:
        out.extend(lines[at : conflict.start])
        out.append(texts[conflict.id])
        at = conflict.end
    out.extend(lines[at:])
    return "".join(out)


def _read_lines(path: Path) -> Optional[list[str]]:
    """A conflicted file's lines; None for a link (never followed) or a file not text."""
    if path.is_symlink():
        return None
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return None


def _snapshot_file(worktree: Git) -> Path:
    return Path(worktree.out("rev-parse", "--absolute-git-dir")) / _SNAPSHOT
