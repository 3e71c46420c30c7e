"""The structured merge of one conflicted file (carry/pymerge.py on the hunks of `git
merge-file --diff3`), and of a patch's files on several cores: one by one in this process
and, where there are enough of them and cores to spare, one by one in helper processes
beside it; or, where threads of this process work beside the caller, all in one helper.

The structured merge of a file is Python work that holds the interpreter's lock: on the
real fork, the stop that meets a patch with 18 conflicting Python files spent 1.3 s on
them with one core busy and the other idle. A helper is a Python started for the call
(40 ms), with this process's import path; it asks git nothing this process would not
(the module names a merge checks are read from the same repository). Each file is taken
by whichever process is free, so the answers are those of one process, in the same
order. A file a helper cannot answer (it failed to start, died, or raised) is merged
here, as it would have been without it.

A lane that goes on past stops has its judge's and triage's threads beside it, whose
Python waited for the lock while a merge held it (on the real fork the lane's merges
parse 1.2 s of files): there an `Aside`, one helper kept for the whole lane, takes them.
"""

from __future__ import annotations

import ast
import os
import pickle
import sys
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

from rebaser import collect_rarely
from rebaser.carry import pymerge, pysyntax
from rebaser.repo import processes, tempdirs
from rebaser.repo.git import Git

# A helper for each this many files (fewer are merged here: a start would not pay).
WORTH_A_HELPER = 3

Job = tuple[Any, ...]  # the arguments of merge_file after its Git: path, the three texts, label
Outcome = tuple[str, list[str], list[str], bool]  # text, resolved, kept, every hunk resolved

# The helper's program: this process's import path first, then the loop below.
_BOOT = (
    "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
    "from rebaser.carry.filemerges import serve; serve()"
)


def merged(
    git: Git, jobs: Sequence[Job], *, busy: int = 1, aside: Optional["Aside"] = None
) -> list[Outcome]:
    """merge_file(git, *job) for each job, in order; where enough, helpers take their share,
    one on each core that `busy` (the cores this process keeps busy: its own thread, and
    others working beside it) leaves free. Where none is wanted, `aside` (the helper of
    a caller with threads beside it, in `git`) takes them all."""
    wanted = min(processes.cores() - busy, len(jobs) // WORTH_A_HELPER)
    if wanted < 1 and aside is not None:
        return aside.merged(jobs)
    if wanted < 1:
        return [merge_file(git, *job) for job in jobs]
    results: list[Optional[Outcome]] = [None] * len(jobs)
    next_job = _Counter(len(jobs))
    helpers: list[_Helper] = []
    beside: list[threading.Thread] = []
    try:
        for _ in range(wanted):
            if (helper := _Helper.start(git)) is None:
                continue
            helpers.append(helper)
            beside.append(
                threading.Thread(
                    target=helper.take_turns, args=(jobs, results, next_job), name="forkkit-merges"
                )
            )
            beside[-1].start()
        while (index := next_job.take()) is not None:
            results[index] = merge_file(git, *jobs[index])
        for thread in beside:
            thread.join()  # the helpers' last files
    finally:
        for helper in helpers:
            helper.close()  # at once where this process failed or was interrupted
        for thread in beside:
            thread.join()
    return [
        merge_file(git, *jobs[n]) if result is None else result for n, result in enumerate(results)
    ]


def merge_file(
    git: Git, path: str, base: Optional[str], ours: Optional[str], theirs: Optional[str], label: str
) -> Outcome:
    """(the file's new text, resolved, kept, whether every hunk resolved)."""
    if base is None or ours is None or theirs is None:
        return "", [], ["the file is not UTF-8"], False
    # A helper killed in a merge leaves its folder: the next merge's sweep removes it.
    with tempdirs.owned("forkkit-merge-") as folder:
        files = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(folder) / name).write_text(text, encoding="utf-8")
            files.append(str(Path(folder) / name))
        labels = ["-L", "HEAD", "-L", "base", "-L", label]
        made = Git(folder).run("merge-file", "-p", "--diff3", *labels, *files, check=False)
    try:
        merged = pymerge.merge(
            base,
            ours,
            theirs,
            made.stdout,
            modules=_ModuleReader(git).names,
            path=path,
            hunks=made.status,  # git's count of its conflicts
        )
    except (ValueError, RecursionError, MemoryError) as error:  # never worse than git's
        return "", [], [f"the structured merge failed: {error}"], False
    if not merged.resolved:
        return "", [], merged.kept, False
    return pymerge.as_style(merged.text, 7, diff3=False), merged.resolved, merged.kept, merged.clean


class _ModuleReader:
    """The top-level names of a module of the repository as upstream's side (HEAD) has it;
    None when it is not a module file of the repository (or a package)."""

    def __init__(self, git: Git) -> None:
        self.git = git

    def names(self, module: str, importer: str) -> Optional[set[str]]:
        for candidate in _module_paths(module, importer):
            shown = self.git.run("cat-file", "blob", f"HEAD:{candidate}", check=False)
            if not shown.ok:
                continue
            if candidate.endswith("__init__.py"):
                return None  # a package: its submodules are names too; not checked
            try:
                return pysyntax.module_names(ast.parse(shown.stdout))
            except (SyntaxError, ValueError):
                return None
        return None


def _module_paths(module: str, importer: str) -> list[str]:
    level = len(module) - len(module.lstrip("."))
    parts = [part for part in module.lstrip(".").split(".") if part]
    if level:
        folder = Path(importer).parent
        for _ in range(level - 1):
            folder = folder.parent
        parts = [*(p for p in folder.parts if p not in (".", "")), *parts]
    if not parts:
        return []
    stem = "/".join(parts)
    return [f"{stem}.py", f"{stem}/__init__.py"]


def serve() -> None:
    """The helper's loop: a job from stdin, its answer to stdout, until stdin ends; its
    cycle collector as rebaser's (the merges' syntax trees)."""
    collect_rarely()
    asked, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            (path, env), job = pickle.load(asked)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("merged", merge_file(Git(path, env), *job))
        except Exception as error:  # this process merges it again, and meets it there
            answer = ("failed", repr(error))
        pickle.dump(answer, answers)
        answers.flush()


class Aside:
    """One helper for all the merges in `git` of a caller with threads beside it, started
    at once (its start, 0.1 s, then runs beside the caller's first steps): each file it
    cannot answer, and every one after, is merged in this process. close() ends it."""

    def __init__(self, git: Git) -> None:
        self.git = git
        self._helper = _Helper.start(git)

    def __enter__(self) -> "Aside":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def merged(self, jobs: Sequence[Job]) -> list[Outcome]:
        outcomes = []
        for job in jobs:
            answer = self._helper._ask(job) if self._helper is not None else None
            if answer is None:
                self.close()
                outcomes.append(merge_file(self.git, *job))
            else:
                outcomes.append(answer[0])
        return outcomes

    def close(self) -> None:
        if self._helper is not None:
            self._helper.close()
            self._helper = None


class _Counter:
    """The next job nobody has taken; None once all are."""

    def __init__(self, count: int) -> None:
        self._next, self._count = 0, count
        self._lock = threading.Lock()

    def take(self) -> Optional[int]:
        with self._lock:
            if self._next >= self._count:
                return None
            self._next += 1
            return self._next - 1


class _Helper:
    def __init__(self, git: Git, process: Any) -> None:
        self.git, self.process = git, process

    @classmethod
    def start(cls, git: Git) -> Optional["_Helper"]:
        if not sys.executable:
            return None
        try:
            process = processes.helper([sys.executable, "-I", "-c", _BOOT], env=os.environ)
        except OSError:
            return None
        helper = cls(git, process)
        try:
            pickle.dump(sys.path, process.stdin)
            process.stdin.flush()
        except OSError:
            helper.close()
            return None
        return helper

    def take_turns(self, jobs: Sequence[Job], results: list, next_job: _Counter) -> None:
        """Jobs for the helper while there are any; one it cannot answer stays undone."""
        while (index := next_job.take()) is not None:
            answer = self._ask(jobs[index])
            if answer is None:
                return
            results[index] = answer[0]

    def _ask(self, job: Job) -> Optional[tuple[Any]]:
        try:
            pickle.dump(((str(self.git.path), self.git.env), job), self.process.stdin)
            self.process.stdin.flush()
            kind, value = pickle.load(self.process.stdout)
        except Exception:  # it died, or was closed: this process merges the file
            return None
        return (value,) if kind == "merged" else None

    def close(self) -> None:
        """End it (in the middle of a merge where this process stops early)."""
        self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.process.wait()
