"""The fast lane (one git rebase for a run of patches, their commits built by one fast-import)
makes exactly the branch and the report the per-patch path makes, costs a number of git
processes that does not grow with the series, and survives a kill in the middle."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault
from synthetic import CALC, edit, git

from rebaser.errors import ExitCode, RebaserError
from rebaser.series.export import export_patch
from rebaser.repo.git import Git
from rebaser.series.patches import load_series
from rebaser.steps import fastlane
from rebaser.carry import replay as replay_module
from rebaser.repo import refs as forkkit_refs
from rebaser.carry.rawdiff import apply_exactly, parse_diff
from rebaser.carry.replay import Replay

ROOT = Path(__file__).resolve().parents[1]
UTIL = "".join(
    f"\n\ndef helper_{n}(value):\n    total = value\n    return total + {n}\n" for n in range(12)
)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_carry", ROOT / "ci" / "bench_carry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def fork_and_tip(upstream, root: Path) -> Path:
    """A fork of six commits on v1 and an upstream tip that makes each way of applying
    happen: clean, offset, ort cherry-pick across a rename, in upstream, a conflict
    (dropped) and a patch that needs the dropped one (blocked). Returns the imported series."""
    upstream.commit({"pkg/util.py": UTIL}, "util", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    steps = [
        ("pkg/calc.py", "    return a + b\n", "    return b + a\n", "calc: commute add"),
        ("pkg/util.py", "return total + 9\n", "return total + 90\n", "util: renamed nine"),
        ("pkg/util.py", "return total + 2\n", "return total - 2\n", "util: drift two"),
        ("pkg/calc.py", "    return -a\n", "    return 0 - a\n", "calc: neg upstream too"),
        ("pkg/calc.py", "    return a / b\n", "    return a // b\n", "calc: floor div"),
        ("pkg/calc.py", "    return a // b\n", "    return int(a // b)\n", "calc: int div"),
    ]
    for path, old, new, subject in steps:
        upstream.commit({path: edit(upstream.read(path), old, new)}, subject)
    git(upstream.path, "checkout", "-q", "main")
    calc = edit(edit(CALC, "    return -a\n", "    return 0 - a\n"), "a / b", "a / (b or 1)")
    util = edit(UTIL, "def helper_2(value):\n", "def helper_2(value):  # upstream\n")
    upstream.commit({"pkg/calc.py": calc, "pkg/util.py": util}, "upstream moves")
    git(upstream.path, "mv", "pkg/util.py", "pkg/helpers.py")
    git(upstream.path, "commit", "-q", "-m", "rename util")
    git(upstream.path, "tag", "tip")
    series_dir = root / "series"
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    from rebaser.cli import main

    assert main(["import", *arguments, str(series_dir)]) == 0
    return series_dir / "series"


def carried(rebaser, series: Path, upstream, report: Path, *extra: str):
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip"]
    return rebaser(*args, "--test", "none", "--keep-going", "--json", report, *extra)


def test_the_fast_lane_makes_the_per_patch_paths_branch_and_report(rebaser, tmp_path, upstream):
    series = fork_and_tip(upstream, tmp_path)
    reports = {}
    for lane in (False, True):
        report = tmp_path / f"lane-{lane}.json"
        force = ("--force",) if lane else ("--no-fast-lane",)
        assert carried(rebaser, series, upstream, report, *force).code == ExitCode.NOT_APPLIED
        data = json.loads(report.read_text())
        reports[lane] = (git(upstream.path, "rev-parse", data["branch"]), data["steps"])
    assert reports[True] == reports[False]
    statuses = [step["status"] for step in reports[True][1]]
    assert statuses == [
        "laid",
        "clean",
        "cherry-pick",
        "cherry-pick",
        "in upstream",
        "dropped",
        "blocked",
    ]


BLOCKS = "x\ny\nz\n" * 6
FOURTH_CHANGED = "x\ny\nz\n" * 3 + "x\nY\nz\n" + "x\ny\nz\n" * 2


def blocks_carried(rebaser, tmp_path, upstream, tip_blocks: str) -> tuple[list[dict], Path]:
    """A fork that changes the fourth of six identical blocks (and then calc.py), carried
    onto a tip whose blocks file is `tip_blocks`, with and without the fast lane: the
    steps (the same both ways) and the worktree."""
    upstream.commit({"pkg/blocks.txt": BLOCKS}, "blocks", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"pkg/blocks.txt": FOURTH_CHANGED}, "Y in the fourth block")
    upstream.commit({"pkg/calc.py": edit(CALC, "a + b", "b + a")}, "calc: commute add")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/blocks.txt": tip_blocks}, "upstream's blocks", tag="tip")
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    from rebaser.cli import main

    assert main(["import", *arguments, str(tmp_path / "s")]) == 0
    reports = {}
    for lane in (False, True):
        report = tmp_path / f"lane-{lane}.json"
        force = ("--force",) if lane else ("--no-fast-lane",)
        result = carried(rebaser, tmp_path / "s" / "series", upstream, report, *force)
        assert result.code == ExitCode.OK, result.out + result.err
        data = json.loads(report.read_text())
        reports[lane] = (git(upstream.path, "rev-parse", data["branch"]), data["steps"])
    assert reports[True] == reports[False]
    worktree = Path(data["worktree"])
    assert git(worktree, "status", "--porcelain") == ""
    return reports[True][1], worktree


def test_where_git_apply_and_ort_make_different_files_ort_wins(rebaser, tmp_path, upstream):
    """Upstream adds two lines above a run of identical blocks: git apply finds the patch's
    context one line up (a block too early), ort puts the change in its own block, as git
    rebase does. Both paths keep ort's file (the lane was cut there, and the per-patch path
    kept git apply's, reported `offset`: a review found the edit in the wrong copy)."""
    steps, worktree = blocks_carried(rebaser, tmp_path, upstream, "q\nq\n" + BLOCKS)
    assert [step["status"] for step in steps] == ["laid", "cherry-pick", "clean"], steps
    assert "git apply's file differs from ort's" in steps[1]["detail"], steps[1]
    lines = (worktree / "pkg/blocks.txt").read_text().splitlines()
    assert lines.index("Y") == 12  # in its own block, as git rebase puts it (git apply: 9)


def test_where_ort_finds_the_change_upstream_git_apply_is_not_kept(rebaser, tmp_path, upstream):
    """A review: upstream made the same change and added lines above the blocks; ort's pick
    was empty (git rebase drops the commit), and the per-patch path fell back to the exact
    apply, which changed another block too, reported `clean`."""
    steps, worktree = blocks_carried(rebaser, tmp_path, upstream, "q\nq\n" + FOURTH_CHANGED)
    assert [step["status"] for step in steps] == ["laid", "in upstream", "clean"], steps
    assert (worktree / "pkg/blocks.txt").read_text() == "q\nq\n" + FOURTH_CHANGED


def test_the_fast_lane_reports_offsets_as_git_apply_does(rebaser, tmp_path, upstream, monkeypatch):
    upstream.commit({"pkg/util.py": UTIL}, "util", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"pkg/util.py": edit(UTIL, "total + 9\n", "total + 90\n")}, "util: nine")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/util.py": "# one\n# two\n" + UTIL}, "upstream header", tag="tip")
    from rebaser.cli import main

    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    assert main(["import", *arguments, str(tmp_path / "s")]) == 0
    report = tmp_path / "r.json"
    assert carried(rebaser, tmp_path / "s" / "series", upstream, report).code == ExitCode.OK
    step = json.loads(report.read_text())["steps"][1]
    assert step["status"] == "offset" and step["detail"].endswith("(offset +2)"), step


def test_fast_built_commits_are_the_commits_git_apply_builds(tmp_path, upstream, monkeypatch):
    series = load_series(fork_and_tip(upstream, tmp_path))
    base = git(upstream.path, "rev-parse", "base")
    fast = Replay(Git(upstream.path), base, series.patches).commits()
    assert len(fast) == len(series.patches)
    refs = git(upstream.path, "for-each-ref", "--format=%(refname)", forkkit_refs.REPLAY)
    for ref in refs.split():
        git(upstream.path, "update-ref", "-d", ref)
    monkeypatch.setattr(replay_module, "build_commits", lambda *args: [])
    slow = Replay(Git(upstream.path), base, series.patches)
    assert [slow.commit_of(patch) for patch in series.patches] == fast


@pytest.mark.parametrize("built", ["at once first", "one by one"])
def test_a_patch_that_does_not_apply_on_its_base_leaves_the_later_ones_their_commits(
    tmp_path, upstream, monkeypatch, built
):
    """`refresh` keeps a patch the branch left off as it was, made on the old base, and
    exports the later ones from a branch without it. Each later patch lost its own commit
    (no cherry-pick, no collision found) for that one patch; they are built without it."""
    series_file = fork_and_tip(upstream, tmp_path)
    second = sorted(series_file.parent.glob("0002-*.patch"))[0]
    second.write_text(second.read_text().replace(" def helper_9(", " def helper_nine("))
    series = load_series(series_file)
    base = git(upstream.path, "rev-parse", "base")
    if built == "one by one":
        monkeypatch.setattr(replay_module, "build_commits", lambda *args: [])
    replay = Replay(Git(upstream.path), base, series.patches)
    commits = [replay.commit_of(patch) for patch in series.patches]
    assert commits[1] is None and None not in commits[:1] + commits[2:], commits
    assert replay.did_not_apply == [series.patches[1].name]
    third = commits[2]
    assert "return total + 9\n" in git(upstream.path, "show", f"{third}:pkg/util.py")
    assert "return total - 2\n" in git(upstream.path, "show", f"{third}:pkg/util.py")
    assert git(upstream.path, "diff", "--stat", f"{third}^", third, "--", "pkg/calc.py") == ""


def test_a_chain_built_at_once_is_remembered_by_one_ref_and_reused(tmp_path, upstream, monkeypatch):
    series = load_series(fork_and_tip(upstream, tmp_path))
    base = git(upstream.path, "rev-parse", "base")
    chain = Replay(Git(upstream.path), base, series.patches).commits()
    refs = git(upstream.path, "for-each-ref", "--format=%(objectname)", forkkit_refs.REPLAY)
    assert refs.split() == [chain[-1]]  # one ref, not one a patch: each is a file to write

    def refuse(*args):
        raise AssertionError("built again")

    monkeypatch.setattr(replay_module, "build_commits", refuse)
    again = Replay(Git(upstream.path), base, series.patches)
    assert [again.commit_of(patch) for patch in series.patches] == chain


def test_a_stale_index_line_is_caught_and_left_to_git_apply(rebaser, tmp_path, upstream):
    series_file = fork_and_tip(upstream, tmp_path)
    third = sorted(series_file.parent.glob("0003-*.patch"))[0]
    third.write_text(
        third.read_text().replace("+    return total - 2\n", "+    return total * 2\n")
    )
    series = load_series(series_file)
    base = git(upstream.path, "rev-parse", "base")
    built = Replay(Git(upstream.path), base, series.patches).commits()
    assert len(built) == 2
    refs = git(upstream.path, "for-each-ref", "--format=%(objectname)", forkkit_refs.REPLAY)
    assert refs.split() == [built[-1]]  # the last good commit's, not the stale one's
    report = tmp_path / "r.json"
    result = carried(rebaser, series_file, upstream, report)
    assert report.exists(), result.out + result.err
    tree = Path(json.loads(report.read_text())["worktree"])
    assert "return total * 2" in (tree / "pkg/helpers.py").read_text()


def count_git_processes(monkeypatch, tmp_path: Path, patches: int) -> int:
    bench = _bench()
    repo = tmp_path / f"repo-{patches}"
    repo.mkdir()
    bench.build_history(repo, patches)
    calls = []
    original = Git._completed
    monkeypatch.setattr(
        Git,
        "_completed",
        lambda self, args, *rest: calls.append(args) or original(self, args, *rest),
    )
    seconds, statuses, _ = bench.time_rebaser(repo, tmp_path / f"scratch-{patches}", 1)
    monkeypatch.setattr(Git, "_completed", original)
    assert "cherry-pick" in statuses and "clean" in statuses
    return len(calls)


def test_git_processes_do_not_grow_with_the_series(monkeypatch, tmp_path):
    """A regression guard for ci/bench_carry.py's figure, without timing anything."""
    ten, thirty = (count_git_processes(monkeypatch, tmp_path, n) for n in (10, 30))
    assert thirty - ten <= 3, (ten, thirty)
    assert thirty < 60, thirty


def test_a_kill_inside_the_sequencer_can_be_continued_or_aborted(rebaser, tmp_path, upstream):
    series = fork_and_tip(upstream, tmp_path)
    whole = tmp_path / "whole.json"
    assert carried(rebaser, series, upstream, whole).code == ExitCode.NOT_APPLIED
    expected = json.loads(whole.read_text())
    branch = expected["branch"]
    uninterrupted = git(upstream.path, "rev-parse", branch)

    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip", "--force"]
    args += ["--test", "none", "--keep-going"]
    point = FaultPoint("rebaser.steps.fastlane:_sequence", "after", 1)
    died = run_with_fault(point, args)
    assert died.returncode == 137, died.stdout + died.stderr
    worktree = Path(expected["worktree"])
    git_dir = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    _, lane = (git_dir / fastlane.MARKER).read_text().splitlines()
    assert (Path(lane) / ".git").is_dir()  # the lane's repository, its sequencer run done
    assert git(worktree, "symbolic-ref", "--short", "HEAD") == branch  # the worktree waits
    status = rebaser("status", "--repo", upstream.path)
    assert "interrupted" in status.out and "rebaser continue" in status.out, status.out

    report = tmp_path / "continued.json"
    continued = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert continued.code == ExitCode.NOT_APPLIED, continued.out + continued.err
    assert git(upstream.path, "rev-parse", branch) == uninterrupted
    assert [s["status"] for s in json.loads(report.read_text())["steps"]] == [
        s["status"] for s in expected["steps"]
    ]
    assert git(worktree, "status", "--porcelain") == ""
    assert not Path(lane).exists()

    assert run_with_fault(point, args).returncode == 137
    _, lane = (git_dir / fastlane.MARKER).read_text().splitlines()
    assert rebaser("abort", "--repo", upstream.path).code == 0, "abort after a kill mid-lane"
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert not Path(lane).exists()


LINES = "".join(f"line {n}\n" for n in range(1, 31))
# (the file a patch was made on, the patch's result, the file it is applied to now)
EXACT_CASES = {
    "moved down": (LINES, LINES.replace("line 15\n", "LINE 15\n"), "new\nnew\n" + LINES),
    "moved up": (LINES, LINES.replace("line 15\n", "LINE 15\n"), LINES.replace("line 2\n", "")),
    "context changed": (LINES, LINES.replace("line 15\n", "X\n"), LINES.replace("line 14", "y")),
    "at the beginning": (LINES, "first\n" + LINES, "new\n" + LINES),
    "at the end": (LINES, LINES + "last\n", LINES + "more\n"),
    "no newline at the end": (LINES + "tail", LINES + "tail!", "new\n" + LINES + "tail"),
    "two hunks": (
        LINES,
        LINES.replace("line 5\n", "five\n").replace("line 25\n", "twenty-five\n"),
        "a\n" + LINES.replace("line 20\n", "line 20\nb\nc\n"),
    ),
    "repeated context": (  # it fits one line down and two up: git takes the nearer
        "x\ny\nz\n" * 6,
        "x\ny\nz\n" * 3 + "x\nY\nz\n" + "x\ny\nz\n" * 2,
        "q\n" + "x\ny\nz\n" * 6,
    ),
}


@pytest.mark.parametrize("case", EXACT_CASES)
def test_the_hunk_search_agrees_with_git_apply(tmp_path, upstream, case):
    """rawdiff.apply_exactly decides `offset` in the fast lane: it must find what git finds."""
    before, after, now = EXACT_CASES[case]
    upstream.commit({"f.txt": before}, "before")
    upstream.commit({"f.txt": after}, "after")
    patch = tmp_path / "p.patch"
    patch.write_text(export_patch(Git(upstream.path), "HEAD"))
    upstream.commit({"f.txt": now}, "now")
    applied = subprocess.run(
        ["git", "apply", "--verbose", str(patch)], cwd=upstream.path, capture_output=True, text=True
    )
    ours = apply_exactly(now.encode(), parse_diff(patch.read_bytes())[0])
    if applied.returncode != 0:
        assert ours is None, applied.stderr
        return
    assert ours is not None, applied.stderr
    text, offsets = ours
    assert text == (upstream.path / "f.txt").read_bytes()
    said = re.findall(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", applied.stderr)
    assert offsets == [f"hunk {n} at line {at} (offset {int(d):+d})" for n, at, d in said]


def test_continue_after_a_stop_carries_the_rest_in_a_lane(rebaser, tmp_path, upstream, monkeypatch):
    """Without --keep-going the lane hands the conflict to the per-patch stop; the user's fix
    and `continue` take the rest through a new lane."""
    series = fork_and_tip(upstream, tmp_path)
    carried: list[str] = []
    carry = fastlane.carry
    monkeypatch.setattr(
        fastlane,
        "carry",
        lambda *args: carried.extend(p.name[:4] for p in args[4]) or carry(*args),
    )
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip"]
    stopped = rebaser(*args, "--test", "none")
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out
    state = rebaser("status", "--repo", upstream.path)
    assert "0005-floor-div.patch" in state.out, state.out
    tree = Path(git(upstream.path, "worktree", "list", "--porcelain").split("\n\n")[1].split()[1])
    calc = (tree / "pkg/calc.py").read_text()
    start, end = calc.index("<<<<<<<"), calc.index(">>>>>>>")
    fixed = calc[:start] + "    return a // b\n" + calc[calc.index("\n", end) + 1 :]
    (tree / "pkg/calc.py").write_text(fixed)
    git(tree, "add", "pkg/calc.py")
    report = tmp_path / "r.json"
    done = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert done.code == ExitCode.OK, done.out + done.err
    steps = json.loads(report.read_text())["steps"]
    assert [s["status"] for s in steps][-2:] == ["manual", "clean"]
    assert "return int(a // b)" in (tree / "pkg/calc.py").read_text()
    assert git(tree, "status", "--porcelain") == ""
    # a lane from 0001 stops at 0004 (empty: in upstream), one from 0005 at its conflict,
    # and after the fix one carries 0006
    assert carried == ["0001", "0002", "0003", "0004", "0005", "0006", "0005", "0006", "0006"]


def test_the_hunk_search_refuses_to_create_a_file_that_exists(upstream, tmp_path):
    upstream.commit({"new.txt": "one\ntwo\n"}, "create new.txt")
    created = parse_diff(export_patch(Git(upstream.path), "HEAD").encode())[0]
    assert created.created
    assert apply_exactly(None, created) == (b"one\ntwo\n", [])
    assert apply_exactly(b"one\ntwo\n", created) is None  # git apply: already exists


def test_a_prefetch_that_fails_says_so_where_the_commits_are_needed(tmp_path, upstream):
    series = load_series(fork_and_tip(upstream, tmp_path))
    missing = "1" * 40  # not a commit of the repository: ls-tree fails in the thread
    replay = Replay(Git(upstream.path), missing, series.patches)
    replay.prefetch()
    with pytest.raises(RebaserError, match="ls-tree"):
        replay.commits()


def test_a_run_of_conflicts_does_not_start_a_lane_per_patch(
    rebaser, tmp_path, upstream, monkeypatch
):
    """On a real fork most stops come in runs (docs/real-fork.md: 23 of 32 patches). Going on
    past failures, the lane judges each patch git stops at by itself and goes on with `git
    rebase --skip`: one sequencer run for the whole series, and the per-patch path's
    outcome, row for row."""
    upstream.commit({"pkg/util.py": UTIL}, "util", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    for n in range(12):
        text = edit(upstream.read("pkg/util.py"), f"total + {n}\n", f"total * {n}\n")
        upstream.commit({"pkg/util.py": text}, f"util: times {n}")
    git(upstream.path, "checkout", "-q", "main")
    theirs = UTIL
    for n in range(12):
        theirs = edit(theirs, f"total + {n}\n", f"total - {n}\n")
    upstream.commit({"pkg/util.py": theirs}, "upstream: minus", tag="tip")
    from rebaser.cli import main

    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    assert main(["import", *arguments, str(tmp_path / "s")]) == 0
    lanes: list[str] = []
    carry = fastlane.carry
    monkeypatch.setattr(
        fastlane, "carry", lambda *args: lanes.append(args[4][0].name[:4]) or carry(*args)
    )
    report = tmp_path / "r.json"
    outcome = carried(rebaser, tmp_path / "s" / "series", upstream, report)
    assert outcome.code == ExitCode.NOT_APPLIED, outcome.out
    steps = json.loads(report.read_text())["steps"][1:]
    assert [step["status"] for step in steps] == ["dropped"] * 12
    assert lanes == ["0001"], lanes  # one lane, through all twelve stops
    alone = tmp_path / "alone.json"
    assert (
        carried(
            rebaser, tmp_path / "s" / "series", upstream, alone, "--force", "--no-fast-lane"
        ).code
        == ExitCode.NOT_APPLIED
    )
    assert json.loads(alone.read_text())["steps"] == json.loads(report.read_text())["steps"]
