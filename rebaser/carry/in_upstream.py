"""Has upstream already made a patch's change? Asked before a patch is declared failed.

Three signs, cheapest first: the patch reverse-applies on the new base; its cherry-pick is
empty (the caller sees that); an upstream commit between the series' recorded base and the
new base has the same `git patch-id --stable`. A weaker sign only earns a note: every line
the patch adds already exists in the file it touches ("possibly superseded").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from rebaser.repo.git import Git
from rebaser.series.patches import Patch
from rebaser.carry.difflines import file_lines, present_lines
from rebaser.carry.rawdiff import parse_diff


class Memo(Protocol):
    """Where what was learnt about upstream's history is kept between commands (the
    sequencer gives one: each `skip` or `continue` is a new process)."""

    def load(self) -> Optional[dict[str, Any]]: ...

    def save(self, data: dict[str, Any]) -> None: ...


class UpstreamHistory:
    """The upstream commits between the series' recorded base and the new base that touch
    the series' files: their patch-ids, and which touch which files."""

    def __init__(
        self,
        repo: Git,
        recorded_base: Optional[str],
        new_base: str,
        patches: list[Patch],
        memo: Optional[Memo] = None,
    ) -> None:
        """`patches`: the series'. A commit with a patch's patch-id touches exactly that
        patch's files: only such commits are diffed."""
        self.repo = repo
        self.recorded_base = recorded_base
        self.new_base = new_base
        self.patches = patches
        self.file_sets = {frozenset(patch.touched_paths) for patch in patches}
        self.memo = memo
        self._known: Optional[dict[str, Any]] = None  # "commits" and "ids", see _upstream
        self._own: Optional[dict[str, Optional[str]]] = None  # patch name -> its patch-id

    def commit_with_same_change(self, patch: Patch) -> Optional[str]:
        """The upstream commit whose patch-id equals the patch's, if any."""
        ids: dict[str, str] = self._upstream()["ids"]
        if not ids:  # no upstream commit can have it: no need for the patch's own id
            return None
        if self._own is None:  # the series' patch-ids, in one `git patch-id`
            self._own = own_patch_ids(self.repo, self.patches)
        own = self._own[patch.name] if patch.name in self._own else patch_id(self.repo, patch.raw)
        return ids.get(own) if own else None

    def touching(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(sha, subject) of the upstream commits that touch any of `paths` (files of the
        series), newest first."""
        wanted = set(paths)
        return [
            (sha, subject)
            for sha, subject, files in self._upstream()["commits"]
            if wanted.intersection(files)
        ]

    def _upstream(self) -> dict[str, Any]:
        """Read once, from the memo when an earlier command of the apply read it."""
        if self._known is None and self.memo:
            known = self.memo.load()
            self._known = known if known and set(known) == {"commits", "ids"} else None
        if self._known is None:
            commits = self._commits() if self._related() else []
            self._known = {"commits": commits, "ids": self._ids(commits)}
            if self.memo:
                self.memo.save(self._known)
        return self._known

    def _related(self) -> bool:
        base = self.recorded_base
        return (
            base is not None
            and self.repo.run("merge-base", "--is-ancestor", base, self.new_base, check=False).ok
        )

    def _ids(self, commits: list[list[Any]]) -> dict[str, str]:
        """patch-id -> the newest upstream commit with it, for the commits that touch
        exactly the files of a patch (only these can share a patch's patch-id)."""
        candidates = [sha for sha, _, files in commits if frozenset(files) in self.file_sets]
        if not candidates:
            return {}
        log = self.repo.run(
            "log",
            "--no-walk=unsorted",
            "--stdin",
            "-p",
            "--no-renames",
            "--no-color",
            "--format=commit %H",
            stdin="".join(f"{sha}\n" for sha in candidates).encode(),
        ).stdout
        by_patch_id: dict[str, str] = {}
        for line in self.repo.run("patch-id", "--stable", stdin=log.encode()).stdout.splitlines():
            change, commit = line.split()
            by_patch_id.setdefault(change, commit)
        return by_patch_id

    def _commits(self) -> list[list[Any]]:
        """[sha, subject, files] of the upstream commits (newest first) that touch the
        series' files, with every file each touches: names only, cheap."""
        paths = sorted(set().union(*self.file_sets))
        if not paths:
            return []
        listing = self.repo.run(
            "--literal-pathspecs",
            "log",
            "--no-merges",
            "--no-renames",
            "--full-diff",  # every file a commit touches, not only the series' ones
            "--name-only",
            "-z",  # names as they are, not quoted
            "--format=%x01%H%x02%s",
            f"{self.recorded_base}..{self.new_base}",
            "--",
            *paths,
        ).stdout
        commits = []
        for record in listing.split("\x01")[1:]:
            sha, _, rest = record.partition("\x02")
            subject, _, names = rest.partition("\0\n")
            commits.append([sha, subject, sorted(filter(None, names.split("\0")))])
        return commits


def own_patch_ids(repo: Git, patches: list[Patch]) -> dict[str, Optional[str]]:
    """Each patch's `git patch-id --stable` (None for one without a diff), in one call: each
    patch goes in under a made-up commit id, its position, which patch-id echoes back."""
    stream = b"".join(
        f"commit {number:040x}\n".encode() + patch.raw.split(b"\n", 1)[-1]
        for number, patch in enumerate(patches)
    )
    ids: dict[str, Optional[str]] = {patch.name: None for patch in patches}
    for line in repo.run("patch-id", "--stable", stdin=stream).stdout.splitlines():
        change, number = line.split()
        ids[patches[int(number, 16)].name] = change
    return ids


def patch_id(repo: Git, diff: bytes) -> Optional[str]:
    out = repo.run("patch-id", "--stable", stdin=diff).stdout.split()
    return out[0] if out else None


def reverse_applies(worktree: Git, patch: Patch) -> bool:
    """Whether the tree already holds the patch's postimage (so undoing it would apply)."""
    return worktree.run("apply", "--check", "--reverse", str(patch.path), check=False).ok


def superseded_in(
    read: Callable[[str], Optional[str]], patch: Patch, repo: Optional[Git] = None
) -> list[str]:
    """The files the patch edits that already contain every meaningful line it adds there
    (`read` gives a file's text before the patch); empty when the patch brings something new
    to every file. With `repo`, where the file the patch was made on (its preimage blob)
    is at hand: only when one of those lines is new to it, else the file had them all
    along and upstream added none."""
    added = {path: lines.added for path, lines in file_lines(patch).items() if not lines.created}
    found = [path for path, lines in added.items() if lines and lines <= present_lines(read(path))]
    if not found or repo is None:
        return found
    made_on = _preimages(repo, patch)
    return [
        path
        for path in found
        if (text := made_on.get(path)) is None or not added[path] <= present_lines(text)
    ]


def _preimages(repo: Git, patch: Patch) -> dict[str, Optional[str]]:
    """Each file as the patch found it where it was made (its `index` line's blob: the
    fork's base with the earlier patches), when the repository has that blob."""
    files = parse_diff(patch.raw) or []
    blobs = repo.blobs([diff.old_blob for diff in files if not diff.created])
    return {
        diff.path: data.decode(errors="replace")
        for diff in files
        if (data := blobs.get(diff.old_blob)) is not None
    }


def files_under(root: Path) -> Callable[[str], Optional[str]]:
    """A reader of the files in a worktree, for superseded_in."""

    def read(path: str) -> Optional[str]:
        file = root / path
        return file.read_text(errors="replace") if file.is_file() else None

    return read
