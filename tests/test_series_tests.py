"""What a series declares about its tests: upstream tests judged against the base (run in a
throwaway checkout), and the modules the test interpreter must import (@test-requires)."""

from __future__ import annotations

import json
import sys

import pytest
from synthetic import CALC, Change, build_series, edit, git

from rebaser.errors import ExitCode, RebaserError
from rebaser.steps.testrun import check_interpreter

UPSTREAM_TEST = """\
from pkg.calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""


def double_mul_series(tmp_path, upstream, base: str, directives: str):
    return build_series(
        tmp_path / "proj",
        upstream,
        base,
        [Change("demo: double mul", {"pkg/calc.py": edit(CALC, "a * b", "2 * a * b")})],
        extra_directives=directives,
    )


def test_upstream_tests_count_only_regressions_against_the_base(rebaser, tmp_path, upstream):
    upstream.commit({"tests/test_up.py": UPSTREAM_TEST}, "upstream tests", tag="v1.1")
    series = double_mul_series(tmp_path, upstream, "v1.1", "@upstream-test tests/test_up.py\n")
    report = tmp_path / "r.json"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1.1", "--json", report
    )
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    suites = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}
    upstream_suite = suites["upstream"]
    assert upstream_suite["status"] == "failed"
    assert upstream_suite["failures"] == ["regression: tests.test_up::test_mul (failed)"]
    assert upstream_suite["note"].startswith("base: 2 passed, 0 failed")
    # The base checkout was a throwaway: only the user's checkout and the apply's remain.
    worktrees = git(upstream.path, "worktree", "list", "--porcelain").count("worktree ")
    assert worktrees == 2


def test_a_declared_test_requirement_is_checked_before_applying(rebaser, tmp_path, upstream):
    series = double_mul_series(tmp_path, upstream, "v1", "@test-requires forkkit_no_such_module\n")
    args = ("apply", "--series", series, "--repo", upstream.path, "--base", "v1")
    refused = rebaser(*args, "--test", "cpu")
    assert refused.code == ExitCode.ENVIRONMENT
    assert "cannot import pytest and forkkit_no_such_module" in refused.err
    assert "--test none" in refused.err
    assert "forkkit/" not in git(upstream.path, "branch", "--list")  # nothing was applied
    assert rebaser(*args, "--test", "none").code == ExitCode.OK


def test_no_torch_probe_unless_the_series_requires_torch(tmp_path, monkeypatch):
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('torch is broken here')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    check_interpreter(sys.executable, "cpu", [])
    check_interpreter(sys.executable, "gpu", [])
    with pytest.raises(RebaserError, match="cannot import pytest and torch: .*torch is broken"):
        check_interpreter(sys.executable, "cpu", ["torch"])


def test_test_requires_takes_a_module_name(rebaser, tmp_path, upstream):
    series = double_mul_series(tmp_path, upstream, "v1", "@test-requires torch; import os\n")
    result = rebaser("apply", "--series", series, "--repo", upstream.path, "--base", "v1")
    assert result.code == ExitCode.USAGE and "one importable module name" in result.err


def test_a_listed_upstream_test_missing_on_the_base_is_reported(rebaser, tmp_path, upstream):
    upstream.commit({"tests/test_up.py": UPSTREAM_TEST}, "upstream tests", tag="v1.1")
    listed = "@upstream-test tests/test_up.py\n@upstream-test tests/test_gone.py\n"
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1.1",
        [Change("demo: document add", {"pkg/calc.py": edit(CALC, "a + b", "b + a")})],
        extra_directives=listed,
    )
    report = tmp_path / "r.json"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1.1", "--json", report
    )
    assert result.code == ExitCode.OK, result.out + result.err
    suite = {s["name"]: s for s in json.loads(report.read_text())["suites"]}["upstream"]
    found = "1 of 2 listed upstream test files exist on this base (missing: tests/test_gone.py)"
    assert suite["status"] == "passed" and suite["note"].startswith(found)
    assert suite["missing_files"] == ["tests/test_gone.py"]
    assert "1 of 2 listed upstream test files exist on this base" in result.out


HONEST_TEST = """\
import pytest

from pkg.calc import add, mul


@pytest.fixture
def dataset():
    raise ValueError("the dataset is not on this machine")


@pytest.fixture
def six():
    if mul(2, 3) != 6:
        raise AssertionError("mul changed")
    return 6


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6


def test_needs_data(dataset):
    pass


@pytest.mark.skip(reason="slow: run nightly")
def test_slow():
    pass


def test_uses_six(six):
    assert six == 6
"""


def test_errors_and_skips_are_named_never_folded_into_no_regressions(rebaser, tmp_path, upstream):
    """Issue 17: upstream tests that error or are skipped are counted and named with a
    reason in the table, the JSON and the Markdown; a regression is a test that passed on
    the base and fails or errors on the branch."""
    upstream.commit({"tests/test_up.py": HONEST_TEST}, "upstream tests", tag="v1.1")
    series = double_mul_series(tmp_path, upstream, "v1.1", "@upstream-test tests/test_up.py\n")
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", "v1.1", "--json", report
    )
    assert result.code == ExitCode.TESTS_FAILED, result.out + result.err
    suite = {s["name"]: s for s in json.loads(report.read_text())["suites"]}["upstream"]
    tests = {note["test"]: (note["outcome"], note["verdict"]) for note in suite["tests"]}
    assert tests == {
        "tests.test_up::test_mul": ("failed", "regression"),
        "tests.test_up::test_uses_six": ("error", "regression"),
        "tests.test_up::test_needs_data": ("error", "also error on the base"),
        "tests.test_up::test_slow": ("skipped", "skipped"),
    }
    reasons = {note["test"]: note["reason"] for note in suite["tests"]}
    assert "the dataset is not on this machine" in reasons["tests.test_up::test_needs_data"]
    assert reasons["tests.test_up::test_slow"] == "slow: run nightly"
    assert suite["note"].endswith("2 regressions; 2 other tests did not pass (listed with reasons)")
    assert (suite["errors"], suite["skipped"]) == (2, 1)
    for shown in ("test_needs_data", "the dataset is not on this machine", "slow: run nightly"):
        assert shown in result.out
    verify = ("verify", "--series", series, "--repo", upstream.path, "--bases", "v1.1")
    matrix = rebaser(*verify, "--markdown", markdown)
    assert matrix.code == ExitCode.TESTS_FAILED, matrix.out + matrix.err
    text = markdown.read_text()
    assert "upstream: 2 regression, 1 also error on the base, 1 skipped" in text
    assert "- error `tests.test_up::test_needs_data`: failed on setup with" in text
    assert "(1/1/2/1)" in matrix.out.replace(" ", "")  # pass/fail/error/skip
