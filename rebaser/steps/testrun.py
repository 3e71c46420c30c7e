"""Run pytest inside the patched tree, in a subprocess, and read its junit XML.

The overlay's tests must pass. Upstream's own tests (those the series lists and the base
has) run on both the base and the patched tree: only tests that pass on the base and not
after the series count as regressions, since many upstream tests need CUDA.

Before anything is applied, `check_interpreter` makes sure the tests could run at all:
pytest and the modules the series declares with `@test-requires` import in the test
interpreter (and, with --test gpu and torch required, torch sees a GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from rebaser.config import TEST_MODES
from rebaser.repo import tempdirs, workspace
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo.git import Git
from rebaser.series.patches import Series

from rebaser.repo.processes import run_own_group

# The plugin goes to the test interpreter as a copy of its (self-contained) file, in a folder
# of its own at the end of PYTHONPATH: that interpreter may not be able to import rebaser
# (`python -m rebaser` from a source checkout, or another --python).
PLUGIN = "forkkit_pytest_plugin"
_PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "testing" / "pytest_plugin.py"
GPU_SUFFIX = "_gpu.py"  # overlay test files that need CUDA (run by --test gpu)
_FAILURE_LINES = 6


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
    outcomes: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def counts(self) -> str:
        return (
            f"{self.passed} passed, {self.failed} failed, {self.errors} errors, "
            f"{self.skipped} skipped"
        )


def check_interpreter(python: str, mode: str, requires: Sequence[str]) -> None:
    """Fail before applying when the tests could not run at all."""
    if mode not in TEST_MODES:
        raise RebaserError(f"--test must be one of {', '.join(TEST_MODES)}; got {mode!r}")
    if mode == "none":
        return
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
) -> list[SuiteResult]:
    """The overlay's tests (cpu, and gpu with --test gpu) and the listed upstream tests,
    judged against the same tests on a throwaway checkout of the base."""
    overlay_tests = [p for p in series.overlay_tests() if p.endswith(".py")]
    cpu = [p for p in overlay_tests if not p.endswith(GPU_SUFFIX)]
    progress(f"running {len(cpu)} overlay test files (cpu)")
    suites = [run_pytest(tree, cpu, "overlay (cpu)", python=python)]
    if mode == "gpu":
        gpu = [p for p in overlay_tests if p.endswith(GPU_SUFFIX)]
        progress(f"running {len(gpu)} overlay test files (gpu)")
        suites.append(run_pytest(tree, gpu, "overlay (gpu)", python=python))
    if series.upstream_tests:
        suites.append(
            _upstream_suite(series.upstream_tests, tree, repo, base_sha, python, progress)
        )
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
    patched = run_pytest(tree, present, "upstream", python=python)
    progress("running the same upstream tests on the base, to tell regressions apart")
    with workspace.exported(repo, base_sha, "base") as base_tree:
        base = run_pytest(base_tree, present, "upstream (base)", python=python)
    suite = compare_with_base(patched, base)
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
    timeout: float = 3600,
    extra_args: Sequence[str] = (),
) -> SuiteResult:
    """Run pytest on `paths` (relative to `tree`) with the tree first on PYTHONPATH."""
    with tempdirs.owned("forkkit-pytest-") as tmp:  # a kill leaves it: the next run sweeps
        plugin_dir = Path(tmp) / "plugin"
        plugin_dir.mkdir()
        shutil.copyfile(_PLUGIN_SOURCE, plugin_dir / f"{PLUGIN}.py")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(tree), env.get("PYTHONPATH"), str(plugin_dir)])
        )
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep the worktree clean
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
            # Upstream's addopts may say -x; every test must run for counts and regressions.
            "--maxfail=0",
            "--rootdir",
            str(tree),
            *extra_args,
            *paths,
        ]
        started = time.monotonic()
        try:
            completed = run_own_group(command, cwd=tree, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return SuiteResult(name, "failed", note=f"timed out after {timeout:.0f} s")
        seconds = time.monotonic() - started
        if not junit.exists():
            tail = (completed.stdout + completed.stderr).strip().splitlines()[-_FAILURE_LINES:]
            return SuiteResult(
                name,
                "failed",
                seconds=seconds,
                note=f"pytest exited {completed.returncode} before writing results",
                failures=tail,
            )
        result = _read_junit(junit, name, seconds)
    if completed.returncode == 5 or result.passed + result.failed + result.errors == 0:
        result.status, result.note = "failed", "no tests ran"
    elif completed.returncode not in (0, 1):
        result.status, result.note = "failed", f"pytest exited {completed.returncode}"
    return result


def compare_with_base(patched: SuiteResult, base: SuiteResult) -> SuiteResult:
    """Judge upstream tests by regressions: passed on the base, not passed after the series.

    Without results from both runs nothing can be told apart, and that is a failure.
    """
    if not patched.outcomes or not base.outcomes:
        broken = patched if not patched.outcomes else base
        patched.status = "failed"
        patched.note = (
            f"{'patched' if broken is patched else 'base'} run gave no results: {broken.note}"
        )
        patched.failures = patched.failures or base.failures
        return patched
    regressions = [
        test
        for test, outcome in base.outcomes.items()
        if outcome == "passed" and patched.outcomes.get(test, "missing") != "passed"
    ]
    patched.failures = [
        f"regression: {test} ({patched.outcomes.get(test, 'missing')})" for test in regressions
    ]
    patched.status = "failed" if regressions else "passed"
    patched.note = f"base: {base.counts}; {len(regressions)} regressions"
    return patched


def _read_junit(junit: Path, name: str, seconds: float) -> SuiteResult:
    result = SuiteResult(name, "passed", seconds=seconds)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = _outcome(case)
        result.outcomes[test] = outcome
        if outcome == "passed":
            result.passed += 1
        elif outcome == "skipped":
            result.skipped += 1
        else:
            if outcome == "failed":
                result.failed += 1
            else:
                result.errors += 1
            message = _message(case)
            result.failures.append(f"{outcome}: {test}" + (f": {message}" if message else ""))
    if result.failed or result.errors:
        result.status = "failed"
    return result


def _outcome(case: ElementTree.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
    return "passed"


def _message(case: ElementTree.Element) -> Optional[str]:
    for tag in ("failure", "error"):
        element = case.find(tag)
        if element is not None:
            text = element.get("message") or (element.text or "")
            return " ".join(text.split())[:300]
    return None
