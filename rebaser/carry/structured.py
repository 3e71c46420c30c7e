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

import ast
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rebaser.carry import pymerge, pysyntax
from rebaser.repo.git import Git

_cache: dict[tuple[str, ...], tuple[str, list[str], list[str], bool]] = {}


@dataclass(frozen=True)
class FileResult:
    """What the structured merge did to one conflicted file."""

    path: str
    resolved: list[str] = field(default_factory=list)  # "line N: reason", one per hunk
    kept: list[str] = field(default_factory=list)  # why each other hunk stays

    @property
    def clean(self) -> bool:
        return bool(self.resolved) and not self.kept


def resolve_conflicts(git: Git, *, label: str = "patch", sparse: bool = False) -> list[FileResult]:
    """Resolve what can be resolved of the conflicted Python files in `git`'s worktree
    (`sparse`: a worktree whose other files are not written, as the scratch repository)."""
    stages = _stages(git)
    if not stages:
        return []
    blobs = _blobs(git, [sha for versions in stages.values() for sha in versions])
    results, clean = [], []
    for path, (base, ours, theirs) in sorted(stages.items()):
        key = (path, base, ours, theirs, label)
        if key not in _cache:
            _cache[key] = _merge(git, path, blobs[base], blobs[ours], blobs[theirs], label)
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


def _stages(git: Git) -> dict[str, tuple[str, str, str]]:
    """Conflicted Python files with a base, upstream's and the patch's version."""
    out = git.run("ls-files", "-u", "-z").stdout
    found: dict[str, dict[int, str]] = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        _, sha, stage = meta.split()
        found.setdefault(path, {})[int(stage)] = sha
    return {
        path: (versions[1], versions[2], versions[3])
        for path, versions in found.items()
        if path.endswith(".py") and set(versions) == {1, 2, 3}
    }


def _blobs(git: Git, shas: list[str]) -> dict[str, Optional[str]]:
    """The blobs' texts (None: not UTF-8)."""
    texts: dict[str, Optional[str]] = {}
    for sha, data in git.blobs(shas).items():
        try:
            texts[sha] = data.decode("utf-8") if data is not None else None
        except UnicodeDecodeError:
            texts[sha] = None
    return texts


def _merge(
    git: Git, path: str, base: Optional[str], ours: Optional[str], theirs: Optional[str], label: str
) -> tuple[str, list[str], list[str], bool]:
    """(the file's new text, resolved, kept, whether every hunk resolved)."""
    if base is None or ours is None or theirs is None:
        return "", [], ["the file is not UTF-8"], False
    with tempfile.TemporaryDirectory(prefix="forkkit-merge-") as folder:
        files = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(folder) / name).write_text(text, encoding="utf-8")
            files.append(str(Path(folder) / name))
        labels = ["-L", "HEAD", "-L", "base", "-L", label]
        diff3 = Git(folder).run("merge-file", "-p", "--diff3", *labels, *files, check=False).stdout
    try:
        merged = pymerge.merge(
            base, ours, theirs, diff3, modules=_ModuleReader(git).names, path=path
        )
    except (ValueError, RecursionError) as error:  # never worse than git: its conflict
        return "", [], [f"the structured merge failed: {error}"], False
    if not merged.resolved:
        return "", [], merged.kept, False
    return pymerge.as_style(merged.text, 7, diff3=False), merged.resolved, merged.kept, merged.clean


class _ModuleReader:
    """The top-level names of a module of the repository as upstream's side (HEAD) has it;
    None when it is not a module file of the repository (or a package)."""

    def __init__(self, git: Git) -> None:
        self.git = git

    def names(self, module: str, importer: str) -> Optional[set[str]]:
        for candidate in _module_paths(module, importer):
            shown = self.git.run("cat-file", "blob", f"HEAD:{candidate}", check=False)
            if not shown.ok:
                continue
            if candidate.endswith("__init__.py"):
                return None  # a package: its submodules are names too; not checked
            try:
                return pysyntax.module_names(ast.parse(shown.stdout))
            except (SyntaxError, ValueError):
                return None
        return None


def _module_paths(module: str, importer: str) -> list[str]:
    level = len(module) - len(module.lstrip("."))
    parts = [part for part in module.lstrip(".").split(".") if part]
    if level:
        folder = Path(importer).parent
        for _ in range(level - 1):
            folder = folder.parent
        parts = [*(p for p in folder.parts if p not in (".", "")), *parts]
    if not parts:
        return []
    stem = "/".join(parts)
    return [f"{stem}.py", f"{stem}/__init__.py"]
