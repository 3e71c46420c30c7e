"""Benchmark: carry a synthetic 30-commit fork onto a newer upstream, rebaser against git rebase.

rebaser's time is import (the fork branch → a series) + one-pass apply (`--keep-going`) with
verification; git's is `git rebase` (ort) of the same commits onto the same tip, with a
`--skip` at every stop (a maintainer listing every stop in one pass). Both run in the same
process and repository, several times, alternating; the ratio of the medians is printed,
and whether both left the same tree. rebaser runs in-process, so the interpreter's start
is not counted (measure whole processes for that). Each run works in a fresh copy of the
history: cold for both, no commit, object or ref of an earlier run. Target: within 1.5x of
git rebase, verification included. `--modules` and `--files` set the tree's size (a
Megatron-LM clone holds about 3,100 files, 1,300 of them Python): rebaser's worktree is a
full checkout of it, where `git rebase` runs in a checkout that exists already. `--stops`
makes that many patches conflict upstream (some of the next ones then need them); with
stops, an interactive apply then times `rebaser skip` and `rebaser continue` at them, each
as a process the user runs (target: 1 s each).

    python ci/bench_carry.py [--runs 3] [--patches 30] [--modules 40] [--stops 0] [--files 0]
    python ci/bench_carry.py --real-size   # a Megatron-size tree, 30 patches, 20 stops
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
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


def build_history(
    repo: Path, patches: int, modules: int = 40, stops: int = 0, other_files: int = 0
) -> None:
    """Tag `base` (`modules` modules, `other_files` more files); branch `fork` with
    `patches` commits on it; tag `tip` upstream, which rewrote lines near a third of the
    fork's changes and renamed one module the fork edits. With `stops`, upstream also
    rewrote the very line that many of the fork's patches change (spread over the series:
    a conflict each), and every fifth of those is followed by a patch that edits its line
    (it needs the patch that stopped: blocked)."""
    git(repo, "init", "-q", "-b", "main")
    files = {f"pkg/mod_{n}.py": module(n, {}) for n in range(modules)}
    files.update({f"docs/page_{n}.md": f"Page {n}.\n" for n in range(other_files)})
    commit(repo, files, "base")
    git(repo, "tag", "base")
    stopped = {number * patches // stops for number in range(stops)}
    targets = _targets(patches, modules, stopped)
    fork_tweaks: dict[int, dict[int, str]] = {}
    git(repo, "checkout", "-q", "-b", "fork")
    for number, (target, function) in enumerate(targets):
        fork_tweaks.setdefault(target, {})[function] = f"    return total - {number}"
        commit(
            repo, {f"pkg/mod_{target}.py": module(target, fork_tweaks[target])}, f"fork {number}"
        )
    git(repo, "checkout", "-q", "main")
    applying = [number for number in range(patches) if number not in stopped]
    for number, (target, function) in enumerate(targets):
        text = (repo / f"pkg/mod_{target}.py").read_text()
        if number in stopped:  # the fork's own line, rewritten: a conflict
            old = f"    return value + {function}\n"
            new = f"    return value + {function} + 1  # upstream\n"
        elif applying.index(number) % 3 == 0:  # context two lines above the change moves
            old = f"def function_{function}(value):\n"
            new = old[:-1] + "  # upstream\n"
        else:
            continue
        commit(repo, {f"pkg/mod_{target}.py": text.replace(old, new)}, f"up {number}")
    git(repo, "mv", "pkg/mod_1.py", "pkg/renamed_1.py")
    git(repo, "commit", "-q", "-m", "up: rename mod_1")
    git(repo, "tag", "tip")


def _targets(patches: int, modules: int, stopped: set[int]) -> list[tuple[int, int]]:
    """(module, function) each fork commit changes; after every fifth stop, the next
    commit changes the same function again."""
    targets: list[tuple[int, int]] = []
    for number in range(patches):
        follows = number - 1 in stopped and sorted(stopped).index(number - 1) % 5 == 4
        if follows and number not in stopped:
            targets.append(targets[-1])
        else:
            targets.append((number % modules, number % FUNCTIONS))
    return targets


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


def time_rebaser(repo: Path, scratch: Path, run: int) -> tuple[float, str, str]:
    """import + apply --keep-going with verification: seconds, statuses, the tree."""
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
    assert report.exit_code in (ExitCode.OK, ExitCode.NOT_APPLIED), report.outcome
    counts: dict[str, int] = {}
    for step in report.steps[1:]:
        counts[step.status] = counts.get(step.status, 0) + 1
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return seconds, statuses, git(repo, "rev-parse", f"{report.branch}^{{tree}}").strip()


def time_git_rebase(repo: Path, run: int) -> tuple[float, int, str]:
    """git rebase (ort) with a --skip at every stop, as a maintainer lists every stop in
    one pass: seconds, stops, the tree."""
    git(repo, "branch", f"rebased-{run}", "fork")
    started = time.perf_counter()
    rebase = ("-c", "merge.renames=true", "rebase")
    done = _git_ok(repo, *rebase, "-q", "tip", f"rebased-{run}")
    stops = 0
    while not done:
        stops += 1
        assert (repo / ".git" / "rebase-merge").is_dir(), "git rebase failed, not stopped"
        done = _git_ok(repo, *rebase, "--skip")
    seconds = time.perf_counter() - started
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    git(repo, "checkout", "-q", "main")
    return seconds, stops, tree


def _spread(seconds: list[float]) -> str:
    if not seconds:
        return "(none)"
    return (
        f"median {statistics.median(seconds):.2f} s ({min(seconds):.2f} to "
        f"{max(seconds):.2f} s, {len(seconds)} runs)"
    )


def _git_ok(repo: Path, *args: str) -> bool:
    command = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args]
    return subprocess.run(command, cwd=repo, capture_output=True).returncode == 0


def time_stops(
    repo: Path, scratch: Path, count: int
) -> tuple[list[float], list[float], list[float]]:
    """At the stops of an interactive apply, each `rebaser skip` and each `rebaser continue`
    (after taking the patch's side of every conflict) as the user runs them: a process each,
    the interpreter's start included. Alternating, `count` of each. Then the apply is
    finished with skips, and `count` of the patches left off are each put back with `rebaser
    retry` (timed) and dropped again with `rebaser abort`."""
    series = import_series(repo, scratch / "series-stops")
    rebaser = [sys.executable, "-m", "rebaser"]
    report = scratch / "stops-report.json"
    apply = ["apply", "--series", str(series), "--repo", str(repo), "--base", "tip"]
    subprocess.run(
        [*rebaser, *apply, "--test", "none", "--json", str(report)], capture_output=True
    )
    status = scratch / "status.json"
    subprocess.run(
        [*rebaser, "status", "--repo", str(repo), "--json", str(status)],
        check=True,
        capture_output=True,
    )
    worktree = Path(json.loads(status.read_text())["worktree"])
    skips, continues, retries = [], [], []
    in_progress = True
    for number in range(2 * count):
        if number % 2:
            conflicted = git(worktree, "diff", "--name-only", "--diff-filter=U").split()
            git(worktree, "checkout", "--theirs", "--", *conflicted)
            git(worktree, "add", "--", *conflicted)
        started = time.perf_counter()
        verb = "continue" if number % 2 else "skip"
        done = subprocess.run([*rebaser, verb, "--repo", str(repo)], capture_output=True)
        (continues if number % 2 else skips).append(time.perf_counter() - started)
        in_progress = done.returncode == ExitCode.NOT_APPLIED
        if not in_progress:
            break  # the apply finished: no stop left
    while in_progress:  # skip what is left (untimed): the report lists every patch left off
        done = subprocess.run([*rebaser, "skip", "--repo", str(repo)], capture_output=True)
        in_progress = done.returncode == ExitCode.NOT_APPLIED
    left_off = [
        row["name"]
        for row in json.loads(report.read_text())["steps"]
        if row["status"] == "skipped"
    ]
    retry = ["retry", "--series", str(series), "--repo", str(worktree)]
    for name in left_off[:count]:
        started = time.perf_counter()
        done = subprocess.run([*rebaser, *retry, name], capture_output=True, text=True)
        retries.append(time.perf_counter() - started)
        if done.returncode != ExitCode.NOT_APPLIED:  # it must stop at the patch's conflict
            sys.exit(f"rebaser retry {name} exited {done.returncode}: {done.stderr.strip()}")
        subprocess.run([*rebaser, "abort", "--repo", str(repo)], check=True, capture_output=True)
    return skips, continues, retries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--modules", type=int, default=40)
    parser.add_argument("--stops", type=int, default=0, help="patches that conflict upstream")
    parser.add_argument("--files", type=int, default=0, help="files besides the modules")
    parser.add_argument(
        "--real-size",
        action="store_true",
        help="a Megatron-size carry: 1,300 modules and 1,800 other files (3,100 in all, as "
        "a Megatron-LM clone), 30 patches of which 20 stop",
    )
    args = parser.parse_args()
    if args.real_size:
        args.modules, args.files, args.patches, args.stops = 1300, 1800, 30, 20
    with tempfile.TemporaryDirectory(prefix="forkkit-bench-carry-") as scratch:
        os.environ["DSA_FORKKIT_CACHE"] = str(Path(scratch) / "cache")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the stops' processes: as installed
        template = Path(scratch) / "history"
        template.mkdir()
        build_history(template, args.patches, args.modules, args.stops, args.files)
        ours, theirs = [], []
        for run in range(1, args.runs + 1):
            # cold for both: a fresh copy holds no commit, object or ref of an earlier run
            repo = Path(scratch) / f"run-{run}" / "upstream"
            shutil.copytree(template, repo, symlinks=True)
            os.sync()  # the copy's writes are not left to slow down the timed commands
            seconds, stops, their_tree = time_git_rebase(repo, run)
            theirs.append(seconds)
            seconds, statuses, our_tree = time_rebaser(repo, Path(scratch), run)
            ours.append(seconds)
            same = "same tree" if our_tree == their_tree else f"TREES DIFFER {our_tree[:12]}"
            print(
                f"run {run}: git rebase {theirs[-1]:.2f} s ({stops} --skip), rebaser "
                f"{seconds:.2f} s [{statuses}]; {same}"
            )
        if args.stops:
            repo = Path(scratch) / "stops" / "upstream"
            shutil.copytree(template, repo, symlinks=True)
            skips, continues, retries = time_stops(
                repo, Path(scratch), min(5, args.stops // 2)
            )
            print(
                f"at the stops, as processes: rebaser skip {_spread(skips)}, "
                f"rebaser continue {_spread(continues)}, rebaser retry {_spread(retries)} "
                "(target <= 1 s each)"
            )
    ratio = statistics.median(ours) / statistics.median(theirs)
    # Each rebaser run against the git rebase just before it: on a shared machine both drift
    # together, so the pairs' ratios spread less than the medians' ratio.
    paired = statistics.median(mine / git for mine, git in zip(ours, theirs))
    print(
        f"{args.patches} patches ({args.stops} stop), {args.modules} modules + {args.files} "
        f"files, {os.cpu_count()} cores: git rebase (with --skip) median "
        f"{statistics.median(theirs):.2f} s; rebaser import + apply --keep-going + verify "
        f"median {statistics.median(ours):.2f} s; ratio {ratio:.2f}x, paired {paired:.2f}x "
        "(target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
