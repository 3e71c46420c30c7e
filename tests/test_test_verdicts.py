"""What a failing, erroring or skipped test of the overlay's suite is taken for, on a machine
without a GPU: a test that needs one is listed as not run, never as a failure; every other
failure fails the suite. Each case from a hostile review of the verdicts (docs/safety.md,
ninth pass), through a real `rebaser apply` of a two-patch series whose overlay holds the
test file."""

from __future__ import annotations

import json
import os
from typing import Optional

import pytest
from synthetic import CALC, Change, build_series, edit, two_patch_series

from rebaser.errors import ExitCode
from rebaser.steps.testrun import compare_with_base, run_pytest

# Plain CPU bugs that only mention a GPU word: each used to read "needs a GPU: not run"
# and the apply exited 0.
PLAIN_FAILURES = {
    "a backend compared": "def pick():\n    return 'nccl'\n\n\ndef test_x():\n    assert pick() == 'gloo'\n",
    "a keyword": "def make(hidden):\n    pass\n\n\ndef test_x():\n    make(use_cudnn=False)\n",
    "a module": "def test_x():\n    import nvidia_resiliency_ext\n",
    "a path": "def test_x():\n    open('/home/nvidia/no/such/config.yaml')\n",
    "the device idiom": (
        "import os\n\n\ndef build(device):\n    raise ValueError('bad hidden size 3')\n\n\n"
        "def test_x():\n    build(device='cuda' if os.environ.get('NO') else 'cpu')\n"
    ),
    "a handled CUDA error": (
        "def test_x():\n    try:\n        raise RuntimeError('CUDA error: no CUDA-capable device')\n"
        "    except RuntimeError:\n        {}['fallback']\n"
    ),
    "a body failure, then a teardown naming the driver": (
        "import pytest\n\n\n@pytest.fixture\ndef device():\n    yield 'cpu'\n"
        "    raise RuntimeError('Found no NVIDIA driver on your system')\n\n\n"
        "def test_x(device):\n    assert 2 + 2 == 5\n"
    ),
}
# What a test that needs a GPU says: not run, the apply passes.
GPU_NEEDS = {
    "an error": "def test_x():\n    raise RuntimeError('No CUDA GPUs are available')\n",
    "a skip": (
        "import pytest\n\npytestmark = pytest.mark.skip(reason='requires CUDA')\n\n\n"
        "def test_x():\n    pass\n"
    ),
    "the line that raised": (
        "import types\n\ntorch = types.SimpleNamespace(cuda=types.SimpleNamespace("
        "device_count=lambda: 0))\n\n\ndef test_x():\n"
        "    size = 8 // torch.cuda.device_count()\n"
    ),
}


def overlay_files(rebaser, tmp_path, upstream, files: dict[str, str]):
    """A series whose overlay holds `files`, applied with its CPU suite: the run, and the
    overlay suite of its report."""
    series = two_patch_series(tmp_path, upstream, overlay=files)
    report = tmp_path / "r.json"
    arguments = ["--series", series, "--repo", upstream.path, "--base", "v1", "--json", report]
    result = rebaser("apply", *arguments)
    (suite,) = json.loads(report.read_text())["suites"]
    return result, suite


def overlay_suite(rebaser, tmp_path, upstream, text: str):
    return overlay_files(rebaser, tmp_path, upstream, {"tests/test_case.py": text})


@pytest.mark.parametrize("case", sorted(PLAIN_FAILURES))
def test_a_plain_failure_naming_a_gpu_word_fails_the_suite(rebaser, tmp_path, upstream, case):
    result, suite = overlay_suite(rebaser, tmp_path, upstream, PLAIN_FAILURES[case])
    (note,) = suite["tests"]
    assert note["verdict"] != "needs a GPU: not run", note
    assert suite["status"] == "failed" and suite["failed"] + suite["errors"] == 1, suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_the_tests_own_failure_decides_over_its_teardowns(rebaser, tmp_path, upstream):
    """pytest writes a test that fails and then errors in teardown twice: the teardown's
    entry replaced the failure's reason, and the test counted twice."""
    text = PLAIN_FAILURES["a body failure, then a teardown naming the driver"]
    _, suite = overlay_suite(rebaser, tmp_path, upstream, text)
    (note,) = suite["tests"]
    assert note["outcome"] == "failed" and "assert" in note["reason"], note


@pytest.mark.parametrize("case", sorted(GPU_NEEDS))
def test_a_test_that_needs_a_gpu_is_not_run(rebaser, tmp_path, upstream, case):
    result, suite = overlay_suite(rebaser, tmp_path, upstream, GPU_NEEDS[case])
    (note,) = suite["tests"]
    assert note["verdict"] == "needs a GPU: not run", note
    assert suite["status"] == "not run" and result.code == ExitCode.OK, (suite, result.out)


def test_a_test_that_raises_keyboard_interrupt_is_no_phantom_pass(rebaser, tmp_path, upstream):
    """A test raising KeyboardInterrupt ends pytest (exit 2) and leaves a junit entry with
    no name: it counted as a passed test `::`."""
    text = "def test_a():\n    pass\n\n\ndef test_b():\n    raise KeyboardInterrupt\n"
    result, suite = overlay_suite(rebaser, tmp_path, upstream, text)
    assert suite["status"] == "failed" and suite["passed"] == 1, suite
    assert "interrupted" in suite["note"] and "test_case.py:6" in "".join(suite["failures"])
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_a_crash_only_with_the_files_together_fails_the_suite(rebaser, tmp_path, upstream):
    """pytest died running the files together and each passed alone: the suite read passed,
    the crash only in its note."""
    files = {
        "tests/test_first.py": "import builtins\n\n\ndef test_a():\n    builtins.forkkit_seen = 1\n",
        "tests/test_second.py": (
            "import builtins\nimport os\n\n\ndef test_b():\n"
            "    if getattr(builtins, 'forkkit_seen', 0):\n        os._exit(3)\n"
        ),
    }
    result, suite = overlay_files(rebaser, tmp_path, upstream, files)
    assert suite["status"] == "failed" and suite["passed"] == 2, suite
    (note,) = suite["tests"]
    assert note["outcome"] == "error" and "each file runs through alone" in note["reason"], note
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_the_crash_salvage_blames_no_file_without_tests(rebaser, tmp_path, upstream):
    """Each file run alone after a crash: a file without tests gave no results, as the file
    pytest dies in does, and was named as where it died."""
    files = {
        "tests/test_dies.py": "import os\n\n\ndef test_a():\n    os._exit(3)\n",
        "tests/test_helpers.py": "def helper():\n    return 1\n",
        "tests/test_fine.py": "def test_b():\n    pass\n",
    }
    result, suite = overlay_files(rebaser, tmp_path, upstream, files)
    assert [note["test"] for note in suite["tests"]] == ["tests.test_dies::test_a"], suite["tests"]
    assert suite["status"] == "failed" and suite["passed"] == 1, suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


COMPARED = """\
import pytest

from pkg.calc import mul


def test_stays():
    pass


@pytest.mark.skipif(mul(2, 3) != 6, reason="mul is not the product here")
def test_mul():
    pass
"""


def upstream_suite(
    rebaser,
    tmp_path,
    upstream,
    text: str,
    added: str = "",
    also: Optional[dict[str, str]] = None,
    listing: str = "tests/test_up.py",
):
    """`text` as upstream's tests/test_up.py, listed (as `listing`) by a series that doubles
    mul (and adds `added` as tests/test_new.py, listed too, and the files `also`): the
    upstream suite of the apply's report, and the run."""
    upstream.commit({"tests/test_up.py": text}, "upstream tests", tag="v1.1")
    files = {"pkg/calc.py": edit(CALC, "a * b", "2 * a * b"), **(also or {})}
    listed = f"@upstream-test {listing}\n"
    if added:
        files["tests/test_new.py"] = added
        listed += "@upstream-test tests/test_new.py\n"
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1.1",
        [Change("demo: double mul", files)],
        extra_directives=listed,
    )
    report = tmp_path / "r.json"
    arguments = ["--series", series, "--repo", upstream.path, "--base", "v1.1", "--json", report]
    result = rebaser("apply", *arguments)
    suites = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}
    return result, suites["upstream"]


def test_a_test_that_passed_on_the_base_and_skips_after_the_series_regressed(
    rebaser, tmp_path, upstream
):
    """A `skipif` the series trips hid the break: passed on the base, skipped after."""
    result, suite = upstream_suite(rebaser, tmp_path, upstream, COMPARED)
    assert suite["failures"] == ["regression: tests.test_up::test_mul (skipped)"], suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


INTERRUPTED = """\
from pkg.calc import mul


def test_a():
    pass


def test_b():
    if {when}:
        raise KeyboardInterrupt
"""


def test_an_interrupted_run_is_an_error_of_its_test_on_each_side(rebaser, tmp_path, upstream):
    """Base and patched runs both ended by a KeyboardInterrupt (exit 2): each counted a
    phantom passed test `::` and the comparison read passed, naming nothing. The test it
    broke in is now an error on both sides, listed with the interruption: no regression of
    the series."""
    text = INTERRUPTED.format(when="True")
    result, suite = upstream_suite(rebaser, tmp_path, upstream, text)
    notes = {note["test"]: note for note in suite["tests"]}
    assert set(notes) == {"tests.test_up::test_b"} and suite["passed"] == 1, suite
    assert "interrupted" in notes["tests.test_up::test_b"]["reason"], notes
    assert notes["tests.test_up::test_b"]["verdict"] == "also error on the base", notes
    assert suite["status"] == "passed" and result.code == ExitCode.OK, (suite, result.out)


def test_a_run_interrupted_after_the_series_regressed(rebaser, tmp_path, upstream):
    text = INTERRUPTED.format(when="mul(2, 3) != 6")
    result, suite = upstream_suite(rebaser, tmp_path, upstream, text)
    assert suite["failures"] == ["regression: tests.test_up::test_b (error)"], suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


# The tenth pass (docs/safety.md): runs that end early or break on the base.
STOPPED_EARLY = {
    "pytest.exit in a test": {
        "tests/test_case.py": (
            "import pytest\n\n\ndef test_a():\n    pass\n\n\n"
            "def test_b():\n    pytest.exit('bye', returncode=0)\n\n\n"
            "def test_c():\n    assert False\n"
        )
    },
    "a conftest that sets the exit status": {
        "tests/conftest.py": (
            "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 1\n"
        ),
        "tests/test_case.py": "def test_a():\n    pass\n",
    },
}


@pytest.mark.parametrize("case", sorted(STOPPED_EARLY))
def test_a_run_that_ends_early_or_says_it_failed_fails(rebaser, tmp_path, upstream, case):
    """pytest.exit(returncode=0) in a test left its later tests out, uncounted; a conftest
    that sets the exit status made pytest exit 1 with no failing test. Both read passed."""
    result, suite = overlay_files(rebaser, tmp_path, upstream, STOPPED_EARLY[case])
    assert suite["status"] == "failed" and result.code == ExitCode.TESTS_FAILED, suite
    said = {"pytest.exit in a test": "stopped after 1 of 3 tests", "a conftest": "no test failed"}
    assert any(words in suite["note"] for words in said.values()), suite["note"]
    if case == "pytest.exit in a test":
        (note,) = suite["tests"]
        assert note["test"] == "tests.test_case::test_b", note


def test_a_run_that_breaks_on_the_base_keeps_the_tests_that_ran(
    rebaser, tmp_path, upstream, monkeypatch
):
    """The base's run hung in test_b after test_a passed: the whole file was one error
    there, so test_a failing after the series read "not on the base", no regression."""
    monkeypatch.setenv("DSA_FORKKIT_TEST_TIMEOUT", "20")
    text = (
        "import time\n\nfrom pkg.calc import mul\n\n\ndef test_a():\n"
        "    assert mul(2, 3) == 6\n\n\ndef test_b():\n    if mul(2, 3) == 6:\n"
        "        time.sleep(600)\n"
    )
    result, suite = upstream_suite(rebaser, tmp_path, upstream, text)
    assert suite["failures"] == ["regression: tests.test_up::test_a (failed)"], suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_an_internal_error_is_no_test_and_counts_once(rebaser, tmp_path, upstream):
    """A module calling sys.exit at import is pytest's internal error: junit's entry
    `pytest::internal` counted as a test, and a second such file counted it twice."""
    exits = "import sys\n\nsys.exit(0)\n\n\ndef test_x():\n    pass\n"
    files = {"tests/test_one.py": exits, "tests/test_two.py": exits}
    files["tests/test_ok.py"] = "def test_c():\n    pass\n"
    result, suite = overlay_files(rebaser, tmp_path, upstream, files)
    names = sorted(note["test"] for note in suite["tests"])
    assert names == ["::tests.test_one", "::tests.test_two"], names
    assert suite["errors"] == 2 and suite["passed"] == 1, suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_a_listed_test_file_the_series_adds_has_no_base_run(rebaser, tmp_path, upstream):
    """The base ran every listed file the patched tree has: pytest exited 4 on the one the
    series adds, an invented base error."""
    added = "def test_new():\n    assert False, 'broken by the fork'\n"
    result, suite = upstream_suite(
        rebaser, tmp_path, upstream, "def test_old():\n    pass\n", added
    )
    (note,) = suite["tests"]
    assert note["test"] == "tests.test_new::test_new", note
    assert note["verdict"] == "not on the base", note
    assert "added by the series (tests/test_new.py)" in suite["note"], suite["note"]
    assert "base: 1 passed, 0 failed, 0 errors" in suite["note"], suite["note"]


def test_a_test_skipped_on_the_base_that_fails_now_is_not_also_skipped(rebaser, tmp_path, upstream):
    text = (
        "import pytest\n\nfrom pkg.calc import mul\n\n\ndef test_a():\n"
        "    if mul(2, 3) == 6:\n        pytest.skip('not here')\n    assert False, 'broken'\n"
    )
    _, suite = upstream_suite(rebaser, tmp_path, upstream, text)
    (note,) = suite["tests"]
    assert note["outcome"] == "failed" and note["verdict"] == "skipped on the base", note


# The eleventh pass (docs/safety.md): a review of the tenth's change.
def test_a_listed_folder_runs_on_the_base_too(rebaser, tmp_path, upstream):
    """`@upstream-test tests` (a folder): the base ran only listed *files*, so the folder
    read "added by the series", nothing compared, and its regression hid."""
    text = "from pkg.calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
    result, suite = upstream_suite(rebaser, tmp_path, upstream, text, listing="tests")
    assert suite["failures"] == ["regression: tests.test_up::test_mul (failed)"], suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_a_run_the_series_breaks_after_its_last_test_regressed(rebaser, tmp_path, upstream):
    """A conftest the series adds aborts the interpreter at exit, after every test passed
    and junit was written: the file's error read "not on the base", and the suite passed."""
    abort = {"tests/conftest.py": "import atexit\nimport os\n\natexit.register(os.abort)\n"}
    text = "def test_a():\n    pass\n"
    result, suite = upstream_suite(rebaser, tmp_path, upstream, text, also=abort)
    assert suite["failures"] == ["regression: ::tests.test_up (error)"], suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_a_test_run_twice_is_no_early_stop(rebaser, tmp_path, upstream):
    """A conftest that runs an item twice (so two runs under one junit name): the log's
    tests were counted by name, fewer than collected, and the run read "stopped early"."""
    files = {
        "tests/conftest.py": "def pytest_collection_modifyitems(items):\n    items.append(items[0])\n",
        "tests/test_case.py": "def test_a():\n    pass\n",
    }
    result, suite = overlay_files(rebaser, tmp_path, upstream, files)
    assert suite["status"] == "passed" and result.code == ExitCode.OK, suite


def tree_of(root, files: dict[str, str]):
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_tree_reached_through_a_symlink_names_each_file_apart(tmp_path):
    """With the tree's path through a symbolic link (macOS's TMPDIR is one), pytest's rootdir
    and its working folder differed: tests of two files came out under one name."""
    files = {f"tests/test_{n}.py": "def test_1():\n    pass\n" for n in "ab"}
    tree_of(tmp_path / "real", files)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = run_pytest(tmp_path / "link", sorted(files), "x")
    assert result.status == "passed" and result.passed == 2, result
    assert sorted(result.outcomes) == ["tests.test_a::test_1", "tests.test_b::test_1"]


def test_a_crashed_test_is_named_as_junit_names_it(tmp_path):
    """With pytest's ids unescaped (an ini option), a U+2028 in one split the log's line and
    a DEL in another kept the raw character where junit writes #x7F: the crash read as a
    test "not on the base", beside two tests "missing"."""
    ini = "[pytest]\ndisable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n"
    test = (
        "import os\n\nimport pytest\n\n\n@pytest.mark.parametrize('x', ['c\u2028d', 'e\x7ff'])\n"
        "def test_p(x):\n    if x.startswith('e') and os.environ.get('BREAK'):\n        os.abort()\n"
    )
    files = {"pytest.ini": ini, "tests/test_p.py": test}
    base = run_pytest(tree_of(tmp_path / "base", files), ["tests/test_p.py"], "base")
    os.environ["BREAK"] = "1"
    try:
        patched = run_pytest(tree_of(tmp_path / "patched", files), ["tests/test_p.py"], "patched")
    finally:
        del os.environ["BREAK"]
    suite = compare_with_base(patched, base)
    assert suite.failures == ["regression: tests.test_p::test_p[e#x7Ff] (error)"], suite.failures


def test_a_collection_failure_says_why(rebaser, tmp_path, upstream):
    """A review: two test files of one basename in folders without __init__.py fail to
    collect with pytest's "import file mismatch", which has no `E` line: the reason read
    only "collection failure"."""
    files = {f"tests/{folder}/test_x.py": "def test_a():\n    pass\n" for folder in "ab"}
    result, suite = overlay_files(rebaser, tmp_path, upstream, files)
    reasons = [note["reason"] for note in suite["tests"]]
    assert any("import file mismatch" in reason for reason in reasons), reasons
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_an_expected_failure_says_it_was_expected(tmp_path):
    """A review: junit writes an xfail as a skip whose message is the xfail's reason, so the
    report read "skipped: known bug 12", as if the test had not run."""
    test = (
        "import pytest\n\n\n@pytest.mark.xfail(reason='known bug 12')\ndef test_marked():\n"
        "    assert False\n\n\ndef test_called():\n    pytest.xfail('flaky upstream')\n\n\n"
        "def test_skipped():\n    pytest.skip('not here')\n\n\ndef test_passes():\n    pass\n"
    )
    tree = tree_of(tmp_path / "tree", {"tests/test_x.py": test})
    result = run_pytest(tree, ["tests/test_x.py"], "x")
    reasons = {test.rpartition("::")[2]: note.reason for test, note in result.read.items()}
    assert reasons == {
        "test_marked": "expected to fail: known bug 12",
        "test_called": "expected to fail: flaky upstream",
        "test_skipped": "not here",
    }, reasons
    assert result.status == "passed" and (result.passed, result.skipped) == (1, 3), result
