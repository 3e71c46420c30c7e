"""`rebaser import`: a fork's branch becomes a series; bad ranges are refused, losing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic import CALC, edit, git
from test_apply_synthetic import apply

from rebaser.errors import ExitCode
from rebaser.series.export import export_patch
from rebaser.repo.git import Git
from rebaser.series.patches import load_series


@pytest.fixture
def fork(upstream):
    """Branch `fork` with three commits (one empty) on top of v1; main moves on meanwhile."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    upstream.commit({"pkg/calc.py": edit(CALC, "a + b", "b + a")}, "calc: commute add")
    git(upstream.path, "commit", "-q", "--allow-empty", "-m", "ci: retrigger")
    upstream.commit({"pkg/extra.py": "X = 1\n"}, "extra: new module\n\nWith a body.")
    upstream.commit({"pkg/calc.py": edit(edit(CALC, "a + b", "b + a"), "-a", "0 - a")}, "calc: neg")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/other.py": "Y = 2\n"}, "upstream moves on", tag="v2")
    return upstream


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_import_writes_a_series_that_rebuilds_the_branch(rebaser, tmp_path, fork):
    target = tmp_path / "series-a"
    result = rebaser(
        "import", "--repo", fork.path, "--range", "v1..fork", "--series-dir", target, "--name", "f"
    )
    assert result.code == ExitCode.OK, result.err
    assert "skipped (changes nothing): " in result.out and "ci: retrigger" in result.out
    base = git(fork.path, "rev-parse", "v1")
    series = load_series(target / "series")
    assert (series.name, series.base.commit) == ("f", base)
    assert [p.name for p in series.patches] == [
        "0001-commute-add.patch",
        "0002-new-module.patch",
        "0003-neg.patch",
    ]
    assert series.patches[1].body == "With a body."
    assert (
        "From 0000000000000000000000000000000000000000"
        in (target / "0001-commute-add.patch").read_text()
    )

    # Re-importing the same range is byte-identical.
    again = tmp_path / "series-b"
    assert (
        rebaser(
            "import",
            "--repo",
            fork.path,
            "--range",
            "v1..fork",
            "--series-dir",
            again,
            "--name",
            "f",
        ).code
        == 0
    )
    assert files_of(again) == files_of(target)

    # Applied onto its base, the series gives exactly the fork's tree.
    report = tmp_path / "r.json"
    applied = apply(rebaser, target / "series", fork, "v1", "--json", report)
    assert applied.code == ExitCode.OK, applied.out
    tree = json.loads(report.read_text())["worktree"]
    assert git(Path(tree), "rev-parse", "HEAD^{tree}") == git(fork.path, "rev-parse", "fork^{tree}")


def merge_into_fork(fork) -> None:
    git(fork.path, "checkout", "-q", "fork")
    git(fork.path, "merge", "-q", "--no-edit", "-m", "Merge upstream v2 into fork", "v2")
    git(fork.path, "checkout", "-q", "main")


@pytest.mark.parametrize(
    "range_spec, message",
    [
        ("v1..fork", "holds 1 merge commit(s), which a patch series cannot carry: "),
        ("v2..fork", "v2 is not an ancestor of fork"),
        ("fork..v1", "the ends look swapped: pass --range v1..fork"),
        ("fork..fork", "fork..fork holds no commits"),
        ("v1..nosuchbranch", "unknown revision 'nosuchbranch'"),
        ("v1", "--range 'v1' is not BASE..TIP"),
        ("v1...fork", "is not BASE..TIP"),
    ],
)
def test_bad_ranges_are_refused_and_write_nothing(rebaser, tmp_path, fork, range_spec, message):
    if "merge" in message:
        merge_into_fork(fork)
    result = rebaser(
        "import", "--repo", fork.path, "--range", range_spec, "--series-dir", tmp_path / "s"
    )
    assert result.code == ExitCode.USAGE
    assert message in result.err, result.err
    if "merge" in message:
        assert "Merge upstream v2 into fork" in result.err
    assert not (tmp_path / "s").exists() and not list(tmp_path.glob(".s.import-*"))


def test_an_existing_series_folder_is_never_overwritten(rebaser, tmp_path, fork):
    target = tmp_path / "patches"
    target.mkdir()
    (target / "series").write_text("my own series\n")
    result = rebaser("import", "--repo", fork.path, "--range", "v1..fork", "--series-dir", target)
    assert result.code == ExitCode.USAGE and "already exists" in result.err
    assert files_of(target) == {"series": b"my own series\n"}
    assert not list(tmp_path.glob(".patches.import-*"))


def test_import_in_one_export_equals_the_per_commit_export(rebaser, tmp_path, fork):
    """The range is exported by one format-patch and split; each file must be byte for byte
    what the per-commit export (refresh's) gives, trailers, deletions and modes included."""
    git(fork.path, "checkout", "-q", "fork")
    git(fork.path, "rm", "-q", "pkg/extra.py")
    git(fork.path, "commit", "-q", "-m", "extra: gone again\n\nForkkit-Patch: 0009-old.patch")
    (fork.path / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    (fork.path / "run.sh").chmod(0o755)
    fork.commit({"pkg/calc.py": edit(CALC, "a * b", "a * b  # ×")}, "calc: ünïcode — subject")
    git(fork.path, "checkout", "-q", "main")
    target = tmp_path / "series"
    arguments = ["--repo", fork.path, "--range", "v1..fork", "--series-dir", target]
    assert rebaser("import", *arguments).code == ExitCode.OK
    commits = git(fork.path, "rev-list", "--reverse", "--no-merges", "v1..fork").split()
    nonempty = [sha for sha in commits if git(fork.path, "diff-tree", "--name-only", "-r", sha)]
    names = load_series(target / "series").patches
    assert len(names) == len(nonempty) == 5
    for patch, sha in zip(names, nonempty):
        assert patch.path.read_text(encoding="utf-8") == export_patch(Git(fork.path), sha)
    assert "Forkkit-Patch" not in (target / names[3].name).read_text()


def test_a_file_with_carriage_returns_inside_its_lines_is_carried(rebaser, tmp_path, upstream):
    """A review: a lone CR inside a line (a progress bar's output, old Mac line ends) made
    import refuse the commit ("cannot parse the diff"): the patch was read with Python's
    newline translation, which split such lines. git rebase carries it."""
    upstream.commit({"pkg/log.txt": "1\n2\nbar\r50%\rdone\n3\n"}, "a log", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    (upstream.path / "pkg/log.txt").write_bytes(b"1\n2\nbar\r75%\rdone\n3\n")
    git(upstream.path, "commit", "-qam", "fork: the log at 75%")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"pkg/other.py": "Y = 2\n"}, "upstream moves on", tag="tip")
    arguments = ["--repo", upstream.path, "--range", "base..fork", "--series-dir"]
    imported = rebaser("import", *arguments, tmp_path / "s", "--name", "f")
    assert imported.code == ExitCode.OK, imported.out + imported.err
    report = tmp_path / "r.json"
    applied = apply(rebaser, tmp_path / "s" / "series", upstream, "tip", "--json", report)
    assert applied.code == ExitCode.OK, applied.out + applied.err
    tree = Path(json.loads(report.read_text())["worktree"])
    assert (tree / "pkg/log.txt").read_bytes() == b"1\n2\nbar\r75%\rdone\n3\n"


def test_a_conflict_in_a_file_with_carriage_returns_stops_and_says_where(
    rebaser, tmp_path, upstream
):
    """A later review: the stop's hunk report read the patch with newline translation, and
    a patch git's own reader could not take (a path with a space beside it) crashed the
    apply (exit 6) where git rebase stops at the conflict."""
    upstream.commit({"f.txt": "a\nb\rX\nd\n", "my file.txt": "one\n"}, "base", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"f.txt": "a\nc\rY\nd\n", "my file.txt": "two\n"}, "fork: both")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"f.txt": "a\nu\rZ\nd\n"}, "upstream: f", tag="tip")
    arguments = ["--repo", upstream.path, "--range", "base..fork", "--series-dir"]
    assert rebaser("import", *arguments, tmp_path / "s", "--name", "f").code == ExitCode.OK
    for lane in ([], ["--no-fast-lane"]):
        stopped = apply(rebaser, tmp_path / "s" / "series", upstream, "tip", "--force", *lane)
        assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
        assert "f.txt" in stopped.out
        assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK
