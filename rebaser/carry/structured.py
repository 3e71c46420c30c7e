"""The structured merge (carry/pymerge.py) applied to a merge git left in conflict: after
ort's cherry-pick in the apply's worktree, and on the fast lane's picks (merges of trees in
the scratch repository), before anything else is tried.

git keeps the three versions of a conflicted file in its index (stages 1, 2, 3; a merge of
trees lists them too). For each Python file with all three, the hunks are found with `git
merge-file --diff3` and resolved where they are mechanical. In a worktree, a file whose
hunks all resolve is written and added, one with real hunks left is written with only those
as markers and stays unmerged; the lane puts the resolved files into the pick's tree. Other
conflicts (a file deleted on one side, renamed on both, not Python) are git's, untouched.

Why not a merge driver: git's ort merges file contents with the histogram diff, a driver
can only call `git merge-file`, which before git 2.44 knows only the Myers diff, and the
two disagree: on the real fork a patch ort merges cleanly conflicts with Myers
(docs/real-fork.md). A driver would change what git itself merges; this pass only ever
touches what git left in conflict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rebaser.carry import filemerges
from rebaser.repo.git import Git
from rebaser.repo.merge_tree import Stage

_cache: dict[tuple[str, ...], filemerges.Outcome] = {}


@dataclass(frozen=True)
class FileResult:
    """What the structured merge did to one conflicted file."""

    path: str
    resolved: list[str] = field(default_factory=list)  # "line N: reason", one per hunk
    kept: list[str] = field(default_factory=list)  # why each other hunk stays

    @property
    def clean(self) -> bool:
        return bool(self.resolved) and not self.kept


@dataclass(frozen=True)
class Unmerged:
    """What git left unmerged (in an index, read in one `git ls-files -u`, or in a merge of
    trees): every path, and the three versions of each Python file that has them all."""

    paths: list[str]  # sorted
    stages: dict[str, tuple[str, str, str]]  # path -> base, upstream's, the patch's blob

    @classmethod
    def read(cls, git: Git) -> "Unmerged":
        out = git.run("ls-files", "-u", "-z").stdout
        entries = []
        for entry in filter(None, out.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, sha, number = meta.split()
            entries.append(Stage(mode, sha, int(number), path))
        return cls.of(entries)

    @classmethod
    def of(cls, entries: list[Stage]) -> "Unmerged":
        """From the stages of the files in conflict (an index's, or a merge of trees')."""
        found: dict[str, dict[int, str]] = {}
        for stage in entries:
            found.setdefault(stage.path, {})[stage.number] = stage.blob
        stages = {
            path: (versions[1], versions[2], versions[3])
            for path, versions in found.items()
            # (a name that is not UTF-8 was read with U+FFFD in it: no file of that name)
            if path.endswith(".py") and set(versions) == {1, 2, 3} and "\ufffd" not in path
        }
        return cls(sorted(found), stages)

    def after(self, results: list[FileResult]) -> list[str]:
        """The paths still unmerged once resolve_conflicts() gave `results` (it adds the
        files whose every hunk it resolved)."""
        added = {result.path for result in results if result.clean}
        return [path for path in self.paths if path not in added]


def resolve_conflicts(
    git: Git,
    *,
    label: str = "patch",
    sparse: bool = False,
    busy: int = 1,
    unmerged: Optional[Unmerged] = None,
) -> list[FileResult]:
    """Resolve what can be resolved of the conflicted Python files in `git`'s worktree
    (`sparse`: a worktree whose other files are not written; `unmerged`: the index's
    conflicts, when the caller has read them already): each file with a hunk resolved is
    written, and added where every hunk is."""
    merged = merge_conflicts(git, unmerged or Unmerged.read(git), label=label, busy=busy)
    clean = []
    for result, text in merged:
        if result.resolved:
            (git.path / result.path).write_text(text, encoding="utf-8")
            if result.clean:
                clean.append(result.path)
    if clean:
        git.run("add", *(["--sparse"] if sparse else []), "--", *clean)
    return [result for result, _ in merged]


def merge_conflicts(
    git: Git,
    unmerged: Unmerged,
    *,
    label: str = "patch",
    busy: int = 1,
    aside: Optional[filemerges.Aside] = None,
) -> list[tuple[FileResult, str]]:
    """The structured merge of each conflicted Python file that has all three versions:
    what it did, and the file's new text where it resolved a hunk; nothing is written.
    `busy`: the cores this process keeps busy, beside which helper processes may merge
    some of them; `aside`: the helper of a caller with threads beside it, which takes
    them where none is wanted (filemerges.merged)."""
    stages = unmerged.stages
    if not stages:
        return []
    blobs = _blobs(git, [sha for versions in stages.values() for sha in versions])
    keys = [(path, *versions, label) for path, versions in sorted(stages.items())]
    missing = [key for key in keys if key not in _cache]
    jobs = [(path, *(blobs[sha] for sha in shas), label) for path, *shas, label in missing]
    _cache.update(zip(missing, filemerges.merged(git, jobs, busy=busy, aside=aside)))
    found = []
    for key in keys:
        text, resolved, kept, _ = _cache[key]  # every hunk resolved: FileResult.clean
        found.append((FileResult(key[0], resolved, kept), text))
    return found


def notes(results: list[FileResult], *, applied: bool) -> str:
    """For a row's detail: every hunk resolved, with its reason (and, when the patch still
    stops, why the others were kept)."""
    done = [f"{r.path} {reason}" for r in results for reason in r.resolved]
    kept = [f"{r.path} {reason}" for r in results for reason in r.kept]
    if applied:
        return "structured merge: " + "; ".join(done)
    if not done:
        return f"the structured merge kept every hunk ({'; '.join(kept)})" if kept else ""
    return (
        f"the structured merge resolved {len(done)} hunk(s) ({'; '.join(done)}) and kept "
        f"{len(kept)} ({'; '.join(kept)})"
    )


def _blobs(git: Git, shas: list[str]) -> dict[str, Optional[str]]:
    """The blobs' texts (None: not UTF-8)."""
    texts: dict[str, Optional[str]] = {}
    for sha, data in git.blobs(shas).items():
        try:
            texts[sha] = data.decode("utf-8") if data is not None else None
        except UnicodeDecodeError:
            texts[sha] = None
    return texts
