"""The triage of a run with stops (carry/triage.py, carry/collision.py): the upstream commit
each stopped patch collides with, found by bisection, and a keep/drop proposal with a
reason for every patch, each rule on a real git history built in the test."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault
from synthetic import (
    CALC,
    DOUBLED,
    Change,
    SyntheticUpstream,
    apply_args,
    build_series,
    edit,
    git,
)
from test_apply_synthetic import apply

from rebaser.carry import triage as triage_module
from rebaser.carry.collision import Bisector
from rebaser.errors import ExitCode
from rebaser.repo.git import Git
from rebaser.repo.memo import memo


def carried(
    rebaser, tmp_path, upstream: SyntheticUpstream, changes: list[Change], tip: str = "tip"
):
    """The series of `changes` (on tag v1) carried onto `tip` with --keep-going: the JSON
    report's patch rows by number ("0001"), and the report."""
    base = git(upstream.path, "rev-parse", "v1")
    series = build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )
    return carry_series(rebaser, tmp_path, upstream, series, tip)


@pytest.fixture
def carry_changes(rebaser, tmp_path, upstream):
    """carried() on this test's repositories."""
    return lambda changes, tip="tip": carried(rebaser, tmp_path, upstream, changes, tip)


def carry_series(rebaser, tmp_path, upstream, series: Path, tip: str = "tip"):
    report_file = tmp_path / "report.json"
    result = apply(rebaser, series, upstream, tip, "--keep-going", "--json", report_file)
    assert result.code in (ExitCode.OK, ExitCode.NOT_APPLIED), result.err
    report = json.loads(report_file.read_text())
    rows = {row["name"][:4]: row for row in report["steps"] if row["name"][:4].isdigit()}
    return rows, report, result


def history(
    upstream: SyntheticUpstream, count: int, planted: dict[int, dict[str, str]]
) -> list[str]:
    """`count` upstream commits after v1 (each touching pkg/other.py), commit n also writing
    planted[n]; tagged `tip` at the end. Their shas."""
    shas = []
    for number in range(1, count + 1):
        files = {"pkg/other.py": f"VERSION = {number}\n", **planted.get(number, {})}
        shas.append(upstream.commit(files, f"upstream {number}"))
    git(upstream.path, "tag", "tip")
    return shas


# -- the colliding commit ------------------------------------------------------------------


def test_the_colliding_commit_is_the_one_the_history_planted(
    carry_changes, rebaser, tmp_path, upstream
):
    shas = history(upstream, 30, {17: {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}})
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    row = rows["0001"]
    assert row["status"] == "dropped"
    assert row["collides_with"] == {
        "sha": shas[16],
        "subject": "upstream 17",
        "what": "modified pkg/calc.py",
    }
    assert row["proposal"] == "keep"
    assert row["reason"] == f"a real conflict with {shas[16][:12]} (upstream 17): resolve by hand"


def test_the_bisection_probes_only_commits_touching_the_files_in_conflict(
    carry_changes, upstream, monkeypatch
):
    """The patch also edits pkg/notes.py, which twenty upstream commits edit elsewhere: they
    cannot change whether it conflicts in pkg/calc.py, so they add probes, never answers.
    On a real fork such a commit was named: ort's rename detection, which reads whole
    trees, flipped the conflict between a file and its renamed copy there, and the
    bisection's two neighbours answered differently."""
    notes = [f"NOTE_{n} = {n}\n" for n in range(40)]
    upstream.commit({"pkg/notes.py": "".join(notes)}, "notes")
    git(upstream.path, "tag", "-f", "v1")
    shas = []
    for number in range(1, 21):
        noted = "".join(notes[:-1]) + f"NOTE_39 = {number}\n"
        planted = (
            {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")} if number == 15 else {}
        )
        shas.append(upstream.commit({"pkg/notes.py": noted, **planted}, f"upstream {number}"))
    git(upstream.path, "tag", "tip")
    probes = []
    probe = Bisector.conflicts
    monkeypatch.setattr(
        Bisector, "conflicts", lambda self, *args: probes.append(args) or probe(self, *args)
    )
    fork_notes = "NOTE_0 = 'fork'\n" + "".join(notes[1:])
    rows, _, _ = carry_changes(
        [Change("fork: double mul", {"pkg/calc.py": DOUBLED, "pkg/notes.py": fork_notes})]
    )
    assert rows["0001"]["collides_with"]["sha"] == shas[14], rows["0001"]
    assert rows["0001"]["collides_with"]["what"] == "modified pkg/calc.py"
    assert probes == []  # one commit touches pkg/calc.py: nothing to bisect


def test_a_patch_that_renames_a_file_collides_with_the_commit_that_edited_it(
    carry_changes, upstream
):
    """The patch moves pkg/calc.py (with its edit) and upstream edits the old name: at the
    target the patch conflicts in the new name, which no upstream commit touches. The
    bisection runs over the commits touching the files the patch deletes too (a hostile
    review: it named none)."""
    shas = history(upstream, 30, {17: {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}})
    rows, _, _ = carry_changes(
        [Change("fork: move calc", {"pkg/calc.py": None, "pkg/arith.py": DOUBLED})]
    )
    assert rows["0001"]["stop"]["conflicts"] == ["pkg/arith.py"], rows["0001"]
    assert rows["0001"]["collides_with"]["sha"] == shas[16], rows["0001"]


def test_a_colliding_commit_upstream_reverted_is_not_the_one_named(
    carry_changes, rebaser, tmp_path, upstream
):
    """Upstream changed the line (X), `git revert`ed X, and changed it again (Y): the
    bisection took X, which the target no longer holds. The patch applies again after the
    revert, so Y is what it collides with."""
    for number in range(1, 4):
        upstream.commit({"pkg/other.py": f"VERSION = {number}\n"}, f"upstream {number}")
    upstream.commit({"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}, "upstream X")
    git(upstream.path, "revert", "--no-edit", "HEAD")
    for number in range(4, 7):
        upstream.commit({"pkg/other.py": f"VERSION = {number}\n"}, f"upstream {number}")
    y = upstream.commit(
        {"pkg/calc.py": edit(CALC, "return a * b", "return a * b * 1")}, "upstream Y"
    )
    upstream.commit({"pkg/other.py": "VERSION = 7\n"}, "upstream 7")
    git(upstream.path, "tag", "tip")
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    assert rows["0001"]["collides_with"]["sha"] == y, rows["0001"]
    assert rows["0001"]["reason"] == f"a real conflict with {y[:12]} (upstream Y): resolve by hand"


def doubled_mul(
    upstream: SyntheticUpstream, tmp_path: Path, planted: dict[int, dict[str, str]]
) -> tuple[list[str], Path]:
    """30 upstream commits (history()) and the series of one patch doubling mul(), on v1:
    the commits' shas and the series file."""
    shas = history(upstream, 30, planted)
    base = git(upstream.path, "rev-parse", "v1")
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1",
        [Change("fork: double mul", {"pkg/calc.py": DOUBLED})],
        extra_directives=f"@base git:{base}\n",
    )
    return shas, series


def test_a_stops_triage_starts_while_the_patch_stops_and_finds_the_same(
    rebaser, tmp_path, upstream
):
    """Where the fast lane hands a conflict to the per-patch path, the stop's triage starts
    beside it (that path is git processes in the worktree, mostly) with the lane's conflicts;
    the stop's rows say what it guessed, so they take its verdicts: what the triage of the
    same stop finds without a lane."""
    planted, text = {}, CALC
    for number in range(2, 31, 2):  # upstream edits the file often: the bisection probes
        text += f"\n\ndef f{number}():\n    return {number}\n"
        if number == 18:
            text = edit(text, "return a * b", "return b * a")
        planted[number] = {"pkg/calc.py": text}
    shas, series = doubled_mul(upstream, tmp_path, planted)
    laned = apply(rebaser, series, upstream, "tip", "--json", tmp_path / "lane.json")
    assert laned.code == ExitCode.NOT_APPLIED and "stopped at 0001" in laned.out, laned.out
    assert "triage: 1 stopped patch, 4 merges" in laned.err, laned.err
    assert "(beside the stop)" in laned.err
    assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK
    shutil.rmtree(upstream.path / ".git" / "forkkit" / "memo")  # asked again, not remembered
    alone = apply(rebaser, series, upstream, "tip", "--no-fast-lane", "--json", tmp_path / "a.json")
    assert alone.code == ExitCode.NOT_APPLIED, alone.out
    rows = [
        json.loads((tmp_path / name).read_text())["steps"][-1] for name in ("lane.json", "a.json")
    ]
    assert (
        rows[0]["collides_with"]
        == rows[1]["collides_with"]
        == {
            "sha": shas[17],
            "subject": "upstream 18",
            "what": "modified pkg/calc.py",
        }
    )
    assert rows[0]["reason"] == rows[1]["reason"]


def test_ctrl_c_while_the_triage_runs_beside_the_stop_can_be_continued(rebaser, tmp_path, upstream):
    """Ctrl-C as the per-patch path starts, the triage ahead still running in its thread:
    the apply ends saying what is possible, and `continue` makes the same stop with the same
    verdict as an apply that was not interrupted."""
    planted, text = {}, CALC
    for number in range(2, 31, 2):
        text += f"\n\ndef f{number}():\n    return {number}\n"
        if number == 18:
            text = edit(text, "return a * b", "return b * a")
        planted[number] = {"pkg/calc.py": text}
    shas, series = doubled_mul(upstream, tmp_path, planted)
    point = FaultPoint("rebaser.steps.patching:PatchStep.run", "before", 1)
    interrupted = run_with_fault(point, apply_args(series, upstream, "tip"), how="interrupt")
    assert interrupted.returncode != 0, interrupted.stdout + interrupted.stderr
    assert "rebaser continue" in interrupted.stderr, interrupted.stderr
    report = tmp_path / "continued.json"
    continued = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert continued.code == ExitCode.NOT_APPLIED and "stopped at 0001" in continued.out
    row = json.loads(report.read_text())["steps"][-1]
    assert row["collides_with"]["sha"] == shas[17]
    assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK


def test_a_knock_on_stops_triage_starts_beside_it_too(rebaser, tmp_path, upstream):
    """After a skip the lane stops at a patch that needs the skipped one: its triage starts
    beside the per-patch path too, and finds what the triage of that stop finds alone."""
    _, (first, needing) = needing_0001(upstream)
    base = git(upstream.path, "rev-parse", "v1")
    changes = [first, Change("fork: a note", {"pkg/note.py": "NOTE = 1\n"}), needing]
    series = build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )
    reports = []
    for name, lane in (("lane", []), ("alone", ["--no-fast-lane"])):
        stopped = apply(rebaser, series, upstream, "tip", *lane)
        assert stopped.code == ExitCode.NOT_APPLIED and "stopped at 0001" in stopped.out
        report = tmp_path / f"{name}.json"
        skipped = rebaser("skip", "--repo", upstream.path, "--json", report)
        assert skipped.code == ExitCode.NOT_APPLIED and "stopped at 0003" in skipped.out
        assert ("(beside the stop)" in skipped.err) == (name == "lane"), skipped.err
        said = json.loads(report.read_text())
        reports.append({**said["steps"][-1], "stop": said["stop"]})  # the row holds none
        assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK
        shutil.rmtree(upstream.path / ".git" / "forkkit" / "memo")
    assert reports[0]["stop"]["reason"].startswith("needs 0001, which did not apply")
    for key in ("stop", "proposal", "reason", "collides_with"):
        assert reports[0][key] == reports[1][key], key


def two_stops(
    upstream: SyntheticUpstream, tmp_path: Path, every_commit_touches_calc: bool = False
) -> tuple[list[str], Path]:
    """A series of three patches on v1 whose first and third collide with upstream 17 and
    23 on `tip` (going on past them, the lane leaves both off): upstream's shas, the series.
    `every_commit_touches_calc`: each upstream commit also adds a line at pkg/calc.py's end
    (30 commits to bisect, not two)."""
    text, planted = CALC, {}
    for number in range(1, 31):
        old, new = {17: ("a * b", "b * a"), 23: ("a - b", "-b + a")}.get(number, ("", ""))
        text = edit(text, f"return {old}", f"return {new}") if old else text
        text += f"# upstream {number}\n" if every_commit_touches_calc else ""
        if old or every_commit_touches_calc:
            planted[number] = {"pkg/calc.py": text}
    shas = history(upstream, 30, planted)
    changes = [
        Change("fork: double mul", {"pkg/calc.py": DOUBLED}),
        Change("fork: a note", {"pkg/note.py": "NOTE = 1\n"}),
        Change("fork: halve sub", {"pkg/calc.py": edit(DOUBLED, "a - b", "(a - b) / 2")}),
    ]
    base = git(upstream.path, "rev-parse", "v1")
    series = build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )
    return shas, series


def test_going_on_the_patches_left_off_are_triaged_beside_the_lane(rebaser, tmp_path, upstream):
    """With --keep-going the patches the lane leaves off are bisected while the lane goes on
    (the triage after verification finds its answers in the memo): the same verdicts as the
    per-patch path's apply, which has no lane to work beside."""
    shas, series = two_stops(upstream, tmp_path)
    rows = []
    for name, lane in (("lane", []), ("alone", ["--no-fast-lane", "--force"])):
        report = tmp_path / f"{name}.json"
        done = apply(rebaser, series, upstream, "tip", "--keep-going", *lane, "--json", report)
        assert done.code == ExitCode.NOT_APPLIED, done.out + done.err
        beside = "triage beside the lane: 2 stopped patches, " in done.err
        assert beside == (name == "lane"), done.err
        if beside:  # every answer found in the memo
            assert "triage: 2 stopped patches, 0 merges" in done.err, done.err
        rows.append(json.loads(report.read_text())["steps"][1:])
        shutil.rmtree(upstream.path / ".git" / "forkkit" / "memo")  # asked again
    assert rows[0] == rows[1]
    found = {row["name"][:4]: row["collides_with"] for row in rows[0]}
    assert found["0001"]["sha"] == shas[16] and found["0003"]["sha"] == shas[22], found
    assert found["0002"] is None


@pytest.mark.parametrize("cores", [8, 2], ids=["beside the lane", "after the lane"])
def test_the_stopped_patches_are_bisected_side_by_side(
    rebaser, tmp_path, upstream, monkeypatch, cores
):
    """On 16 cores the bisections one after the other were the apply's end. With cores to
    spare, 0001's bisection waits (up to 30 s) until 0003's has begun beside it, in a
    thread and merge process of its own, and each round probes several commits at once.
    On two cores one thread bisected beside the lane, and after the lane's end too (the
    real fork's last 22 stopped patches took 1.3 s one after the other while the lane's
    core waited): there only a thread started at the lane's end can begin 0003's. The
    verdicts are the ones found alone."""
    from rebaser.repo import processes

    shas, series = two_stops(upstream, tmp_path, every_commit_touches_calc=True)
    began, met = threading.Event(), []
    bisect = Bisector.first_colliding

    def side_by_side(self, patch, *args):
        if patch.name.startswith("0003"):
            began.set()
        elif patch.name.startswith("0001"):
            met.append(began.wait(30))
        return bisect(self, patch, *args)

    threads = set()
    probe = Bisector.conflicts
    monkeypatch.setattr(
        Bisector,
        "conflicts",
        lambda self, *args: threads.add(threading.current_thread().name) or probe(self, *args),
    )
    monkeypatch.setattr(processes, "cores", lambda: cores)
    monkeypatch.setattr(Bisector, "first_colliding", side_by_side)
    report = tmp_path / "report.json"
    done = apply(rebaser, series, upstream, "tip", "--keep-going", "--json", report)
    assert done.code == ExitCode.NOT_APPLIED, done.out + done.err
    assert "triage beside the lane: 2 stopped patches, " in done.err, done.err
    assert met == [True]
    # Rounds of several probes at once only where cores are to spare.
    assert any(name.startswith("forkkit-probe") for name in threads) == (cores == 8), threads
    found = {
        row["name"][:4]: row["collides_with"] for row in json.loads(report.read_text())["steps"][1:]
    }
    assert found["0001"]["sha"] == shas[16] and found["0003"]["sha"] == shas[22], found


def test_a_patch_asked_about_in_two_lanes_is_counted_once(rebaser, tmp_path, upstream):
    """A lane cut before a patch it left off (an exact apply ort would make otherwise)
    asks about that patch again in the next lane: the progress line counts patches, and
    the verdicts are the per-patch path's."""
    blocks = "x\ny\nz\n" * 6
    upstream.commit({"pkg/blocks.txt": blocks}, "blocks", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    halved = edit(edit(CALC, "return a * b", "return 2 * a * b"), "a - b", "(a - b) / 2")
    for files, subject in (
        ({"pkg/note.py": "NOTE = 1\n"}, "fork: a note"),
        ({"pkg/calc.py": edit(CALC, "return a * b", "return 2 * a * b")}, "fork: double mul"),
        ({"pkg/blocks.txt": "x\ny\nz\n" * 3 + "x\nY\nz\n" + "x\ny\nz\n" * 2}, "fork: Y"),
        ({"pkg/calc.py": halved}, "fork: halve sub"),
    ):
        upstream.commit(files, subject)
    git(upstream.path, "checkout", "-q", "main")
    calc = edit(CALC, "return a * b", "return b * a")
    for number in range(1, 9):
        files = {"pkg/other.py": f"VERSION = {number}\n"}
        if number in (3, 6):
            calc = calc if number == 3 else edit(calc, "return a - b", "return -b + a")
            files["pkg/calc.py"] = calc
        upstream.commit(files, f"upstream {number}")
    upstream.commit({"pkg/blocks.txt": "q\nq\n" + blocks}, "two lines on top", tag="tip")
    series = tmp_path / "s" / "series"
    imported = rebaser(
        "import", "--repo", upstream.path, "--range", "base..fork", "--series-dir", series.parent
    )
    assert imported.code == ExitCode.OK, imported.err
    rows, said = [], []
    for extra in ([], ["--no-fast-lane", "--force"]):
        report = tmp_path / "report.json"
        done = rebaser(
            "apply", "--series", series, "--repo", upstream.path, "--base", "tip", "--test",
            "none", "--keep-going", "--json", report, *extra,
        )  # fmt: skip
        said.append(done.err)
        rows.append(json.loads(report.read_text())["steps"])
        shutil.rmtree(upstream.path / ".git" / "forkkit" / "memo")
    assert "triage beside the lane: 2 stopped patches, " in said[0], said[0]
    assert "one lane" in said[0] and rows[0] == rows[1]


def test_ctrl_c_while_the_triage_runs_beside_the_lane_can_be_continued(rebaser, tmp_path, upstream):
    """Ctrl-C as the lane ends, its triage's thread still asking: the apply ends at once
    (the thread stops after its answer under way) saying what is possible, and `continue`
    finds the verdicts an apply that was not interrupted finds."""
    shas, series = two_stops(upstream, tmp_path)
    point = FaultPoint("rebaser.steps.fastlane:_results", "before", 1)
    args = [*apply_args(series, upstream, "tip"), "--keep-going"]
    interrupted = run_with_fault(point, args, how="interrupt")
    assert interrupted.returncode != 0, interrupted.stdout + interrupted.stderr
    assert "rebaser continue" in interrupted.stderr, interrupted.stderr
    report = tmp_path / "continued.json"
    continued = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert continued.code == ExitCode.NOT_APPLIED, continued.out + continued.err
    found = {
        row["name"][:4]: (row["status"], row["collides_with"])
        for row in json.loads(report.read_text())["steps"][1:]
    }
    assert [found[number][0] for number in ("0001", "0003")] == ["dropped", "dropped"], found
    assert found["0001"][1]["sha"] == shas[16] and found["0003"][1]["sha"] == shas[22], found


def test_ctrl_c_while_the_lanes_triage_is_awaited_can_be_continued(rebaser, tmp_path, upstream):
    """Ctrl-C while the run waits for the triage beside the lane (the carry and its
    verification done): `continue` finishes it, as the interruption's message says."""
    shas, series = two_stops(upstream, tmp_path)
    point = FaultPoint("rebaser.sequencer.proposals:BesideTheLane.wait", "before", 1)
    args = [*apply_args(series, upstream, "tip"), "--keep-going"]
    interrupted = run_with_fault(point, args, how="interrupt")
    assert "rebaser continue" in interrupted.stderr, interrupted.stderr
    report = tmp_path / "continued.json"
    continued = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert continued.code == ExitCode.NOT_APPLIED, continued.out + continued.err
    found = {
        row["name"][:4]: row["collides_with"] for row in json.loads(report.read_text())["steps"][1:]
    }
    assert found["0001"]["sha"] == shas[16] and found["0003"]["sha"] == shas[22], found


def test_a_triage_ahead_that_guessed_wrong_is_not_taken(rebaser, tmp_path, upstream, monkeypatch):
    """Where the stop's rows are not what the triage ahead judged (here: other conflicts),
    the triage after the stop works its verdicts out again (from the memo where it can)."""
    from rebaser.sequencer import proposals

    ahead = proposals.ahead
    elsewhere = ["pkg/elsewhere.py"]
    monkeypatch.setattr(
        proposals, "ahead", lambda *args: ahead(*args[:-1], replace(args[-1], conflicts=elsewhere))
    )
    planted = {17: {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}}
    _, series = doubled_mul(upstream, tmp_path, planted)
    stopped = apply(rebaser, series, upstream, "tip", "--json", tmp_path / "r.json")
    assert stopped.code == ExitCode.NOT_APPLIED and "stopped at 0001" in stopped.out
    assert "triage: 1 stopped patch," in stopped.err and "beside the stop" not in stopped.err
    row = json.loads((tmp_path / "r.json").read_text())["steps"][-1]
    assert row["collides_with"]["subject"] == "upstream 17", row


def test_the_colliding_commit_of_a_file_renamed_and_then_edited(
    carry_changes, rebaser, tmp_path, upstream
):
    """Upstream renames calc.py (ort follows that), then edits the line the patch edits."""
    renamed_at, edited_at = 5, 12
    shas = []
    for number in range(1, 16):
        if number == renamed_at:
            git(upstream.path, "mv", "pkg/calc.py", "pkg/arith.py")
        files = {"pkg/other.py": f"VERSION = {number}\n"}
        if number == edited_at:
            files["pkg/arith.py"] = edit(CALC, "return a * b", "return b * a")
        shas.append(upstream.commit(files, f"upstream {number}"))
    git(upstream.path, "tag", "tip")
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    assert rows["0001"]["collides_with"]["sha"] == shas[edited_at - 1]
    assert rows["0001"]["collides_with"]["what"] == "modified pkg/arith.py"


def test_a_function_upstream_moved_to_another_file_is_named(
    carry_changes, rebaser, tmp_path, upstream
):
    without_mul = edit(CALC, "def mul(a, b):\n    return a * b\n\n\n", "")
    moved = "def mul(a, b):\n    return b * a\n"
    shas = history(upstream, 9, {6: {"pkg/calc.py": without_mul, "pkg/ops.py": moved}})
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    collision = rows["0001"]["collides_with"]
    assert collision["sha"] == shas[5]
    assert collision["what"] == "modified pkg/calc.py; moved mul() to pkg/ops.py"
    assert rows["0001"]["reason"].startswith("upstream moved the code (")


def test_a_function_moved_by_a_merge_of_many_files_is_named(carry_changes, upstream):
    """A merge that brings a branch changing many files, most of them only calling mul():
    where mul() went is still named (the files that hold the name are the ones searched)."""
    without_mul = edit(CALC, "def mul(a, b):\n    return a * b\n\n\n", "")
    git(upstream.path, "checkout", "-q", "-b", "sync")
    files = {f"pkg/use {n}.py": f"from pkg.ops import mul\nX = mul({n}, 2)\n" for n in range(40)}
    files.update({"pkg/calc.py": without_mul, "pkg/ops.py": "def mul(a, b):\n    return b * a\n"})
    upstream.commit({**files, "pkg/notes.py": "# def mul( moved to ops\n"}, "move mul to ops")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/other.py": "X = 1\n"}, "main goes on")
    git(upstream.path, "merge", "-q", "--no-ff", "-m", "sync the ops branch", "sync")
    git(upstream.path, "tag", "tip")
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    collision = rows["0001"]["collides_with"]
    assert collision["subject"] == "sync the ops branch"
    assert collision["what"].startswith("modified pkg/calc.py; moved mul() to pkg/ops.py; ")


@pytest.mark.parametrize("name", [b"pkg/ops\xff.py", b"pkg/mul ops.py"], ids=["bytes", "space"])
def test_a_function_moved_to_a_file_with_an_odd_name_is_named(carry_changes, upstream, name):
    """git names files in bytes: a move into a file whose name is not UTF-8, or holds a
    space, is still seen, and the file named as git spells it."""
    without_mul = edit(CALC, "def mul(a, b):\n    return a * b\n\n\n", "")
    (upstream.path / os.fsdecode(name)).write_text("def mul(a, b):\n    return b * a\n")
    upstream.commit({"pkg/calc.py": without_mul}, "move mul")
    git(upstream.path, "tag", "tip")
    rows, _, _ = carry_changes([Change("fork: double mul", {"pkg/calc.py": DOUBLED})])
    spelled = name.decode("utf-8", "backslashreplace").replace("\\xff", "\\377")
    assert rows["0001"]["collides_with"]["what"].endswith(f"moved mul() to {spelled}")


# -- the proposals -------------------------------------------------------------------------

TOPK = "def select_topk(scores, k):\n    return scores.topk(k)\n"


def test_a_patch_upstream_has_is_dropped(carry_changes, rebaser, tmp_path, upstream):
    history(upstream, 3, {2: {"pkg/calc.py": DOUBLED}})
    rows, _, _ = carry_changes(
        [
            Change("fork: double mul", {"pkg/calc.py": DOUBLED}),
            Change(
                "fork: check div",
                {"pkg/calc.py": edit(DOUBLED, "return a / b", "return a / b if b else 0")},
            ),
        ],
    )
    assert rows["0001"]["status"] == "in upstream" and rows["0001"]["proposal"] == "drop"
    assert rows["0001"]["reason"].startswith("in upstream: ")
    assert rows["0002"]["proposal"] == "keep" and rows["0002"]["reason"] == "applied as it is"


def test_a_patch_whose_names_upstream_added_is_superseded(
    carry_changes, rebaser, tmp_path, upstream
):
    shas = history(
        upstream,
        8,
        {
            4: {"pkg/topk.py": TOPK + "\n\ndef topk_backend():\n    return 'torch'\n"},
            6: {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")},
        },
    )
    fork_topk = TOPK.replace("scores.topk(k)", "scores.topk(k, sorted=False)")
    fork_calc = DOUBLED + "\n\ndef topk_backend():\n    return 'flashinfer'\n"
    rows, _, _ = carry_changes(
        [Change("fork: explicit top-k", {"pkg/topk.py": fork_topk, "pkg/calc.py": fork_calc})],
    )
    row = rows["0001"]
    assert row["status"] == "dropped" and row["proposal"] == "drop"
    assert row["reason"] == (
        f"superseded: {shas[3][:12]} (upstream 4) adds the same names: "
        "function topk_backend, function select_topk (2 of 2)"
    )


def _superseded_by_names(upstream: SyntheticUpstream, tmp_path: Path) -> Path:
    """A series of one patch whose two new names upstream added on `tip`, and that stops
    there: proposed for drop, as superseded, when the triage finds the names."""
    history(upstream, 8, {4: {"pkg/topk.py": TOPK + "\n\ndef topk_backend():\n    return 1\n"}})
    fork_topk = TOPK.replace("scores.topk(k)", "scores.topk(k, sorted=False)")
    doubled = edit(CALC, "return a * b", "return 2 * a * b")
    fork_calc = doubled + "\n\ndef topk_backend():\n    return 2\n"
    changes = [Change("fork: explicit top-k", {"pkg/topk.py": fork_topk, "pkg/calc.py": fork_calc})]
    upstream.commit({"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}, "upstream 9")
    git(upstream.path, "tag", "-f", "tip")
    base = git(upstream.path, "rev-parse", "v1")
    return build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )


# git killed by a Ctrl-C: the shim dies of SIGINT even where it starts with SIGINT ignored
# (as in a job a non-interactive shell starts in the background).
_CTRL_C = (
    f'exec "{sys.executable}" -c "import os, signal; '
    'signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGINT)"'
)


@pytest.mark.parametrize(
    "failure",
    [_CTRL_C, "echo 'fatal: regex too big' >&2; exit 128"],
    ids=["signal", "status"],
)
def test_a_failed_grep_of_upstreams_names_is_not_remembered(
    rebaser, tmp_path, upstream, monkeypatch, failure
):
    """A terminal's Ctrl-C reaches git too: a `git grep` killed by SIGINT wrote no match,
    and its empty output was remembered as "upstream has none of these names", so every
    later triage onto that target kept a superseded patch; a grep that fails (status 128)
    was remembered the same way. A git killed by a signal fails its command; a failed grep
    answers nothing and is asked again next time."""
    series = _superseded_by_names(upstream, tmp_path)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "git").write_text(
        "#!/bin/bash\n"
        f'for a in "$@"; do [ "$a" = grep ] && {{ {failure}; }}; done\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    (shim / "git").chmod(0o755)
    with monkeypatch.context() as patched:
        patched.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
        failed = apply(rebaser, series, upstream, "tip", "--keep-going")
    if failure == _CTRL_C:
        assert failed.code == ExitCode.ENVIRONMENT, failed.out + failed.err
        assert "git grep was killed by signal 2" in failed.err, failed.err
    else:
        assert failed.code == ExitCode.NOT_APPLIED, failed.out + failed.err
    report = tmp_path / "again.json"
    again = apply(rebaser, series, upstream, "tip", "--keep-going", "--force", "--json", report)
    assert again.code == ExitCode.NOT_APPLIED, again.out + again.err
    row = json.loads(report.read_text())["steps"][-1]
    assert row["proposal"] == "drop", row["reason"]


def test_a_stopped_patch_whose_lines_upstream_has_is_superseded(
    carry_changes, rebaser, tmp_path, upstream
):
    guard = "    if b == 0:\n        raise ZeroDivisionError(b)\n    assert isinstance(b, float)\n"
    checked = edit(CALC, "    return a / b\n", guard + "    return a / b\n")
    upstream_version = edit(checked, "    return a / b\n", "    return a / float(b)\n")
    history(upstream, 4, {3: {"pkg/calc.py": upstream_version}})
    rows, _, _ = carry_changes([Change("fork: check div", {"pkg/calc.py": checked})])
    assert rows["0001"]["status"] == "dropped"
    assert rows["0001"]["proposal"] == "drop"
    assert rows["0001"]["reason"] == "superseded: upstream already has 3 of the 3 lines it adds"


def test_a_stopped_patch_whose_feature_upstream_made_is_superseded(
    carry_changes, rebaser, tmp_path, upstream
):
    """An upstream commit on the patch's file whose subject shares words rare in upstream's
    history ("int4", "qat": once in 700 subjects) re-made the feature."""
    many_commits(upstream, 700)
    made = upstream.commit(
        {"pkg/calc.py": edit(CALC, "return a * b", "return quantize(a) * b")},
        "Add int4 qat training support",
    )
    upstream.commit({"pkg/other.py": "VERSION = 2\n"}, "upstream 2", tag="tip")
    rows, _, _ = carry_changes(
        [Change("feat: add INT4 fake QAT for grouped linear", {"pkg/calc.py": DOUBLED})],
    )
    row = rows["0001"]
    assert row["status"] == "dropped" and row["proposal"] == "drop"
    assert row["reason"] == (
        f"superseded: upstream {made[:12]} (Add int4 qat training support) makes the same "
        "feature (int4, qat)"
    )
    assert row["collides_with"]["sha"] == made


def test_words_common_in_upstreams_subjects_do_not_make_a_feature(
    carry_changes, rebaser, tmp_path, upstream
):
    many_commits(upstream, 700)
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")}, "tune knob3 for layer3"
    )
    upstream.commit({"pkg/other.py": "VERSION = 2\n"}, "upstream 2", tag="tip")
    rows, _, _ = carry_changes(
        [Change("tune knob3 for layer3 again", {"pkg/calc.py": DOUBLED})],
    )
    assert rows["0001"]["proposal"] == "keep", rows["0001"]["reason"]


def many_commits(upstream: SyntheticUpstream, count: int) -> None:
    """`count` commits on main, each subject with its own two words (and the words "knob",
    "layer"... in none), written by one fast-import."""
    head = git(upstream.path, "rev-parse", "HEAD")
    stream = [f"reset refs/heads/main\nfrom {head}\n"]
    for number in range(count):
        message = f"tune knob{number} for layer{number}\n"
        content = f"{number}\n"
        stream.append(
            f"commit refs/heads/main\ncommitter t <t@t> {1700000000 + number} +0000\n"
            f"data {len(message)}\n{message}M 644 inline pkg/knobs.txt\n"
            f"data {len(content)}\n{content}\n"
        )
    subprocess.run(
        ["git", "fast-import", "--quiet"],
        cwd=upstream.path,
        input="".join(stream).encode(),
        check=True,
    )
    git(upstream.path, "reset", "-q", "--hard", "main")


def test_patches_that_follow_up_a_dropped_one_are_dropped(
    carry_changes, rebaser, tmp_path, upstream
):
    """0001 is superseded; 0002 is blocked on it; 0003 names its pull request; 0004 shares
    its topic and a file; 0005 packages the folder only 0001 creates; 0006 stands alone."""
    history(upstream, 5, {3: {"pkg/topk.py": TOPK}})
    fork_topk = TOPK.replace("scores.topk(k)", "scores.topk(k, sorted=False)")
    with_helper = CALC + "\n\nTOPK_DEFAULT = 8\n"
    changes = [
        Change(
            "dsv4: explicit top-k (#28)",
            {
                "pkg/topk.py": fork_topk,
                "plugins/hook.py": "HOOKED = True\n",
                "pkg/calc.py": with_helper,
            },
        ),
        Change(
            "fix: top-k sorts", {"pkg/topk.py": fork_topk.replace("sorted=False", "sorted=True")}
        ),
        Change("Restore what #28 dropped (#31)", {"pkg/extra.py": "RESTORED = True\n"}),
        Change(
            "dsv4: document calc",
            {"pkg/calc.py": with_helper.replace('"""A tiny upstream module."""', '"""Calc."""')},
        ),
        Change(
            "packaging: ship the plugins", {"setup.cfg": "[options]\npackages = pkg, plugins\n"}
        ),
        Change("fix: check div", {"pkg/other2.py": "CHECKED = True\n"}),
    ]
    rows, _, _ = carry_changes(changes)
    proposals = {number: (row["proposal"], row["reason"]) for number, row in rows.items()}
    assert rows["0001"]["status"] == "dropped"
    assert proposals["0001"][0] == "drop" and proposals["0001"][1].startswith("superseded: ")
    assert rows["0002"]["status"] == "blocked"
    assert proposals["0002"] == ("drop", "builds on 0001, proposed for drop")
    assert proposals["0003"] == ("drop", "follows up 0001 (#28), proposed for drop")
    assert proposals["0004"] == (
        "drop",
        "follows up 0001 (dsv4:, the same files), proposed for drop",
    )
    assert proposals["0005"] == (
        "drop",
        "needs plugins, which only 0001 (proposed for drop) creates",
    )
    assert proposals["0006"] == ("keep", "applied as it is")


def needing_0001(upstream: SyntheticUpstream) -> tuple[list[str], list[Change]]:
    """Upstream commits and two patches: 0001 conflicts in calc.py (upstream 3), 0002 edits
    0001's line and, on its own, conflicts in util.py (upstream 8)."""
    util = "def clamp(x):\n    return max(0, x)\n"
    upstream.commit({"pkg/util.py": util}, "util")
    git(upstream.path, "tag", "-f", "v1")  # the series' base has util.py
    shas = history(
        upstream,
        10,
        {
            3: {"pkg/calc.py": edit(CALC, "return a * b", "return b * a")},
            8: {"pkg/util.py": util.replace("max(0, x)", "max(1, x)")},
        },
    )
    changes = [
        Change("fork: double mul", {"pkg/calc.py": DOUBLED}),
        Change(
            "fork: say why",
            {
                "pkg/calc.py": DOUBLED.replace("2 * a * b", "2 * a * b  # doubled"),
                "pkg/util.py": util.replace("max(0, x)", "max(-1, x)"),
            },
        ),
    ]
    return shas, changes


def test_a_blocked_patch_names_its_own_conflicts(carry_changes, rebaser, tmp_path, upstream):
    """0002 is blocked on 0001 in calc.py and, on its own, conflicts in util.py, a file
    0001 never touches; its colliding commit is the one that edited util.py."""
    shas, changes = needing_0001(upstream)
    rows, _, _ = carry_changes(changes)
    blocked = rows["0002"]
    assert blocked["status"] == "blocked"
    assert blocked["stop"]["reason"] == (
        "needs 0001, which did not apply; on its own it also conflicts in pkg/util.py"
    )
    assert blocked["stop"]["conflicts"] == ["pkg/util.py"]
    assert blocked["collides_with"]["sha"] == shas[7]
    assert rows["0001"]["collides_with"]["sha"] == shas[2]
    assert blocked["proposal"] == "keep"
    assert blocked["reason"].startswith(
        "needs 0001 first; on its own it also conflicts in pkg/util.py"
    )


def test_every_patch_row_has_a_proposal_and_no_triage_runs_without_a_stop(
    carry_changes, rebaser, tmp_path, upstream, monkeypatch
):
    def refuse(*args, **kwargs):
        raise AssertionError("the triage looked at upstream on a run without stops")

    monkeypatch.setattr(triage_module, "Upstream", refuse)
    history(upstream, 3, {})
    rows, report, result = carry_changes(
        [Change("fork: double mul", {"pkg/calc.py": DOUBLED})],
    )
    assert result.code == ExitCode.OK
    assert rows["0001"]["proposal"] == "keep" and rows["0001"]["reason"] == "applied as it is"
    assert rows["0001"]["collides_with"] is None
    assert report["steps"][0]["proposal"] is None  # the overlay is not a patch


def test_the_table_and_the_markdown_start_with_what_needs_a_decision(
    carry_changes, rebaser, tmp_path, upstream
):
    upstream_has = edit(CALC, "return a - b", "return a - b  # upstream's")
    history(upstream, 4, {2: {"pkg/calc.py": edit(upstream_has, "return a * b", "return b * a")}})
    changes = [
        Change(
            "fork: check div",
            {"pkg/calc.py": edit(CALC, "return a / b", "return a / b if b else 0")},
        ),
        Change(
            "fork: comment sub",
            {
                "pkg/calc.py": edit(
                    edit(CALC, "return a / b", "return a / b if b else 0"),
                    "return a - b",
                    "return a - b  # upstream's",
                )
            },
        ),
        Change(
            "fork: double mul",
            {
                "pkg/calc.py": edit(
                    edit(
                        edit(CALC, "return a / b", "return a / b if b else 0"),
                        "return a - b",
                        "return a - b  # upstream's",
                    ),
                    "return a * b",
                    "return 2 * a * b",
                )
            },
        ),
    ]
    rows, _, result = carry_changes(changes)
    assert [rows[n]["proposal"] for n in ("0001", "0002", "0003")] == ["keep", "drop", "keep"]
    out = result.out
    resolve, confirm, applied = (
        out.index("resolve: stopped, proposed to keep"),
        out.index("confirm: proposed to drop"),
        out.index("applied, proposed to keep"),
    )
    assert resolve < out.index("0003-change-3", resolve) < confirm < applied
    series = tmp_path / "proj" / "patches" / "series"
    markdown = tmp_path / "matrix.md"
    rebaser(
        "verify",
        "--series",
        series,
        "--repo",
        upstream.path,
        "--bases",
        "tip",
        "--test",
        "none",
        "--markdown",
        markdown,
    )
    text = markdown.read_text()
    assert "#### triage on `tip`" in text
    assert text.index("**resolve: stopped, proposed to keep**") < text.index(
        "**confirm: proposed to drop**"
    )
    assert "- `0003-change-3.patch` (dropped): **keep**, a real conflict with " in text
    assert "- `0002-change-2.patch` (in upstream): **drop**, in upstream: " in text


def test_a_later_stop_asks_upstream_nothing_again_about_an_earlier_stop(
    rebaser, tmp_path, upstream, monkeypatch
):
    """Each `skip` or `continue` triages every stopped patch again. What a patch's proposal
    reads of upstream that depends on nothing but the patch and the target (its added lines
    in the target's files, the commit adding its names, whether the history is related) is
    asked at the first stop that judges it, then kept in the memo: on a real fork the later
    stops read a file set per earlier stop again (a tenth of a second each)."""
    guard = "    if b == 0:\n        raise ZeroDivisionError(b)\n    assert isinstance(b, float)\n"
    checked = edit(CALC, "    return a / b\n", guard + "    return a / b\n")
    backend = "\n\ndef topk_backend():\n    return '{}'\n"
    shas = history(
        upstream,
        5,
        {
            2: {"pkg/topk.py": TOPK + backend.format("torch")},
            3: {"pkg/calc.py": edit(checked, "    return a / b\n", "    return a / float(b)\n")},
        },
    )
    fork_topk = TOPK.replace("scores.topk(k)", "scores.topk(k, sorted=False)")
    base = git(upstream.path, "rev-parse", "v1")
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1",
        [
            Change("fork: explicit top-k", {"pkg/topk.py": fork_topk + backend.format("fi")}),
            Change("fork: check div", {"pkg/calc.py": checked}),
        ],
        extra_directives=f"@base git:{base}\n",
    )
    first = apply(rebaser, series, upstream, "tip", "--json", tmp_path / "a.json")
    assert first.code == ExitCode.NOT_APPLIED and "stopped at 0001" in first.out, first.out
    asked: dict[str, list] = {"texts": [], "adding": [], "related": []}
    texts, adding, run = (
        triage_module.Upstream.texts,
        triage_module.Upstream.adding,
        triage_module.Git.run,
    )
    monkeypatch.setattr(
        triage_module.Upstream,
        "texts",
        lambda self, paths: asked["texts"].append(list(paths)) or texts(self, paths),
    )
    monkeypatch.setattr(
        triage_module.Upstream,
        "adding",
        lambda self, name, paths: asked["adding"].append(name) or adding(self, name, paths),
    )

    def spied(self, *args, **kwargs):
        if args[:2] == ("merge-base", "--is-ancestor"):
            asked["related"].append(args)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(triage_module.Git, "run", spied)
    skipped = rebaser("skip", "--repo", upstream.path, "--json", tmp_path / "s.json")
    assert skipped.code == ExitCode.NOT_APPLIED and "stopped at 0002" in skipped.out
    assert asked == {"texts": [["pkg/calc.py"]], "adding": [], "related": []}
    before = {
        row["name"][:4]: row for row in json.loads((tmp_path / "a.json").read_text())["steps"]
    }
    after = {row["name"][:4]: row for row in json.loads((tmp_path / "s.json").read_text())["steps"]}
    assert after["0001"]["status"] == "skipped" and after["0002"]["status"] == "failed"
    for name, row in (("0001", before["0001"]), ("0002", after["0002"])):
        assert after[name]["proposal"] == row["proposal"] == "drop", after[name]
    assert (
        after["0001"]["reason"]
        == before["0001"]["reason"]
        == (
            f"superseded: {shas[1][:12]} (upstream 2) adds the same names: "
            "function select_topk, function topk_backend (2 of 2)"
        )
    )
    assert after["0002"]["reason"] == "superseded: upstream already has 3 of the 3 lines it adds"


def test_a_shallow_clones_answers_are_not_kept_for_it_deepened(tmp_path):
    """Whether upstream's range is related depends on the history the clone holds: a
    shallow clone lacks the ancestry and answers no. Deepened (`fetch --unshallow`), the
    same range is asked again, not answered from the memo; and a git error (an unknown
    commit) is never kept."""
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    shas = []
    for number in range(3):
        (source / "f.txt").write_text(f"{number}\n")
        git(source, "add", "f.txt")
        git(source, "commit", "-q", "-m", f"upstream {number}")
        shas.append(git(source, "rev-parse", "HEAD"))
    git(source, "tag", "base", shas[0])
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{source}", str(clone))
    git(clone, "fetch", "-q", "--depth", "1", "origin", "tag", "base")
    repo = Git(clone)
    memo_for = functools.partial(memo, repo)
    assert not triage_module.Upstream(repo, shas[0], shas[2], memo_for).related
    git(clone, "fetch", "-q", "--unshallow", "origin")
    deepened = triage_module.Upstream(repo, shas[0], shas[2], memo_for)
    assert deepened.related and deepened.history == "full"
    unknown = "0" * 40
    assert not triage_module.Upstream(repo, unknown, shas[2], memo_for).related
    assert memo_for("related", unknown, shas[2], "full").load() is None


def test_the_names_upstream_added_are_counted_as_listed():
    """One name in the patch's own file and four elsewhere read "function a and 2 more
    (5 of 5)" (a review): the count left out the names not shown."""
    from types import SimpleNamespace

    fresh = {name: "function" for name in "abcde"}
    at_target = {"a": ["pkg/own.py"], **{name: ["pkg/other.py"] for name in "bcde"}}
    row = SimpleNamespace(patch=SimpleNamespace(touched_paths=["pkg/own.py"]))
    triage = SimpleNamespace(_range=[], _remembered=lambda kind, key, ask: None)
    said = triage_module.Triage._same_identifiers(triage, row, fresh, at_target)
    assert said == "superseded: upstream adds the same names: function a and 4 more (5 of 5)"


def _names_base_and_target(tmp_path: Path) -> tuple[Git, list[str], list[str]]:
    """A repository of two commits, a base and a target, whose files hold names upstream
    kept, edited, deleted, renamed or added; the commits and the names to ask."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base_files = {
        "kept.py": "def alpha_name(): pass\n",
        "edited.py": "def beta_name(): pass\n",
        "gone.py": "def delta_name(): pass\n",
        "old_place.py": "class EpsilonName: pass\n" + "# filler\n" * 20,
        "odd [x].py": "ETA_NAME = 1\n",
        "both.py": "THETA_NAME = 1\n",
    }
    target_files = {
        "kept.py": base_files["kept.py"],
        "edited.py": "def beta_name(): pass\ndef gamma_name(): pass\n",
        "new.py": "def delta_name(): pass\ndef zeta_name(): pass\nTHETA_NAME = 2\n",
        "new_place.py": base_files["old_place.py"],
        "odd [x].py": "ETA_NAME = 2\n",
        "both.py": base_files["both.py"],
    }
    shas = []
    for files in (base_files, target_files):
        for path in repo.glob("*.py"):
            path.unlink()
        for name, text in files.items():
            (repo / name).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "a tree")
        shas.append(git(repo, "rev-parse", "HEAD"))
    names = ["alpha_name", "beta_name", "gamma_name", "delta_name", "EpsilonName", "zeta_name",
             "ETA_NAME", "THETA_NAME", "absent_name"]  # fmt: skip
    return Git(repo), shas, names


ON_THE_BASE = {"alpha_name", "beta_name", "delta_name", "EpsilonName", "ETA_NAME", "THETA_NAME"}


@pytest.mark.parametrize("threads", [0, 1], ids=["git's-threads", "one-thread"])
@pytest.mark.parametrize("memo_kept", [False, True], ids=["no-memo", "memo"])
def test_the_names_on_the_base_are_those_a_grep_of_the_whole_base_finds(
    tmp_path, memo_kept, threads
):
    """The base is searched only in the files upstream changed (a name in a file upstream
    left as it was is on the base: the same blob): the names found there are those a grep
    of the whole base finds, whatever upstream did to their files (kept, edited, deleted,
    renamed, a name with glob characters), asked once or answered from the memo, the
    greps in git's threads or in one (beside the lane, on two cores)."""
    repo, shas, names = _names_base_and_target(tmp_path)
    memo_for = functools.partial(memo, repo) if memo_kept else None
    upstream = triage_module.Upstream(repo, shas[0], shas[1], memo_for, threads=threads)
    whole = upstream.defined(shas[0], names)
    assert whole is not None and set(whole) == ON_THE_BASE
    for _ in range(2):  # the second time from the memo, where there is one
        triage = triage_module.Triage(upstream, None, memo_for)
        found = triage._defined(shas[1], names)
        assert set(triage._at_base(found)) == set(whole) & set(found)
    assert sorted(set(found) - set(whole)) == ["gamma_name", "zeta_name"]


@pytest.mark.parametrize(
    "setting",
    ["config grep.lineNumber", "config grep.column", "GIT_ICASE_PATHSPECS", "GIT_GLOB_PATHSPECS"],
)
def test_the_names_upstream_added_are_the_same_whatever_grep_settings_say(
    tmp_path, monkeypatch, setting
):
    """A review: with `grep.lineNumber` (or `grep.column`) in the user's config every match
    came as `rev:file\0<line>\0name`, read as a name in no file, so no name was ever one
    upstream added (a superseded patch was kept); with GIT_ICASE_PATHSPECS or
    GIT_GLOB_PATHSPECS in the environment git refused `--literal-pathspecs`, the base's
    grep failed, and every name counted as upstream's (a patch could be dropped)."""
    repo, shas, names = _names_base_and_target(tmp_path)
    if setting.startswith("config "):
        config = tmp_path / "gitconfig"
        section, key = setting.removeprefix("config ").split(".")
        config.write_text(f"[{section}]\n\t{key} = true\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    else:
        monkeypatch.setenv(setting, "1")
    upstream = triage_module.Upstream(repo, shas[0], shas[1])
    triage = triage_module.Triage(upstream, None)
    found = triage._defined(shas[1], names)
    assert set(found) == ON_THE_BASE | {"gamma_name", "zeta_name"}
    assert found["zeta_name"] == ["new.py"]
    assert set(triage._at_base(found)) == ON_THE_BASE


def test_a_path_too_long_for_one_argument_is_not_put_on_a_command_line(tmp_path):
    """A review: a changed file whose path is longer than one argument may be (128 KiB on
    Linux: git stores such a path, no file system checks it out) went on the base grep's
    command line, and `Argument list too long` crashed the triage. The base is then
    searched whole."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    long = "/".join(["d" * 200] * 700) + "/x.py"
    shas = []
    for text in ("def alpha_name(): pass\n", "def alpha_name(): pass\ndef beta_name(): pass\n"):
        stream = (
            "commit refs/heads/main\ncommitter x <x@y> 0 +0000\ndata 1\nc\n"
            + (f"from {shas[-1]}\n" if shas else "")
            + f"M 100644 inline {long}\ndata {len(text)}\n{text}\n"
        )
        subprocess.run(
            ["git", "fast-import", "--quiet"], cwd=repo, input=stream.encode(), check=True
        )
        shas.append(git(repo, "rev-parse", "main"))
    upstream = triage_module.Upstream(Git(repo), shas[0], shas[1])
    triage = triage_module.Triage(upstream, None)
    found = triage._defined(shas[1], ["alpha_name", "beta_name"])
    assert set(found) == {"alpha_name", "beta_name"}
    assert triage._at_base(found) == {"alpha_name"}


def test_a_change_applied_on_top_of_one_upstream_has_is_kept(carry_changes, upstream):
    """A review: 0001 is in upstream as it is; 0002, same topic and file, applies with a
    change of its own, upstream lacking it. It was proposed for drop as a follow-up of 0001
    (once another patch stopped and the triage ran), and following that loses the change."""
    clamped = CALC.replace("    return a - b\n", "    return max(a - b, 0)\n")
    history(upstream, 3, {2: {"pkg/calc.py": clamped}, 3: {"pkg/d.py": "X = 5\n"}})
    changes = [
        Change("calc: clamp sub at zero", {"pkg/calc.py": clamped}),
        Change("calc: triple mul", {"pkg/calc.py": clamped.replace("a * b", "3 * a * b")}),
        *[Change(f"{n}: x two", {f"pkg/{n}.py": "X = 2\n"}) for n in "abc"],
        Change("d: x two", {"pkg/d.py": "X = 2\n"}),  # stops: upstream wrote X = 5
    ]
    rows, _, _ = carry_changes(changes)
    assert [rows[n]["status"] for n in ("0001", "0002")] == ["in upstream", "clean"], rows
    assert rows["0002"]["proposal"] == "keep", rows["0002"]


def test_a_patchs_names_are_read_by_kind_from_its_changed_lines():
    """Each kind of name, on added lines only and in the files where it can be written:
    defs, classes and config fields in Python alone; flags and environment variables in
    any file. A name a removed line also holds, a short one and a dunder are not new."""
    from types import SimpleNamespace

    diff = """\
diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,9 @@
-def renamed_helper():
+def renamed_helper(x):
+async  def fetch_shards():
+class ShardPlan:
+    shard_count: int = 4
+    os.environ.get("SHARD_DEBUG_DIR") or os.getenv( 'SHARD_LIMIT')
+parser.add_argument("--shard-plan", type=str)
+def abc(): pass
+def __dunder__(): pass
 def test_kept(): pass
+def test_shards_round_trip(): pass
diff --git a/run.sh b/run.sh
--- a/run.sh
+++ b/run.sh
@@ -1 +1,3 @@
+def not_python_here
+torchrun train.py "--shard-count" 4
+export X=${environ["SHELL_ONLY"]}
"""
    patch = SimpleNamespace(raw=diff.encode())
    assert triage_module.identifiers(patch) == {
        "fetch_shards": "function",
        "ShardPlan": "class",
        "shard_count": "field",
        "SHARD_DEBUG_DIR": "env var",
        "SHARD_LIMIT": "env var",
        "--shard-plan": "flag",
        "test_shards_round_trip": "test",
        "--shard-count": "flag",
        "SHELL_ONLY": "env var",
    }
