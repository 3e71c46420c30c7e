"""Run pytest inside the patched tree, in a subprocess, and read its junit XML.

Three suites, each judged its own way:

- the overlay's tests must pass;
- upstream's own tests that the series lists (`@upstream-test`) run on the base and on the
  patched tree: only a test that passes on the base and fails, errors or is gone after the
  series is a regression, since many upstream tests need CUDA;
- the fork's own tests (`@fork-test`, recorded by `rebaser import`) and upstream's tests of
  the files the patches touch (steps/testselect.py) run on the patched tree and on the
  fork's own branch: a test that passes there and not here is a regression of the carry,
  named with the patch from which it fails (steps/testblame.py).

Every test that does not pass is named with a one-line reason, errors and skips too, so
"0 regressions" never hides them. On CPU, a test whose skip or error names CUDA or a GPU
needs one: it is listed as not run, never counted as passed or as a regression.

Before anything is applied, `check_interpreter` makes sure the tests could run at all:
pytest and the modules the series declares with `@test-requires` import in the test
interpreter (and, with --test gpu and torch required, torch sees a GPU).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.config import TEST_MODES, test_timeout
from rebaser.repo import tempdirs, workspace
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo.git import Git
from rebaser.repo.processes import run_own_group
from rebaser.series.patches import Series
from rebaser.steps import pytestlog
from rebaser.wording import counted

# The plugin goes to the test interpreter as a copy of its (self-contained) file, in a folder
# of its own at the end of PYTHONPATH: that interpreter may not be able to import rebaser
# (`python -m rebaser` from a source checkout, or another --python).
PLUGIN = "forkkit_pytest_plugin"
_PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "testing" / "pytest_plugin.py"
GPU_SUFFIX = "_gpu.py"  # overlay test files that need CUDA (run by --test gpu)
_FAILURE_LINES = 6
_REASON_CHARACTERS = 200
# What a test that cannot run without a GPU says on a machine without one, in its skip
# reason, the exception it ends with, or the line that raised it (Megatron's set-up helper
# divides by torch.cuda.device_count()): a need, not a word. "nccl" compared in a string,
# `use_cudnn`, a path under /home/nvidia or `device='cuda' if ... else 'cpu'` is no need.
_GPU_RE = re.compile(
    r"\bno (?:cuda|nvidia|gpus?)\b|\bcuda-capable\b|\bnot compiled with cuda\b"
    r"|\b(?:cuda|gpus?|nvidia driver)\b[^\n]{0,30}\bnot (?:available|enabled|found)"
    r"|\b(?:requires?|needs?) (?:a |an )?(?:cuda|gpus?)\b|torch\.cuda\.\w+\("
    r"|\bnccl\b[^\n]{0,40}\b(?:not available|built in)",
    re.IGNORECASE,
)
NEEDS_GPU = "needs a GPU: not run"
REGRESSION = "regression"
NOT_PASSED = ("failed", "error")
# What a test that passed before has regressed to: a skip too (a `skipif` the series trips).
REGRESSED = (*NOT_PASSED, "skipped", "missing")
# junit entries that are no test: what an interrupted run leaves, pytest's internal error.
_NO_TEST = {(None, None), ("", ""), ("pytest", "internal")}
TOGETHER = "(the files together)"  # the error of a run that breaks only with all its files


@dataclass
class TestNote:
    """A test that did not pass, and what that means for the suite."""

    __test__ = False  # not a pytest test class, whatever its name

    test: str
    outcome: str  # failed | error | skipped | missing (gone after the series) | not run
    reason: str  # one line: the error or skip message, or why it was not run
    verdict: str = ""  # regression | needs a GPU: not run | skipped | also ... | flaky ...
    blame: Optional[str] = None  # the patch from which a regression fails
    gpu_only: bool = False
    upstream: list[str] = field(default_factory=list)  # commits touching the blamed patch's files


@dataclass
class SuiteResult:
    name: str
    status: str  # passed | failed | not run
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    failures: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)  # listed, but not on this base
    tests: list[TestNote] = field(default_factory=list)  # each test that did not pass
    outcomes: dict[str, str] = field(default_factory=dict, repr=False)
    # test -> its note as read from the junit XML (the verdict is the suite's to give)
    read: dict[str, TestNote] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # A report read back from JSON (`verify --merge`) holds its notes as dicts.
        self.tests = [TestNote(**n) if isinstance(n, dict) else n for n in self.tests]

    @property
    def counts(self) -> str:
        gpu = sum(note.gpu_only and note.outcome != "not run" for note in self.tests)
        return (
            f"{self.passed} passed, {self.failed} failed, {self.errors} errors, "
            f"{self.skipped} skipped" + (f" ({gpu} need a GPU: not run)" if gpu else "")
        )

    @property
    def regressions(self) -> list[TestNote]:
        return [note for note in self.tests if note.verdict == REGRESSION]


def check_interpreter(python: str, mode: str, requires: Sequence[str]) -> None:
    """Fail before applying when the tests could not run at all."""
    if mode not in TEST_MODES:
        raise RebaserError(f"--test must be one of {', '.join(TEST_MODES)}; got {mode!r}")
    if mode == "none":
        return
    test_timeout()  # a limit that is no number: said now, not after the apply
    modules = list(dict.fromkeys(["pytest", *requires]))
    probe = f"import sys; import {', '.join(modules)}"
    needs_gpu = mode == "gpu" and "torch" in modules
    if needs_gpu:
        probe += "; sys.exit(0 if torch.cuda.is_available() else 3)"
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if result.returncode not in (0, 3):
        error = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise RebaserError(
            f"the test interpreter {python} cannot import {' and '.join(modules)}: {error}",
            next_step="install them into it (here: pip install -e '.[payload]'), "
            "or pass --test none",
            code=ExitCode.ENVIRONMENT,
        )
    if needs_gpu and result.returncode == 3:
        raise RebaserError(
            f"--test gpu needs CUDA, but torch in {python} sees no GPU",
            next_step="run on a GPU machine, or use --test cpu",
        )


def run_series_tests(
    series: Series,
    tree: Path,
    repo: Git,
    base_sha: str,
    *,
    mode: str,
    python: str,
    progress: Callable[[str], None],
    fork: Optional[Callable[[], Optional[SuiteResult]]] = None,
) -> list[SuiteResult]:
    """The overlay's tests (cpu, and gpu with --test gpu), the listed upstream tests judged
    against the same tests on a throwaway checkout of the base, and `fork`: the suite of
    the fork's own tests (steps/testblame.py), when there is one."""
    overlay_tests = [p for p in series.overlay_tests() if p.endswith(".py")]
    cpu = [p for p in overlay_tests if not p.endswith(GPU_SUFFIX)]
    suites = []
    if cpu:  # no paths at all would make pytest collect the whole tree
        progress(f"running {len(cpu)} overlay test files (cpu)")
        suites.append(must_pass(run_pytest(tree, cpu, "overlay (cpu)", python=python, gpu=False)))
    gpu = [p for p in overlay_tests if p.endswith(GPU_SUFFIX)]
    if mode == "gpu" and gpu:
        progress(f"running {len(gpu)} overlay test files (gpu)")
        suites.append(must_pass(run_pytest(tree, gpu, "overlay (gpu)", python=python, gpu=True)))
    elif gpu:
        suites.append(not_run("overlay (gpu)", gpu, "a GPU test file (run with --test gpu)"))
    if series.upstream_tests:
        suites.append(
            _upstream_suite(series.upstream_tests, tree, repo, base_sha, python, progress)
        )
    if fork is not None and (suite := fork()) is not None:
        suites.append(suite)
    return suites


def _upstream_suite(
    listed: list[str],
    tree: Path,
    repo: Git,
    base_sha: str,
    python: str,
    progress: Callable[[str], None],
) -> SuiteResult:
    """The listed upstream tests that exist on this base, judged by regressions; the count
    of those that exist is always stated, so a missing file is never silently dropped."""
    present = [path for path in listed if (tree / path).exists()]
    missing = [path for path in listed if path not in present]
    found = f"{len(present)} of {len(listed)} listed upstream test files exist on this base"
    if not present:
        return SuiteResult(
            "upstream",
            "not run",
            note=f"{found} (PyPI wheels ship no tests)",
            missing_files=missing,
        )
    progress(f"running {len(present)} upstream test files on the patched tree")
    patched = run_pytest(tree, present, "upstream", python=python, gpu=False)
    progress("running the same upstream tests on the base, to tell regressions apart")
    with workspace.exported(repo, base_sha, "base") as base_tree:
        there = [path for path in present if (base_tree / path).exists()]
        base = (  # no paths at all would make pytest collect the whole tree
            run_pytest(base_tree, there, "upstream (base)", python=python, gpu=False)
            if there
            else None
        )
    suite = compare_with_base(patched, base)
    added = [path for path in present if path not in there]
    if added:  # the series adds them: their tests are new, nothing to regress from
        suite.note = f"{len(added)} added by the series ({', '.join(added)}); {suite.note}"
    if missing:
        suite.note = f"{found} (missing: {', '.join(missing)}); {suite.note}"
        suite.missing_files = missing
    return suite


def run_pytest(
    tree: Path,
    paths: Sequence[str],
    name: str,
    *,
    python: str = sys.executable,
    timeout: Optional[float] = None,
    extra_args: Sequence[str] = (),
    gpu: bool = False,
) -> SuiteResult:
    """Run pytest on `paths` (relative to `tree`) with the tree first on PYTHONPATH. `gpu`:
    whether a GPU is there (without one, a test that asks for CUDA is not run, not failed);
    `timeout`: seconds (None: $DSA_FORKKIT_TEST_TIMEOUT's). A run that breaks (pytest
    dies, hangs, is interrupted or stops early) keeps the results of the tests that ended
    and is an error of the test it broke in (else of its file): with several files, each
    runs alone to give the others' results."""
    timeout = test_timeout() if timeout is None else timeout
    tree = tree.resolve()  # pytest's rootdir as its working folder says it (no symlink)
    options = dict(python=python, timeout=timeout, extra_args=extra_args, gpu=gpu)
    result, broke = _run_once(tree, paths, name, **options)
    if broke is None or not paths:
        return result
    if len(paths) == 1:
        return result if broke else _broken_in(result, paths[0])
    return _file_by_file(tree, paths, name, result.note, broke, options)


def _run_once(
    tree: Path,
    paths: Sequence[str],
    name: str,
    *,
    python: str,
    timeout: float,
    extra_args: Sequence[str],
    gpu: bool,
) -> tuple[SuiteResult, Optional[str]]:
    """One pytest run of `paths`, as `run_pytest`'s, and where it broke: None where it went
    through; the test it broke in (an error of it added), or "" where no test was running.
    """
    with tempdirs.owned("forkkit-pytest-") as tmp:  # a kill leaves it: the next run sweeps
        plugin_dir = Path(tmp) / "plugin"
        plugin_dir.mkdir()
        shutil.copyfile(_PLUGIN_SOURCE, plugin_dir / f"{PLUGIN}.py")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(tree), env.get("PYTHONPATH"), str(plugin_dir)])
        )
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep the worktree clean
        env["PWD"] = str(tree)  # where pytest runs (rebaser's PWD names the user's checkout)
        env[pytestlog.ENV] = str(Path(tmp) / "log")
        junit = Path(tmp) / "junit.xml"
        command = [
            python,
            "-m",
            "pytest",
            "-p",
            PLUGIN,
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            "-q",
            "-rfE",
            # Upstream's addopts may say -x; every test must run for counts and regressions,
            # and a test file that does not import is one error, not the end of the run.
            "--maxfail=0",
            "--continue-on-collection-errors",
            "--rootdir",
            str(tree),
            *extra_args,
            *paths,
        ]
        started = time.monotonic()
        try:
            completed = run_own_group(
                command, cwd=tree, env=env, timeout=timeout, output=Path(tmp) / "output"
            )
        except subprocess.TimeoutExpired:
            completed = None
        seconds = time.monotonic() - started
        log = pytestlog.RunLog.read(Path(tmp) / "log")
        if completed is None:
            note = f"timed out after {timeout:g} s"
            return _broken(_logged(name, seconds, log), note, log, [])
        tail = completed.stdout.strip().splitlines()[-_FAILURE_LINES:]  # stderr in it
        if not junit.exists():
            last = f": {tail[-1].strip()}" if tail else ""
            note = f"pytest exited {completed.returncode} before writing results{last}"
            return _broken(_logged(name, seconds, log), note, log, tail)
        result = _read_junit(junit, name, seconds, gpu)
    ran = result.passed + result.failed + result.errors
    code = completed.returncode
    if code not in (0, 1, 5):  # 2: a test raised KeyboardInterrupt; 3: an internal error
        return _broken(result, f"pytest exited {code}{' (interrupted)' * (code == 2)}", log, tail)
    if log.stopped_early:  # pytest.exit in a test, or a plugin's stop
        stopped = f"pytest stopped after {log.ended} of {log.collected} tests"
        return _broken(result, stopped, log, tail)
    if code == 1 and not result.failed and not result.errors:  # set by a conftest or plugin
        return _broken(result, "pytest exited 1, and no test failed", log, tail)
    if not ran and result.read and all(note.gpu_only for note in result.read.values()):
        result.status = "not run"  # each test skipped for want of a GPU, and listed so
    elif code == 5 or not ran:
        result.status, result.note = "failed", "no tests ran"
    return result, None


def _logged(name: str, seconds: float, log: pytestlog.RunLog) -> SuiteResult:
    """The results of a run that wrote no junit XML: the tests its log saw end."""
    result = SuiteResult(name, "failed", seconds=seconds)
    for test, outcome in log.done.items():
        result.outcomes[test] = outcome
        if outcome != "passed":
            reason = "no report: pytest broke off after this test"
            result.read[test] = TestNote(test, outcome, reason)
            result.failures.append(f"{outcome}: {test}: {reason}")
    return _recount(result)


def _broken(
    result: SuiteResult, note: str, log: pytestlog.RunLog, tail: list[str]
) -> tuple[SuiteResult, str]:
    """A run that broke: failed, with `note` and pytest's last lines; an error of the test it
    broke in, where one was running (the log's)."""
    result.status, result.note = "failed", note
    result.failures += tail
    if log.running:
        how = "timed out" if note.startswith("timed out") else "broke off"
        _add_error(result, log.running, f"pytest {how} in this test ({note})")
    return result, log.running or ""


def _file_by_file(
    tree: Path, paths: Sequence[str], name: str, why: str, where: str, options: dict
) -> SuiteResult:
    """The run broke (in test `where`, if known) before the files after it ran: each file
    run alone gives the others' results, and where a file breaks alone, the test it breaks
    in is an error (else the file, as one error of that module: its tests are then gone, as
    those of a file that no longer collects). Where every file runs alone, the files break
    together."""
    result = SuiteResult(name, "failed", note=f"{why}: each file run alone")
    breaking = []
    for path in paths:
        alone, broke = _run_once(tree, [path], name, **options)
        if broke is not None:
            breaking.append(path)
            alone = alone if broke else _broken_in(alone, path)
        result = joined(result, alone)
    if not breaking:
        longer = " (or raise DSA_FORKKIT_TEST_TIMEOUT)" if why.startswith("timed out") else ""
        at = f" in {where}" if where else ""
        reason = f"{why}{at} with the files together; each file runs through alone: they interfere"
        _add_error(result, TOGETHER, reason + longer)
    return result


def _broken_in(result: SuiteResult, path: str) -> SuiteResult:
    """A run that broke in file `path` between tests: an error of that module."""
    how = "timed out" if result.note.startswith("timed out") else "died"
    _add_error(result, "::" + junit_module(path), f"pytest {how} in this file ({result.note})")
    return result


def _add_error(result: SuiteResult, test: str, reason: str) -> None:
    """`test` (a test, a file, or the files together) as one error of `result`."""
    result.outcomes[test] = "error"
    result.read[test] = TestNote(test, "error", reason)
    result.failures.append(f"error: {test}: {reason}")
    _recount(result)


def _recount(result: SuiteResult) -> SuiteResult:
    """Its counts from its outcomes (a test told twice counts once)."""
    counted = collections.Counter(result.outcomes.values())
    result.passed, result.failed = counted["passed"], counted["failed"]
    result.errors, result.skipped = counted["error"], counted["skipped"]
    return result


def junit_module(path: str) -> str:
    """The dotted name junit gives a test file's tests (their class name, or its start)."""
    return path.removesuffix(".py").replace("/", ".")


def joined(first: SuiteResult, second: SuiteResult) -> SuiteResult:
    """Two runs' results as one (of different files): `first`'s name, status and note."""
    both = replace(
        first,
        failures=first.failures + second.failures,
        outcomes={**second.outcomes, **first.outcomes},
        read={**second.read, **first.read},
    )
    return _recount(both)


def must_pass(suite: SuiteResult) -> SuiteResult:
    """A suite of tests that must pass (the overlay's): each test that did not is listed;
    only those that need a GPU, on a machine without one, do not fail it."""
    suite.tests = [_judged(note, None, None) for note in suite.read.values()]
    if suite.status == "failed" and not suite.note:  # the run itself went through
        failing = any(note.outcome in NOT_PASSED and not note.gpu_only for note in suite.tests)
        suite.status = _status(suite, failing)
    return suite


def _status(suite: SuiteResult, failing: bool) -> str:
    """Failed, or passed; "not run" when no test could run here (all needed a GPU or were
    skipped): such tests are never counted as passed. A test that ran and failed on both
    sides of a comparison (no regression) ran."""
    if failing:
        return "failed"
    ran = suite.passed or any(
        note.outcome in NOT_PASSED and not note.gpu_only for note in suite.tests
    )
    return "passed" if ran else "not run"


def not_run(name: str, paths: Sequence[str], reason: str) -> SuiteResult:
    """Test files that were not run (GPU files without --test gpu), each listed."""
    notes = [TestNote(path, "not run", reason, NEEDS_GPU, gpu_only=True) for path in paths]
    return SuiteResult(
        name, "not run", note=f"{counted(len(paths), 'file')} not run: {reason}", tests=notes
    )


def compare_with_base(
    patched: SuiteResult, base: Optional[SuiteResult], against: str = "base"
) -> SuiteResult:
    """Judge tests by regressions: passed on `against` (the base, or the fork's branch) and
    failed, errored, skipped or gone after the series. Every other test that did not pass is
    listed with its reason, never folded into "0 regressions". `base` None: none of the test
    files exist there, so nothing can have regressed.

    Without results from both runs nothing can be told apart, and that is a failure.
    """
    if base is None:
        patched.tests = [_judged(note, None, against) for note in patched.read.values()]
        patched.failures = []
        patched.status = _status(patched, False)
        patched.note = f"none of these test files exist on the {against}: nothing to compare"
        return patched
    if not patched.outcomes or not base.outcomes:
        broken = patched if not patched.outcomes else base
        patched.status = "failed"
        patched.note = (
            f"{'patched' if broken is patched else against} run gave no results: {broken.note}"
        )
        patched.failures = patched.failures or base.failures
        patched.tests = [_judged(note, None, None) for note in patched.read.values()]
        return patched
    gone = [
        TestNote(test, "missing", f"passed on the {against}; not collected after the series")
        for test, outcome in base.outcomes.items()
        if outcome == "passed" and test not in patched.outcomes
    ]
    # A run that broke (together, or in a file) did not on `against` unless it broke so
    # there too, where `against` ran that file's tests.
    ran = {f"::{test.split('::', 1)[0]}" for test in base.outcomes if not test.startswith("::")}
    ran |= {module for test in ran for module in _enclosing(test)}
    before = {TOGETHER: "passed", **dict.fromkeys(ran, "passed"), **base.outcomes}
    patched.tests = [
        _judged(note, before.get(note.test), against) for note in [*patched.read.values(), *gone]
    ]
    for note in patched.tests:  # a file that no longer collects: its tests are gone, above
        module = note.test.removeprefix("::")
        if note.test.startswith("::") and any(
            g.test.startswith((f"{module}::", f"{module}.")) for g in gone
        ):
            note.verdict = f"its tests, passed on the {against}, are not collected"
    regressions = patched.regressions
    patched.failures = [f"regression: {note.test} ({note.outcome})" for note in regressions]
    patched.status = _status(patched, bool(regressions))
    others = len(patched.tests) - len(regressions)
    listed = f"; {others} other tests did not pass (listed with reasons)" if others else ""
    patched.note = f"{against}: {base.counts}; {counted(len(regressions), 'regression')}{listed}"
    return patched


def _enclosing(module: str) -> list[str]:
    """`::a.b.C`'s enclosing names, `::a.b` and `::a` (a test's class name holds its module
    and its classes, joined by dots alike)."""
    parts = module.removeprefix("::").split(".")
    return [f"::{'.'.join(parts[:end])}" for end in range(1, len(parts))]


def _judged(note: TestNote, before: Optional[str], against: Optional[str]) -> TestNote:
    """The verdict on a test that did not pass, given its outcome `before`, on `against`
    (the base, the fork's branch; None: not compared)."""
    if before == "passed" and note.outcome in REGRESSED:
        verdict = REGRESSION  # it ran here without a GPU: whatever its error or skip names
    elif note.gpu_only:
        verdict = NEEDS_GPU
    elif note.outcome in ("skipped", "not run"):
        verdict = note.verdict or note.outcome
    elif against is None:
        verdict = ""
    elif before is None:
        verdict = f"not on the {against}"
    elif before == note.outcome:
        verdict = f"also {before} on the {against}"
    else:
        verdict = f"{before} on the {against}"
    return replace(note, verdict=verdict, gpu_only=note.gpu_only and verdict == NEEDS_GPU)


def _read_junit(junit: Path, name: str, seconds: float, gpu: bool) -> SuiteResult:
    result = SuiteResult(name, "passed", seconds=seconds)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        if (case.get("classname"), case.get("name")) in _NO_TEST:
            continue  # the run's exit status tells
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = _outcome(case)
        # pytest's second entry for a test is its teardown's error: the test's own failure
        # decides, where it failed; the counts come from the outcomes, so it counts once.
        if result.outcomes.get(test, "passed") != "passed":
            continue
        result.outcomes[test] = outcome
        if outcome == "passed":
            continue
        reason, raised = _reason(case)
        needs_gpu = not gpu and bool(_GPU_RE.search(raised))
        result.read[test] = TestNote(test, outcome, reason, gpu_only=needs_gpu)
        if outcome != "skipped":
            result.failures.append(f"{outcome}: {test}" + (f": {reason}" if reason else ""))
    _recount(result)
    if result.failed or result.errors:
        result.status = "failed"
    return result


def _outcome(case: ElementTree.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
    return "passed"


def _reason(case: ElementTree.Element) -> tuple[str, str]:
    """A not-passed test's reason in one line (its message), and where a GPU need would
    show: the message's first line, the line that raised last (`>`) and the exception the
    test ended with (the first line of the last run of `E` lines). Not the rest of a message
    (an assertion's may hold a worker's output naming CUDA), nor an exception handled
    before the one it ended with."""
    for tag in ("failure", "error", "skipped"):
        element = case.find(tag)
        if element is not None:
            text = element.text or ""
            message = element.get("message") or text
            if element.get("type") == "pytest.xfail":  # junit writes an xfail as a skip
                message = f"expected to fail: {message}"
            lines = [line for line in text.splitlines() if line.startswith((">", "E "))]
            if message == "collection failure":  # what failed: its last E line, else its first
                said = [line for line in text.splitlines() if line.strip()]
                what = lines[-1].removeprefix("E ") if lines else (said or [""])[0]
                message = f"{message}: {what.strip()}" if what.strip() else message
            first = message.strip().splitlines()[0] if message.strip() else ""
            raised = [line for line in lines if line[:1] == ">"][-1:]
            starts = [
                at
                for at, line in enumerate(lines)
                if line[:1] == "E" and (at == 0 or lines[at - 1][:1] != "E")
            ]
            ended = [lines[starts[-1]]] if starts else []
            return " ".join(message.split())[:_REASON_CHARACTERS], "\n".join(
                [first, *raised, *ended]
            )
    return "", ""
