"""The fork's own tests in the patched tree, judged against the fork's own branch, and each
test the carry broke pinned to the patch from which it fails.

A patch can apply cleanly and still be wrong on the new base (upstream already did its
job, and its extra change now hangs a checkpoint save): only a test tells. The selection
(steps/testselect.py) runs on the patched tree and on the fork's branch (the series on its
recorded base, the overlay laid on it). A test that passes there and fails, errors or is
gone here is a regression of the carry. It is run again first (a flaky test passes the
second time, and is named flaky instead of blamed); then a bisection over the branch's
commits (the overlay, then each patch) in a tree outside the worktree finds the first patch
after which it fails: "test_x fails from 0009 on". That patch is proposed for review, with
the upstream commits since the recorded base that touch its files. A patch that changes
only tests is never blamed for adding a test the new base already fails: the test's file
is laid alone on the commits before it.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Optional, Sequence

from rebaser.repo import workspace
from rebaser.repo.git import Git
from rebaser.repo.probe import ProbeTree, probe_tree
from rebaser.series.patches import Series, identity, is_test_file, number_of
from rebaser.steps.records import StepRow
from rebaser.steps.step import SeriesContext
from rebaser.steps.testrun import (
    NOT_PASSED,
    REGRESSED,
    REGRESSION,
    SuiteResult,
    TestNote,
    compare_with_base,
    joined,
    junit_module,
    must_pass,
    not_run,
    run_pytest,
)
from rebaser.steps.testselect import Selection, select
from rebaser.wording import counted

Progress = Callable[[str], None]
FORK_BRANCH = "fork's branch"
_UPSTREAM_SHOWN = 5  # upstream commits named beside a blamed patch


@dataclass
class Lineage:
    """Where the patched tree came from."""

    fork_tip: Optional[str]  # the series on its recorded base: the fork's own branch
    commits: list[tuple[str, str]]  # (step, commit) on the apply's branch: overlay, patches
    touching: Callable[[Sequence[str]], list[tuple[str, str]]]  # upstream (sha, subject)
    paths: dict[str, list[str]]  # patch -> the files it touches


def lineage(worktree: Git, base_sha: str, series: Series, carry: SeriesContext) -> Lineage:
    """The fork's branch (rebuilt by Replay, None without the recorded base) and the
    commits of the apply's branch, each named by its patch (`Forkkit-Patch`)."""
    tip = None
    if carry.replay is not None:
        chain = carry.replay.commits()
        whole = len(chain) == len(series.patches)
        tip = chain[-1] if whole else carry.replay.commit_of(series.patches[-1])
        if carry.replay.did_not_apply:  # a chain without those patches is not the fork's
            tip = None
    log = worktree.run("log", "--reverse", "--format=%H%x1f%B%x1e", f"{base_sha}..HEAD").stdout
    commits = []
    for record in filter(str.strip, log.split("\x1e")):
        sha, _, message = record.strip().partition("\x1f")
        commits.append((identity(message) or "overlay", sha))
    history = carry.history
    touching = history.touching if history else lambda paths: []
    paths = {patch.name: patch.touched_paths for patch in series.patches}
    return Lineage(tip, commits, touching, paths)


def fork_suite(
    series: Series,
    tree: Path,
    repo: Git,
    base_sha: str,
    found: Lineage,
    *,
    python: str,
    gpu: bool,
    progress: Progress,
) -> Optional[SuiteResult]:
    """The fork's tests and upstream's tests of the touched files; None when there are
    none (no fork tests, and the base has no tests for what the patches touch)."""
    chosen = select(series, tree, repo, base_sha, gpu=gpu)
    if not chosen.files and not chosen.gpu_files and not chosen.missing:
        return None
    if not chosen.files:
        suite = not_run("fork", chosen.gpu_files, "a GPU test file (run with --test gpu)")
        return _described(suite, chosen)
    progress(
        f"running the fork's tests: {len(chosen.fork)} of its own, {len(chosen.upstream)} "
        "upstream test files of the files it touches"
    )
    carried = run_pytest(tree, chosen.files, "fork", python=python, gpu=gpu)
    if found.fork_tip is None:  # nothing to compare with: they must pass
        suite = must_pass(carried)
        suite.note = "the fork's branch cannot be rebuilt here (no @base at hand): must pass"
        return _described(suite, chosen)
    progress("running the same tests on the fork's own branch, to tell regressions apart")
    with workspace.exported(repo, found.fork_tip, "fork") as fork_tree:
        _lay_overlay(series, fork_tree)
        there = [path for path in chosen.files if (fork_tree / path).is_file()]
        before = (
            run_pytest(fork_tree, there, "fork (its branch)", python=python, gpu=gpu)
            if there
            else None
        )
    # Upstream's test files the fork's branch lacks (new on the base) are judged against
    # the new base itself: one that passes there and fails after the series is broken.
    failing = [note for note in carried.read.values() if note.outcome in REGRESSED]
    lacking = [path for path in _files_of(failing, chosen.files) if path not in there]
    against = FORK_BRANCH
    if lacking and found.commits:
        progress(f"running {len(lacking)} test files the fork's branch lacks on the new base")
        with workspace.exported(repo, found.commits[0][1], "base") as base_tree:
            on_base = run_pytest(base_tree, lacking, "fork (the new base)", python=python, gpu=gpu)
        before = on_base if before is None else joined(before, on_base)
        against = f"{FORK_BRANCH} (the new base for files it lacks)"
    suite = compare_with_base(carried, before, against)
    if suite.regressions and found.commits:
        _removed_upstream(suite, chosen.upstream, repo, found.commits[0][1], python, gpu, progress)
    if suite.regressions:
        _again(suite, tree, chosen.files, python, gpu, progress)
    if suite.regressions:
        _bisect(suite, repo, found, chosen.files, python, gpu, progress)
    return _described(suite, chosen)


def _lay_overlay(series: Series, tree: Path) -> None:
    """The overlay's files, as the apply lays them before the patches."""
    for path in series.overlay_files():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(series.overlay_dir / path, tree / path)  # type: ignore[operator]


def _again(
    suite: SuiteResult, tree: Path, files: list[str], python: str, gpu: bool, progress: Progress
) -> None:
    """Run the regressions once more on the patched tree: one that passes now is flaky,
    named so and not blamed. Their files run alone first; where one passes so, the whole
    selection runs again, as it ran the first time: a test that fails only after another
    file's tests (a state they leave) passes alone every time, and is no flaky test."""
    regressions = suite.regressions
    rerun = _files_of(regressions, files)
    if not rerun:  # no test file to run again (no paths at all: pytest collects everything)
        return
    progress(f"running {len(regressions)} failing tests again (a flaky one passes now)")
    again = run_pytest(tree, rerun, "fork (again)", python=python, gpu=gpu)
    passing = [note for note in regressions if again.outcomes.get(note.test) == "passed"]
    if passing and set(rerun) != set(files):
        progress(f"{len(passing)} passed alone: running the whole selection again")
        whole = run_pytest(tree, files, "fork (again, whole)", python=python, gpu=gpu)
        for note in passing:
            if whole.outcomes.get(note.test) != "passed":
                note.reason += "; passes alone, fails beside the other tests"
        passing = [note for note in passing if whole.outcomes.get(note.test) == "passed"]
    for note in passing:
        note.verdict = "flaky: passed when run again"
    _recounted(suite)


def _removed_upstream(
    suite: SuiteResult,
    upstream_files: list[str],
    repo: Git,
    new_base: str,
    python: str,
    gpu: bool,
    progress: Progress,
) -> None:
    """Upstream's tests gone after the carry that the new base lacks too (upstream removed
    or renamed them): no regression of the carry. `new_base`: the branch's first commit
    (the overlay on the new base)."""
    gone = [
        note
        for note in suite.regressions
        if note.outcome == "missing" and _file_of(note.test, upstream_files) is not None
    ]
    if not gone:
        return
    files = _files_of(gone, upstream_files)
    progress(f"looking for {len(gone)} tests of upstream's gone after the carry on the new base")
    with workspace.exported(repo, new_base, "base") as base_tree:
        there = [path for path in files if (base_tree / path).is_file()]
        on_base = (  # no files at all would make pytest collect the whole tree
            run_pytest(base_tree, there, "fork (the new base)", python=python, gpu=gpu)
            if there
            else None
        )
    outcomes = on_base.outcomes if on_base else {}
    for note in gone:
        absent = _file_of(note.test, upstream_files) not in there or (
            note.test not in outcomes and not _failing(outcomes, note.test, gone=False)
        )  # not in its file there, which collected (a run that gave nothing tells nothing)
        if absent:
            note.verdict = "removed by upstream: not on the new base either"
    _recounted(suite)


def _recounted(suite: SuiteResult) -> None:
    """The suite's failures, status and count of regressions after verdicts changed."""
    suite.failures = [f"regression: {note.test} ({note.outcome})" for note in suite.regressions]
    if not suite.regressions:
        suite.status = "passed"
    regressions = counted(len(suite.regressions), "regression")
    suite.note = re.sub(r"\b\d+ regressions?\b", regressions, suite.note)


def _bisect(
    suite: SuiteResult,
    repo: Git,
    found: Lineage,
    files: list[str],
    python: str,
    gpu: bool,
    progress: Progress,
) -> None:
    """Name, for each regression, the first patch of the branch after which it fails."""
    regressions = suite.regressions
    commits = found.commits
    progress(f"bisecting {len(regressions)} regressions over the branch's {len(commits)} commits")
    with probe_tree(repo, "blame") as probe:
        probes = _Probes(probe, commits, _files_of(regressions, files), python, gpu)
        for note in regressions:
            if _file_of(note.test, files) is None:
                note.reason += "; not bisected: its test file could not be told"
                continue
            gone = note.outcome == "missing"
            if not probes.fails(len(commits) - 1, note.test, gone=gone):
                note.reason += (
                    "; not bisected: it passes in the bisection's tree at the branch's tip"
                    " (alone, outside a checkout: it fails only in the worktree, or only"
                    " beside the other tests)"
                )
                continue
            first = first_failing(len(commits), lambda at: probes.fails(at, note.test, gone=gone))
            laid = ""
            if first is not None and _only_tests(found.paths.get(commits[first][0], [])):
                # A patch that changes no code cannot break a test; before it, the test
                # is not there to fail. Its file laid alone on the commits before tells
                # from where the test fails.
                adder = first
                if probes.fails(adder - 1, note.test, laid_from=adder):
                    first = first_failing(
                        adder, lambda at: probes.fails(at, note.test, laid_from=adder)
                    )
                    laid = (
                        f" (its file laid alone: {number_of(commits[adder][0])} only changes tests)"
                    )
            if first is None:
                note.reason += f"; it fails on the new base before any patch{laid}"
                continue
            note.blame = commits[first][0]
            touched = found.paths.get(note.blame, [])
            note.upstream = [f"{sha[:12]} {subject}" for sha, subject in found.touching(touched)]


def first_failing(count: int, fails: Callable[[int], bool]) -> Optional[int]:
    """The first of `count` commits (0: before any patch) at which a test fails, knowing it
    fails at the last; None when it fails at the first already (no patch to blame)."""
    if fails(0):
        return None
    good, bad = 0, count - 1
    while bad - good > 1:
        middle = (good + bad) // 2
        if fails(middle):
            bad = middle
        else:
            good = middle
    return bad


class _Probes:
    """The tests' outcomes at the branch's commits, each commit run once (all the files of
    the regressions at a time)."""

    def __init__(
        self,
        probe: ProbeTree,
        commits: list[tuple[str, str]],
        files: list[str],
        python: str,
        gpu: bool,
    ) -> None:
        self.probe, self.commits, self.files = probe, commits, files
        self.python, self.gpu = python, gpu
        self.seen: dict[int, tuple[dict[str, str], set[str]]] = {}
        self.laid: dict[tuple[int, str, int], dict[str, str]] = {}

    def fails(
        self, at: int, test: str, laid_from: Optional[int] = None, gone: bool = False
    ) -> bool:
        """Whether `test` fails or errors at commit `at`, or its file no longer collects
        (not when its file is not there yet, nor the test in it: a test cannot fail
        before a patch adds it; `gone`: a test missing at the branch's tip, which fails
        by not being there). `laid_from`: with its file as that later commit has it laid
        on the tree first."""
        if laid_from is not None:
            return self._fails_laid(at, test, laid_from)
        if at not in self.seen:
            tree = self.probe.at(self.commits[at][1])
            there = [path for path in self.files if (tree / path).is_file()]
            name = f"fork (at {self.commits[at][0]})"
            run = run_pytest(tree, there, name, python=self.python, gpu=self.gpu) if there else None
            self.seen[at] = (run.outcomes if run else {}, set(there))
        outcomes, there = self.seen[at]
        if _file_of(test, self.files) not in there:
            return False
        return _failing(outcomes, test, gone)

    def _fails_laid(self, at: int, test: str, laid_from: int) -> bool:
        file = _file_of(test, self.files)
        assert file is not None  # _bisect asks only for tests whose file it knows
        key = (at, file, laid_from)
        if key not in self.laid:
            tree = self.probe.at(self.commits[at][1])
            target = tree / file
            before = target.read_bytes() if target.is_file() else None
            target.parent.mkdir(parents=True, exist_ok=True)
            blob = f"{self.commits[laid_from][1]}:{file}"
            target.write_bytes(self.probe.repo.output_bytes("cat-file", "blob", blob))
            name = f"fork (at {self.commits[at][0]}, {file} laid)"
            try:
                run = run_pytest(tree, [file], name, python=self.python, gpu=self.gpu)
            finally:  # the tree holds exactly its commit's files again
                if before is None:
                    target.unlink()
                else:
                    target.write_bytes(before)
            self.laid[key] = run.outcomes
        return _failing(self.laid[key], test, gone=True)  # the laid file holds it


def _failing(outcomes: dict[str, str], test: str, gone: bool) -> bool:
    """Whether `test` fails by a run's outcomes: it failed, errored or skipped, its file did not
    collect (an error named `::<its module>`), the run gave nothing at all (pytest itself
    died), or it is missing and `gone` says that is how it fails."""
    if test in outcomes:
        return outcomes[test] in REGRESSED
    module = test.split("::", 1)[0]
    collected = [
        outcome
        for key, outcome in outcomes.items()
        if key.startswith("::") and (module == key[2:] or module.startswith(key[2:] + "."))
    ]
    return not outcomes or any(outcome in NOT_PASSED for outcome in collected) or gone


def _only_tests(paths: list[str]) -> bool:
    """Whether a patch's files are all the tests' own (it changes no code a test runs)."""
    return bool(paths) and all(_tests_own(path) for path in paths)


def _tests_own(path: str) -> bool:
    """A test file, or one only tests read: a conftest.py, a tests folder's __init__.py."""
    file = PurePosixPath(path)
    if file.name == "conftest.py":
        return True
    if file.name == "__init__.py":
        return any(part in ("tests", "test") for part in file.parts[:-1])
    return is_test_file(path)


def _files_of(notes: list[TestNote], files: list[str]) -> list[str]:
    """The test files the notes' tests are in."""
    return sorted({_file_of(note.test, files) for note in notes} - {None})  # type: ignore[misc]


def _file_of(test: str, files: list[str]) -> Optional[str]:
    """The file a junit test id ("tests.unit.test_x.TestY::test_z", or "::tests.unit.test_x"
    for the file itself) comes from."""
    classname = test.split("::", 1)[0] or test.removeprefix("::")
    for path in files:
        dotted = junit_module(path)
        if classname == dotted or classname.startswith(dotted + "."):
            return path
    return None


def _described(suite: SuiteResult, chosen: Selection) -> SuiteResult:
    """The selection in the suite's note; GPU files and missing fork tests listed."""
    suite.tests += not_run("fork", chosen.gpu_files, "a GPU test file (run with --test gpu)").tests
    # A fork test file the patched tree lacks is gone (moved or removed upstream, or left
    # off with its patch): its tests are, as a test that is gone.
    suite.tests += [
        TestNote(path, "missing", "a @fork-test file not in the patched tree", REGRESSION)
        for path in chosen.missing
    ]
    if chosen.missing:
        _recounted(suite)
        suite.status = "failed"
    parts = [
        counted(len(chosen.fork), "fork test file"),
        counted(len(chosen.upstream), "upstream one"),
    ]
    if chosen.too_general:
        parts.append("none for " + ", ".join(chosen.too_general) + " (too many import it)")
    suite.note = "; ".join(filter(None, [", ".join(parts), suite.note]))
    return suite


def mark_for_review(rows: list[StepRow], suites: list[SuiteResult], series: Series) -> None:
    """Each patch a regression is pinned to: proposal "review", and in its reason the
    tests and the upstream commits that touch its files."""
    by_patch: dict[str, list[TestNote]] = {}
    for suite in suites:
        for note in suite.regressions:
            if note.blame:
                by_patch.setdefault(note.blame, []).append(note)
    patches = {patch.name: patch for patch in series.patches}
    for row in rows:
        notes = by_patch.get(row.name)
        if not notes or row.name not in patches:
            continue
        tests = ", ".join(note.test.split("::", 1)[-1] for note in notes)  # an id may hold ::
        reason = f"{tests} fail{'s' if len(notes) == 1 else ''} from {patches[row.name].number} on"
        upstream = notes[0].upstream
        if upstream:
            more = len(upstream) - _UPSTREAM_SHOWN
            shown = ", ".join(upstream[:_UPSTREAM_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
            reason += f"; upstream commits touching its files: {shown}"
        row.proposal, row.reason = "review", reason
