"""Patches carried as cherry-picks of their own commits (ort, renames followed), compared with
a real `git rebase` of the same commits onto the same upstream tip."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import RunResult
from synthetic import CALC, Change, SyntheticUpstream, build_series, edit, git
from test_apply_synthetic import apply

from rebaser.errors import ExitCode

UTIL = '''\
"""Helpers."""


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def scale(value, factor):
    return value * factor
'''
LEGACY = "def legacy():\n    return 1\n"


def carried_history(upstream: SyntheticUpstream, root: Path) -> Path:
    """A fork series on v1, then upstream moves on: renames + modifies util.py, moves `sub`,
    deletes legacy.py, rewrites the module docstring (tag `tip`). Returns the series."""
    upstream.commit({"pkg/util.py": UTIL, "pkg/legacy.py": LEGACY}, "base", tag="base")
    clamp_doc = edit(
        UTIL, "def clamp(value, low, high):\n", 'def clamp(value, low, high):\n    """Clamp."""\n'
    )
    div_checked = edit(CALC, "    return a / b\n", "    assert b\n    return a / b\n")
    doubled = edit(div_checked, "    return a * b\n", "    return 2 * a * b\n")
    changes = [
        Change("fork: check div", {"pkg/calc.py": div_checked}),
        Change("fork: document clamp", {"pkg/util.py": clamp_doc}),
        Change(
            "fork: scale rounds",
            {
                "pkg/util.py": edit(
                    clamp_doc,
                    "    return value * factor\n",
                    "    return round(value * factor)\n",
                )
            },
        ),
        Change("fork: legacy returns 2", {"pkg/legacy.py": "def legacy():\n    return 2\n"}),
        Change("fork: double mul", {"pkg/calc.py": doubled}),
        Change(
            "fork: neg of zero",
            {"pkg/calc.py": edit(doubled, "    return -a\n", "    return -a if a else 0\n")},
        ),
    ]
    series = fork_series(upstream, root, "base", changes)
    # Upstream: util.py moves to pkg/utils_helpers.py (with an edit), `sub` moves to the end
    # of calc.py, legacy.py goes away, calc.py's docstring changes.
    git(upstream.path, "mv", "pkg/util.py", "pkg/utils_helpers.py")
    git(upstream.path, "rm", "-q", "pkg/legacy.py")
    moved_sub = edit(CALC, "def sub(a, b):\n    return a - b\n\n\n", "")
    moved_sub = edit(
        moved_sub, '"""A tiny upstream module."""', '"""A tiny upstream module, v2."""'
    )
    upstream.commit(
        {
            "pkg/utils_helpers.py": UTIL.replace('"""Helpers."""', '"""Helpers, v2."""'),
            "pkg/calc.py": moved_sub + "\n\ndef sub(a, b):\n    return a - b\n",
        },
        "upstream moves things",
        tag="tip",
    )
    return series


def fork_series(upstream: SyntheticUpstream, root: Path, tag: str, changes: list[Change]) -> Path:
    """The fork's changes exported against `tag`, which is the series' @base (so each patch's
    own commit is at hand to cherry-pick)."""
    base = git(upstream.path, "rev-parse", tag)
    return build_series(root, upstream, tag, changes, extra_directives=f"@base git:{base}\n")


def git_rebase(repo: Path, series: Path, base: str, onto: str) -> dict[str, str]:
    """`git am` the series onto `base`, `git rebase` it onto `onto` (ort, skipping every stop):
    the tree after each commit git applied, by subject."""
    patches = [
        series.parent / line for line in series.read_text().splitlines() if line.endswith(".patch")
    ]
    git(repo, "checkout", "-q", "-b", "git-rebased", base)
    git(repo, "am", "-q", "--keep-cr", *map(str, patches))
    rebase = subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "merge.renames=true",
            "-c",
            "merge.directoryRenames=true",
            "rebase",
            "-q",
            onto,
        ],
        cwd=repo,
        capture_output=True,
    )
    while rebase.returncode != 0:
        rebase = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "rebase", "--skip"],
            cwd=repo,
            capture_output=True,
        )
    log = git(repo, "log", "--reverse", "--format=%T %s", f"{onto}..git-rebased")
    git(repo, "checkout", "-q", "main")
    return {subject: tree for tree, subject in (line.split(" ", 1) for line in log.splitlines())}


def rebaser_trees(worktree: Path, base: str) -> dict[str, str]:
    log = git(worktree, "log", "--reverse", "--format=%T %s", f"{base}..HEAD")
    return {
        subject: tree
        for tree, subject in (line.split(" ", 1) for line in log.splitlines())
        if not subject.startswith("forkkit: overlay")
    }


@dataclass
class Carried:
    """The same series onto `tip` by git rebase and by rebaser (one pass, --keep-going)."""

    rebased: dict[str, str]  # git rebase: the tree after each patch it applied, by subject
    trees: dict[str, str]  # rebaser: the same
    report: dict
    result: RunResult

    @property
    def statuses(self) -> dict[str, str]:
        return {step["name"]: step["status"] for step in self.report["steps"]}

    def detail(self, name: str) -> str:
        return next(step["detail"] for step in self.report["steps"] if step["name"] == name)


def carry_beside_git_rebase(
    rebaser, tmp_path, upstream, series: Path, base: str, *options: str
) -> Carried:
    """Both carries of the series from `base` onto `tip`; asserts that rebaser applies every
    patch git rebase applies, each with git rebase's tree. `options`: the apply's own."""
    rebased = git_rebase(upstream.path, series, base, "tip")
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "tip", "--keep-going", "--json", report, *options)
    data = json.loads(report.read_text())
    carried = Carried(rebased, rebaser_trees(Path(data["worktree"]), "tip"), data, result)
    assert set(rebased) <= set(carried.trees), (carried.statuses, result.out)
    assert {subject: carried.trees[subject] for subject in rebased} == rebased, carried.statuses
    return carried


def test_applies_every_patch_git_rebase_applies_with_the_same_trees(rebaser, tmp_path, upstream):
    series = carried_history(upstream, tmp_path / "proj")
    carried = carry_beside_git_rebase(rebaser, tmp_path, upstream, series, "base")
    statuses = carried.statuses
    # git rebase stops on the file deleted upstream and on the change next to the moved
    # function; rebaser leaves the first off (one pass) and says so, and merges the second by
    # syntax (functions of a module go in any order): neg edited, sub where upstream put it
    assert set(carried.trees) - set(carried.rebased) == {"fork: neg of zero"}
    assert statuses["0004-change-4.patch"] == "dropped"
    assert statuses["0006-change-6.patch"] == "structured merge"
    calc = git(Path(carried.report["worktree"]), "show", "HEAD:pkg/calc.py")
    assert "def neg(a):\n    return -a if a else 0\n\n\ndef sub(a, b):\n    return a - b" in calc
    assert calc.count("def sub(") == 1
    assert "pkg/legacy.py" in carried.detail("0004-change-4.patch")
    assert carried.result.code == ExitCode.NOT_APPLIED
    # util.py was renamed upstream: per-file 3-way cannot find it, ort follows the rename
    assert statuses["0002-change-2.patch"] == statuses["0003-change-3.patch"] == "cherry-pick"
    assert "pkg/utils_helpers.py" in carried.detail("0003-change-3.patch")
    git(upstream.path, "checkout", "-q", "--detach", "tip")
    three_way = subprocess.run(
        ["git", "apply", "--3way", "--index", str(series.parent / "0002-change-2.patch")],
        cwd=upstream.path,
        capture_output=True,
    )
    assert three_way.returncode != 0


ALPHA = "def alpha(x):\n    return x + 1\n"
BETA = "def beta(x):\n    return x * 3\n"
GAMMA = "from pkg.plugins.alpha import alpha\n\n\ndef gamma(x):\n    return alpha(x) - 1\n"


def renamed_folder_history(upstream: SyntheticUpstream, root: Path) -> Path:
    """A fork series that edits files in pkg/plugins/ and adds one there, then upstream
    renames the folder to pkg/extensions/ and edits a file in it (tag `tip`)."""
    folder = {"pkg/plugins/alpha.py": ALPHA, "pkg/plugins/beta.py": BETA}
    upstream.commit(folder, "upstream adds pkg/plugins/", tag="plugins")
    checked = edit(ALPHA, "    return x + 1\n", "    assert x >= 0\n    return x + 1\n")
    changes = [
        Change("fork: alpha checks", {"pkg/plugins/alpha.py": checked}),
        Change("fork: add gamma", {"pkg/plugins/gamma.py": GAMMA}),
        Change("fork: beta quadruples", {"pkg/plugins/beta.py": edit(BETA, "* 3", "* 4")}),
        Change("fork: gamma doubles", {"pkg/plugins/gamma.py": edit(GAMMA, "- 1", "* 2")}),
    ]
    series = fork_series(upstream, root, "plugins", changes)
    git(upstream.path, "mv", "pkg/plugins", "pkg/extensions")
    upstream.commit(
        {"pkg/extensions/beta.py": '"""Beta."""\n\n\n' + BETA},
        "upstream renames plugins/ to extensions/",
        tag="tip",
    )
    return series


@pytest.mark.parametrize("lane", [True, False])
def test_a_folder_renamed_upstream_takes_the_edits_and_the_added_files(
    rebaser, tmp_path, upstream, lane
):
    """Patch by patch too (a review: the exact apply came first there and recreated
    pkg/plugins/ for the added file, where the lane followed the rename)."""
    series = renamed_folder_history(upstream, tmp_path / "proj")
    options = () if lane else ("--no-fast-lane",)
    carried = carry_beside_git_rebase(rebaser, tmp_path, upstream, series, "plugins", *options)
    assert len(carried.rebased) == 4  # git rebase applies every patch (ort follows the folder)
    assert carried.result.code == ExitCode.OK, carried.result.out
    tree = Path(carried.report["worktree"])
    assert not (tree / "pkg/plugins").exists()
    assert "* 2" in (tree / "pkg/extensions/gamma.py").read_text()
    statuses = {step["name"][:4]: step["status"] for step in carried.report["steps"][1:]}
    assert statuses["0002"] == "cherry-pick", "the added file followed the folder's rename"


def test_a_patch_made_on_another_base_is_cherry_picked_from_its_blobs(rebaser, tmp_path, upstream):
    """`refresh` keeps a patch the branch left off as it was, made on the old base, and moves
    the series' @base: its diff no longer applies there, so it had no commit and took a
    per-file `git apply --3way`, which left both sides' new functions in conflict. A commit
    made from the blobs it names is cherry-picked, then merged by syntax, as any patch is."""
    triple = edit(
        CALC, "def div(a, b):\n", "def triple(a):\n    return 3 * a\n\n\ndef div(a, b):\n"
    )
    square = edit(
        CALC, "def div(a, b):\n", "def square(a):\n    return a * a\n\n\ndef div(a, b):\n"
    )
    series = build_series(
        tmp_path / "proj", upstream, "v1", [Change("fork: triple", {"pkg/calc.py": triple})]
    )
    v2 = upstream.commit({"pkg/calc.py": square}, "upstream: square", tag="v2")
    series.write_text(series.read_text().replace("@name demo\n", f"@name demo\n@base git:{v2}\n"))
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", str(report))
    assert result.code == ExitCode.OK, result.out + result.err
    data = json.loads(report.read_text())
    assert [step["status"] for step in data["steps"]] == ["laid", "structured merge"], data["steps"]
    merged = (Path(data["worktree"]) / "pkg/calc.py").read_text()
    assert "def triple(a):" in merged and "def square(a):" in merged and "<<<<<<<" not in merged


def test_merge_drivers_the_tree_names_are_used_as_git_rebase_uses_them(rebaser, tmp_path, upstream):
    """A review: the lane's scratch repository writes no file, so git found no
    .gitattributes there and merged a `merge=union` file as text (the patch dropped) and a
    `merge=binary` one line by line (carried, where git rebase stops)."""
    attributes = {
        ".gitattributes": "CHANGES merge=union\n",
        "data/.gitattributes": "* merge=binary\n",
    }
    lines = "".join(f"{n}\n" for n in range(1, 7))
    upstream.commit({**attributes, "CHANGES": lines, "data/table": lines}, "base", tag="base")
    changes = [
        Change("fork: a change noted", {"CHANGES": lines + "fork\n"}),
        Change("fork: a table row", {"data/table": lines.replace("2\n", "two\n")}),
    ]
    series = fork_series(upstream, tmp_path / "proj", "base", changes)
    upstream.commit(
        {"CHANGES": lines + "up\n", "data/table": lines.replace("5\n", "five\n")}, "up", tag="tip"
    )
    carried = carry_beside_git_rebase(rebaser, tmp_path, upstream, series, "base")
    assert sorted(carried.rebased) == ["fork: a change noted"], carried.rebased
    assert list(carried.statuses.values())[1:] == ["cherry-pick", "dropped"], carried.statuses


def test_a_file_whose_name_is_not_utf8_is_carried_and_stops_as_git_does(
    rebaser, tmp_path, upstream
):
    """A review: a conflict in `caf\\xe9.txt` crashed the stop's report (exit 6), and once
    the patches' commits were remembered the lane crashed on the same name when it applied
    cleanly; git rebase carries it, and stops at its conflict."""
    name = "caf\udce9.txt"  # the byte 0xe9, as Python holds a file name that is not UTF-8
    lines = "".join(f"{letter}\n" for letter in "abcdefghij")
    upstream.commit({name: lines, "g.txt": lines}, "base", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({name: lines.replace("d\n", "D\n")}, "fork: d")
    upstream.commit({"g.txt": lines.replace("d\n", "D\n")}, "fork: g")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({name: lines.replace("j\n", "J\n")}, "upstream: j", tag="tip")
    upstream.commit({"g.txt": lines.replace("d\n", "X\n")}, "upstream: g", tag="tip2")
    arguments = ["--repo", upstream.path, "--range", "base..fork", "--series-dir"]
    assert rebaser("import", *arguments, tmp_path / "s", "--name", "f").code == ExitCode.OK
    series = tmp_path / "s" / "series"
    for _ in range(2):  # the second, from remembered commits, through the lane
        applied = apply(rebaser, series, upstream, "tip", "--force", "--test", "none")
        assert applied.code == ExitCode.OK, applied.out + applied.err
    git(upstream.path, "tag", "-f", "tip3", "tip2")
    upstream.commit({name: lines.replace("d\n", "X\n")}, "upstream: d", tag="tip4")
    for lane in ([], ["--no-fast-lane"]):
        stopped = apply(rebaser, series, upstream, "tip4", "--force", "--test", "none", *lane)
        assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
        assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK
