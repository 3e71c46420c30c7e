"""A run of patches carried in one `git rebase`, as `git rebase` itself would carry them.

Patch by patch, an apply costs several git processes (apply, commit, rev-parse, ...). On the
happy path that is most of its time, so a run of patches whose own commits are at hand
(Replay) goes through git's sequencer in ONE process: `git rebase --onto <tip>` of those
commits, ort with renames followed, each commit keeping the patch's message and author and
getting rebaser's committer with the patch's date, exactly the commit the per-patch path
makes. The lane stops where git stops (a conflict, an empty pick = upstream has it); that
patch goes through the per-patch path (exact/offset, cherry-pick, resolutions, codemod, in
upstream checks, keep-going), and the lane resumes after it.

Statuses come from two git calls afterwards. A patch is `clean` where the tree held its
preimage blobs, `offset` where `git apply` would have placed its hunks elsewhere
(rawdiff.apply_exactly, git's own search) and ort made the same file, else `cherry-pick`.
Where the exact apply would have made a different file than ort, ort's is kept
(`cherry-pick`: git rebase's result), as the per-patch path does.

git's sequencer runs in a scratch repository in memory (scratch.py): neither the apply's
worktree nor its branch moves until the lane's commits are known; then one checkout moves
the branch to the last one kept. Meanwhile the worktree's files, if none are written yet
(late_checkout), are written at the lane's start. While the lane runs, a marker in the
worktree's git dir names the scratch repository; after a kill, leave_interrupted() removes
it, and the recovery backs up whatever the worktree holds before it goes back to the last
recorded step (`rebaser continue` then redoes the lane, `abort` drops it).
"""

from __future__ import annotations

import hashlib
import shlex
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.carry import structured
from rebaser.carry.knockon import head_reader, needed_patch
from rebaser.repo import late_checkout
from rebaser.repo import scratch
from rebaser.repo.git import Git, committer_env
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
# ort follows renames as `git rebase` does (the neutral config turns diff renames off; the
# rest of the user's settings are neutral already: repo/git.py).
_SEQUENCER = ("-c", "merge.renames=true", "-c", "merge.directoryRenames=true")


# Where git stopped at a patch (on a commit; what the structured merge did and kept): None,
# the lane ends there; or what gives the patch's row (None after all: the lane is cut there).
Judge = Callable[[Patch, Git, str, str], Optional[Callable[[], Optional[StepRow]]]]


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
    branch's tip; as many as git's sequencer takes and the status check keeps, each with its
    commit as the branch's tip after it. `missing`: patches left off the branch so far (a
    patch that needs one is not merged by syntax). Where git stops at a patch, `judge` (an
    apply that goes on, steps/lanestop.py) may give its row (left off the branch, or in
    upstream): the lane then goes on past it with `git rebase --skip`. Also the conflict
    the lane leaves to the per-patch path, if it does."""
    marker = git_dir / MARKER
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="forkkit-lane") as pool:
        # The worktree's files, if not written yet, are written while the sequencer runs
        # elsewhere; the last checkout then writes only what the lane changed.
        writing = pool.submit(late_checkout.finish, worktree, git_dir)
        with scratch.repository(git_dir, head) as lane:
            marker.write_text(f"{branch}\n{lane.path}\n")
            merged, judged, handed = _sequence(lane, head, patches, commits, list(missing), judge)
            # The commits' objects go to the repository (HEAD: the last pick git made, also
            # where it stopped) while the rows are worked out.
            back = pool.submit(scratch.bring_back, lane, worktree, "HEAD", head)
            results = _results(lane, head, patches, _carried(lane, head), judged, merged)
            back.result()
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
    """git's sequencer: the commits onto `head`, stopping where git stops. Where a pick
    conflicts only in Python hunks the structured merge resolves, it goes on (what it did,
    by the patch's position); past the patches `judge` takes, too (their rows, by
    position). Last, the conflict it stops at for the per-patch path, if it does."""
    lane.run(
        *_SEQUENCER,
        "rebase",
        "--quiet",
        "--empty=ask",
        "--committer-date-is-author-date",
        "--no-fork-point",
        "--onto",
        head,
        f"{commits[0]}~1",
        commits[-1],
        check=False,
        env=committer_env(),
    )
    position = {commit: number for number, commit in enumerate(commits)}
    merged: _Merged = {}
    verdicts: dict[int, Future[Optional[StepRow]]] = {}

    def left_off() -> list[Patch]:  # the patches missing so far, those judged in this lane too
        judged = [number for number, verdict in verdicts.items() if _left_off(verdict.result())]
        return missing + [patches[number] for number in judged]

    handed = None
    # The rows are worked out (Python, and upstream's history) while git goes on.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkkit-judge") as rows:
        while (stopped := _stopped_at(lane)) is not None and stopped[0] in position:
            number = position[stopped[0]]
            # Going on past stops, the judge's and the triage's threads keep two more
            # cores busy: helpers for the merge only beside those (carry/filemerges.py).
            busy = 1 if judge is None else 3
            results, unmerged, needed = _by_syntax(lane, patches[number], left_off, busy)
            if results and not unmerged:
                merged[number] = results
                _continue_with_message(lane, stopped[0])
                continue
            notes = structured.notes(results or [], applied=False)
            verdict = judge(patches[number], lane, stopped[1], notes) if judge else None
            if verdict is None:
                if results is not None:  # merged by syntax as far as it goes: a conflict
                    handed = Handed(patches[number], unmerged)
                elif needed is not None:
                    handed = Handed(patches[number], [], needed)
                break
            verdicts[number] = rows.submit(verdict)
            lane.run(*_SEQUENCER, "rebase", "--skip", check=False, env=committer_env())
    return merged, {number: verdict.result() for number, verdict in verdicts.items()}, handed


def _continue_with_message(lane: Git, commit: str) -> None:
    """`rebase --continue` after a structured merge, the pick committed with `commit`'s
    message byte for byte: git's message file holds its commit template too (comment
    lines), which `commit.cleanup=verbatim` (repo/git.py) would keep. The "editor" puts
    the message back over that file."""
    raw = lane.output_bytes("cat-file", "commit", commit)
    message = lane.path / ".git" / "forkkit-message"
    message.write_bytes(raw.partition(b"\n\n")[2])
    env = {**committer_env(), "GIT_EDITOR": f"cp {shlex.quote(str(message))}"}
    lane.run(*_SEQUENCER, "rebase", "--continue", check=False, env=env)


def _by_syntax(
    lane: Git, patch: Patch, missing: Callable[[], list[Patch]], busy: int
) -> tuple[Optional[list[structured.FileResult]], list[str], Optional[Patch]]:
    """What the structured merge did to a pick git stopped at in conflict, and the paths
    still in conflict after it; None where it is not tried: an empty pick, or a patch that
    needs a missing one (a knock-on, which the per-patch path or the judge names: the patch
    it needs is the last value)."""
    unmerged = structured.Unmerged.read(lane)
    if not unmerged.paths:
        return None, [], None
    left = missing()
    if left and (needed := needed_patch(patch, left, head_reader(lane))) is not None:
        return None, unmerged.paths, needed
    results = structured.resolve_conflicts(
        lane, label=patch.name, sparse=True, busy=busy, unmerged=unmerged
    )
    return results, unmerged.after(results), None


def _left_off(row: Optional[StepRow]) -> bool:
    return row is not None and row.status in LEFT_OFF


def _stopped_at(lane: Git) -> Optional[tuple[str, str]]:
    """Where the lane's sequencer stopped (a conflict, an empty pick), if it did: the commit
    it was picking, and the one it stood on."""
    git_dir = lane.path / ".git"
    if not (git_dir / "rebase-merge").is_dir() or not (git_dir / "REBASE_HEAD").is_file():
        return None
    return (git_dir / "REBASE_HEAD").read_text().strip(), (git_dir / "HEAD").read_text().strip()


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
    """The commits the sequencer made on `head`, oldest first, each with the paths it
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
