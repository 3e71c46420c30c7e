"""The series' own commits (carry/replay.py): what is remembered under a patch's ref is that
patch's commit on the chain of the earlier ones, as every reader of the ref expects."""

from __future__ import annotations

from synthetic import ADD_DOC, DOUBLE_MUL, calc_series, edit, two_patch_series

from rebaser.carry import replay as replay_module
from rebaser.carry.replay import Replay
from rebaser.repo.git import Git
from rebaser.series.patches import load_series


def test_a_commit_built_around_a_gap_is_not_remembered_as_the_patchs(
    tmp_path, upstream, monkeypatch
):
    """A review: after `apply --test cpu` of the embedded series, `refresh --check` of the
    unchanged series printed a range-diff with patches added and a commit "recorded base of
    0004". The fork's branch for the test blame asks for the last patch's commit first where
    the one-go build gives no chain: it is built on one commit holding the earlier patches,
    and was remembered under the last patch's ref, which a later Replay read as the chain."""
    patches = load_series(two_patch_series(tmp_path, upstream)).patches
    repo = Git(upstream.path)
    base = repo.rev_parse("v1")
    monkeypatch.setattr(replay_module, "build_commits", lambda *args: [])  # no blobs at hand
    assert Replay(repo, base, patches).commit_of(patches[-1]) is not None
    again = Replay(repo, base, patches)
    first, second = (again.commit_of(patch) for patch in patches)
    assert repo.out("rev-parse", f"{second}^").strip() == first
    assert repo.out("log", "--format=%s", f"{base}..{second}").split("\n") == [
        "demo: double mul",
        "demo: document add",
    ]


def test_a_patch_built_after_a_gap_is_not_remembered_either(tmp_path, upstream, monkeypatch):
    """A review of the fix above: the first patch applied exactly, so the second patch's
    commit was built around a gap (not remembered), and the third's on top of it, under its
    ref: a later Replay took that for the chain, and a second apply put a commit "recorded
    base of 0002" on the branch in place of the first patch."""
    third = edit(DOUBLE_MUL, "    return a - b\n", "    return a - b - 0\n")
    versions = [("demo: document add", ADD_DOC), ("demo: double mul", DOUBLE_MUL)]
    patches = load_series(
        calc_series(tmp_path, upstream, [*versions, ("demo: sub", third)])
    ).patches
    repo = Git(upstream.path)
    base = repo.rev_parse("v1")
    monkeypatch.setattr(replay_module, "build_commits", lambda *args: [])  # no blobs at hand
    first = Replay(repo, base, patches)
    assert first.commit_of(patches[1]) and first.commit_of(patches[2])  # as attempts.py asks
    again = Replay(repo, base, patches)
    commits = [again.commit_of(patch) for patch in patches]
    assert repo.out("log", "--format=%s", f"{base}..{commits[-1]}").split("\n") == [
        "demo: sub",
        "demo: double mul",
        "demo: document add",
    ]
