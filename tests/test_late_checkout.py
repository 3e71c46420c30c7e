"""The apply's worktree gets its files late (rebaser/repo/late_checkout.py). Until then git sees
a clean sparse checkout that holds no file; however the apply ends, stops or dies, the
worktree ends as a plain checkout of its branch: every file written, no skip-worktree mark,
and no sparse-checkout setting left anywhere in the repository."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault
from synthetic import ADD_DOC, CALC, apply, calc_series, edit, git, two_patch_series
from test_fast_lane import carried, fork_and_tip

from rebaser.repo import late_checkout
from rebaser.repo import workspace
from rebaser.errors import ExitCode
from rebaser.repo.git import Git


def assert_plain_checkout(worktree: Path, repo: Path) -> None:
    entries = git(worktree, "ls-files", "-v").splitlines()
    assert entries and all(line.startswith(("H ", "M ")) for line in entries), entries  # S: skipped
    missing = [line[2:] for line in entries if not (worktree / line[2:]).is_file()]
    assert missing == []
    git_dir = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    assert not (git_dir / "info" / "sparse-checkout").exists()
    settings = git(repo, "config", "--list", "--show-origin").lower()
    assert "sparsecheckout" not in settings and "worktreeconfig" not in settings, settings


def test_a_new_worktree_holds_no_file_yet_and_git_sees_it_clean(upstream, tmp_path):
    base = upstream.commit({"pkg/calc.py": CALC, "pkg/deep/more.py": "X = 1\n"}, "v1")
    repo = Git(upstream.path)
    space = workspace.create(repo, "forkkit/demo/v1", base, tmp_path / "wt")
    assert [path.name for path in space.path.iterdir()] == [".git"]
    assert git(space.path, "status", "--porcelain") == ""
    git_dir = workspace.worktree_git_dir(space.path)
    assert late_checkout.pending(git_dir)

    # what the overlay step leaves (a new file in the index) stays through finish()
    (space.path / "pkg").mkdir()
    (space.path / "pkg" / "new.py").write_text("NEW = 1\n")
    git(space.path, "add", "pkg/new.py")
    late_checkout.finish(space.git, git_dir)
    assert not late_checkout.pending(git_dir)
    assert (space.path / "pkg/calc.py").read_text() == CALC
    assert (space.path / "pkg/deep/more.py").read_text() == "X = 1\n"
    assert git(space.path, "status", "--porcelain") == "A  pkg/new.py"
    assert_plain_checkout(space.path, upstream.path)
    late_checkout.finish(space.git, git_dir)  # a second time changes nothing
    assert git(space.path, "status", "--porcelain") == "A  pkg/new.py"


def index_sizes(worktree: Path) -> dict[str, int]:
    """Each entry's size as the index holds it (0 where git smudged a racily clean one)."""
    sizes, name = {}, ""
    for line in git(worktree, "ls-files", "--debug").splitlines():
        if not line.startswith(" "):
            name = line
        elif line.strip().startswith("size:"):
            sizes[name] = int(line.split()[1])
    return sizes


def test_settle_leaves_no_file_racily_clean(upstream, tmp_path):
    """Files written in the second their index was written are racily clean: git smudges
    them in the index and reads each again at every later index write (a checkout, a
    status). settle() lets that second pass and writes the index once more, after which
    every entry holds its file's size; given up first, it leaves the index as it was."""
    base = upstream.commit({"pkg/calc.py": CALC, "pkg/deep/more.py": "X = 1\n"}, "v1")
    space = workspace.create(Git(upstream.path), "forkkit/demo/v1", base, tmp_path / "wt")
    git_dir = workspace.worktree_git_dir(space.path)
    assert late_checkout.finish(space.git, git_dir)
    written = (git_dir / "index").stat().st_mtime_ns
    given_up = threading.Event()
    given_up.set()
    late_checkout.settle(space.git, git_dir, given_up)
    assert (git_dir / "index").stat().st_mtime_ns == written
    late_checkout.settle(space.git, git_dir, threading.Event())
    sizes = index_sizes(space.path)
    files = {path: (space.path / path).stat() for path in sizes}
    assert "pkg/deep/more.py" in files
    index = (git_dir / "index").stat().st_mtime_ns // 10**9
    assert all(stat.st_mtime_ns // 10**9 < index for stat in files.values())
    assert sizes == {path: stat.st_size for path, stat in files.items()}
    assert not late_checkout.finish(space.git, git_dir)  # written already
    assert git(space.path, "status", "--porcelain") == ""


def _lane_all(rebaser, tmp_path, upstream):
    series = fork_and_tip(upstream, tmp_path)
    return carried(rebaser, series, upstream, tmp_path / "r.json"), ExitCode.NOT_APPLIED


def _lane_off(rebaser, tmp_path, upstream):
    series = fork_and_tip(upstream, tmp_path)
    result = carried(rebaser, series, upstream, tmp_path / "r.json", "--no-fast-lane")
    return result, ExitCode.NOT_APPLIED


def _per_patch(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream, overlay={"pkg/extra.py": "EXTRA = 1\n"})
    return apply(rebaser, series, upstream, "v1", "--json", tmp_path / "r.json"), ExitCode.OK


def _conflict_stop(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    moved = edit(CALC, "def add(a, b):\n", "def add(a, b):  # v2\n")
    upstream.commit({"pkg/calc.py": moved}, "v2: a comment where the patch adds", tag="v2")
    return _apply_v2(rebaser, tmp_path, upstream, series)


def _overlay_clash(rebaser, tmp_path, upstream):
    series = calc_series(
        tmp_path, upstream, [("demo: document add", ADD_DOC)], overlay={"pkg/extra.py": "E = 1\n"}
    )
    upstream.commit({"pkg/extra.py": "UPSTREAM = 1\n"}, "v2: upstream's own extra.py", tag="v2")
    return _apply_v2(rebaser, tmp_path, upstream, series)


def _apply_v2(rebaser, tmp_path, upstream, series):
    """An apply onto v2 that stops; the result and the exit code expected."""
    result = apply(rebaser, series, upstream, "v2", "--json", tmp_path / "r.json")
    return result, ExitCode.NOT_APPLIED


ENDINGS = {
    "a lane carries the series (with stops, going on)": _lane_all,
    "the per-patch path only": _lane_off,
    "patches applied one by one, with an overlay": _per_patch,
    "a conflict stop": _conflict_stop,
    "an overlay stop": _overlay_clash,
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_every_way_an_apply_ends_leaves_a_plain_checkout(rebaser, tmp_path, upstream, ending):
    result, expected = ENDINGS[ending](rebaser, tmp_path, upstream)
    assert result.code == expected, result.out + result.err
    report = json.loads((tmp_path / "r.json").read_text())
    assert_plain_checkout(Path(report["worktree"]), upstream.path)
    if ending == "an overlay stop":  # the user merges the clash in upstream's file
        assert (Path(report["worktree"]) / "pkg/extra.py").read_text() == "UPSTREAM = 1\n"
        assert "pkg/extra.py" in report["steps"][0]["detail"]


def _killed_before_files(rebaser, tmp_path, upstream, point: FaultPoint):
    """The series of test_fast_lane applied whole, then again with --force killed at
    `point`; the whole apply's report and the arguments to apply again."""
    series = fork_and_tip(upstream, tmp_path)
    whole = tmp_path / "whole.json"
    assert carried(rebaser, series, upstream, whole).code == ExitCode.NOT_APPLIED
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "tip", "--force"]
    args += ["--test", "none", "--keep-going"]
    assert run_with_fault(point, args).returncode == 137
    return json.loads(whole.read_text()), args


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_while_the_worktree_is_made_is_replaced_by_the_next_apply(
    rebaser, tmp_path, upstream, when
):
    """Killed before the apply's state exists: nothing to continue; apply --force replaces
    the half-made worktree (with no index yet, or an index and no file)."""
    point = FaultPoint("rebaser.repo.late_checkout:begin", when, 1)
    expected, args = _killed_before_files(rebaser, tmp_path, upstream, point)
    again = rebaser(*args, "--json", tmp_path / "again.json")
    assert again.code == ExitCode.NOT_APPLIED, again.out + again.err
    steps = json.loads((tmp_path / "again.json").read_text())["steps"]
    assert [s["status"] for s in steps] == [s["status"] for s in expected["steps"]]
    assert_plain_checkout(Path(expected["worktree"]), upstream.path)


def test_a_kill_before_any_file_is_written_can_be_continued_or_aborted(rebaser, tmp_path, upstream):
    point = FaultPoint(
        "rebaser.sequencer.state:ApplyState.save", "after", 1
    )  # the apply's first save
    expected, args = _killed_before_files(rebaser, tmp_path, upstream, point)
    worktree = Path(expected["worktree"])
    assert [path.name for path in worktree.iterdir()] == [".git"]
    status = rebaser("status", "--repo", upstream.path).out
    assert "interrupted" in status and "files are not written yet" in status, status

    report = tmp_path / "continued.json"
    continued = rebaser("continue", "--repo", upstream.path, "--json", report)
    assert continued.code == ExitCode.NOT_APPLIED, continued.out + continued.err
    steps = json.loads(report.read_text())["steps"]
    assert [s["status"] for s in steps] == [s["status"] for s in expected["steps"]]
    assert git(worktree, "status", "--porcelain") == ""
    assert_plain_checkout(worktree, upstream.path)

    assert run_with_fault(point, args).returncode == 137
    aborted = rebaser("abort", "--repo", upstream.path)
    assert aborted.code == 0, aborted.out + aborted.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert not worktree.exists()


def test_a_repository_in_cone_mode_gets_the_same_apply_and_no_warning(
    rebaser, tmp_path, upstream, monkeypatch
):
    """rebaser's patterns (leave out everything, then everything) are not cone patterns: the
    user's `core.sparseCheckoutCone` and `index.sparse` must not change how git reads them
    (git warns, then falls back to non-cone matching: a fallback not to rely on)."""
    series = fork_and_tip(upstream, tmp_path)
    assert carried(rebaser, series, upstream, tmp_path / "plain.json").code == ExitCode.NOT_APPLIED
    git(upstream.path, "config", "core.sparseCheckoutCone", "true")
    git(upstream.path, "config", "index.sparse", "true")
    said: list[bytes] = []
    original = Git._completed

    def recording(self, args, *rest):
        completed = original(self, args, *rest)
        said.append(completed.stderr)
        return completed

    monkeypatch.setattr(Git, "_completed", recording)
    result = carried(rebaser, series, upstream, tmp_path / "cone.json", "--force")
    assert result.code == ExitCode.NOT_APPLIED
    assert not [text for text in said if b"cone pattern" in text], said
    plain, cone = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "cone"))
    assert cone["steps"] == plain["steps"]
    entries = git(Path(cone["worktree"]), "ls-files", "-v").splitlines()
    assert entries and not [line for line in entries if line.startswith("S ")]
