"""Benchmark: carry a synthetic 30-commit fork onto a newer upstream, rebaser against git rebase.

rebaser's time is import (the fork branch → a series) + one-pass apply (`--keep-going`) with
verification; git's is `git rebase` (ort) of the same commits onto the same tip. Both run in
the same process and repository, several times, alternating; the ratio of the medians is
printed. rebaser runs in-process, so the interpreter's start (imports, about 1 s) is not
counted. Each run works in a fresh copy of the history: cold for both, no commit, object
or ref of an earlier run. Target: within 1.5x of git rebase, verification included.
`--modules` sets the tree's size (a Megatron-LM clone holds about 3,100 files, 1,300 of
them Python): rebaser's worktree is a full checkout of it, where `git rebase` runs in a
checkout that exists already.

    python ci/bench_carry.py [--runs 3] [--patches 30] [--modules 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rebaser.sequencer import machine
from rebaser.cli import main as rebaser_main
from rebaser.errors import ExitCode
from rebaser.repo.git import Git
from rebaser.series.export import export_patch

FUNCTIONS = 12


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


def module(number: int, tweaks: dict[int, str]) -> str:
    """A module of FUNCTIONS small functions; `tweaks` rewrites some functions' bodies."""
    parts = [f'"""Module {number}."""\n']
    for index in range(FUNCTIONS):
        body = tweaks.get(index, f"    return value + {index}")
        parts.append(f"\n\ndef function_{index}(value):\n    total = value * {number}\n{body}\n")
    return "".join(parts)


def commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "--all")
    git(repo, "commit", "-q", "-m", message)


def build_history(repo: Path, patches: int, modules: int = 40) -> None:
    """Tag `base` (`modules` modules); branch `fork` with `patches` commits on it; tag `tip`
    upstream, which rewrote lines near a third of the fork's changes and renamed one module
    the fork edits."""
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {f"pkg/mod_{n}.py": module(n, {}) for n in range(modules)}, "base")
    git(repo, "tag", "base")
    fork_tweaks: dict[int, dict[int, str]] = {}
    git(repo, "checkout", "-q", "-b", "fork")
    for number in range(patches):
        target = number % modules
        fork_tweaks.setdefault(target, {})[number % FUNCTIONS] = f"    return total - {number}"
        commit(
            repo, {f"pkg/mod_{target}.py": module(target, fork_tweaks[target])}, f"fork {number}"
        )
    git(repo, "checkout", "-q", "main")
    for number in range(0, patches, 3):  # context two lines above the fork's change moves
        target = number % modules
        text = (repo / f"pkg/mod_{target}.py").read_text()
        old = f"def function_{number % FUNCTIONS}(value):\n"
        commit(
            repo,
            {f"pkg/mod_{target}.py": text.replace(old, old[:-1] + "  # upstream\n")},
            f"up {number}",
        )
    git(repo, "mv", "pkg/mod_1.py", "pkg/renamed_1.py")
    git(repo, "commit", "-q", "-m", "up: rename mod_1")
    git(repo, "tag", "tip")


def import_series(repo: Path, series_dir: Path) -> Path:
    """`rebaser import` when this checkout has it, else the stable export of each commit."""
    if importlib.util.find_spec("rebaser.commands.import_series") is not None:
        arguments = ["--repo", str(repo), "--range", "base..fork", "--series-dir", str(series_dir)]
        code = rebaser_main(["import", *arguments, "--name", "bench"])
        assert code == 0, f"rebaser import exited {code}"
        return series_dir / "series"
    series_dir.mkdir(parents=True)
    names = []
    for number, sha in enumerate(git(repo, "rev-list", "--reverse", "base..fork").split(), 1):
        names.append(f"{number:04d}-fork.patch")
        (series_dir / names[-1]).write_text(export_patch(Git(repo), sha))
    base = git(repo, "rev-parse", "base").strip()
    header = f"@name bench\n@base git:{base}\n"
    (series_dir / "series").write_text(header + "\n".join(names) + "\n")
    return series_dir / "series"


def time_rebaser(repo: Path, scratch: Path, run: int) -> tuple[float, str]:
    started = time.perf_counter()
    series = import_series(repo, scratch / f"series-{run}")
    options = machine.ApplyOptions(
        series_file=series,
        repo=repo,
        base="tip",
        test="none",
        keep_going=True,
        ephemeral=True,
        branch_prefix=f"bench-{run}",
    )
    report = machine.apply(options, lambda _message: None)
    seconds = time.perf_counter() - started
    assert report.exit_code == ExitCode.OK, report.outcome
    counts: dict[str, int] = {}
    for step in report.steps[1:]:
        counts[step.status] = counts.get(step.status, 0) + 1
    return seconds, ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))


def time_git_rebase(repo: Path, run: int) -> float:
    git(repo, "branch", f"rebased-{run}", "fork")
    started = time.perf_counter()
    git(repo, "-c", "merge.renames=true", "rebase", "-q", "tip", f"rebased-{run}")
    seconds = time.perf_counter() - started
    git(repo, "checkout", "-q", "main")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--modules", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forkkit-bench-carry-") as scratch:
        os.environ["DSA_FORKKIT_CACHE"] = str(Path(scratch) / "cache")
        template = Path(scratch) / "history"
        template.mkdir()
        build_history(template, args.patches, args.modules)
        ours, theirs = [], []
        for run in range(1, args.runs + 1):
            # cold for both: a fresh copy holds no commit, object or ref of an earlier run
            repo = Path(scratch) / f"run-{run}" / "upstream"
            shutil.copytree(template, repo, symlinks=True)
            os.sync()  # the copy's writes are not left to slow down the timed commands
            theirs.append(time_git_rebase(repo, run))
            seconds, statuses = time_rebaser(repo, Path(scratch), run)
            ours.append(seconds)
            print(f"run {run}: git rebase {theirs[-1]:.2f} s, rebaser {seconds:.2f} s [{statuses}]")
    ratio = statistics.median(ours) / statistics.median(theirs)
    # Each rebaser run against the git rebase just before it: on a shared machine both drift
    # together, so the pairs' ratios spread less than the medians' ratio.
    paired = statistics.median(mine / git for mine, git in zip(ours, theirs))
    print(
        f"{args.patches} patches, {args.modules} modules, {os.cpu_count()} cores: git rebase median "
        f"{statistics.median(theirs):.2f} s; rebaser import + apply --keep-going + verify median "
        f"{statistics.median(ours):.2f} s; ratio {ratio:.2f}x, paired {paired:.2f}x "
        "(target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
