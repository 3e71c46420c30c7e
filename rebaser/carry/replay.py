"""The series' own commits, rebuilt on its recorded base, so each patch can be cherry-picked.

A patch is a diff against its recorded base: the series' `@base` plus the earlier patches.
Rebuilding that chain exactly (no fuzz, no merge) gives each patch its own commit, and a
cherry-pick of that commit lets git's ort merge carry it onto any other tip, with rename
detection and whole-tree context, as `git rebase` would.

The commits are built in the target repository without a worktree (a temporary index, then
`commit-tree` with the patch's author and date, so they are reproducible) and remembered
under `refs/forkkit/replay/`, keyed by the base and the patches' bytes: a ref for each commit
built alone, one for the last of a chain built at once (it keeps the chain).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Callable, Optional

from rebaser.errors import RebaserError
from rebaser.repo import refs, tempdirs
from rebaser.repo.git import Git, commit_tree
from rebaser.series.patches import Patch, Series
from rebaser.carry.fastbuild import build_commits, from_blobs
from rebaser.upstream import pypi_cache


def recorded_base(series: Series, repo: Git, progress: Callable[[str], None]) -> Optional[str]:
    """The series' `@base` as a commit of `repo`, or None when it cannot be had (then patches
    fall back to a per-file 3-way apply).

    `git:<sha>` must be a commit of `repo`; a PyPI release is materialised in the cache and,
    when `repo` is another repository, fetched into it (objects copied, so commits made there
    never depend on the cache staying around).
    """
    if series.base is not None and series.base.commit is not None:
        sha = repo.rev_parse(series.base.commit)
        if sha is None:
            progress(f"the series' {series.base} is not in {repo.path}: no cherry-picks")
        return sha
    spec = series.base.release if series.base else None
    if spec is None or spec.version is None:
        return None
    cache = pypi_cache(spec.package)
    tag = f"refs/tags/{cache.tag(spec.version)}"
    if (found := repo.rev_parse(tag)) is not None:
        return found  # `repo` is the release cache itself
    local = refs.pypi_base(spec.package, spec.version)
    if (found := repo.rev_parse(local)) is not None:
        return found
    try:
        if cache.cached(spec.version) is None:
            progress(f"fetching the series' base {spec} for cherry-picks")
            cache.materialise(spec.version)
    except RebaserError as error:  # offline: cherry-picks fall back to 3-way and codemods
        progress(f"the series' base {spec} is unavailable ({error}): no cherry-picks")
        return None
    repo.run("fetch", "--quiet", "--no-tags", str(cache.repo_dir), f"+{tag}:{local}")
    return repo.rev_parse(local)


class Replay:
    """Each patch's commit on its recorded base.

    First all at once in one fast-import where the repository has the patches' blobs
    (fastbuild); the patches after that, on first use: one temporary index follows the
    series, and to build patch j it takes the patches since the last one built in one
    `git apply --cached` call.
    """

    def __init__(
        self, repo: Git, base_sha: str, patches: list[Patch], *, remember: bool = True
    ) -> None:
        """`remember`: keep the commits under refs/forkkit/replay/ (not for commits whose
        objects `repo` reads from another repository through its env)."""
        self.repo = repo
        self.remember = remember
        self.base_sha = base_sha
        self.patches = patches
        self._applied = -1  # the index holds the base plus patches[: _applied + 1]
        self._index: dict[str, str] = {}  # GIT_INDEX_FILE of the private index, once read
        self._index_commit: Optional[str] = None  # a commit with the index's tree
        self._batch_tried = False
        self._chain: list[str] = []
        self._prefetch: Optional[threading.Thread] = None
        self._failure: Optional[BaseException] = None
        self._refs = _refs(base_sha, patches)
        self._cache: Optional[dict[str, str]] = None if remember else {}
        self._skipped: set[int] = set()  # patches that did not apply on their recorded base
        # The index's commits descend from one built around a gap: off the series' chain.
        self._off_chain = False
        self._from_blobs: dict[int, Optional[str]] = {}  # pick_commit's, by position

    def prefetch(self) -> None:
        """Start commits() in a thread: it needs only the repository, so it runs while the
        caller creates the worktree (git processes on both sides)."""
        if self._batch_tried or not self.remember:
            return
        self._batch_tried = True
        self._prefetch = threading.Thread(target=self._collect, name="forkkit-replay")
        self._prefetch.start()

    def commits(self) -> list[str]:
        """The patches' commits as one first-parent chain on the base, for as many patches
        from the first as that can be had at once (remembered, or built by fastbuild): the
        commits a fast lane may carry."""
        if self._prefetch is not None:
            self._prefetch.join()
            self._prefetch = None
            if self._failure is not None:
                raise self._failure
        if not self._batch_tried and self.remember:  # fast-import writes refs
            self._batch_tried = True
            self._build()
        return self._chain

    def _collect(self) -> None:
        try:
            self._build()
        except BaseException as failure:  # raised again by commits(), in the caller
            self._failure = failure

    def _build(self) -> None:
        """Reuse the remembered chain (its last commit's ref keeps it), or build it with
        fastbuild."""
        cached = self._cached()
        if (last := cached.get(self._refs[-1])) is not None:
            chain = self.repo.out(
                "rev-list", "--reverse", "--first-parent", f"{self.base_sha}..{last}"
            ).split()
            # one commit a patch (a chain built around a gap also holds a recorded base)
            self._chain = chain if len(chain) == len(self._refs) else []
        else:
            self._chain = build_commits(self.repo, self.base_sha, self.patches, self._refs)
            if self._chain:
                cached[self._refs[len(self._chain) - 1]] = self._chain[-1]
                self._applied, self._index_commit = len(self._chain) - 1, self._chain[-1]

    def commit_of(self, patch: Patch) -> Optional[str]:
        """The patch's own commit, or None when it does not apply exactly on its recorded
        base (it was not exported from that base: `refresh` keeps a patch the branch left
        off as it was). The patches after such a one are built without it, as a branch
        that lacks it was exported."""
        position = self.patches.index(patch)
        if position < len(self.commits()):  # had in one go (or the prefetch's result)
            return self._chain[position]
        if (cached := self._cached().get(self._refs[position])) is not None:
            return cached
        if position in self._skipped or position <= self._applied:
            return None  # only asked again after the index moved on: not in a normal apply
        if not self._index:  # a private index, made when first needed
            folder = tempdirs.Owned("forkkit-replay-")  # a kill leaves it: swept next time
            weakref.finalize(self, folder.release)
            self._index = {"GIT_INDEX_FILE": str(folder.path / "index")}
            self.repo.run("read-tree", self._index_commit or self.base_sha, env=self._index)
            self._index_commit = self._index_commit or self.base_sha
        gap = self._apply_gap(position)
        parent = self._index_commit
        if gap:  # a commit with the recorded base's tree: the merge base of the cherry-pick
            parent = self._commit(parent, f"recorded base of {patch.name}\n", patch)
            self._off_chain = True
        self._applied = position
        if not self._apply([patch]):
            self._skipped.add(position)
            if gap:  # the index holds the gap: the next patch's parent
                self._index_commit = parent
            return None
        commit = self._commit(parent, patch.message, patch)
        self._index_commit = commit
        # Its ref names the patch's commit on the chain of the earlier ones, as a later
        # Replay reads it (the chain below it, a range-diff's old side): not one built on
        # a commit holding a gap's patches, nor on one descending from such a commit.
        if self.remember and not self._off_chain:
            self.repo.run("update-ref", self._refs[position], commit)
        self._cached()[self._refs[position]] = commit
        return commit

    def pick_commit(self, patch: Patch) -> Optional[str]:
        """The commit a cherry-pick of the patch merges: its own (commit_of), else, for a
        patch that does not apply on its recorded base, one made from the blobs its diff
        names (fastbuild.from_blobs: ort and the structured merge then merge it, where a
        per-file `git apply --3way` did); None when the repository lacks them."""
        own = self.commit_of(patch)
        position = self.patches.index(patch)
        if own is not None or position not in self._skipped:
            return own
        if position not in self._from_blobs:
            side = {"GIT_INDEX_FILE": self._index["GIT_INDEX_FILE"] + "-blobs"}
            self._from_blobs[position] = from_blobs(self.repo, self.base_sha, patch, side)
        return self._from_blobs[position]

    @property
    def did_not_apply(self) -> list[str]:
        """The patches found not to apply on their recorded base (so far)."""
        return [self.patches[position].name for position in sorted(self._skipped)]

    def _apply_gap(self, position: int) -> list[Patch]:
        """The patches between the last one built and `position` into the index (one `git
        apply`, else one at a time, leaving out those that do not apply); those it holds."""
        gap = [
            (number, patch)
            for number, patch in enumerate(self.patches[:position])
            if number > self._applied and number not in self._skipped
        ]
        if not gap or self._apply([patch for _, patch in gap]):
            return [patch for _, patch in gap]
        held = []
        for number, patch in gap:
            if self._apply([patch]):
                held.append(patch)
            else:
                self._skipped.add(number)
        return held

    def _apply(self, patches: list[Patch]) -> bool:
        paths = [str(patch.path) for patch in patches]
        return self.repo.run("apply", "--cached", *paths, env=self._index, check=False).ok

    def _commit(self, parent: str, message: str, patch: Patch) -> str:
        tree = self.repo.out("write-tree", env=self._index)
        return commit_tree(self.repo, tree, [parent], message, author=patch.person, date=patch.date)

    def _cached(self) -> dict[str, str]:
        if self._cache is None:
            listing = self.repo.out(
                "for-each-ref", "--format=%(refname) %(objectname)", refs.REPLAY
            )
            self._cache = dict(line.split() for line in listing.splitlines())
        return self._cache


def _refs(base_sha: str, patches: list[Patch]) -> list[str]:
    """Each patch's commit's ref, keyed by the base and the bytes of the patches up to it.
    The key's "3:" leaves behind the refs of earlier versions, some of which named a
    commit built around a gap or on one (see commit_of)."""
    key = hashlib.sha1(b"3:" + base_sha.encode())
    names = []
    for patch in patches:
        key.update(patch.raw)
        names.append(refs.replay(key.hexdigest()))
    return names
