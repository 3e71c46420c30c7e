"""The fork's own tests in the patched tree (issue 20): `import` records them, `apply --test
cpu` runs them on the carried branch and on the fork's own branch, and a test the carry
broke is pinned to the patch from which it fails. Real git histories, real pytest runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic import git

from rebaser.cli import main
from rebaser.errors import ExitCode
from rebaser.steps.testblame import first_failing

UNITS = '''\
"""Lengths."""


def to_meters(mm):
    return mm


def padding(value):
    return value


def width(value):
    return padding(value)


def length(mm):
    return to_meters(mm)
'''
UNITS_TEST = """\
from pkg.units import length


def test_length():
    assert length(5000) == 5


def test_unchanged():
    assert length(0) == 0
"""
OTHER = "def other():\n    return 1\n"


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def fork_and_new_base(upstream, tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """v1, a fork of four commits on it (its own test, the patch that fixes lengths at the
    call, two unrelated ones), and v2, where upstream fixed lengths in to_meters instead:
    every patch applies cleanly on v2, and the fork's test fails there from 0002 on."""
    upstream.commit({"pkg/units.py": UNITS, "pkg/other.py": OTHER}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"tests/test_units.py": UNITS_TEST, **(extra or {})}, "tests: lengths")
    at_call = edit(UNITS, "return to_meters(mm)\n", "return to_meters(mm) / 1000\n")
    upstream.commit({"pkg/units.py": at_call}, "units: length in meters")
    upstream.commit({"pkg/other.py": OTHER + "\n\ndef more():\n    return 2\n"}, "other: more")
    upstream.commit({"pkg/other.py": OTHER + "\n\ndef more():\n    return 3\n"}, "other: three")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"README": "upstream\n"}, "docs: readme")
    _upstream_fixes_lengths(upstream)
    return _imported(upstream, tmp_path)


def _upstream_fixes_lengths(upstream) -> None:
    """v2: upstream divides in to_meters (the fork's "length in meters" divides again)."""
    fixed = edit(
        UNITS, "def to_meters(mm):\n    return mm\n", "def to_meters(mm):\n    return mm / 1000\n"
    )
    upstream.commit({"pkg/units.py": fixed}, "units: to_meters divides", tag="v2")


def applied(rebaser, series: Path, upstream, report: Path):
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "v2"]
    return rebaser(*args, "--test", "cpu", "--json", report)


def failing_fork_suite(rebaser, tmp_path: Path, upstream) -> dict:
    """The fork (base..fork) imported and applied onto v2 with its tests: they fail; the
    report's fork suite."""
    series = tmp_path / "series"
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    assert main(["import", *arguments, str(series)]) == 0
    report = tmp_path / "r.json"
    result = applied(rebaser, series / "series", upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    return {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}["fork"]


def test_import_records_the_test_files_the_fork_adds_or_changes(tmp_path, upstream):
    gone = {"tests/test_gone.py": "def test_gone():\n    pass\n", "tests/helper.py": "X = 1\n"}
    upstream.commit({"pkg/units.py": UNITS}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"tests/test_units.py": UNITS_TEST, **gone}, "tests")
    git(upstream.path, "rm", "-q", "tests/test_gone.py")
    git(upstream.path, "commit", "-qm", "tests: drop one")
    upstream.commit({"pkg/units_test.py": "def test_x():\n    pass\n"}, "tests: beside")
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    for copy in ("one", "two"):
        assert main(["import", *arguments, str(tmp_path / copy), "--name", "fork"]) == 0
    text = (tmp_path / "one" / "series").read_text()
    listed = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("@fork-test")]
    assert listed == ["pkg/units_test.py", "tests/test_units.py"]  # not the deleted, not helpers
    assert text == (tmp_path / "two" / "series").read_text()  # re-import: byte-identical


def test_a_patch_that_breaks_a_fork_test_only_on_the_new_base_is_named(rebaser, tmp_path, upstream):
    series = fork_and_new_base(upstream, tmp_path)
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    data = json.loads(report.read_text())
    # Clean is not correct: every patch applied exactly.
    assert [row["status"] for row in data["steps"][1:]] == ["clean"] * 4
    fork = {suite["name"]: suite for suite in data["suites"]}["fork"]
    assert fork["status"] == "failed"
    assert fork["failures"] == ["regression: tests.test_units::test_length (failed)"]
    (note,) = [test for test in fork["tests"] if test["verdict"] == "regression"]
    assert note["blame"] == "0002-length-in-meters.patch"
    upstream_fix = git(upstream.path, "rev-parse", "v2")[:12]
    assert note["upstream"] == [f"{upstream_fix} units: to_meters divides"]
    rows = {row["name"]: row for row in data["steps"]}
    culprit = rows["0002-length-in-meters.patch"]
    assert culprit["proposal"] == "review"
    assert culprit["reason"] == (
        f"test_length fails from 0002 on; upstream commits touching its files: "
        f"{upstream_fix} units: to_meters divides"
    )
    # The others keep the triage's proposal (the overlay is no patch: it has none).
    others = [row["proposal"] for name, row in rows.items() if name != culprit["name"]]
    assert others == [None, "keep", "keep", "keep"]
    assert "fails from 0002-length-in-meters.patch on" in result.out
    assert "proposal: review (test_length fails from 0002 on" in result.out
    # The triage's table puts it first among the patches that applied: a decision to take.
    review = result.out.index("review: a test fails from it on")
    assert review < result.out.index("applied, proposed to keep")
    # The fork's branch: where the test passes (the comparison's other side).
    assert fork["note"].startswith("1 fork test file, 0 upstream ones; fork's branch: 2 passed")


def test_a_flaky_test_is_run_again_before_it_is_blamed(rebaser, tmp_path, upstream, monkeypatch):
    """A test that fails the first time it ever runs: run on the carried branch (fails),
    on the fork's branch (passes), again on the carried branch (passes): flaky, not blamed,
    and no bisection run (three runs in all)."""
    runs = tmp_path / "runs.log"
    monkeypatch.setenv("FORKKIT_TEST_RUNS", str(runs))
    flaky = """\
import os


def test_first_run_fails():
    log = os.environ["FORKKIT_TEST_RUNS"]
    first = not os.path.exists(log)
    with open(log, "a") as handle:
        handle.write("run\\n")
    assert not first
"""
    upstream.commit({"pkg/units.py": UNITS}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit({"tests/test_flaky.py": flaky}, "tests: flaky")
    at_call = edit(UNITS, "return to_meters(mm)\n", "return to_meters(mm) + 0\n")
    upstream.commit({"pkg/units.py": at_call}, "units: touch")
    git(upstream.path, "checkout", "-q", "main")
    upstream.commit({"README": "upstream\n"}, "docs", tag="v2")
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    assert main(["import", *arguments, str(tmp_path / "s")]) == 0
    report = tmp_path / "r.json"
    result = applied(rebaser, tmp_path / "s" / "series", upstream, report)
    assert result.code == ExitCode.OK, result.out + result.err
    fork = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}["fork"]
    assert fork["status"] == "passed" and fork["failures"] == []
    (note,) = fork["tests"]
    assert (note["test"], note["verdict"], note["blame"]) == (
        "tests.test_flaky::test_first_run_fails",
        "flaky: passed when run again",
        None,
    )
    assert runs.read_text().count("run") == 3
    steps = json.loads(report.read_text())["steps"]
    assert [row["proposal"] for row in steps] == [None] + ["keep"] * (len(steps) - 1)


def test_tests_that_need_a_gpu_are_listed_as_not_run(rebaser, tmp_path, upstream):
    gpu_tests = """\
import pytest


@pytest.fixture
def device():
    raise RuntimeError("No CUDA GPUs are available")


def test_on_cpu():
    assert True


@pytest.mark.skip(reason="CUDA not available")
def test_kernel():
    pass


def test_with_device(device):
    pass


def test_lengths_without_a_device():
    from pkg.units import length

    if length(5000) != 5:  # it passed on the fork's branch, on this machine: a regression
        raise RuntimeError("a length for the CUDA kernel")
"""
    series = fork_and_new_base(
        upstream,
        tmp_path,
        {"tests/test_device.py": gpu_tests, "tests/test_fused_gpu.py": "def test_x():\n    pass\n"},
    )
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    fork = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}["fork"]
    by_test = {note["test"]: note for note in fork["tests"]}
    for test in ("tests.test_device::test_kernel", "tests.test_device::test_with_device"):
        assert by_test[test]["gpu_only"] and by_test[test]["verdict"] == "needs a GPU: not run"
    assert by_test["tests/test_fused_gpu.py"]["outcome"] == "not run"
    assert fork["passed"] == 2  # test_on_cpu and test_unchanged: nothing GPU-only counted
    assert "(2 need a GPU: not run)" in result.out, result.out
    for test in (
        "tests.test_units::test_length",
        "tests.test_device::test_lengths_without_a_device",
    ):
        assert by_test[test]["verdict"] == "regression" and not by_test[test]["gpu_only"]
        assert by_test[test]["blame"] == "0002-length-in-meters.patch"


def test_the_bisection_probes_a_logarithm_of_the_commits():
    probed: list[int] = []

    def fails(at: int) -> bool:
        probed.append(at)
        return at >= 23

    assert first_failing(40, fails) == 23
    assert len(probed) <= 7 and probed[0] == 0  # first: does it fail with no patch at all?
    assert first_failing(40, lambda at: True) is None  # upstream's doing: no patch named


def test_a_test_broken_by_upstream_is_not_blamed_on_the_patch_that_only_adds_it(
    rebaser, tmp_path, upstream
):
    """0001 adds only a test of upstream's to_meters; v2 changes to_meters. The bisection
    cannot run the test before its file is there, so it blamed 0001 (a review). Laid on
    the tree before 0001, the test fails too: upstream's change, no patch's."""
    small = "from pkg.units import to_meters\n\n\ndef test_small():\n    assert to_meters(1000) == 1000\n"
    series = fork_and_new_base(upstream, tmp_path, extra={"tests/test_small.py": small})
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    fork = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}["fork"]
    notes = {note["test"]: note for note in fork["tests"] if note["verdict"] == "regression"}
    small_note = notes["tests.test_small::test_small"]
    assert small_note["blame"] is None, small_note
    assert "fails on the new base before any patch" in small_note["reason"], small_note
    assert "its file laid alone" in small_note["reason"]
    # test_length, in the same test-only patch, is still pinned to the patch that broke it.
    assert notes["tests.test_units::test_length"]["blame"] == "0002-length-in-meters.patch"


def test_an_upstream_test_new_on_the_base_that_the_carry_breaks_is_a_regression(
    rebaser, tmp_path, upstream
):
    """v2 adds upstream's test of other(); the fork's 0002 changes other(). The test is not
    on the fork's branch, so it was "not on the fork's branch", never a regression (a
    review). It passes on the new base alone: the carry broke it, from 0002 on."""
    upstream.commit({"pkg/units.py": UNITS, "pkg/other.py": OTHER}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    upstream.commit(
        {
            "tests/test_units.py": UNITS_TEST.split("\n\n\ndef test_length")[0]
            + "\n\n\ndef test_unchanged():\n    assert length(0) == 0\n"
        },
        "tests: mine",
    )
    upstream.commit({"pkg/other.py": "def other():\n    return 5\n"}, "other: five")
    git(upstream.path, "checkout", "-q", "main")
    other_test = "from pkg.other import other\n\n\ndef test_other():\n    assert other() == 1\n"
    upstream.commit({"tests/test_other.py": other_test}, "tests: other", tag="v2")
    fork = failing_fork_suite(rebaser, tmp_path, upstream)
    assert fork["failures"] == ["regression: tests.test_other::test_other (failed)"], fork
    (note,) = [test for test in fork["tests"] if test["test"] == "tests.test_other::test_other"]
    assert note["verdict"] == "regression" and note["blame"] == "0002-five.patch", note


def test_a_test_file_that_no_longer_imports_says_why_and_its_tests_are_regressions(
    rebaser, tmp_path, upstream
):
    """v2 moves pkg/other.py away; the fork's test of it no longer imports. The collection
    error read "collection failure" (the ModuleNotFoundError lost) and was "not on the
    fork's branch", though its file was there and its tests passed (a review)."""
    upstream.commit({"pkg/units.py": UNITS, "pkg/other.py": OTHER}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    mine = "from pkg.other import other\n\n\ndef test_mine():\n    assert other() == 1\n"
    upstream.commit({"tests/test_mine.py": mine}, "tests: mine")
    git(upstream.path, "checkout", "-q", "main")
    git(upstream.path, "mv", "pkg/other.py", "pkg/tools.py")
    git(upstream.path, "commit", "-qm", "move other to tools")
    git(upstream.path, "tag", "v2")
    fork = failing_fork_suite(rebaser, tmp_path, upstream)
    notes = {note["test"]: note for note in fork["tests"]}
    collection = notes["::tests.test_mine"]
    assert "ModuleNotFoundError: No module named 'pkg.other'" in collection["reason"], collection
    assert collection["verdict"] == "its tests, passed on the fork's branch, are not collected"
    assert notes["tests.test_mine::test_mine"]["verdict"] == "regression"


def _fork_of_commits(upstream, tmp_path: Path, commits: list[tuple[dict[str, str], str]]) -> Path:
    """v1 (units, other), a fork of `commits` on it, and v2, where upstream fixed lengths in
    to_meters; the series imported."""
    upstream.commit({"pkg/units.py": UNITS, "pkg/other.py": OTHER}, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")
    for files, subject in commits:
        upstream.commit(files, subject)
    git(upstream.path, "checkout", "-q", "main")
    _upstream_fixes_lengths(upstream)
    return _imported(upstream, tmp_path)


UPSTREAM_TEST = (
    "from pkg.units import to_meters\n\n\ndef test_zero():\n    assert to_meters(0) == 0\n"
)


def _base_with_upstream_test(upstream, path: str) -> None:
    """v1 (units, other, upstream's UPSTREAM_TEST at `path`), the fork's branch checked out."""
    files = {"pkg/units.py": UNITS, "pkg/other.py": OTHER, path: UPSTREAM_TEST}
    upstream.commit(files, "units", tag="base")
    git(upstream.path, "checkout", "-q", "-b", "fork")


def _imported(upstream, tmp_path: Path) -> Path:
    """base..fork imported: the series file."""
    series = tmp_path / "series"
    arguments = ["--repo", str(upstream.path), "--range", "base..fork", "--series-dir"]
    assert main(["import", *arguments, str(series)]) == 0
    return series / "series"


def _fork_suite(report: Path) -> dict:
    return {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}["fork"]


def _fork_notes(rebaser, series: Path, upstream, tmp_path: Path) -> dict[str, dict]:
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    return {note["test"]: note for note in _fork_suite(report)["tests"]}


@pytest.mark.parametrize("first_changes_code", [False, True], ids=["tests-only", "with-code"])
def test_a_test_a_later_patch_adds_is_pinned_to_the_patch_that_breaks_it(
    rebaser, tmp_path, upstream, first_changes_code
):
    """A review: 0001 adds the fork's test file with one test, 0004 (tests only) adds
    test_length to it. Every probe where the file was there without test_length counted it
    as failing: the bisection blamed 0001, or (0001 changing only tests, its file laid
    alone) no patch. test_length fails from 0002 on."""
    unchanged_only = (
        "from pkg.units import length\n\n\ndef test_unchanged():\n    assert length(0) == 0\n"
    )
    first = {"tests/test_units.py": unchanged_only}
    if first_changes_code:
        first["pkg/other.py"] = OTHER + "\n\ndef extra():\n    return 0\n"
    at_call = edit(UNITS, "return to_meters(mm)\n", "return to_meters(mm) / 1000\n")
    series = _fork_of_commits(
        upstream,
        tmp_path,
        [
            (first, "tests: unchanged"),
            ({"pkg/units.py": at_call}, "units: length in meters"),
            ({"README.fork": "fork\n"}, "docs: fork"),
            ({"tests/test_units.py": UNITS_TEST}, "tests: length"),
        ],
    )
    notes = _fork_notes(rebaser, series, upstream, tmp_path)
    note = notes["tests.test_units::test_length"]
    assert note["verdict"] == "regression" and note["blame"] == "0002-length-in-meters.patch", note


@pytest.mark.parametrize("support", ["tests/conftest.py", "tests/__init__.py"])
def test_a_patch_adding_a_test_and_its_support_files_is_not_blamed_for_upstreams_break(
    rebaser, tmp_path, upstream, support
):
    """A review: a patch adding only tests and their conftest.py (or the tests' package's
    __init__.py) counted as changing code: it was blamed for a test the new base alone
    breaks. Those files are the tests' own, as test files are."""
    small = "from pkg.units import to_meters\n\n\ndef test_small():\n    assert to_meters(1000) == 1000\n"
    extra = {"tests/test_small.py": small, support: "\n"}
    series = fork_and_new_base(upstream, tmp_path, extra=extra)
    notes = _fork_notes(rebaser, series, upstream, tmp_path)
    small_note = next(note for test, note in notes.items() if test.endswith("::test_small"))
    assert small_note["blame"] is None, small_note
    assert "fails on the new base before any patch" in small_note["reason"], small_note


def test_a_regression_the_bisection_never_sees_fail_is_not_blamed(rebaser, tmp_path, upstream):
    """A review: a test that fails in the worktree only (here: it asks whether its tree is a
    git checkout; the bisection's trees are not) was blamed on the branch's last patch,
    though no probe saw it fail: the bisection took its failing at the tip for granted."""
    checkout = (
        "from pathlib import Path\n\n\ndef test_not_a_checkout():\n"
        "    assert not (Path(__file__).resolve().parents[1] / '.git').exists()\n"
    )
    series = fork_and_new_base(upstream, tmp_path, extra={"tests/test_tree.py": checkout})
    notes = _fork_notes(rebaser, series, upstream, tmp_path)
    note = notes["tests.test_tree::test_not_a_checkout"]
    assert note["verdict"] == "regression" and note["blame"] is None, note
    assert "not bisected: it passes in the bisection's tree at the branch's tip" in note["reason"]
    assert notes["tests.test_units::test_length"]["blame"] == "0002-length-in-meters.patch"


def test_a_test_failing_only_beside_the_others_is_not_called_flaky(rebaser, tmp_path, upstream):
    """A review: test_b reads module state test_a (another file, run first) sets; on the new
    base it fails every time the selection runs. Run again alone, it passed: "flaky", and the
    suite passed. Run again as it ran the first time, it fails again: a regression."""
    extra = {
        "tests/test_fork_a.py": "import pkg.units as u\n\n\ndef test_a():\n    u.CACHE = u.length(5000)\n",
        "tests/test_fork_b.py": (
            "import pkg.units as u\n\n\ndef test_b():\n    assert getattr(u, 'CACHE', 5) == 5\n"
        ),
    }
    series = fork_and_new_base(upstream, tmp_path, extra=extra)
    notes = _fork_notes(rebaser, series, upstream, tmp_path)
    note = notes["tests.test_fork_b::test_b"]
    assert note["verdict"] == "regression", note
    assert "passes alone, fails beside the other tests" in note["reason"], note


def test_a_test_upstream_renamed_is_no_regression(rebaser, tmp_path, upstream):
    """A review: upstream renamed one of its own tests between the fork's base and the new
    base; its test file, selected for the file the fork changes, lacked the old name after
    the carry: a regression (exit 1), though the new base lacks it too."""
    _base_with_upstream_test(upstream, "tests/test_upstream.py")
    upstream.commit({"pkg/units.py": UNITS + "\n\ndef meters(mm):\n    return mm\n"}, "meters")
    upstream.commit({"pkg/other.py": OTHER + "\n\ndef more():\n    return 2\n"}, "more")
    git(upstream.path, "checkout", "-q", "main")
    renamed = UPSTREAM_TEST.replace("test_zero", "test_of_zero")
    upstream.commit({"tests/test_upstream.py": renamed}, "tests: clearer name", tag="v2")
    report = tmp_path / "r.json"
    result = applied(rebaser, _imported(upstream, tmp_path), upstream, report)
    assert result.code == ExitCode.OK, result.out + result.err
    fork = _fork_suite(report)
    assert fork["status"] == "passed" and fork["failures"] == [], fork
    (note,) = [note for note in fork["tests"] if note["test"].endswith("::test_zero")]
    assert note["verdict"] == "removed by upstream: not on the new base either", note
    assert "0 regressions" in fork["note"], fork["note"]


def test_a_fork_test_file_upstream_moved_fails_the_run(rebaser, tmp_path, upstream):
    """A review: the fork adds test_length to upstream's tests/test_units.py, which the new
    base moves to tests/unit/ (the patch follows the rename). The @fork-test file was listed
    as missing and counted for nothing, test_length failed at its new place as "not on the
    fork's branch", and the run passed (exit 0). A fork test file the patched tree lacks is
    gone, as a test that is gone: the run fails and names it."""
    _base_with_upstream_test(upstream, "tests/test_units.py")
    with_length = UPSTREAM_TEST + "\n\ndef test_length():\n    from pkg.units import length\n"
    with_length += "    assert length(5000) == 5\n"
    upstream.commit({"tests/test_units.py": with_length}, "tests: lengths")
    at_call = edit(UNITS, "return to_meters(mm)\n", "return to_meters(mm) / 1000\n")
    upstream.commit({"pkg/units.py": at_call}, "units: length in meters")
    git(upstream.path, "checkout", "-q", "main")
    (upstream.path / "tests" / "unit").mkdir()
    git(upstream.path, "mv", "tests/test_units.py", "tests/unit/test_units.py")
    git(upstream.path, "commit", "-qm", "tests: into unit/")
    _upstream_fixes_lengths(upstream)
    report = tmp_path / "r.json"
    result = applied(rebaser, _imported(upstream, tmp_path), upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    fork = _fork_suite(report)
    assert fork["status"] == "failed"
    assert "regression: tests/test_units.py (missing)" in fork["failures"], fork["failures"]


def _beside_a_passing_file(upstream, tmp_path: Path, units_test: str) -> Path:
    """A fork of tests/test_units.py (`units_test`) beside a test file that passes, then the
    patch that breaks lengths on v2; the series."""
    other = "from pkg.other import other\n\n\ndef test_other():\n    assert other() == 1\n"
    at_call = edit(UNITS, "return to_meters(mm)\n", "return to_meters(mm) / 1000\n")
    return _fork_of_commits(
        upstream,
        tmp_path,
        [
            ({"tests/test_units.py": units_test, "tests/test_other.py": other}, "tests: mine"),
            ({"pkg/units.py": at_call}, "units: length in meters"),
        ],
    )


@pytest.mark.parametrize(
    "ending, said, timeout",
    [
        ("os._exit(3)", "pytest broke off in this test", None),
        ("time.sleep(600)", "timed out", "15"),
    ],
    ids=["dies", "hangs"],
)
def test_a_test_that_ends_or_hangs_pytest_is_named_and_the_other_files_still_count(
    rebaser, tmp_path, upstream, monkeypatch, ending, said, timeout
):
    """A review: a test that ends the interpreter (os._exit, a crash) on the new base left
    no results at all ("pytest exited 3 before writing results"), one that hangs cost each
    run a fixed hour; no test was named, the real regression never blamed. Each file then
    runs alone (DSA_FORKKIT_TEST_TIMEOUT limits a run): the others' results count, and the
    test pytest dies or hangs in (the tests' plugin logs each as it starts) is an error,
    pinned to the patch from which it does."""
    if timeout:
        monkeypatch.setenv("DSA_FORKKIT_TEST_TIMEOUT", timeout)
    units_test = (
        "import os\nimport time\n\nfrom pkg.units import length\n\n\ndef test_length():\n"
        f"    if length(5000) != 5:\n        {ending}\n"
    )
    series = _beside_a_passing_file(upstream, tmp_path, units_test)
    notes = _fork_notes(rebaser, series, upstream, tmp_path)
    ended = notes["tests.test_units::test_length"]
    assert ended["outcome"] == "error" and said in ended["reason"], ended
    assert ended["verdict"] == "regression" and ended["blame"] == "0002-length-in-meters.patch"
    assert "tests.test_other::test_other" not in notes  # it passed, and counts as passed


def test_a_test_writing_to_its_working_folder_writes_in_the_tree(
    rebaser, tmp_path, upstream, monkeypatch
):
    """A review: pytest ran in the patched tree with rebaser's environment, whose PWD named
    the user's checkout: a test writing to $PWD (as shell-minded helpers do) wrote there."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setenv("PWD", str(checkout))
    writer = (
        "import os\nfrom pathlib import Path\n\n\ndef test_writes():\n"
        "    (Path(os.environ['PWD']) / 'written-by-a-test').write_text('x')\n"
    )
    series = fork_and_new_base(upstream, tmp_path, extra={"tests/test_writer.py": writer})
    _fork_notes(rebaser, series, upstream, tmp_path)
    assert not (checkout / "written-by-a-test").exists()


def _one_test_file_carried(rebaser, upstream, tmp_path: Path, test_file: str):
    """A fork of one test file (tests/test_mine.py) and a docs commit carried onto v2 with its
    tests, no regression expected: the fork suite of the report, and the run."""
    series = _fork_of_commits(
        upstream,
        tmp_path,
        [({"tests/test_mine.py": test_file}, "tests: mine"), ({"README.fork": "x\n"}, "docs")],
    )
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    assert result.code == ExitCode.OK, result.out + result.err
    return _fork_suite(report), result


def test_a_suite_whose_tests_fail_on_both_branches_ran(rebaser, tmp_path, upstream):
    """A review: the fork's only test fails on its own branch too (no regression); the suite
    read "not run", and the apply "tests not run", though the test ran. "Not run" is for
    tests that could not run here (a GPU's, skipped ones)."""
    broken = "def test_broken():\n    assert False\n"
    fork, result = _one_test_file_carried(rebaser, upstream, tmp_path, broken)
    assert fork["status"] == "passed", fork
    assert fork["tests"][0]["verdict"] == "also failed on the fork's branch", fork["tests"]
    assert "tests not run" not in result.out


def test_a_blamed_tests_parameter_id_with_colons_is_named_whole(rebaser, tmp_path, upstream):
    """A review: a parametrized test whose id holds `::` was named in the blamed patch's
    reason by what followed its last `::` (`mm]`)."""
    param = (
        "import pytest\n\nfrom pkg.units import length\n\n\n"
        "@pytest.mark.parametrize('mm', [5000], ids=['in::mm'])\n"
        "def test_param(mm):\n    assert length(mm) == 5\n"
    )
    series = fork_and_new_base(upstream, tmp_path, extra={"tests/test_param.py": param})
    report = tmp_path / "r.json"
    result = applied(rebaser, series, upstream, report)
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    rows = {row["name"]: row for row in json.loads(report.read_text())["steps"]}
    reason = rows["0002-length-in-meters.patch"]["reason"]
    tests = reason.split(" fail from 0002 on")[0]
    assert sorted(tests.split(", ")) == ["test_length", "test_param[in::mm]"], reason


def test_a_failure_that_only_names_gpus_is_no_gpu_need(rebaser, tmp_path, upstream):
    """A review: a plain CPU failure whose assertion shows a `gpus` argument was listed as
    "needs a GPU: not run". Messages that say a GPU is missing still are."""
    tests = (
        "def shard(gpus):\n    return gpus * 2\n\n\n"
        "def test_plain_bug():\n    assert shard(gpus=2) == 5\n\n\n"
        "def test_worker_failed():\n"
        "    said = 'UserWarning: CUDA initialization: no driver\\nworker: wrong sum'\n"
        "    assert False, f'the worker failed:\\n{said}'\n\n\n"
        "def test_needs_one():\n    raise RuntimeError('No GPU found on this machine')\n"
    )
    fork, _ = _one_test_file_carried(rebaser, upstream, tmp_path, tests)
    by_test = {note["test"]: note for note in fork["tests"]}
    plain = by_test["tests.test_mine::test_plain_bug"]
    assert not plain["gpu_only"] and plain["verdict"] == "also failed on the fork's branch"
    # a worker's output that names CUDA, in an assertion's message: a failure all the same
    worker = by_test["tests.test_mine::test_worker_failed"]
    assert not worker["gpu_only"] and worker["verdict"] == "also failed on the fork's branch"
    needs = by_test["tests.test_mine::test_needs_one"]
    assert needs["gpu_only"] and needs["verdict"] == "needs a GPU: not run", needs


def test_a_test_timeout_that_is_no_number_is_refused(rebaser, tmp_path, upstream, monkeypatch):
    monkeypatch.setenv("DSA_FORKKIT_TEST_TIMEOUT", "an hour")
    series = fork_and_new_base(upstream, tmp_path)
    result = applied(rebaser, series, upstream, tmp_path / "r.json")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "DSA_FORKKIT_TEST_TIMEOUT" in result.err and "an hour" in result.err, result.err


def test_a_runs_output_stays_on_disk_and_only_its_end_is_read(tmp_path):
    """A review: pytest's whole output was held in rebaser's memory (a test printing 300 MB
    took it to 0.9 GB). It goes to a file; rebaser reads its last 64 KiB (why it failed)."""
    import sys

    from rebaser.repo.processes import run_own_group

    printing = "import sys\nsys.stdout.write('x' * 1000 + '\\n'); sys.stdout.write(('y' * 999 + '\\n') * 20000); print('THE END')"
    output = tmp_path / "output"
    done = run_own_group(
        [sys.executable, "-c", printing], cwd=tmp_path, env={}, timeout=600, output=output
    )
    assert done.returncode == 0
    assert output.stat().st_size > 20_000_000
    assert len(done.stdout) <= 64 * 1024 and done.stdout.endswith("THE END\n")
