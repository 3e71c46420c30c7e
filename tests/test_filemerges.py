"""A patch's conflicted files merged on two cores (carry/filemerges.py): what the helper
process answers is what this process would have, and a helper that fails or an interrupted
merge leaves nothing running and nothing different."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from rebaser.carry import filemerges, structured
from rebaser.repo import processes, tempdirs
from rebaser.repo.git import Git

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
MERGE_FILE = filemerges.merge_file
BASE = "import os\n\n\ndef {name}():\n    return {value}\n"


def run_git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git with a fixed date: two repositories built alike hold the same commits."""
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    return subprocess.run(
        ["git", *IDENTITY, *args], cwd=repo, capture_output=True, text=True, env=env
    )


def commit_all(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", message)


def conflicted(repo: Path, count: int = 5) -> Path:
    """A cherry-pick left in conflict in `count` Python files: in all but the last both
    sides add an import (resolved), in the last both change the same line (kept)."""
    repo.mkdir()
    run_git(repo, "init", "-q")
    names = "abcdefghijklmnopqrstuvwxy"[:count]
    *merging, last = names
    commit_all(repo, {f"{n}.py": BASE.format(name=n, value=1) for n in names}, "base")
    run_git(repo, "checkout", "-q", "-b", "patch")
    fork = {
        f"{n}.py": BASE.format(name=n, value=1).replace("import os", "import os\nimport re")
        for n in merging
    }
    fork[f"{last}.py"] = BASE.format(name=last, value=2)
    commit_all(repo, fork, "the patch")
    run_git(repo, "checkout", "-q", "main")
    up = {
        f"{n}.py": BASE.format(name=n, value=1).replace("import os", "import os\nimport sys")
        for n in merging
    }
    up[f"{last}.py"] = BASE.format(name=last, value=3)
    commit_all(repo, up, "upstream")
    assert run_git(repo, "cherry-pick", "--no-commit", "patch").returncode != 0
    assert len(run_git(repo, "ls-files", "-u").stdout.splitlines()) == 3 * count
    return repo


def state(repo: Path) -> tuple:
    """The files and what the index holds of them."""
    files = {p.name: p.read_text() for p in sorted(repo.glob("*.py"))}
    return files, run_git(repo, "ls-files", "-s").stdout


@pytest.fixture
def two_cores(monkeypatch):
    """Two cores, whatever the machine, and a merge cache of this test's own."""
    monkeypatch.setattr(processes, "cores", lambda: 2)
    monkeypatch.setattr(structured, "_cache", {})


class Answers(list):
    """The files the helper merged, and an event set at its first answer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = threading.Event()


@pytest.fixture
def answered(monkeypatch) -> Answers:
    found = Answers()
    ask = filemerges._Helper._ask

    def counted(self, job):
        answer = ask(self, job)
        if answer is not None:
            found.append(job[0])
            found.first.set()
        return answer

    monkeypatch.setattr(filemerges._Helper, "_ask", counted)
    return found


def merged_alone(tmp_path: Path, monkeypatch, count: int = 5) -> tuple:
    """The results and the state of a merge in this process alone."""
    repo = conflicted(tmp_path / "alone", count)
    with monkeypatch.context() as alone:
        alone.setattr(filemerges, "WORTH_A_HELPER", 10**6)
        alone.setattr(filemerges, "merge_file", MERGE_FILE)
        alone.setattr(structured, "_cache", {})
        results = structured.resolve_conflicts(Git(repo))
    return results, state(repo)


def test_the_helper_answers_what_this_process_would(tmp_path, monkeypatch, two_cores, answered):
    alone = merged_alone(tmp_path, monkeypatch)
    assert [r.path for r in alone[0] if r.clean] == ["a.py", "b.py", "c.py", "d.py"]
    assert [r.path for r in alone[0] if r.kept] == ["e.py"]

    def after_the_helper(*args):  # else, on a loaded machine, this process could merge all
        answered.first.wait(60)  # five files before the helper has started
        return MERGE_FILE(*args)

    monkeypatch.setattr(filemerges, "merge_file", after_the_helper)
    repo = conflicted(tmp_path / "two")
    results = structured.resolve_conflicts(Git(repo))
    assert answered, "the helper merged none of the five files"
    assert len(answered) < 5, "this process merged none"
    assert (results, state(repo)) == alone


@pytest.mark.parametrize(
    "program",
    [
        "import sys; sys.exit(3)",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        "import os, pickle, sys; pickle.load(sys.stdin.buffer); pickle.load(sys.stdin.buffer); "
        "os._exit(1)",  # takes a file, and dies
    ],
    ids=["exits", "killed", "dies-in-a-merge"],
)
def test_a_helper_that_cannot_answer_changes_nothing(
    tmp_path, monkeypatch, two_cores, answered, program
):
    alone = merged_alone(tmp_path, monkeypatch)
    monkeypatch.setattr(filemerges, "_BOOT", program)
    repo = conflicted(tmp_path / "two")
    assert (structured.resolve_conflicts(Git(repo)), state(repo)) == alone
    assert answered == []


def test_an_interrupted_merge_leaves_no_helper_running(tmp_path, monkeypatch, two_cores):
    repo = conflicted(tmp_path / "repo")
    started = []
    start = filemerges._Helper.start.__func__

    def kept(cls, git):
        helper = start(cls, git)
        started.append(helper)
        return helper

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(filemerges._Helper, "start", classmethod(kept))
    monkeypatch.setattr(filemerges, "merge_file", interrupted)  # this process's, not the helper's
    with pytest.raises(KeyboardInterrupt):
        structured.resolve_conflicts(Git(repo))
    assert started and started[0] is not None
    assert started[0].process.poll() is not None, "the helper still runs"
    assert not [t for t in threading.enumerate() if t.name == "forkkit-merges"]
    assert len(run_git(repo, "ls-files", "-u").stdout.splitlines()) == 15, "nothing written"


def test_no_helper_where_the_caller_says_the_other_core_is_busy(tmp_path, monkeypatch, two_cores):
    """A lane that goes on past stops has its judge's and triage's threads beside it."""
    alone = merged_alone(tmp_path, monkeypatch)

    def refused(cls, git):
        raise AssertionError("a helper was started")

    monkeypatch.setattr(filemerges._Helper, "start", classmethod(refused))
    repo = conflicted(tmp_path / "busy")
    assert (structured.resolve_conflicts(Git(repo), busy=2), state(repo)) == alone


def test_a_merge_killed_midway_leaves_its_folder_to_the_next(tmp_path, monkeypatch):
    """A helper is killed in the middle of a merge where this process stops early (Ctrl-C):
    its folder for `git merge-file` stayed for good (a TemporaryDirectory); now it is one
    of rebaser's owned folders, which the next of its kind removes."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(structured, "_cache", {})
    left = tmp_path / "forkkit-merge-left"
    left.mkdir()
    (left / tempdirs.OWNER).write_text("")  # its lock died with its process
    repo = conflicted(tmp_path / "repo")
    structured.resolve_conflicts(Git(repo), busy=2)
    assert not list(tmp_path.glob("forkkit-merge-*"))


@pytest.mark.parametrize("cores, busy, helpers", [(8, 1, 3), (8, 3, 3), (4, 3, 1), (3, 3, 0)])
def test_a_helper_for_each_core_to_spare(tmp_path, monkeypatch, answered, cores, busy, helpers):
    """On more cores, more helpers: one for each three files, on the cores the caller
    leaves free; the answers are still one process's."""
    alone = merged_alone(tmp_path, monkeypatch, count=9)
    monkeypatch.setattr(processes, "cores", lambda: cores)
    monkeypatch.setattr(structured, "_cache", {})
    started = []
    start = filemerges._Helper.start.__func__

    def counted(cls, git):
        started.append(start(cls, git))
        return started[-1]

    def after_a_helper(*args):  # else this process could merge all before one has started
        answered.first.wait(60)
        return MERGE_FILE(*args)

    monkeypatch.setattr(filemerges._Helper, "start", classmethod(counted))
    monkeypatch.setattr(filemerges, "merge_file", after_a_helper if helpers else MERGE_FILE)
    repo = conflicted(tmp_path / "many", count=9)
    assert (structured.resolve_conflicts(Git(repo), busy=busy), state(repo)) == alone
    assert len(started) == helpers and all(started)
    assert bool(answered) == bool(helpers)
    assert all(helper.process.poll() is not None for helper in started), "a helper still runs"


def test_an_interrupt_while_helpers_start_leaves_none_running(tmp_path, monkeypatch):
    """A review: Ctrl-C as the third of eight helpers started left the first two running
    (they were started before the merge's clean-up was in place)."""
    monkeypatch.setattr(processes, "cores", lambda: 8)
    monkeypatch.setattr(structured, "_cache", {})
    repo = conflicted(tmp_path / "repo", count=24)
    started = []
    start = filemerges._Helper.start.__func__

    def third_interrupted(cls, git):
        if len(started) == 2:
            raise KeyboardInterrupt
        started.append(start(cls, git))
        return started[-1]

    monkeypatch.setattr(filemerges._Helper, "start", classmethod(third_interrupted))
    with pytest.raises(KeyboardInterrupt):
        structured.resolve_conflicts(Git(repo))
    assert len(started) == 2 and all(started)
    assert all(helper.process.poll() is not None for helper in started), "a helper still runs"
    assert not [t for t in threading.enumerate() if t.name == "forkkit-merges"]


def merged_here(repo: Path, monkeypatch) -> list:
    """merge_conflicts of `conflicted(repo)` in this process alone."""
    git = Git(conflicted(repo))
    with monkeypatch.context() as alone:
        alone.setattr(filemerges, "WORTH_A_HELPER", 10**6)
        alone.setattr(structured, "_cache", {})
        return structured.merge_conflicts(git, structured.Unmerged.read(git))


def merged_aside(repo: Path, aside: filemerges.Aside) -> list:
    """merge_conflicts as a lane with threads beside it asks: busy=3, with `aside`."""
    unmerged = structured.Unmerged.read(Git(repo))
    return structured.merge_conflicts(Git(repo), unmerged, busy=3, aside=aside)


def test_beside_threads_one_helper_merges_every_file_of_each_stop(
    tmp_path, monkeypatch, two_cores, answered
):
    """A lane going on past stops has its judge's and triage's threads beside it: one helper,
    started with the lane and kept, merges each file of each stop, as this process would
    have."""
    alone = merged_here(tmp_path / "alone", monkeypatch)
    started = []
    start = filemerges._Helper.start.__func__

    def counted(cls, git):
        started.append(start(cls, git))
        return started[-1]

    def refused(*args):
        raise AssertionError("this process merged a file")

    monkeypatch.setattr(filemerges._Helper, "start", classmethod(counted))
    monkeypatch.setattr(filemerges, "merge_file", refused)  # this process's, not the helper's
    repo = conflicted(tmp_path / "lane")
    with filemerges.Aside(Git(repo)) as aside:
        assert len(started) == 1, "the helper is started with the lane"
        first = merged_aside(repo, aside)
        monkeypatch.setattr(structured, "_cache", {})  # the next stop's files
        second = merged_aside(repo, aside)
        assert len(started) == 1 and started[0].process.poll() is None
    assert first == second == alone
    assert answered == ["a.py", "b.py", "c.py", "d.py", "e.py"] * 2
    assert started[0].process.poll() is not None, "the helper still runs"


@pytest.mark.parametrize(
    "program",
    [
        "import sys; sys.exit(3)",
        "import os, pickle, sys; pickle.load(sys.stdin.buffer); pickle.load(sys.stdin.buffer); "
        "os._exit(1)",  # takes a file, and dies
    ],
    ids=["exits", "dies-in-a-merge"],
)
def test_an_aside_helper_that_cannot_answer_changes_nothing(
    tmp_path, monkeypatch, two_cores, answered, program
):
    alone = merged_here(tmp_path / "alone", monkeypatch)
    monkeypatch.setattr(filemerges, "_BOOT", program)
    repo = conflicted(tmp_path / "aside")
    with filemerges.Aside(Git(repo)) as aside:
        assert merged_aside(repo, aside) == alone
    assert answered == []


def test_a_helper_collects_cycles_as_rarely_as_rebaser_does(monkeypatch):
    """A helper parses what the process would have: with Python's default thresholds its
    cycle collector ran full collections over the syntax trees again and again (a helper
    merging the real fork's stops took 1.9 to 2.5 s of CPU, 1.4 to 1.9 s with these)."""
    import gc
    import io
    import types

    import rebaser

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's defaults
    try:
        monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO()))
        monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(buffer=io.BytesIO()))
        filemerges.serve()  # no job: it returns at once
        served = gc.get_threshold()
        rebaser.collect_rarely()
        assert served == gc.get_threshold() != (700, 10, 10)
    finally:
        gc.set_threshold(*before)
