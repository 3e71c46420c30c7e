"""The upstream commit a stopped patch collides with, found by bisection.

For a patch that stops on the target: the first commit on upstream's first-parent history
between the series' recorded base and the target at which the patch, on top of the patches
before it that applied, stops applying. As git-imerge finds where a pair of commits
conflicts, each probe is one cherry-pick made as a merge of trees (repo/picks.py: ort in
`git merge-tree`, in memory, no worktree or index) in the scratch repository.

Only commits that touch the files it conflicts in can change whether it conflicts there, so
the bisection runs over those: a handful of probes, milliseconds each. The
patches before it that applied and touch the files it conflicts in are merged onto each
probed commit first (without them the probe would conflict with their changes; the others
cannot change what conflicts there). A probe counts as "stops" when
one of the files the patch conflicts in on the target conflicts; for a blocked patch those
are the files the patch it needs never touches ("its own conflicts").
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Collection, Optional, Sequence

from rebaser.repo.git import Git, nameable
from rebaser.repo.history import RangeHistory
from rebaser.repo.picks import TreePicks
from rebaser.repo.subtrees import Unreadable
from rebaser.series.patches import Patch

_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_HUNK_FUNCTION = re.compile(r"^@@ [^@]* @@\s*(?:async\s+)?(?:def|class)\s+(\w+)")


@dataclass(frozen=True)
class Found:
    sha: str
    subject: str
    what: str
    probes: int  # merges it took (for the docs' timing)


class Bisector:
    """Probes of one series' patches against upstream commits, in a scratch repository that
    reads the real repository's objects. Close it (or use it as a context manager): its
    picks run in git processes of their own."""

    def __init__(
        self,
        scratch: Git,
        recorded_base: str,
        target: str,
        commit_of: Callable[[Patch], Optional[str]],
        history: Optional[RangeHistory] = None,
        ways: int = 1,
    ) -> None:
        """`history`: upstream's commits from the recorded base to the target, when the
        caller reads them for other questions too. `ways`: the probes a bisection's round
        makes at once (on cores to spare: a bisection is a chain of probes, and the last
        stopped patch's chain ended the apply on 16 cores)."""
        self.git = scratch
        self.history = history or RangeHistory(scratch, recorded_base, target)
        self.base, self.target = recorded_base, target
        self.commit_of = commit_of
        self._picks = TreePicks(scratch)  # probes run in threads (carry/triage.py)
        self._ways = max(1, ways)
        self._pool = (  # the other probes of a round: threads kept, each its merge process
            ThreadPoolExecutor(self._ways - 1, thread_name_prefix="forkkit-probe")
            if self._ways > 1
            else None
        )

    @property
    def merges(self) -> int:
        """The merges made so far (for the progress line)."""
        return self._picks.count

    def __enter__(self) -> "Bisector":
        return self

    def __exit__(self, *_: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._picks.close()

    def conflicts(
        self,
        patch: Patch,
        before: Sequence[Patch],
        at: Optional[str] = None,
        asked: Collection[str] = (),
    ) -> Optional[list[str]]:
        """The files the patch conflicts in when cherry-picked onto `at` (default: the
        target) with those of `before` (earlier patches) merged first that apply there (one
        that does not would blame its own conflict on this patch); None when the patch has
        no commit. With `asked`, only whether those conflict is asked: the merges read
        only the files that can decide it (_within)."""
        tree = f"{at or self.target}^{{tree}}"
        within = (
            self._within(patch, before, tree, asked) if asked and not self._picks.uncut else None
        )
        for earlier in before:
            merged = self._pick(tree, earlier, within)
            if merged is not None and not merged[1]:
                tree = merged[0]
        picked = self._pick(tree, patch, within)
        if within is not None and self._picks.uncut:  # a pick of the chain merged whole
            return self.conflicts(patch, before, at)
        return None if picked is None else picked[1]

    def _within(
        self, patch: Patch, before: Sequence[Patch], tree: str, asked: Collection[str]
    ) -> Optional[frozenset[str]]:
        """The files whose merge decides whether the patch, onto `tree` after `before`,
        conflicts in `asked`: those, every file the patches before it change (whether each
        applies), and each of its own files that one of the three trees lacks (one it adds
        or deletes). A file all three hold merges alone: on the real fork a probe of 0020
        merged 19 files for 5. None, the whole trees, where ort may pair a file with one
        outside them: `tree` lacks a file a patch changes (a rename upstream), or a side
        lacks the folder of one (a folder renamed); or git cannot tell what a commit
        changes, or a name is not one the cut can read."""
        commits = [self.commit_of(one) for one in (patch, *before)]
        changes = [self._picks.changed(commit) for commit in commits if commit is not None]
        if len(changes) < len(commits) or None in changes:
            return None
        holds = self._picks.subtrees.holds
        paths = set(asked)
        try:
            for path in paths:
                holds(tree, path)  # a name the cut cannot read: Unreadable
            for number, (commit, changed) in enumerate(zip(commits, changes)):
                sides = (f"{commit}^", commit, tree)
                for path in changed:  # type: ignore[union-attr]
                    there = [holds(side, path) for side in sides]
                    folder = path.rpartition("/")[0]
                    if there[0] and not there[2]:
                        return None
                    if (
                        folder
                        and holds(sides[0], folder)
                        and not all(holds(side, folder) for side in sides[1:])
                    ):
                        return None
                    if number or not all(there):
                        paths.add(path)
        except Unreadable:
            return None
        return frozenset(paths)

    def first_colliding(
        self, patch: Patch, before: Sequence[Patch], files: Sequence[str]
    ) -> Optional[Found]:
        """The first upstream commit (first-parent) at which the patch conflicts in one of
        `files`; None when it already does on the recorded base (not upstream's doing)."""
        # A commit that leaves these files as they were (a rename into one adds it), and
        # those the patch deletes or renames away, leaves their conflicts as they were: the
        # patch's other files would add probes, not answers.
        candidates = self.history.first_parent_touching(sorted({*files, *self._gone(patch)}))
        if not candidates:
            return None
        wanted = set(files)
        before = touching(before, wanted)
        probed: list[int] = []

        def stops(at: int) -> bool:
            probed.append(at)
            found = self.conflicts(patch, before, candidates[at], wanted)
            return found is None or bool(wanted & set(found))  # None: no commit, no bisection

        low, high = -1, len(candidates) - 1  # low applies (the recorded base), high stops
        while True:
            low, high = self._narrowed(low, high, stops)
            # Upstream reverted it, and the patch applies again there: a later commit is
            # what it collides with at the target.
            revert = self._reverted_in(candidates[high], candidates[high + 1 :])
            if revert is None or stops(at := candidates.index(revert)):
                break
            low, high = at, len(candidates) - 1
        sha = candidates[high]
        subject = self.git.out("log", "-1", "--format=%s", sha)
        return Found(sha, subject, self.what(sha, patch, files), len(probed))

    def _narrowed(self, low: int, high: int, stops: Callable[[int], bool]) -> tuple[int, int]:
        """Neighbours between `low` (applies) and `high` (stops) where the answer changes:
        each round probes `ways` evenly spaced points at once (one: the middle) and keeps
        the span before the first that stops."""
        while high - low > 1:
            count = min(self._ways, high - low - 1)
            points = [low + (high - low) * n // (count + 1) for n in range(1, count + 1)]
            others = [self._pool.submit(stops, at) for at in points[1:]] if self._pool else []
            answers = [stops(points[0]), *(other.result() for other in others)]
            for at, stopped in zip(points, answers):
                if stopped:
                    high = at
                    break
                low = at
        return low, high

    def _gone(self, patch: Patch) -> list[str]:
        """The files the patch's commit deletes (a rename's old name too)."""
        commit = self.commit_of(patch)
        changed = self._picks.changed(commit) if commit is not None else None
        try:
            holds = self._picks.subtrees.holds
            return [path for path in changed or () if not holds(commit, path)]  # type: ignore
        except Unreadable:
            return list(patch.touched_paths)  # as before the cut: the patch's own files

    def _reverted_in(self, sha: str, later: Sequence[str]) -> Optional[str]:
        """The first of `later` (candidates after `sha`) that says it reverts `sha`, as
        `git revert` writes it."""
        if not later:
            return None
        out = self.git.out(
            "log", "--first-parent", "--format=%H", "-F", f"--grep=This reverts commit {sha}",
            f"{sha}..{self.target}",
        )  # fmt: skip
        reverts = set(out.split())
        return next((commit for commit in later if commit in reverts), None)

    def what(self, sha: str, patch: Patch, files: Sequence[str]) -> str:
        """What a commit did to the patch's files: modified (those in conflict, else any),
        renamed, deleted; a function the patch edits moved to another file; for a merge,
        the commits it brought that touch them."""
        changes = self._name_status(sha, sorted({*patch.touched_paths, *files}))
        modified = [path for status, path in changes if status == "M"]
        shown = (
            [path for path in modified if path in files] if _names_any(changes, files) else modified
        )
        said = []
        for status, path in changes:
            if status == "M" and path in shown:
                said.append(f"modified {path}")
            elif status != "M":
                said.append(f"{status} {path}")
        gone = [path for status, path in changes if status in ("M", "deleted")]
        said += self._moved(sha, patch, gone) + self._brought(sha, files)
        return "; ".join(said) or "changed what the patch's files depend on"

    def _name_status(self, sha: str, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(M | deleted | added | renamed, path or "old to new") of the commit's
        first-parent diff, limited to `paths`."""
        fields = self.git.run(
            "--literal-pathspecs",
            "diff",
            "--name-status",
            "-M",
            "-z",
            f"{sha}^1",
            sha,
            "--",
            *paths,
        ).stdout.split("\0")
        found, position = [], 0
        while position < len(fields) - 1:
            status = fields[position]
            if status.startswith("R"):
                found.append(("renamed", f"{fields[position + 1]} to {fields[position + 2]}"))
                position += 3
                continue
            kind = {"D": "deleted", "A": "added"}.get(status, "M")
            found.append((kind, fields[position + 1]))
            position += 2
        return found

    def _brought(self, sha: str, files: Sequence[str]) -> list[str]:
        """For a merge on the first-parent line (a sync of another branch): the commits it
        brought that touch the files in conflict, the likely culprits."""
        if not self.git.run("rev-parse", "--verify", "--quiet", f"{sha}^2", check=False).ok:
            return []
        out = self.git.run(
            "--literal-pathspecs",
            "log",
            "--no-merges",
            "--format=%h %s",
            f"{sha}^1..{sha}^2",
            "--",
            *files,
            check=False,
        ).stdout.splitlines()
        if not out:
            return []
        if len(out) > 3:
            return [f"a merge: it brought {len(out)} commits touching them ({out[-1][:60]} ...)"]
        return ["a merge: it brought " + "; ".join(line[:80] for line in reversed(out))]

    def _moved(self, sha: str, patch: Patch, paths: list[str]) -> list[str]:
        """Functions or classes the patch edits that the commit took out of their file and
        added to exactly one other file (a name added in several, like `forward`, says
        nothing)."""
        edited = _edited_functions(patch)
        if not edited or not paths:
            return []
        removed, kept = self._defs(sha, paths=paths)
        names = sorted(n for n in edited & removed.keys() if len(kept.get(n, [])) < len(removed[n]))
        if not names:
            return []
        pattern = r"^\s*(async\s+)?(def|class)\s+(" + "|".join(names) + r")\b"
        holding = self._holding(sha, names)
        if holding == []:
            return []
        _, added = self._defs(sha, options=["-G", pattern], paths=holding or ())
        found = []
        for name in names:
            elsewhere = sorted({path for path in added.get(name, []) if path not in removed[name]})
            if len(elsewhere) == 1:
                found.append(f"moved {name}() to {elsewhere[0]}")
        return found

    def _holding(self, sha: str, names: Sequence[str]) -> Optional[list[str]]:
        """The files the commit changed whose new version holds one of `names` (only there
        can it have added a def of one): a merge of another branch changes hundreds of
        files, and the pickaxe diffed them all (0.4 to 0.6 s a question on Megatron-LM).
        None when they cannot be named on a command line (the pickaxe reads all)."""
        changed = nameable(self.git.run("diff", "--name-only", "-z", f"{sha}^1", sha).stdout)
        if changed is None:
            return None
        if not changed:  # no file to search (an empty pathspec would search them all)
            return []
        found = self.git.run(
            "--literal-pathspecs",
            "grep",
            "-l",
            "-z",
            "-F",
            *(option for name in names for option in ("-e", name)),
            sha,
            "--",
            *changed,
            check=False,
        ).stdout
        return [path.removeprefix(f"{sha}:") for path in filter(None, found.split("\0"))]

    def _defs(
        self, sha: str, options: Sequence[str] = (), paths: Sequence[str] = ()
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """The functions and classes a commit's diff removes and adds, by file (one diff
        for both)."""
        diff = self.git.run(
            "--literal-pathspecs",
            "diff",
            "-U0",
            "--no-color",
            "--no-ext-diff",  # the neutral diff.external (repo/git.py) is no command to run
            "--no-textconv",
            *options,
            f"{sha}^1",
            sha,
            "--",
            *paths,
        ).stdout
        found: dict[str, dict[str, list[str]]] = {"-": {}, "+": {}}
        path = {"-": "", "+": ""}
        for line in diff.splitlines():
            if line.startswith("+++ ") or line.startswith("--- "):
                name = line[4:].rstrip("\t")  # git ends a name that holds a space with a tab
                if name != "/dev/null":
                    # a name git quotes (bytes, controls) is kept as git spells it, unquoted
                    path[line[0]] = (name[1:-1] if name.startswith('"') else name)[2:]
                continue
            if line[:1] in found and (match := _DEF.match(line[1:])):
                found[line[0]].setdefault(match.group(1), []).append(path[line[0]])
        return found["-"], found["+"]

    def _pick(
        self, tree: str, patch: Patch, within: Optional[frozenset[str]] = None
    ) -> Optional[tuple[str, list[str]]]:
        """The patch's commit merged onto `tree` as a cherry-pick (the trees cut to `within`):
        (the merged tree, the files in conflict); None when the patch has no commit."""
        commit = self.commit_of(patch)
        if commit is None:
            return None
        merged = self._picks.pick(tree, commit, within)
        return None if merged is None else (merged.tree, merged.conflicted)


def touching(patches: Sequence[Patch], files: set[str]) -> list[Patch]:
    """The patches that change one of `files`: only they change whether a pick conflicts
    there (merged first in a probe, the others would only cost a merge each)."""
    return [patch for patch in patches if files & set(patch.touched_paths)]


def _names_any(changes: list[tuple[str, str]], files: Sequence[str]) -> bool:
    """Whether any change is about one of `files` (a rename names two paths)."""
    return any(file in path for _, path in changes for file in files)


def _edited_functions(patch: Patch) -> set[str]:
    """The functions and classes whose lines the patch changes: the nearest `def` or `class`
    above each changed line inside its hunk, else the one git names in the hunk's header."""
    found: set[str] = set()
    enclosing: Optional[str] = None
    for line in patch.raw.decode("utf-8", "replace").splitlines():
        if line.startswith("@@"):
            header = _HUNK_FUNCTION.match(line)
            enclosing = header.group(1) if header else None
            continue
        if line[:1] not in (" ", "-", "+") or line[:4] in ("--- ", "+++ "):
            continue
        defined = _DEF.match(line[1:])
        if defined and line[:1] != "+":
            enclosing = defined.group(1)
        elif line[:1] in "+-" and enclosing:
            found.add(enclosing)
    return found
