"""A run of patches carried as `git rebase` would carry them, in one git process.

Patch by patch, an apply costs several git processes (apply, commit, rev-parse, ...). On the
happy path that is most of its time, so a run of patches whose own commits are at hand
(Replay) is carried as `git rebase --onto <tip>` carries those commits, but each pick is a
merge of trees (repo/picks.py: ort in one long-running `git merge-tree`, renames followed)
and each commit is written as an object: no index, worktree or sequencer state to rewrite
at every pick or stop, which was most of `git rebase`'s time on a real fork. Each commit
keeps the patch's message and author and gets rebaser's committer with the patch's date:
the commit `git rebase --committer-date-is-author-date` makes, and exactly the one the
per-patch path makes. The lane stops where git stops (a conflict, an empty pick = upstream
has it); that patch goes through the per-patch path (exact/offset, cherry-pick,
resolutions, codemod, in upstream checks, keep-going), and the lane resumes after it.

Statuses come from two git calls afterwards. A patch is `clean` where the tree held its
preimage blobs, `offset` where `git apply` would have placed its hunks elsewhere
(rawdiff.apply_exactly, git's own search) and ort made the same file, else `cherry-pick`.
Where the exact apply would have made a different file than ort, ort's is kept
(`cherry-pick`: git rebase's result), as the per-patch path does.

The picks run in a scratch repository in memory (scratch.py): neither the apply's
worktree nor its branch moves until the lane's commits are known; then one checkout moves
the branch to the last one kept. Meanwhile the worktree's files, if none are written yet
(late_checkout), are written at the lane's start. While the lane runs, a marker in the
worktree's git dir names the scratch repository; after a kill, leave_interrupted() removes
it, and the recovery backs up whatever the worktree holds before it goes back to the last
recorded step (`rebaser continue` then redoes the lane, `abort` drops it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.carry import filemerges, structured
from rebaser.carry.knockon import head_reader, needed_patch
from rebaser.errors import RebaserError
from rebaser.repo import late_checkout
from rebaser.repo import scratch
from rebaser.repo.git import Git, picked_commit_text
from rebaser.repo.merge_tree import Merged, Stage
from rebaser.repo.picks import TreePicks
from rebaser.steps.records import (
    LEFT_OFF,
    StepResult,
    StepRow,
    StepStatus,
    cherry_picked,
    patch_row,
)
from rebaser.series.patches import Patch
from rebaser.carry.rawdiff import ABSENT, FileDiff, apply_exactly, decoded, parse_diff
from rebaser.carry.in_upstream import superseded_in

Texts = dict[str, Optional[bytes]]  # path -> its bytes before the patch (None: no file)
_Merged = dict[int, list[structured.FileResult]]  # what the structured merge did, by position
MARKER = "forkkit-fast-lane"  # in the worktree's git dir while a lane runs: branch, scratch


# Where git stopped at a patch (on a commit; what the structured merge did and kept; the
# files still in conflict, none for an empty pick): None, the lane ends there; or what gives
# the patch's row (None after all: the lane is cut there).
Judge = Callable[[Patch, Git, str, str, list[str]], Optional[Callable[[], Optional[StepRow]]]]


def carry(
    worktree: Git,
    git_dir: Path,
    branch: str,
    head: str,
    patches: list[Patch],
    commits: list[str],
    missing: Sequence[Patch] = (),
    judge: Optional[Judge] = None,
) -> tuple[list[StepResult], Optional[Handed]]:
    """Carry `patches` (their own commits `commits`, a first-parent chain) onto `head`, the
    branch's tip; as many as git's picks take and the status check keeps, each with its
    commit as the branch's tip after it. `missing`: patches left off the branch so far (a
    patch that needs one is not merged by syntax). Where git stops at a patch, `judge` (an
    apply that goes on, steps/lanestop.py) may give its row (left off the branch, or in
    upstream): the lane then goes on past it, as `git rebase --skip` would. Also the
    conflict the lane leaves to the per-patch path, if it does."""
    marker = git_dir / MARKER
    ended = threading.Event()  # the lane's: the files' writer gives up settling them
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="forkkit-lane") as pool:
        # The worktree's files, if not written yet, are written while the picks run
        # elsewhere; the last checkout then writes only what the lane changed.
        writing = pool.submit(_write_files, worktree, git_dir, ended)
        try:
            with scratch.repository(git_dir, head) as lane:
                marker.write_text(f"{branch}\n{lane.path}\n")
                merged, judged, handed = _sequence(
                    lane, head, patches, commits, list(missing), judge
                )
                # The commits' objects go to the repository (HEAD: the last commit kept,
                # also where it stopped) while the rows are worked out.
                back = pool.submit(scratch.bring_back, lane, worktree, "HEAD", head)
                results = _results(lane, head, patches, _carried(lane, head), judged, merged)
                back.result()
        finally:
            ended.set()
        writing.result()
    _move_branch(worktree, branch, results[-1].head if results else head)
    marker.unlink()
    return results, handed


@dataclass(frozen=True)
class Handed:
    """A patch git stopped at in conflict that the lane leaves to the per-patch path, and
    the files still in conflict after the structured merge (that path's cherry-pick onto
    the same commit meets the same ones), or the missing patch it needs (a knock-on: that
    path's check reads the same files)."""

    patch: Patch
    conflicts: list[str]
    needs: Optional[Patch] = None


def _write_files(worktree: Git, git_dir: Path, ended: threading.Event) -> None:
    """The worktree's files, and their index settled while the lane goes on."""
    if late_checkout.finish(worktree, git_dir):
        late_checkout.settle(worktree, git_dir, ended)


def _move_branch(worktree: Git, branch: str, tip: str) -> None:
    """The lane's one change to the worktree: its branch moves to the last commit kept."""
    worktree.run("checkout", "--quiet", "-B", branch, tip)


def _sequence(
    lane: Git,
    head: str,
    patches: list[Patch],
    commits: list[str],
    missing: list[Patch],
    judge: Optional[Judge],
) -> tuple[_Merged, dict[int, Optional[StepRow]], Optional[Handed]]:
    """The commits picked onto `head` one by one as `git rebase` picks them, each onto the
    last one kept, stopping where git stops (a conflict, an empty pick). Where a pick
    conflicts only in Python hunks the structured merge resolves, it goes on (what it did,
    by the patch's position); past the patches `judge` takes, too (their rows, by
    position). Last, the conflict it stops at for the per-patch path, if it does. The
    scratch repository's HEAD follows the last commit kept."""
    raw = lane.blobs([head, f"{commits[0]}~1", *commits], kind="commit")
    tip, tip_tree = head, _tree_of(raw[head])
    before = _tree_of(raw[f"{commits[0]}~1"])  # the tree each commit was made on
    merged: _Merged = {}
    verdicts: dict[int, Future[Optional[StepRow]]] = {}

    def left_off() -> list[Patch]:  # the patches missing so far, those judged in this lane too
        judged = [number for number, verdict in verdicts.items() if _left_off(verdict.result())]
        return missing + [patches[number] for number in judged]

    handed = None
    # The rows are worked out (Python, and upstream's history) while the picks go on.
    with (
        TreePicks(lane) as picks,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkkit-judge") as rows,
        # Going on past stops, the judge's and the triage's threads work beside the lane:
        # its merges go to a helper, off this process's lock (carry/filemerges.py).
        filemerges.Aside(lane) if judge else contextlib.nullcontext() as aside,
    ):
        for number, commit in enumerate(commits):
            own = _Own.read(raw[commit])
            if own is None:
                break  # a commit the lane cannot re-make byte for byte: the per-patch path's
            started_empty, before = own.tree == before, own.tree
            picked = Merged(tip_tree, []) if started_empty else picks.pick(tip_tree, commit)
            if picked is None or not (picked.clean or picked.stages):
                # git could not merge them, or stopped at a conflict of no file's (a folder
                # that upstream split): the per-patch path says why
                break
            tree, stages = picked.tree, picked.stages
            found: Optional[list[tuple[structured.FileResult, str]]] = None
            unmerged: list[str] = []  # the files still in conflict
            needed = None
            if stages:
                # Going on past stops, the judge's and the triage's threads keep two more
                # cores busy: helpers for the merge only beside those, else `aside`.
                busy = 1 if judge is None else 3
                found, unmerged, needed = _by_syntax(
                    lane, patches[number], stages, left_off, busy, aside
                )
                if found and not unmerged:
                    if _brings_attributes(patches[number]):  # the resolved files go under them
                        late_checkout.follow_attributes(lane, tree)
                    texts = {r.path: text.encode() for r, text in found if r.resolved}
                    tree, stages = picks.replaced(tree, texts), []
                    merged[number] = [result for result, _ in found]
            if not stages and (tree != tip_tree or started_empty):  # git keeps a commit
                tip, tip_tree = picks.commits.stored(own.on(tree, tip)), tree
                _stand_on(lane, tip, patches[number], picks)
                continue
            results = [result for result, _ in found or []]
            notes = structured.notes(results, applied=False)
            verdict = judge(patches[number], lane, tip, notes, unmerged) if judge else None
            if verdict is None:
                if found is not None:  # merged by syntax as far as it goes: a conflict
                    handed = Handed(patches[number], unmerged)
                elif needed is not None:
                    handed = Handed(patches[number], [], needed)
                break
            verdicts[number] = rows.submit(verdict)
    return merged, {number: verdict.result() for number, verdict in verdicts.items()}, handed


_PLAIN = [b"author", b"committer", b"tree"]  # a commit's headers besides its parents


@dataclass(frozen=True)
class _Own:
    """A patch's own commit, as the lane makes it again: its tree, author and message."""

    tree: str
    author: bytes  # name <email> seconds zone
    message: bytes

    @classmethod
    def read(cls, raw: Optional[bytes]) -> Optional["_Own"]:
        """None for what is no commit, or one with more than a tree, a parent, an author
        and a committer (a signature, an encoding: `git rebase` would drop or re-encode
        them)."""
        if raw is None:
            return None
        header, _, message = raw.partition(b"\n\n")
        fields = [line.split(b" ", 1) for line in header.split(b"\n")]
        if sorted({field[0] for field in fields} - {b"parent"}) != _PLAIN or len(fields) > 4:
            return None  # (one parent: the lane's commits are a first-parent chain)
        values = dict(field for field in fields if len(field) == 2)
        return cls(values[b"tree"].decode(), values[b"author"], message)

    def on(self, tree: str, parent: str) -> bytes:
        """The commit `git rebase --committer-date-is-author-date` makes of it with `tree` on
        `parent` (repo/git.py spells it)."""
        return picked_commit_text(tree, parent, self.author, self.message)


def _tree_of(raw: Optional[bytes]) -> str:
    """A commit's tree, from its text."""
    if raw is None or not raw.startswith(b"tree "):
        raise RebaserError("the fast lane could not read a commit it carries onto")
    return raw[5 : raw.index(b"\n")].decode()


def _stand_on(lane: Git, tip: str, patch: Patch, picks: TreePicks) -> None:
    """The scratch repository's HEAD at the last commit kept (what a knock-on check reads),
    and its `.gitattributes` files as that commit has them where the patch changed one:
    the merges read their drivers there, as `git rebase` reads them in its worktree."""
    # As git moves it (its lock, then a rename): a git process of the judge's thread that
    # starts meanwhile must never read a HEAD half written.
    lock = lane.path / ".git" / "HEAD.lock"
    lock.write_text(f"{tip}\n")
    os.replace(lock, lane.path / ".git" / "HEAD")
    if _brings_attributes(patch):
        late_checkout.follow_attributes(lane, tip)
        picks.attributes_changed()


def _brings_attributes(patch: Patch) -> bool:
    """Whether the patch changes a `.gitattributes` file."""
    return any(Path(path).name == ".gitattributes" for path in patch.touched_paths)


def _by_syntax(
    lane: Git,
    patch: Patch,
    stages: list[Stage],
    missing: Callable[[], list[Patch]],
    busy: int,
    aside: Optional[filemerges.Aside],
) -> tuple[Optional[list[tuple[structured.FileResult, str]]], list[str], Optional[Patch]]:
    """What the structured merge did to a pick that conflicts (`stages`: of its files in
    conflict), each file's new text, and the paths still in conflict after it; None where
    it is not tried: a patch that needs a missing one (a knock-on, which the per-patch path
    or the judge names: the patch it needs is the last value)."""
    unmerged = structured.Unmerged.of(stages)
    left = missing()
    if left and (needed := needed_patch(patch, left, head_reader(lane))) is not None:
        return None, unmerged.paths, needed
    found = structured.merge_conflicts(lane, unmerged, label=patch.name, busy=busy, aside=aside)
    return found, unmerged.after([result for result, _ in found]), None


def _left_off(row: Optional[StepRow]) -> bool:
    return row is not None and row.status in LEFT_OFF


def leave_interrupted(git_dir: Path) -> bool:
    """After a kill during a lane: remove its scratch repository and its marker. The
    worktree is left as it is (the user may have worked in it since): the recovery backs
    it up before anything resets it. Whether there was a lane to leave."""
    marker = git_dir / MARKER
    if not marker.is_file():
        return False
    _, *folder = marker.read_text(errors="replace").splitlines()
    if folder:
        scratch.remove(folder[0])
    marker.unlink()
    return True


@dataclass(frozen=True)
class _Change:
    """One path of one carried commit: its blob before and after (ABSENT: no file)."""

    before: str
    after: str


def _results(
    lane: Git,
    head: str,
    patches: list[Patch],
    changes: dict[str, dict[str, _Change]],
    judged: dict[int, Optional[StepRow]],
    merged: dict[int, list[structured.FileResult]],
) -> list[StepResult]:
    """The carried and judged patches, in order, up to the first whose status cannot be
    told (the lane is cut there) or that git left to the per-patch path; `merged`: what the
    structured merge did to a patch's pick."""
    order = _order(head, len(patches), list(changes), judged)
    diffs = {number: parse_diff(patches[number].raw) for number, _, commit in order if commit}
    names = [
        f"{parent}:{diff.path}"
        for number, parent, commit in order
        if commit
        for diff in diffs[number] or []
        if not diff.created
    ]
    texts = lane.blobs(names)
    results = []
    for number, parent, commit in order:
        row = judged.get(number)
        if commit is not None and (files := diffs[number]) is not None:
            before = {diff.path: texts.get(f"{parent}:{diff.path}") for diff in files}
            row = _row(patches[number], files, changes[commit], before, lane)
        if row is None:
            break
        results.append(StepResult(_structured(row, merged.get(number)), commit or parent))
    return results


def _structured(row: StepRow, results: Optional[list[structured.FileResult]]) -> StepRow:
    """The row of a patch whose conflicts the structured merge resolved inside the lane,
    as the per-patch path writes it."""
    if not results or row.status != StepStatus.CHERRY_PICK:
        return row
    notes = structured.notes(results, applied=True)
    return replace(row, status=StepStatus.STRUCTURED_MERGE, detail=f"{row.detail}; {notes}")


def _order(
    head: str, count: int, made: list[str], judged: dict[int, Optional[StepRow]]
) -> list[tuple[int, str, Optional[str]]]:
    """(position, the branch's tip before it, its commit or None when judged) of the lane's
    patches, as far as git carried or the judge took them."""
    picks = iter(made)
    order: list[tuple[int, str, Optional[str]]] = []
    tip = head
    for number in range(count):
        commit = None if number in judged else next(picks, None)
        if number not in judged and commit is None:
            break
        order.append((number, tip, commit))
        tip = commit or tip
    return order


def _row(
    patch: Patch, files: list[FileDiff], changed: dict[str, _Change], before: Texts, lane: Git
) -> StepRow:
    """The patch's row, as the per-patch path writes it: where an exact apply makes ort's
    files, `clean` or `offset`, else `cherry-pick` (attempts._as_ort_merges)."""
    applied = [apply_exactly(before[diff.path], diff) for diff in files]
    offsets = [note for result in applied if result is not None for note in result[1]]
    moved = sorted(set(changed) - set(patch.touched_paths))
    exact = all(result is not None for result in applied) and not moved
    if (
        exact
        and set(changed) == set(patch.touched_paths)
        and all(
            changed[diff.path].after == (ABSENT if diff.deleted else _blob_id(result[0]))
            for diff, result in zip(files, applied)
            if result is not None
        )
    ):
        status = StepStatus.OFFSET if offsets else StepStatus.CLEAN
        detail = "; ".join(offsets)
    else:  # git apply fails or makes another file, or ort followed upstream's renames: git
        # rebase's result, ort's
        status, detail = StepStatus.CHERRY_PICK, cherry_picked(moved, exact)
    superseded = superseded_in(lambda path: decoded(before.get(path)), patch, lane)
    return patch_row(patch, status, detail, superseded)


def _carried(worktree: Git, head: str) -> dict[str, dict[str, _Change]]:
    """The commits the lane made on `head`, oldest first, each with the paths it
    changes against its parent (renames not followed): one `git log`."""
    out = worktree.output_bytes(
        "log",
        "--reverse",
        "-z",
        "--raw",
        "--no-abbrev",
        "--no-renames",
        "--format=%x1e%H",
        f"{head}..HEAD",
    )
    carried: dict[str, dict[str, _Change]] = {}
    for record in out.split(b"\x1e")[1:]:
        sha, *fields = record.split(b"\0")
        changed = carried.setdefault(sha.decode(), {})
        for meta, path in zip(fields[::2], fields[1::2]):
            _, _, before, after, _ = meta.lstrip(b"\n")[1:].decode().split(" ")
            changed[path.decode("utf-8", "surrogateescape")] = _Change(before, after)
    return carried


def _blob_id(data: bytes) -> str:
    """The id git gives a blob of these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
