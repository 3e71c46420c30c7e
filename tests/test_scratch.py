"""The scratch repository a fast lane runs git's sequencer in (rebaser/repo/scratch.py): in memory,
borrowing the real repository's objects and config, gone afterwards, its objects brought
back in one pack; a kill's leftovers are removed by the next lane."""

from __future__ import annotations

import json
import os
import subprocess
import time

from synthetic import edit, git
from test_fast_lane import carried, fork_and_tip

from rebaser.repo import scratch, tempdirs
from rebaser.repo import workspace
from rebaser.errors import ExitCode
from rebaser.repo.git import Git, commit_tree


def test_a_scratch_repository_borrows_objects_and_config_and_goes(upstream, tmp_path):
    # a bare repository's config says core.bare = true; '#' and ';' start comments in git's
    # config, a quote or a newline would end a value
    bare = tmp_path / 'bare #1; "café"\tx\\y.git'
    git(tmp_path, "clone", "-q", "--bare", str(upstream.path), str(bare))
    git(bare, "config", "forkkit.probe", "from the real repository")
    space = workspace.create(Git(bare), "forkkit/demo/v1", git(bare, "rev-parse", "v1"))
    git_dir = workspace.worktree_git_dir(space.path)
    head = git(bare, "rev-parse", "v1")
    with scratch.repository(git_dir, head) as lane:
        assert lane.path.parent == scratch.scratch_root()
        written = sorted(path.name for path in lane.path.iterdir())
        assert written == sorted([".git", tempdirs.OWNER])  # no file of the tree
        assert lane.out("status", "--porcelain") == ""
        assert lane.out("rev-parse", "HEAD") == head
        assert lane.out("config", "forkkit.probe") == "from the real repository"
        assert lane.out("rev-parse", "--is-bare-repository") == "false"

        calc = lane.out("show", "HEAD:pkg/calc.py") + "\n"
        changed = edit(calc, "a + b", "b + a").encode()
        blob = lane.run("hash-object", "-w", "--stdin", stdin=changed).stdout.strip()
        lane.run("update-index", "--cacheinfo", f"100644,{blob},pkg/calc.py")
        tree = lane.out("write-tree")
        made = commit_tree(lane, tree, [head], "made in the lane\n")
        assert Git(bare).rev_parse(made) is None
        scratch.bring_back(lane, space.git, made, head)
        assert Git(bare).rev_parse(made) == made
        assert git(bare, "cat-file", "-p", f"{made}:pkg/calc.py") + "\n" == changed.decode()
    assert not lane.path.exists()


def test_the_next_lane_removes_what_a_killed_one_left(rebaser, tmp_path, upstream):
    """A folder whose lock no process holds (what a kill leaves) goes; one a living process
    holds stays, whatever its name says; one without a lock (an older rebaser's, or one
    being made) only when it is old."""
    root = scratch.scratch_root()
    orphan = root / f"{scratch.PREFIX}left-by-a-kill"
    (orphan / ".git").mkdir(parents=True)
    (orphan / tempdirs.OWNER).write_text("")  # its holder is gone: nothing holds the lock
    living = tempdirs.Owned(scratch.PREFIX, root)
    young, old = root / f"{scratch.PREFIX}unlocked-young", root / f"{scratch.PREFIX}unlocked-old"
    for folder in (young, old):
        (folder / ".git").mkdir(parents=True)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    try:
        series = fork_and_tip(upstream, tmp_path)
        assert carried(rebaser, series, upstream, tmp_path / "r.json").code == ExitCode.NOT_APPLIED
        assert not orphan.exists() and not old.exists()
        assert living.path.exists() and young.exists()  # held, or being made: not touched
        steps = json.loads((tmp_path / "r.json").read_text())["steps"]
        assert steps[1]["status"] == "clean"
        left = sorted(root.glob(f"{scratch.PREFIX}*"))
        assert living.path in left and young in left
    finally:
        living.release()
        for folder in (orphan, young, old):
            subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_without_tmpfs_the_lane_runs_in_the_temporary_folder(
    rebaser, tmp_path, upstream, monkeypatch
):
    monkeypatch.setattr(scratch, "_MEMORY", tmp_path / "no-shm")
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert scratch.scratch_root() == tmp_path / "tmp"
    series = fork_and_tip(upstream, tmp_path)
    assert carried(rebaser, series, upstream, tmp_path / "r.json").code == ExitCode.NOT_APPLIED
    statuses = [s["status"] for s in json.loads((tmp_path / "r.json").read_text())["steps"]]
    assert statuses[:4] == ["laid", "clean", "cherry-pick", "cherry-pick"], statuses
    assert list((tmp_path / "tmp").iterdir()) == []


def test_remove_takes_only_a_scratch_repository(tmp_path):
    victim = tmp_path / f"{scratch.PREFIX}1-x"
    victim.mkdir()
    scratch.remove(str(victim))  # named like one, but not in the scratch root
    assert victim.exists()
    elsewhere = scratch.scratch_root() / "forkkit-not-a-lane"
    elsewhere.mkdir()
    try:
        scratch.remove(str(elsewhere))
        assert elsewhere.exists()
    finally:
        elsewhere.rmdir()


def test_carrying_the_same_series_again_adds_no_pack(rebaser, tmp_path, upstream, monkeypatch):
    """The lane's commits are reproducible: the second time, the repository has them, and
    nothing is packed or brought back (nor built again by fast-import)."""
    series = fork_and_tip(upstream, tmp_path)
    packs = upstream.path / ".git" / "objects" / "pack"
    assert carried(rebaser, series, upstream, tmp_path / "1.json").code == ExitCode.NOT_APPLIED
    first = sorted(packs.glob("*.pack"))
    assert first  # fast-import's and the lane's
    commands: set[str] = set()
    original = Git._completed

    def recording(self, args, *rest):
        commands.update(args)
        return original(self, args, *rest)

    monkeypatch.setattr(Git, "_completed", recording)
    again = carried(rebaser, series, upstream, tmp_path / "2.json", "--force")
    assert again.code == ExitCode.NOT_APPLIED
    assert "(one lane)" in again.out + again.err, "a lane carried them"
    assert "pack-objects" not in commands and "fast-import" not in commands
    assert sorted(packs.glob("*.pack")) == first
    branches = [json.loads((tmp_path / name).read_text())["steps"] for name in ("1.json", "2.json")]
    assert branches[0] == branches[1]
