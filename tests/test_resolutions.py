"""Remembered resolutions (rebaser/carry/resolutions.py) against git rerere on the same conflict."""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

import pytest

from synthetic import AUTHOR, CALC, SyntheticUpstream, edit, git
from test_apply_synthetic import (
    CONFLICT_FIXED,
    apply,
    stopped_apply,
    two_patch_series,
    worktree_of,
)

from rebaser.carry import resolutions
from rebaser.series import confinement
from rebaser.errors import ExitCode
from rebaser.series.export import export_patch
from rebaser.repo.git import Git
from rebaser.series.patches import load_series

DOUBLE = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")
SWAP = edit(CALC, "    return a * b\n", "    return b * a\n")
RESOLVED = edit(CALC, "    return a * b\n", "    return 2 * b * a\n")


def conflicting_history(upstream) -> Path:
    """Branch `patch` doubles mul; v2 swaps its operands; v3 also changes another function.
    Returns a series holding the patch."""
    git(upstream.path, "checkout", "-q", "-b", "patch", "v1")
    upstream.commit({"pkg/calc.py": DOUBLE}, "demo: double mul")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/calc.py": SWAP}, "upstream: swap mul", tag="v2")
    upstream.commit({"pkg/calc.py": edit(SWAP, "return -a", "return 0 - a")}, "v3", tag="v3")
    folder = upstream.path.parent / "series"
    folder.mkdir()
    (folder / "0001-double-mul.patch").write_text(export_patch(Git(upstream.path), "patch"))
    (folder / "series").write_text("@name demo\n0001-double-mul.patch\n")
    return folder / "series"


def stop_at(upstream, tag: str, name: str) -> Git:
    """A worktree at `tag` where the patch stopped with conflict markers (as an apply leaves it)."""
    tree = upstream.path.parent / name
    git(upstream.path, "worktree", "add", "-q", "--detach", str(tree), tag)
    patch = upstream.path.parent / "series" / "0001-double-mul.patch"
    result = Git(tree).run("apply", "--3way", "--index", str(patch), check=False)
    assert not result.ok and Git(tree).unmerged_paths() == ["pkg/calc.py"]
    return Git(tree)


def resolved(worktree: Git, patch, text: str) -> Git:
    """The stop in `worktree` snapshotted, then fixed with `text` and committed, as a user
    does before `continue` records it."""
    resolutions.snapshot(worktree, worktree.unmerged_paths())
    (worktree.path / "pkg/calc.py").write_text(text)
    worktree.run("add", "pkg/calc.py")
    worktree.commit(patch.message, author=AUTHOR, date="1700000000 +0000")
    return worktree


def plain_git(cwd: Path, *args: str) -> bool:
    """git as the user runs it (rebaser's runner turns rerere off): whether it succeeded."""
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True).returncode == 0


def test_record_then_replay_on_another_base_matches_git_rerere(tmp_path, upstream):
    series = load_series(conflicting_history(upstream))
    patch = series.patches[0]

    # Ours: stop on v2, snapshot, resolve + commit, record; then replay on v3.
    first = resolved(stop_at(upstream, "v2", "first"), patch, RESOLVED)
    ids, beyond = resolutions.record(first, patch, series)
    assert beyond == []
    folder = series.patches_dir / "resolutions" / patch.name / ids[0]
    assert len(ids) == 1 and (folder / "postimage").read_text() == "    return 2 * b * a\n"
    assert (folder / "preimage").read_text() == (
        "<<<<<<<\n    return 2 * a * b\n=======\n    return b * a\n>>>>>>>\n"
    )
    second = stop_at(upstream, "v3", "second")
    replayed = resolutions.replay(second, patch, series)
    assert replayed and "1 recorded conflict resolution(s) in pkg/calc.py" in replayed.detail
    assert second.unmerged_paths() == []
    ours = (second.path / "pkg/calc.py").read_text()
    assert ours == edit(RESOLVED, "return -a", "return 0 - a")

    # git rerere, on a clone (its records stay local): same conflict id, same result on v3.
    clone = tmp_path / "rerere"
    git(tmp_path, "clone", "-q", str(upstream.path), str(clone))
    git(clone, "config", "rerere.enabled", "true")
    git(clone, "checkout", "-q", "-b", "w2", "v2")
    assert not plain_git(clone, "cherry-pick", "origin/patch")
    rr_ids = sorted(p.name for p in (clone / ".git/rr-cache").iterdir())
    assert rr_ids == ids
    (clone / "pkg/calc.py").write_text(RESOLVED)
    git(clone, "add", "pkg/calc.py")
    git(clone, "-c", "core.editor=true", "cherry-pick", "--continue")
    git(clone, "checkout", "-q", "-b", "w3", "v3")
    assert not plain_git(clone, "cherry-pick", "origin/patch")  # resolved, unstaged
    assert (clone / "pkg/calc.py").read_text() == ours


def test_a_record_that_no_longer_matches_is_not_applied(upstream):
    series = load_series(conflicting_history(upstream))
    patch = series.patches[0]
    stale = series.patches_dir / "resolutions" / patch.name / ("0" * 40)
    stale.mkdir(parents=True)
    (stale / "preimage").write_text("<<<<<<<\nold\n=======\nother\n>>>>>>>\n")
    (stale / "postimage").write_text("resolved\n")
    tree = stop_at(upstream, "v2", "tree")
    marked = (tree.path / "pkg/calc.py").read_text()
    replayed = resolutions.replay(tree, patch, series)
    assert not replayed
    assert "a recorded resolution exists" in replayed.detail
    assert "did not match: 1 of 1 conflicts are new" in replayed.detail
    assert (tree.path / "pkg/calc.py").read_text() == marked and tree.unmerged_paths()


def test_resolutions_pair_each_conflict_with_its_text_when_context_was_edited_too():
    marked = [
        "a\n",
        "<<<<<<< ours\n",
        "x\n",
        "||||||| base\n",
        "o\n",
        "=======\n",
        "y\n",
        ">>>>>>> t\n",
        "b\n",
        "c\n",
        "<<<<<<< ours\n",
        "p\n",
        "=======\n",
        "q\n",
        ">>>>>>> t\n",
        "d\n",
    ]
    resolved = ["a\n", "xy\n", "b\n", "C (edited)\n", "pq\n", "q2\n", "d\n"]
    pairs = resolutions._resolutions(marked, resolved)
    assert [(c.ours, c.theirs) for c, _ in pairs] == [(("x\n",), ("y\n",)), (("p\n",), ("q\n",))]
    assert [text for _, text in pairs] == ["xy\n", "C (edited)\npq\nq2\n"]


def test_continue_records_and_the_next_apply_elsewhere_replays(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    done = rebaser("continue", "--repo", upstream.path)
    assert done.code == ExitCode.OK
    assert "1 resolution(s) recorded in resolutions/0002-change-2.patch/" in done.out
    records = list((series.parent / "resolutions" / "0002-change-2.patch").iterdir())
    assert len(records) == 1 and (records[0] / "postimage").read_text() == "    return 2 * b * a\n"

    # Another user, another clone, another base with the same conflict: replayed.
    upstream.commit({"pkg/calc.py": edit(SWAP, "return -a", "return 0 - a")}, "v3", tag="v3")
    clone = tmp_path / "colleague"
    git(tmp_path, "clone", "-q", str(upstream.path), str(clone))
    report3 = tmp_path / "r3.json"
    result = apply(rebaser, series, SyntheticUpstream(clone), "v3", "--json", report3)
    assert result.code == ExitCode.OK, result.out
    steps = json.loads(report3.read_text())["steps"]
    assert [s["status"] for s in steps] == ["laid", "clean", "resolution replayed"]
    assert "1 recorded conflict resolution(s) in pkg/calc.py" in steps[2]["detail"]
    assert (worktree_of(report3) / "pkg/calc.py").read_text() == edit(
        CONFLICT_FIXED, "return -a", "return 0 - a"
    )
    # In one pass (--keep-going, as verify and CI run it) the record is replayed too.
    again = apply(
        rebaser,
        series,
        SyntheticUpstream(clone),
        "v3",
        "--json",
        report3,
        "--keep-going",
        "--force",
    )
    assert again.code == ExitCode.OK, again.out
    assert json.loads(report3.read_text())["steps"][2]["status"] == "resolution replayed"

    # Upstream changed the conflicting line again: the record does not match; a plain stop.
    upstream.commit({"pkg/calc.py": edit(CALC, "a * b\n", "b * a * 1\n")}, "v4", tag="v4")
    report4 = tmp_path / "r4.json"
    assert apply(rebaser, series, upstream, "v4", "--json", report4).code == ExitCode.NOT_APPLIED
    stop = json.loads(report4.read_text())["stop"]
    assert stop["patch"] == "0002-change-2.patch"
    assert "a recorded resolution exists (resolutions/0002-change-2.patch) but did not match" in (
        stop["reason"]
    )
    assert "<<<<<<<" in (worktree_of(report4) / "pkg/calc.py").read_text()


def test_each_conflict_gets_the_text_that_took_its_place_in_a_long_file():
    """The head and tail the marked and resolved files share are aligned before difflib
    runs (its time grows with the square of what it compares); the recorded texts are
    difflib's on the whole files, also where lines repeat around the conflicts."""
    body = [f"line {n % 7}\n" for n in range(3000)]
    first = ["<<<<<<< ours\n", "a = 1\n", "=======\n", "a = 2\n", ">>>>>>> theirs\n"]
    second = ["<<<<<<< ours\n", "line 3\n", "||||||| base\n", "x\n", "=======\n", ">>>>>>> p\n"]
    marked = body[:1000] + first + body[1000:2000] + second + body[2000:]
    resolved = body[:1000] + ["a = 3\n", "a = 4\n"] + body[1000:2000] + ["line 3\n"] + body[2000:]
    found = [(conflict.ours, text) for conflict, text in resolutions._resolutions(marked, resolved)]
    assert found == [(("a = 1\n",), "a = 3\na = 4\n"), (("line 3\n",), "line 3\n")]
    whole = difflib.SequenceMatcher(None, marked, resolved, autojunk=False)
    blocks = [block for block in whole.get_matching_blocks() if block.size]
    for conflict, text in resolutions._resolutions(marked, resolved):
        before = max(b.b + b.size for b in blocks if b.a + b.size <= conflict.start)
        after = min(b.b for b in blocks if b.a >= conflict.end)
        assert text == "".join(resolved[before:after])


@pytest.mark.parametrize("written", [0, 1])
def test_a_record_interrupted_while_written_is_no_record(upstream, monkeypatch, written):
    """A review: a kill while `continue` wrote a record left its preimage alone (every later
    command refused the series) or an empty postimage, which the next apply replayed: the
    conflict's lines deleted, "applied, verified". A record now appears whole or not at
    all; what a kill leaves is hidden, never read, and replaced by the next record."""
    series = load_series(conflicting_history(upstream))
    patch = series.patches[0]
    first = resolved(stop_at(upstream, "v2", "first"), patch, RESOLVED)
    real = confinement.write_record
    calls = []

    def killed(series_dir, parts, text):
        calls.append(parts[-1])
        if len(calls) > written:
            real(series_dir, parts, "")  # the file made, its text not written yet
            raise KeyboardInterrupt
        real(series_dir, parts, text)

    monkeypatch.setattr(confinement, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        resolutions.record(first, patch, series)
    monkeypatch.setattr(confinement, "write_record", real)
    confinement.check_records(series.patches_dir, [patch.name])  # nothing refused
    second = stop_at(upstream, "v3", "second")
    assert not resolutions.replay(second, patch, series)
    (again,), _ = resolutions.record(first, patch, series)  # `continue` again: recorded whole
    resolved(second, patch, edit(RESOLVED, "return -a", "return 0 - a"))
    (recorded,), _ = resolutions.record(second, patch, series)  # replaces the record
    assert recorded == again
    folder = series.patches_dir / "resolutions" / patch.name / recorded
    assert (folder / "postimage").read_text() == "    return 2 * b * a\n"
    assert sorted(entry.name for entry in folder.parent.iterdir()) == [recorded]


def test_a_fix_that_changes_lines_outside_its_conflict_is_not_recorded(upstream):
    """A review: a fix that also edited the line after its conflict was recorded with that
    line, and its replay kept the old line too (a statement twice, "resolution replayed");
    one that edited a line elsewhere lost that edit on replay. git rerere merges the whole
    file. Such a fix is not recorded, and the row says why."""
    series = load_series(conflicting_history(upstream))
    patch = series.patches[0]
    beyond = RESOLVED.replace("def neg(a):", "def neg(a):  # and here")
    first = resolved(stop_at(upstream, "v2", "first"), patch, beyond)
    assert resolutions.record(first, patch, series) == ([], ["pkg/calc.py"])
    assert not resolutions.recorded_for(series, patch)
