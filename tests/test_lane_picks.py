"""The fast lane's picks as merges of trees (rebaser/repo/picks.py, steps/fastlane.py): the
commits they make are, byte for byte, the ones `git rebase --committer-date-is-author-date`
makes with `--skip` at each stop, across a rename, a commit that starts empty, an empty
pick and a merge driver a patch brings in its `.gitattributes`; a conflict's stages are
the ones a cherry-pick leaves in the index; a commit the lane cannot make again byte for
byte is left to the per-patch path."""

from __future__ import annotations

import json
import os
from pathlib import Path

from synthetic import commit_files, git

from rebaser.repo import scratch
from rebaser.repo.git import Git, committer_env
from rebaser.repo.picks import TreePicks
from rebaser.series.patches import FileChange, Patch
from rebaser.steps import fastlane

LINES = "".join(f"line {n}\n" for n in range(1, 21))
A9 = LINES.replace("line 3\n", "three\n").replace("line 9\n", "9\n")


def _fork(repo: Path) -> tuple[str, str, list[str]]:
    """(the fork's base, upstream's tip, the fork's commits oldest first): clean picks, one
    across upstream's rename, a commit that starts empty, one upstream already made (an
    empty pick), a conflict, and a `.gitattributes` whose union driver makes a later
    pick clean."""
    git(repo, "init", "-q", "-b", "main")
    base = commit_files(repo, {"a.txt": LINES, "b.txt": LINES, "log.txt": "start\n"}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    edits = [
        ({"a.txt": LINES.replace("line 3\n", "three\n")}, "a: three"),
        ({"b.txt": LINES.replace("line 15\n", "fifteen\n")}, "b: fifteen (renamed upstream)"),
        ({}, "started empty"),
        ({"a.txt": A9}, "a: 9"),
        ({"a.txt": A9.replace("line 12\n", "twelve\n")}, "a: twelve"),
        ({".gitattributes": "log.txt merge=union\n"}, "attributes: union for the log"),
        ({"log.txt": "start\nfork\n"}, "log: fork's line"),
        ({"c.txt": "new\n"}, "c: new file"),
    ]
    commits = [commit_files(repo, files, message) for files, message in edits]
    git(repo, "checkout", "-q", "main")
    git(repo, "mv", "b.txt", "renamed.txt")
    upstream_a = LINES.replace("line 9\n", "9\n").replace("line 12\n", "TWELVE\n")
    commit_files(repo, {"a.txt": upstream_a}, "upstream: 9, twelve, rename b")
    tip = commit_files(repo, {"log.txt": "start\nupstream\n"}, "upstream: log")
    return base, tip, commits


def _rebased(repo: Path, base: str, tip: str, last: str) -> list[str]:
    """`git rebase` of the fork onto `tip` with a `--skip` at each stop: its commits."""
    rebase = Git(repo)
    git(repo, "checkout", "-q", "--detach", last)
    options = ["-c", "merge.renames=true", "-c", "merge.directoryRenames=true"]
    step = rebase.run(
        *options, "rebase", "--quiet", "--empty=ask", "--committer-date-is-author-date",
        "--onto", tip, base, check=False, env=committer_env(),
    )  # fmt: skip
    while not step.ok:
        step = rebase.run(*options, "rebase", "--skip", check=False, env=committer_env())
    return git(repo, "rev-list", "--reverse", f"{tip}..HEAD").split()


def _patch(number: int, paths: list[str]) -> Patch:
    """What the lane reads of a patch: its name and its files (the commits are given)."""
    changes = [FileChange(path, 1) for path in paths]
    return Patch(f"{number:04d}-p.patch", Path("unused"), "p", "", "A <a@a>", "", changes)


def test_the_lanes_commits_are_git_rebases(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    base, tip, commits = _fork(repo)
    expected = _rebased(repo, base, tip, commits[-1])
    touched = [["a.txt"], ["b.txt"], [], ["a.txt"], ["a.txt"], [".gitattributes"], ["log.txt"]]
    patches = [_patch(n, paths) for n, paths in enumerate(touched + [["c.txt"]], start=1)]
    stops: list[tuple[str, list[str]]] = []

    def judge(patch, lane, head, notes, conflicts):
        stops.append((patch.name[:4], conflicts))
        return lambda: None

    real = Git(repo)
    with scratch.repository(repo / ".git", tip) as lane:
        _, _, handed = fastlane._sequence(lane, tip, patches, commits, [], judge)
        assert handed is None
        made = lane.out("rev-list", "--reverse", f"{tip}..HEAD").split()
        scratch.bring_back(lane, real, "HEAD", tip)
    assert stops == [("0004", []), ("0005", ["a.txt"])]  # upstream's 9; a real conflict
    assert made == expected, "the same commits, byte for byte"
    assert git(repo, "show", f"{made[-2]}:log.txt") == "start\nupstream\nfork"  # the union
    assert git(repo, "show", f"{made[1]}:renamed.txt").count("fifteen") == 1


def test_a_commit_git_rebase_would_rewrite_is_left_to_the_per_patch_path(tmp_path):
    """A signature or an encoding header: `git rebase` drops or re-encodes them, which the
    lane does not copy; it stops before such a commit and hands nothing over."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit_files(repo, {"a.txt": LINES}, "base")
    first = commit_files(repo, {"a.txt": LINES + "more\n"}, "plain")
    latin = commit_files(repo, {"b.txt": "b\n"}, "encoded")
    raw = git(repo, "cat-file", "commit", latin)
    header, _, message = raw.partition("\n\n")
    text = f"{header}\nencoding ISO-8859-1\n\n{message}\n"
    encoded = Git(repo).run("hash-object", "-t", "commit", "-w", "--stdin", stdin=text.encode())
    git(repo, "checkout", "-q", "-b", "up", base)
    tip = commit_files(repo, {"c.txt": "c\n"}, "upstream")
    patches = [_patch(1, ["a.txt"]), _patch(2, ["b.txt"])]
    with scratch.repository(repo / ".git", tip) as lane:
        merged, judged, handed = fastlane._sequence(
            lane, tip, patches, [first, encoded.stdout.strip()], [], None
        )
        made = lane.out("rev-list", f"{tip}..HEAD").split()
        assert len(made) == 1 and lane.out("show", f"{made[0]}:a.txt").endswith("more")
    assert (merged, judged, handed) == ({}, {}, None)


def test_a_picks_conflict_has_the_stages_a_cherry_pick_leaves(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    base, tip, commits = _fork(repo)
    with scratch.repository(repo / ".git", tip) as lane, TreePicks(lane) as picks:
        merged = picks.pick(f"{tip}^{{tree}}", commits[4])
        assert merged is not None and merged.conflicted == ["a.txt"]
        stages = [(stage.number, stage.blob, stage.mode) for stage in merged.stages]
    git(repo, "checkout", "-q", "--detach", tip)
    assert Git(repo).run("cherry-pick", "--no-commit", commits[4], check=False).status != 0
    index = [line.split("\t")[0].split() for line in git(repo, "ls-files", "-u").splitlines()]
    assert stages == [(int(number), blob, mode) for mode, blob, number in index]


def test_a_resolved_pick_keeps_each_files_mode(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "run.py").write_text("print(1)\n")
    (repo / "run.py").chmod(0o755)
    (repo / "lib").mkdir()
    (repo / "lib" / "m.py").write_text("x = 1\n")
    git(repo, "add", "--all")
    git(repo, "commit", "-q", "-m", "base")
    with scratch.repository(repo / ".git", git(repo, "rev-parse", "HEAD")) as lane:
        tree = TreePicks(lane).replaced("HEAD^{tree}", {"run.py": b"print(2)\n"})
        tree = TreePicks(lane).replaced(tree, {"lib/m.py": b"x = 2\n"})
        listed = lane.out("ls-tree", "-r", tree)
        shown = [lane.out("show", f"{tree}:{path}") for path in ("run.py", "lib/m.py")]
    assert [line.split()[0] for line in listed.splitlines()] == ["100644", "100755"]
    assert shown == ["print(2)", "x = 2"]


def _lane_and_per_patch(rebaser, repo: Path, base: str, fork: str, tip: str, tmp_path: Path):
    """The fork imported, then applied onto `tip` going on past stops, by the lane and by
    the per-patch path: (exit code, branch tip, steps) of each."""
    from rebaser.cli import main

    series = tmp_path / "series"
    arguments = ["--repo", str(repo), "--range", f"{base}..{fork}", "--series-dir", str(series)]
    assert main(["import", *arguments]) == 0
    made = []
    for way in ([], ["--no-fast-lane"]):
        report = tmp_path / f"{len(way)}.json"
        done = rebaser(
            "apply", "--series", series / "series", "--repo", repo, "--base", tip,
            "--test", "none", "--keep-going", "--json", report, "--force", *way,
        )  # fmt: skip
        assert report.is_file(), done.out + done.err
        data = json.loads(report.read_text())
        made.append((done.code, git(repo, "rev-parse", data["branch"]), data["steps"]))
    return made


def test_a_conflict_with_no_file_in_conflict_stops_the_lane(rebaser, tmp_path):
    """ort's "directory rename split" conflict leaves no file with stages: the pick still
    stopped (`git rebase` stops there), and the patch is not carried as if clean."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit_files(repo, {"dir/a": "a\n", "dir/b": "b\n", "f.txt": LINES}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    commit_files(repo, {"k.txt": "k\n"}, "fork: k")
    edited = LINES.replace("line 10\n", "ten\n")
    commit_files(repo, {"dir/new.txt": "n\n", "f.txt": edited}, "fork: a file in dir")
    fork = commit_files(repo, {"k.txt": "k\nk3\n"}, "fork: k3")
    git(repo, "checkout", "-q", "main")
    git(repo, "mv", "dir/a", "x_a")  # dir's files split over two folders: ort cannot tell
    (repo / "x").mkdir()
    (repo / "y").mkdir()
    git(repo, "mv", "x_a", "x/a")
    git(repo, "mv", "dir/b", "y/b")
    tip = commit_files(repo, {"f.txt": LINES.replace("line 13\n", "thirteen\n")}, "upstream: split")
    lane, alone = _lane_and_per_patch(rebaser, repo, base, fork, tip, tmp_path)
    assert lane == alone
    assert [step["status"] for step in lane[2]][1:] == ["clean", "dropped", "clean"]


def test_a_resolved_file_is_stored_as_git_add_stores_it(rebaser, tmp_path):
    """The structured merge's file goes through the path's attributes, as `git add` takes
    it in the per-patch path: here `text`, and the patch's line ends with CRLF."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")

    def module(a: str, b: str) -> str:
        return f"def a():\n    return {a}\ndef b{b}\n    return 2\n"  # one hunk for git

    base = commit_files(repo, {"m.py": module("1", "():"), "f.txt": LINES}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    commit_files(repo, {"g.txt": "g\n"}, "fork: g")
    commit_files(repo, {"m.py": module("1", "(x=0):\r")}, "fork: b's parameter")
    fork = commit_files(repo, {"h.txt": "h\n"}, "fork: h")
    git(repo, "checkout", "-q", "main")
    commit_files(repo, {".gitattributes": "*.py text\n"}, "upstream: Python is text")
    tip = commit_files(repo, {"m.py": module("11", "():")}, "upstream: a")
    lane, alone = _lane_and_per_patch(rebaser, repo, base, fork, tip, tmp_path)
    assert lane == alone
    assert [step["status"] for step in lane[2]][1:] == ["clean", "structured merge", "clean"]
    assert lane[0] == 0
    assert "\r" not in git(repo, "show", f"{lane[1]}:m.py")


def test_the_lane_moves_its_head_by_a_rename(tmp_path):
    """The judge's thread starts git processes while the lane moves its HEAD: a HEAD
    rewritten in place can be read empty (`fatal: not a git repository`), which made a
    row's files unreadable on a loaded machine. Written beside it and renamed, as git
    moves it, HEAD is always whole."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _, tip, commits = _fork(repo)
    with scratch.repository(repo / ".git", tip) as lane, TreePicks(lane) as picks:
        head = lane.path / ".git" / "HEAD"
        before = head.stat().st_ino
        fastlane._stand_on(lane, commits[0], _patch(1, ["a.txt"]), picks)
        assert head.read_text() == f"{commits[0]}\n" and head.stat().st_ino != before
        assert not (lane.path / ".git" / "HEAD.lock").exists()


def test_a_resolved_file_takes_the_attributes_its_own_patch_brings(rebaser, tmp_path):
    """A patch that adds `*.py ident` and edits a function next to upstream's edit: the
    resolved file is stored under the pick's `.gitattributes` (its `$Id: ...$` collapsed),
    as `git add` stores it in a worktree that holds the patch's attributes already."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")

    def module(a: str, b: str) -> str:
        return f"# $Id: zzz $\ndef a():\n    return {a}\ndef b({b}):\n    return 2\n"

    base = commit_files(repo, {"m.py": module("1", ""), "k.txt": "k\n"}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    commit_files(repo, {"k.txt": "k2\n"}, "fork: k")
    attributes = {"m.py": module("1", "x=0"), ".gitattributes": "*.py ident\n"}
    commit_files(repo, attributes, "fork: b's parameter, and ident")
    fork = commit_files(repo, {"k.txt": "k3\n"}, "fork: k3")
    git(repo, "checkout", "-q", "-f", "main")
    tip = commit_files(repo, {"m.py": module("11", "")}, "upstream: a")
    lane, alone = _lane_and_per_patch(rebaser, repo, base, fork, tip, tmp_path)
    assert lane == alone
    assert [step["status"] for step in lane[2]][1:] == ["clean", "structured merge", "clean"]
    assert git(repo, "show", f"{lane[1]}:m.py").startswith("# $Id$\n")


def test_a_python_file_whose_name_is_not_utf8_stays_gits_conflict(rebaser, tmp_path):
    """Its name is read with U+FFFD in it (no file of that name): the structured merge leaves
    it to git, and both paths leave the patch off, where they used to fail on it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    name = os.fsdecode(b"caf\xe9.py")

    def module(a: str, b: str) -> str:
        return f"def a():\n    return {a}\ndef b({b}):\n    return 2\n"

    base = commit_files(repo, {name: module("1", ""), "k.txt": "k\n"}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    commit_files(repo, {name: module("1", "x=0")}, "fork: b's parameter")
    fork = commit_files(repo, {"k.txt": "k2\n"}, "fork: k")
    git(repo, "checkout", "-q", "main")
    tip = commit_files(repo, {name: module("11", "")}, "upstream: a")
    lane, alone = _lane_and_per_patch(rebaser, repo, base, fork, tip, tmp_path)
    assert lane == alone
    assert lane[0] == 3 and [step["status"] for step in lane[2]][1:] == ["dropped", "clean"]


def test_the_repositorys_own_attributes_hold_in_the_lane(rebaser, tmp_path):
    """A merge driver named in the repository's `.git/info/attributes` (not in any tree):
    the lane's scratch repository reads it as the worktree of the per-patch path does, so
    the lane carries the patch the driver merges instead of leaving it off."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("*.txt merge=union\n")
    base = commit_files(repo, {"a.txt": "x\n", "k.txt": "k\n"}, "base")
    git(repo, "checkout", "-q", "-b", "fork")
    commit_files(repo, {"a.txt": "fork\n"}, "fork: a")
    fork = commit_files(repo, {"k.txt": "k2\n"}, "fork: k")
    git(repo, "checkout", "-q", "-f", "main")
    tip = commit_files(repo, {"a.txt": "up\n"}, "upstream: a")
    lane, alone = _lane_and_per_patch(rebaser, repo, base, fork, tip, tmp_path)
    assert lane == alone
    assert [step["status"] for step in lane[2]][1:] == ["cherry-pick", "clean"]
    assert git(repo, "show", f"{lane[1]}:a.txt") == "up\nfork"
