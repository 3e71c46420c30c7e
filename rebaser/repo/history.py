"""Which commits of a range touch some paths, asked for many sets of paths.

`git log base..target -- <paths>` walks the whole range again for every set of paths: on
Megatron-LM's `dev` (1,500 commits) 20 to 35 ms each, and a real fork's triage asked 29
sets, plus 18 `--first-parent` ones for its bisections. Past the first few questions, the
range is read once (each commit's parents, date, subject and changed files; a merge's
against each parent: 0.2 to 0.3 s there) and every later answer is worked out from it, the
same as git's, in git's order: git's default history simplification is reproduced (a merge
that changes none of the paths against one of its relevant parents is followed down the
first such parent only, so the commits of its other side are not listed), and so is the
order of git's walk (newest committer date first, ties in the order git met the commits: it
may differ from the order of an unlimited `git log` when dates tie or go backwards).

A parent is relevant to git when it is in the range, or the base itself; a parent of the
base is not; an older ancestor of the base is relevant or not depending on whether git's
walk marked it uninteresting before it met the merge (commit dates): a question whose
answer depends on one is asked to git. So is a question with no path or a path not in
git's canonical form ("", ".", "./a", "a//b"), which git normalises.
"""

from __future__ import annotations

import heapq
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, TypeVar

from rebaser.repo.git import Git

ASKED_ALONE = 4  # questions answered by a `git log` of their own before the range is read
_Answer = TypeVar("_Answer")
_META = re.compile(r"\n?:(\d{6}) (\d{6}) ")  # a `--raw -z` entry's modes, before its path


@dataclass
class _Commit:
    parents: list[str]
    date: int
    subject: str
    # per parent: what a pathspec matches among the files changed (see _keys)
    changed: list[frozenset[str]] = field(default_factory=list)


class _AskGit(Exception):
    """The answer depends on something the range's read cannot tell."""


class RangeHistory:
    """The commits in `base..target` (commit ids); threads may share it."""

    def __init__(self, git: Git, base: str, target: str, asked_alone: int = ASKED_ALONE) -> None:
        self.git, self.base, self.target = git, base, target
        self._alone = asked_alone
        self._commits: Optional[dict[str, _Commit]] = None
        self._bottom = ""  # the base's commit id, once read
        self._top = ""  # the target's commit id, once read
        self._base_parents: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def touching(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(sha, subject), newest first, as `git --literal-pathspecs log --no-merges
        --format='%H %s' base..target -- paths` lists them."""
        found = self._worked_out(paths, self._touching)
        if found is not None:
            return found
        out = self._log(["--no-merges", "-z", "--format=%H %s"], paths)
        records = [record.split(" ", 1) for record in out.split("\0") if record]
        return [(sha, subject) for sha, subject in records]

    def _touching(self, commits: dict[str, _Commit], wanted: set[str]) -> list[tuple[str, str]]:
        # git's walk: a queue by committer date, newest first, ties first come first served
        found: list[tuple[str, str]] = []
        queued = {self._top}
        queue = [(0, 0, self._top)]
        count = 0
        while queue:
            _, _, sha = heapq.heappop(queue)
            commit = commits.get(sha)
            if commit is None:  # outside the range
                continue
            if len(commit.parents) < 2:
                if not wanted.isdisjoint(commit.changed[0]):
                    found.append((sha, commit.subject))
                followed = commit.parents
            else:
                followed = commit.parents
                for parent, changed in zip(commit.parents, commit.changed):
                    if not wanted.isdisjoint(changed):
                        continue
                    relevant = self._relevant(parent)
                    if relevant is None:
                        raise _AskGit
                    if relevant:
                        followed = [parent]
                        break
            for parent in followed:
                if parent not in queued and parent in commits:
                    queued.add(parent)
                    count += 1
                    heapq.heappush(queue, (-commits[parent].date, count, parent))
        return found

    def first_parent_touching(self, paths: Sequence[str]) -> list[str]:
        """Commit ids, oldest first, as `git --literal-pathspecs log --first-parent
        --reverse --format=%H base..target -- paths` lists them (merges included)."""
        found = self._worked_out(paths, self._first_parent)
        if found is not None:
            return found
        return self._log(["--first-parent", "--reverse", "--format=%H"], paths).split()

    def _first_parent(self, commits: dict[str, _Commit], wanted: set[str]) -> list[str]:
        found = []
        sha: Optional[str] = self._top
        while sha in commits:
            commit = commits[sha]
            changed = not wanted.isdisjoint(commit.changed[0])
            if len(commit.parents) > 1 and changed:
                # git compares a merge with its first parent only, but counts its second
                # among the parents that decide: one relevant, after a first one that is
                # not, makes the merge TREESAME (not listed).
                first, second = (self._relevant(p) for p in commit.parents[:2])
                if first is None or (not first and second is None):
                    raise _AskGit
                changed = first or not second
            if changed:
                found.append(sha)
            sha = commit.parents[0] if commit.parents else None
        return found[::-1]

    def _worked_out(
        self, paths: Sequence[str], walk: Callable[[dict[str, _Commit], set[str]], _Answer]
    ) -> Optional[_Answer]:
        """`walk`'s answer from the range's read; None where git must answer (too few
        questions yet, a path git normalises, a parent only git's walk can judge)."""
        commits, wanted = self._read(), _wanted(paths)
        if commits is None or wanted is None:
            return None
        try:
            return walk(commits, wanted)
        except _AskGit:
            return None

    def _relevant(self, parent: str) -> Optional[bool]:
        """Whether git's simplification may follow a parent: one in the range or the base
        (its bottom), not a parent of the base; None: an older commit, which git's walk may
        or may not have marked uninteresting yet when it meets the merge."""
        if parent == self._bottom or parent in (self._commits or {}):
            return True
        if parent in self._base_parents:
            return False
        return None

    def _log(self, options: Sequence[str], paths: Sequence[str]) -> str:
        return self.git.out(
            "--literal-pathspecs", "log", *options, f"{self.base}..{self.target}", "--", *paths
        )

    def _read(self) -> Optional[dict[str, _Commit]]:
        """The range's commits, once enough questions came; None: ask git this time."""
        with self._lock:
            if self._commits is None:
                if self._alone > 0:
                    self._alone -= 1
                    return None
                ends = self.git.out(  # no name of a commit starts with "-"
                    "rev-parse", f"{self.base}^{{commit}}", f"{self.target}^{{commit}}",
                    f"{self.base}^@",
                ).split()  # fmt: skip
                self._bottom, self._top, self._base_parents = ends[0], ends[1], frozenset(ends[2:])
                self._commits = self._listed()
            return self._commits

    def _listed(self) -> dict[str, _Commit]:
        """Every commit of the range; a merge's files against each parent from one
        `git diff-tree --stdin` (`log -m` prints nothing for a parent the merge does not
        differ from, so its lists cannot be told apart)."""
        listing = self.git.run(
            "log",
            "--no-renames",  # a rename touches both names, as a pathspec sees it
            "--root",  # a root commit's files, whatever log.showRoot says
            "--raw",
            "-z",
            "--format=%x01%H %ct %P%x02%s",
            f"{self._bottom}..{self._top}",
        ).stdout
        commits: dict[str, _Commit] = {}
        for header, entries in _records(listing):
            fields, _, subject = header.partition("\x02")
            sha, date, *parents = fields.split()
            commit = _Commit(parents, int(date), subject)
            if len(parents) < 2:  # `log` shows no files for a merge
                commit.changed.append(_keys(entries))
            commits[sha] = commit
        pairs = [(sha, p) for sha, c in commits.items() if len(c.parents) > 1 for p in c.parents]
        if pairs:
            diffs = self.git.run(
                "diff-tree",
                "--stdin",
                "--always",  # a header for every pair, changed or not
                "-r",
                "--no-renames",
                "--raw",
                "-z",
                "--format=%x01",
                stdin="".join(f"{sha} {parent}\n" for sha, parent in pairs).encode(),
            ).stdout
            for (sha, _), (_, entries) in zip(pairs, _records(diffs), strict=True):
                commits[sha].changed.append(_keys(entries))
        return commits


def _records(listing: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(header, [(old mode, new mode, path)]) of `--raw -z` output whose headers start with
    \\x01: a path is the field after an entry's modes, whatever it holds."""
    records: list[tuple[str, list[tuple[str, str, str]]]] = []
    fields = listing.split("\0")
    position = 0
    while position < len(fields):
        field_ = fields[position]
        position += 1
        meta = _META.match(field_)
        if meta and records and position < len(fields):
            records[-1][1].append((meta.group(1), meta.group(2), fields[position]))
            position += 1
        elif field_.startswith("\x01"):
            records.append((field_[1:], []))
    return records


def _keys(entries: list[tuple[str, str, str]]) -> frozenset[str]:
    """What a literal pathspec matches among changed entries: a file by its name, and each
    folder it lies in with or without a trailing slash; a submodule with one too."""
    found: set[str] = set()
    for old, new, name in entries:
        found.add(name)
        if "160000" in (old, new):
            found.add(name + "/")
        while "/" in name:
            name = name.rpartition("/")[0]
            if name + "/" in found:  # a folder's key (a file's name alone says nothing)
                break
            found.update((name, name + "/"))
    return frozenset(found)


def _wanted(paths: Sequence[str]) -> Optional[set[str]]:
    """The paths as _keys spells them; None where git's reading of one would differ (no
    path: the whole tree; a path git normalises)."""
    wanted = set()
    for path in paths:
        name = path[:-1] if path.endswith("/") else path
        parts = name.split("/")
        if not name or any(part in ("", ".", "..") for part in parts):
            return None
        wanted.add(path)
    return wanted or None
