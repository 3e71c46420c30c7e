"""The structured merge (carry/pymerge.py) applied to a merge git left in conflict: after
ort's cherry-pick in the apply's worktree, and inside the fast lane's `git rebase` in the
scratch repository, before anything else is tried.

git keeps the three versions of a conflicted file in its index (stages 1, 2, 3). For each
Python file with all three, the hunks are found with `git merge-file --diff3` and resolved
where they are mechanical; a file whose hunks all resolve is written and added, one with
real hunks left is written with only those as markers and stays unmerged. Other conflicts
(a file deleted on one side, renamed on both, not Python) are git's, untouched.

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
    """What git left unmerged in an index, read in one `git ls-files -u`: every path, and
    the three versions of each Python file that has them all."""

    paths: list[str]  # sorted
    stages: dict[str, tuple[str, str, str]]  # path -> base, upstream's, the patch's blob

    @classmethod
    def read(cls, git: Git) -> "Unmerged":
        out = git.run("ls-files", "-u", "-z").stdout
        found: dict[str, dict[int, str]] = {}
        for entry in filter(None, out.split("\0")):
            meta, path = entry.split("\t", 1)
            _, sha, stage = meta.split()
            found.setdefault(path, {})[int(stage)] = sha
        stages = {
            path: (versions[1], versions[2], versions[3])
            for path, versions in found.items()
            if path.endswith(".py") and set(versions) == {1, 2, 3}
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
    (`sparse`: a worktree whose other files are not written, as the scratch repository;
    `busy`: the cores this process keeps busy, beside which helper processes may merge
    some of them (filemerges.merged);
    `unmerged`: the index's conflicts, when the caller has read them already)."""
    stages = (unmerged or Unmerged.read(git)).stages
    if not stages:
        return []
    blobs = _blobs(git, [sha for versions in stages.values() for sha in versions])
    keys = [(path, *versions, label) for path, versions in sorted(stages.items())]
    missing = [key for key in keys if key not in _cache]
    jobs = [(path, *(blobs[sha] for sha in shas), label) for path, *shas, label in missing]
    _cache.update(zip(missing, filemerges.merged(git, jobs, busy=busy)))
    results, clean = [], []
    for key in keys:
        path = key[0]
        text, resolved, kept, done = _cache[key]
        results.append(FileResult(path, resolved, kept))
        if resolved:
            (git.path / path).write_text(text, encoding="utf-8")
            if done:
                clean.append(path)
    if clean:
        git.run("add", *(["--sparse"] if sparse else []), "--", *clean)
    return results


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
