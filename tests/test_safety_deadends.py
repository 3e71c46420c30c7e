"""Issue 9 items 5 and 6: no dead ends. Whatever happened to the worktree, the state file or
the cache, rebaser says what is wrong and `abort` can always clean up; and it never commits
onto a branch the user switched to inside the worktree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from faults import FaultPoint, run_with_fault
from test_refresh import CALC_SUB
from synthetic import SyntheticUpstream, git
from test_apply_synthetic import (
    ADD_DOC,
    apply,
    stopped_apply,
    two_patch_series,
    worktree_of,
)

from rebaser.errors import ExitCode, RebaserError
from rebaser.sequencer.state import state_path
from rebaser.repo.git import Git

BRANCH = "forkkit/demo/v2"


def assert_abort_cleans_up(rebaser, upstream) -> None:
    result = rebaser("abort", "--repo", upstream.path)
    assert result.code == 0, result.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    assert git(upstream.path, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"


def test_a_patch_already_in_the_base_is_recorded_in_upstream(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    upstream.commit({"pkg/calc.py": ADD_DOC}, "upstream documents add", tag="v2")
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report)
    assert result.code == ExitCode.OK, result.out + result.err
    steps = json.loads(report.read_text())["steps"]
    assert [step["status"] for step in steps] == ["laid", "in upstream", "clean"]
    assert git(worktree_of(report), "log", "--format=%s", "v2..HEAD").splitlines() == [
        "demo: double mul",
        "forkkit: overlay (0 files)",
    ]


def test_a_deleted_worktree_folder_is_named_and_abort_cleans_up(rebaser, tmp_path, upstream):
    tree = stopped_apply(rebaser, tmp_path, upstream)
    git(tree, "commit", "-qam", "half-done fix")
    os.system(f"rm -rf '{tree}'")
    status = rebaser("status", "--repo", upstream.path)
    assert status.code == 0 and "missing" in status.out and str(tree) in status.out
    refused = rebaser("continue", "--repo", upstream.path)
    assert refused.code == ExitCode.USAGE, refused.err
    assert f"the worktree {tree} is missing" in refused.err and "rebaser abort" in refused.err
    assert_abort_cleans_up(rebaser, upstream)
    # The commit the user made there is kept.
    backup = git(upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/")
    assert git(upstream.path, "log", "-1", "--format=%s", backup) == "half-done fix"


@pytest.mark.parametrize(
    "damage",
    ["truncated", "foreign", "folder"],
)
def test_a_damaged_state_file_is_named_and_abort_cleans_up(rebaser, tmp_path, upstream, damage):
    stopped_apply(rebaser, tmp_path, upstream)
    path = state_path(Git(upstream.path))
    text = path.read_text()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "foreign":
        path.write_text(json.dumps({"tool": "something else", "version": 1}))
    else:
        path.unlink()
        path.mkdir()
    for command in ("status", "continue"):
        result = rebaser(command, "--repo", upstream.path)
        assert result.code == ExitCode.USAGE, result.err
        assert str(path) in result.err and "rebaser abort" in result.err
    blocked = apply(rebaser, two_patch_series(tmp_path / "again", upstream), upstream, "v1")
    assert blocked.code == ExitCode.USAGE and "rebaser abort" in blocked.err
    result = rebaser("abort", "--repo", upstream.path)
    assert result.code == 0, result.err
    assert not path.exists()
    if damage == "truncated":  # the branch could still be read from what was left
        assert git(upstream.path, "branch", "--list", "forkkit/*") == ""
    else:
        assert BRANCH in result.out  # named, for the user to remove with --force or git
    assert apply(rebaser, two_patch_series(tmp_path / "new", upstream), upstream, "v1").code == 0


def test_a_folder_in_place_of_a_registry_file_is_skipped(
    rebaser, tmp_path, upstream, isolated_cache, monkeypatch
):
    stopped_apply(rebaser, tmp_path, upstream)
    (isolated_cache / "in-progress" / "0123456789abcdef").mkdir()
    monkeypatch.chdir(tmp_path)  # not inside a repository: the registry finds the apply
    status = rebaser("status")
    assert status.code == 0 and f"apply in progress: branch {BRANCH}" in status.out
    assert_abort_cleans_up(rebaser, upstream)


def test_a_repository_path_that_is_not_utf8_is_refused_clearly(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    git(tmp_path, "clone", "-q", str(upstream.path), str(odd))
    result = apply(rebaser, series, SyntheticUpstream(odd), "v1")
    assert result.code == ExitCode.USAGE, result.err
    assert "not valid UTF-8" in result.err and "caf" in result.err
    assert git(odd, "branch", "--list", "forkkit/*") == ""


def test_continue_and_abort_refuse_a_worktree_switched_to_another_branch(
    rebaser, tmp_path, upstream
):
    tree = stopped_apply(rebaser, tmp_path, upstream)
    (tree / "pkg/calc.py").write_text(ADD_DOC)
    git(tree, "add", "pkg/calc.py")
    git(tree, "switch", "-q", "-c", "mine")
    head = git(tree, "rev-parse", "HEAD")
    for command in ("continue", "abort"):
        refused = rebaser(command, "--repo", upstream.path)
        assert refused.code == ExitCode.USAGE, refused.out + refused.err
        assert "on branch mine" in refused.err and BRANCH in refused.err
        assert f"git switch {BRANCH}" in refused.err
    assert git(tree, "rev-parse", "HEAD") == head  # nothing committed onto the user's branch
    assert git(tree, "diff", "--cached", "--name-only") == "pkg/calc.py"
    git(tree, "switch", "-q", BRANCH)
    assert_abort_cleans_up(rebaser, upstream)
    assert git(upstream.path, "rev-parse", "--verify", "-q", "mine") == head


@pytest.mark.parametrize(
    "point",
    [
        FaultPoint("rebaser.repo.workspace:remove", "before"),  # the work in progress is saved
        FaultPoint(
            "rebaser.sequencer.state:ApplyState.clear", "before"
        ),  # branch and worktree gone
    ],
    ids=["before removing", "before clearing the state"],
)
def test_an_abort_killed_midway_can_be_run_again(rebaser, tmp_path, upstream, point):
    tree = stopped_apply(rebaser, tmp_path, upstream)
    (tree / "notes.txt").write_text("half-done fix\n")
    died = run_with_fault(point, ["abort", "--repo", upstream.path])
    assert died.returncode == 137, died.stdout + died.stderr
    assert_abort_cleans_up(rebaser, upstream)
    (backup,) = git(
        upstream.path, "for-each-ref", "--format=%(refname)", "refs/forkkit/backups/"
    ).split()
    assert git(upstream.path, "show", f"{backup}:notes.txt") == "half-done fix"


def test_a_missing_folder_is_named_not_blamed_on_git(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(RebaserError) as raised:
        Git(gone).run("status")
    assert f"the folder {gone} does not exist" in str(raised.value)


def test_a_folder_in_place_of_this_repositorys_registry_file_is_refused_first(
    rebaser, tmp_path, upstream, isolated_cache
):
    series = two_patch_series(tmp_path, upstream)
    stopped_apply(rebaser, tmp_path / "first", upstream)  # writes the registry entry
    (entry,) = (isolated_cache / "in-progress").iterdir()
    assert_abort_cleans_up(rebaser, upstream)
    entry.mkdir()
    refused = apply(rebaser, series, upstream, "v1")
    assert refused.code == ExitCode.USAGE and f"{entry} is a folder" in refused.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""  # nothing created
    entry.rmdir()
    assert apply(rebaser, series, upstream, "v1").code == ExitCode.OK


@pytest.mark.parametrize("command", ["continue", "skip", "abort"])
def test_a_command_in_another_repository_leaves_its_apply_alone(
    rebaser, tmp_path, upstream, isolated_cache, monkeypatch, command
):
    """From an unrelated clone with nothing in progress, `abort` dropped the apply stopped
    in another repository (a review): a repository of the user's is only acted on from
    inside it, or with --repo."""
    stopped_apply(rebaser, tmp_path, upstream)
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    monkeypatch.chdir(elsewhere)
    result = rebaser(command)
    assert result.code == ExitCode.USAGE, result.out
    said = " ".join(result.err.split())
    assert f"no apply is in progress in {elsewhere}" in said, said
    assert f"one is, in {upstream.path}" in said and f"--repo {upstream.path}" in said
    assert rebaser("status", "--repo", upstream.path).out.startswith("apply in progress")
    here = rebaser("status")  # says where one is, rather than that there is none (a review)
    assert here.code == ExitCode.OK, here.err
    assert f"no apply is in progress in {elsewhere}; one is, in {upstream.path}" in here.out
    monkeypatch.chdir(tmp_path)  # outside any repository, the only apply is found
    assert rebaser("status").out.startswith("apply in progress")


def test_an_apply_onto_a_release_is_found_from_another_repository_through_a_linked_cache(
    rebaser, tmp_path, fake_pypi, monkeypatch
):
    """The README's flow: an apply onto a PyPI release stops; `status` from the checkout
    (another repository) finds it, as its repository is rebaser's own, in the cache. With
    the cache folder reached through a link it said "no apply in progress" (a review)."""
    (tmp_path / "real-cache").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "real-cache")
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "patches"
    folder.mkdir()
    clash = CALC_SUB.replace(
        " def add(a, b):\n     return a + b\n", " def add(a, b):\n     return b + a\n"
    )
    (folder / "0001-sub.patch").write_text(clash)
    (folder / "series").write_text("@name rel\n0001-sub.patch\n")
    stopped = rebaser("apply", "--series", folder / "series", "--upstream",
                      "pypi:megatron-core==9.9.0", "--test", "none")  # fmt: skip
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    checkout = tmp_path / "checkout"
    git(tmp_path, "init", "-q", str(checkout))
    monkeypatch.chdir(checkout)
    assert rebaser("status").out.startswith("apply in progress: branch forkkit/rel/")
