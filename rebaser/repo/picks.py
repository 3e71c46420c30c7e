"""Cherry-picks made as merges of trees, in a scratch repository: no index, no worktree, no
sequencer state.

A cherry-pick of commit C onto a tree is ort's merge of that tree and C's tree with C's
parent as the base. git 2.39's `merge-tree` finds the base itself, so each pick merges two
commits made for it: the tree it lands on and C's tree, both children of a root commit
holding C's parent's tree (loose objects, repo/commits.py). The merges run in one
long-running git process (repo/merge_tree.py). The fast lane carries a series this way
(steps/fastlane.py), and the bisection probes upstream's commits (carry/collision.py).
"""

from __future__ import annotations

import threading
from typing import Optional

from rebaser.errors import RebaserError
from rebaser.repo.commits import Commits
from rebaser.repo.git import FOLLOW_RENAMES, Git
from rebaser.repo.merge_tree import Merged, TreeMerges
from rebaser.repo.subtrees import Subtrees, Unreadable


class TreePicks:
    """Picks of commits onto trees; threads may share it. Close it (or use it as a context
    manager) to end its git processes."""

    def __init__(self, git: Git) -> None:
        self.commits = Commits(git)
        self.subtrees = Subtrees(self.commits)
        # One merge process for each thread that picks: probes in threads run side by side.
        self._merges: dict[int, TreeMerges] = {}
        # (commit, the paths its trees hold) -> (its base, its change)
        self._pairs: dict[tuple[str, Optional[frozenset[str]]], tuple[str, str]] = {}
        self._changed: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        self.count = 0  # merges made
        self.uncut = False  # a pick asked to cut its trees merged them whole (git failed)

    def __enter__(self) -> "TreePicks":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.attributes_changed()
        self.subtrees.close()
        self.commits.close()

    def attributes_changed(self) -> None:
        """The worktree's `.gitattributes` files changed: the next merge reads them in a
        new git process (a running one keeps the merge drivers it read)."""
        with self._lock:
            running, self._merges = list(self._merges.values()), {}
        for merges in running:
            merges.close()

    def _merges_here(self) -> TreeMerges:
        """This thread's merge process (as `git rebase` and the per-patch path merge)."""
        with self._lock:
            merges = self._merges.get(threading.get_ident())
            if merges is None:
                merges = TreeMerges(self.commits.git, FOLLOW_RENAMES)
                self._merges[threading.get_ident()] = merges
            return merges

    def pick(
        self, tree: str, commit: str, within: Optional[frozenset[str]] = None
    ) -> Optional[Merged]:
        """`commit` cherry-picked onto `tree` (a tree's name: an id, `<commit>^{tree}`): the
        merged tree and the stages of each file in conflict; None when git could not merge
        (not a conflict). `within`: the paths whose conflicts are asked; the three trees
        hold only those where they can (repo/subtrees.py), else all of them."""
        ours = self._cut(tree, within) if within is not None else None
        key = (commit, within if ours is not None else None)
        with self._lock:
            pair = self._pairs.get(key)
        if pair is None:
            pair = self._pair(commit, key[1])
            if pair is None:  # the commit's trees could not be cut: none are
                ours, key = None, (commit, None)
                pair = self._pair(commit, None)
            assert pair is not None
            with self._lock:
                self._pairs[key] = pair
        if within is not None and ours is None:
            self.uncut = True
        base, change = pair
        ours = self.commits.commit(ours or tree, [base], "upstream\n")
        merged = self._merges_here().merge(ours, change)
        with self._lock:
            self.count += 1
        return merged

    def _pair(self, commit: str, within: Optional[frozenset[str]]) -> Optional[tuple[str, str]]:
        """The commits a pick of `commit` merges: its parent's tree as the base, its own tree
        on it (each cut to `within`); None where they cannot be cut."""
        trees = [f"{commit}^^{{tree}}", f"{commit}^{{tree}}"]
        if within is not None:
            cut = [self._cut(name, within) for name in trees]
            if None in cut:
                return None
            trees = cut  # type: ignore[assignment]
        base = self.commits.commit(trees[0], [], "base\n")
        return base, self.commits.commit(trees[1], [base], "patch\n")

    def _cut(self, tree: str, within: frozenset[str]) -> Optional[str]:
        try:
            return self.subtrees.cut(tree, within)
        except Unreadable:  # the whole trees
            return None

    def changed(self, commit: str) -> Optional[frozenset[str]]:
        """The paths `commit` changes from its first parent (renames as a deletion and an
        addition); None where git cannot tell."""
        with self._lock:
            found = self._changed.get(commit)
        if found is None:
            try:
                found = frozenset(
                    self.commits.git.changed_paths("--no-renames", f"{commit}^", commit)
                )
            except RebaserError:  # a root commit, or git failed
                return None
            with self._lock:
                self._changed[commit] = found
        return found

    def replaced(self, tree: str, files: dict[str, bytes]) -> str:
        """The id of `tree` with `files` (path -> bytes; each a file `tree` holds) in place,
        their modes kept, each stored as `git add` stores it (its attributes applied: line
        endings, filters): a pick's conflicts resolved."""
        git = self.commits.git
        index = git.path / ".git" / f"forkkit-pick-{threading.get_ident()}.index"
        env = {"GIT_INDEX_FILE": str(index)}
        paths = list(files)
        try:
            git.run("read-tree", tree, env=env)
            listed = git.run("--literal-pathspecs", "ls-files", "-s", "-z", "--", *paths, env=env)
            modes = {}
            for entry in filter(None, listed.stdout.split("\0")):
                meta, path = entry.split("\t", 1)
                modes[path] = meta.split()[0]
            info = "".join(
                f"{modes[path]} {_blob(git, path, files[path])}\t{path}\0" for path in paths
            )
            git.run("update-index", "-z", "--index-info", env=env, stdin=info.encode())
            return git.out("write-tree", env=env)
        finally:
            index.unlink(missing_ok=True)


def _blob(git: Git, path: str, data: bytes) -> str:
    """The blob `git add` makes of `data` at `path` (the worktree's attributes for it)."""
    return git.run("hash-object", "-w", f"--path={path}", "--stdin", stdin=data).stdout.strip()
