"""Benchmark: a real fork carried onto a newer upstream, rebaser against `git rebase`, paired.

A manual check (it needs a real clone): run it in a scratch clone holding the fork's branch
and the upstream commit to carry it onto. It deletes rebaser's state (`.git/forkkit`,
`refs/forkkit/*`, `forkkit/*` branches) before each run, so every run starts with an empty
memo, and refuses a clone with local changes. It deletes no earlier run's files before a
timed run: they wait in a folder beside the clone until every run is timed.

Each rebaser first carries the fork once, untimed, so that its bytecode is written as
after a maintainer's first run; its commands run without PYTHONDONTWRITEBYTECODE.

`carry` (each round): `git rebase --onto ONTO BASE TIP` with a `--skip` at every stop (in a
worktree made at TIP for it), then
for each rebaser given `import` + `apply --keep-going --test none`, as processes. It prints
each run, the medians, each rebaser against git and against the first rebaser (paired: the
same round's runs), and whether the trees and the JSON reports agree.

`stops` (each round, each rebaser in turn): an interactive apply, then at every third stop
`continue` (upstream's side of each conflict, and in each Python file a line of the
maintainer's own, so that the fix changes something), else `skip`, to the end; then
`retry` of the first two patches left off. It prints each kind of command's median, its
maximum and how many took over 1 s, and the paired difference per command.

    python ci/bench_real_fork.py carry --repo FORK --range BASE..TIP --onto REV \\
        --rebaser .venv/bin/rebaser [--rebaser /other/bin/rebaser] [--rounds 5]
    python ci/bench_real_fork.py stops --repo FORK --range BASE..TIP --onto REV --rebaser ...

docs/architecture.md ("Speed on a real fork") records what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GIT, *args], cwd=repo, check=check, capture_output=True, text=True)


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - started, done


def forget_rebaser(repo: Path, trash: Optional[Path] = None) -> None:
    """Everything rebaser left in the clone: worktrees, state, memo, branches and refs.
    With `trash`, its worktrees are moved there, not deleted: ext4 passes over the inodes
    deleted in the last minute or more for each file it creates (`recently_deleted`), so a
    3,000-file tree deleted just before a timed run slows that run's checkout by up to
    seconds, a cost no maintainer's own run pays (docs/architecture.md)."""
    git(repo, "rebase", "--abort", check=False)
    for number, worktree in enumerate((repo / ".git" / "forkkit" / "worktrees").glob("*")):
        if trash is None:
            git(repo, "worktree", "remove", "--force", str(worktree), check=False)
        else:
            worktree.rename(trash / f"rebaser-{time.monotonic_ns()}-{number}")
    shutil.rmtree(repo / ".git" / "forkkit", ignore_errors=True)
    git(repo, "worktree", "prune")
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/forkkit", "refs/heads/forkkit")
    for ref in refs.stdout.split():
        git(repo, "update-ref", "-d", ref)


def settle() -> None:
    """Before a timed run: what earlier runs wrote, on disk (the timed run flushes none)."""
    subprocess.run(["sync"], check=False)


def git_carry(repo: Path, base: str, tip: str, onto: str, trash: Path) -> tuple[float, str]:
    """`git rebase` with a `--skip` at each stop: (seconds, the result's tree). It runs in a
    worktree made for it at TIP, as in a maintainer's checkout of the fork: the clone's own
    checkout, switched back to TIP, would have thousands of files just deleted."""
    checkout = trash / f"git-{time.monotonic_ns()}"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), tip)
    state = checkout / git(checkout, "rev-parse", "--git-path", "rebase-merge").stdout.strip()
    settle()
    started = time.perf_counter()
    step = git(checkout, "rebase", "-q", "--onto", onto, base, check=False)
    for _ in range(10_000):  # a stop a commit at most
        if step.returncode == 0 or not state.is_dir():
            break
        step = git(checkout, "rebase", "--skip", check=False)
    seconds = time.perf_counter() - started
    return seconds, git(checkout, "rev-parse", "HEAD^{tree}").stdout.strip()


def rebaser_carry(
    rebaser: str, repo: Path, base: str, tip: str, onto: str, scratch: Path
) -> tuple[float, str, dict]:
    """`import` + `apply --keep-going --test none`: (seconds, branch tree, JSON report)."""
    forget_rebaser(repo, scratch / "trash")
    series, report = scratch / "series", scratch / "report.json"
    shutil.rmtree(series, ignore_errors=True)
    settle()
    name = "bench"
    import_args = ["import", "--repo", str(repo), "--range", f"{base}..{tip}"]
    started = time.perf_counter()
    # Run from the scratch folder: from a checkout of this project, `python -m rebaser`
    # imports the checkout's package before any PYTHONPATH (sys.path[0] is the cwd), so
    # every rebaser compared would be the same code.
    imported = subprocess.run(
        [rebaser, *import_args, "--series-dir", str(series), "--name", name],
        capture_output=True, text=True, cwd=scratch,
    )  # fmt: skip
    applied = subprocess.run(
        [rebaser, "apply", "--series", str(series / "series"), "--repo", str(repo), "--base",
         onto, "--keep-going", "--test", "none", "--json", str(report)],
        capture_output=True, text=True, cwd=scratch,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if imported.returncode != 0 or applied.returncode not in (0, 3):
        raise SystemExit(f"{rebaser} failed:\n{imported.stderr}\n{applied.stderr}")
    branch = json.loads(report.read_text()).get("branch", "")
    tree = git(repo, "rev-parse", f"{branch}^{{tree}}", check=False).stdout.strip()
    return seconds, tree, _comparable(json.loads(report.read_text()), str(scratch))


def _comparable(report: object, scratch: str) -> object:
    """A report without its timings, and with each run's own folder (where its series
    is, which the next steps name) said the same way."""
    if isinstance(report, dict):
        return {
            k: _comparable(v, scratch)
            for k, v in report.items()
            if k not in ("duration", "seconds")
        }
    if isinstance(report, list):
        return [_comparable(v, scratch) for v in report]
    return report.replace(scratch, "SCRATCH") if isinstance(report, str) else report


def carry(args: argparse.Namespace) -> None:
    base, tip = args.range.split("..")
    runs: dict[str, list[float]] = {"git": []}
    reports: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-real-fork-", dir=args.repo.parent) as folder:
        trash = Path(folder) / "trash"  # the runs' trees, deleted when all are timed
        trash.mkdir()
        warm_up(args, Path(folder))
        for round_ in range(1, args.rounds + 1):
            seconds, tree = git_carry(args.repo, base, tip, args.onto, trash)
            runs["git"].append(seconds)
            print(f"round {round_}: git {seconds:.2f} s (tree {tree[:8]})", flush=True)
            for rebaser in args.rebaser:
                seconds, tree, report = rebaser_carry(
                    rebaser, args.repo, base, tip, args.onto, Path(folder)
                )
                runs.setdefault(rebaser, []).append(seconds)
                same = "" if reports.setdefault("first", report) == report else ", REPORT DIFFERS"
                print(f"round {round_}: {rebaser} {seconds:.2f} s (tree {tree[:8]}{same})")
    first = args.rebaser[0]
    for name, seconds in runs.items():
        line = f"{name}: median {statistics.median(seconds):.2f} s ({min(seconds):.2f} to "
        line += f"{max(seconds):.2f})"
        if name != "git":
            line += f"; against git {_paired(seconds, runs['git'])}"
            if name != first:
                line += f"; against {first} {_paired(seconds, runs[first])}"
        print(line)


def warm_up(args: argparse.Namespace, scratch: Path) -> None:
    """One untimed carry by each rebaser: its bytecode written, as after a maintainer's
    first run (git's own code needs no such step)."""
    base, tip = args.range.split("..")
    for rebaser in args.rebaser:
        rebaser_carry(rebaser, args.repo, base, tip, args.onto, scratch)


def _paired(these: list[float], those: list[float]) -> str:
    ratios = [a / b for a, b in zip(these, those)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}x to {max(ratios):.2f}x)"


def stops(args: argparse.Namespace) -> None:
    base, tip = args.range.split("..")
    times: dict[str, list[tuple[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-real-fork-", dir=args.repo.parent) as folder:
        scratch = Path(folder)
        (scratch / "trash").mkdir()
        warm_up(args, scratch)
        for round_ in range(1, args.rounds + 1):
            for rebaser in args.rebaser:
                done = _one_stops_run(rebaser, args.repo, base, tip, args.onto, scratch)
                times.setdefault(rebaser, []).extend(done)
                print(f"round {round_}: {rebaser} " + " ".join(f"{c} {s:.2f}" for c, s in done))
    for rebaser, done in times.items():
        for kind in ("apply", "skip", "continue", "retry"):
            seconds = [s for c, s in done if c == kind]
            if seconds:
                over = sum(s > 1 for s in seconds)
                print(
                    f"{rebaser} {kind}: median {statistics.median(seconds):.2f} s, max "
                    f"{max(seconds):.2f}, {over} of {len(seconds)} over 1 s"
                )
    first = times[args.rebaser[0]]
    for rebaser in args.rebaser[1:]:
        same = [(a, b) for a, b in zip(first, times[rebaser]) if a[0] == b[0]]
        differences = [b[1] - a[1] for a, b in same]
        if differences:
            print(f"{rebaser} against the first, paired: {statistics.median(differences):+.3f} s")


def _one_stops_run(
    rebaser: str, repo: Path, base: str, tip: str, onto: str, scratch: Path
) -> list[tuple[str, float]]:
    forget_rebaser(repo, scratch / "trash")
    series = scratch / "series"
    shutil.rmtree(series, ignore_errors=True)  # `continue` records resolutions beside it
    subprocess.run(
        [rebaser, "import", "--repo", str(repo), "--range", f"{base}..{tip}", "--series-dir",
         str(series), "--name", "bench"],
        check=True, capture_output=True, cwd=scratch,  # as in rebaser_carry
    )  # fmt: skip
    done: list[tuple[str, float]] = []

    def run(kind: str, *extra: str) -> subprocess.CompletedProcess[str]:
        seconds, result = timed([rebaser, kind, *extra], repo)
        done.append((kind, seconds))
        return result

    result = run("apply", "--series", str(series / "series"), "--repo", str(repo), "--base",
                 onto, "--test", "none")  # fmt: skip
    worktree = next((repo / ".git" / "forkkit" / "worktrees").glob("*"), None)
    for number in range(1, 200):
        if "stopped at" not in result.stdout + result.stderr or worktree is None:
            break
        unmerged = git(worktree, "diff", "--name-only", "-z", "--diff-filter=U").stdout
        conflicted = [path for path in unmerged.split("\0") if path]
        if number % 3 == 0 and conflicted:
            _resolve_by_hand(worktree, conflicted)
            result = run("continue")
            if result.returncode != 2:
                continue
        result = run("skip")
    if result.returncode != 3:  # not an apply that left patches off (e.g. verification)
        return done
    for patch in ("0002", "0003"):
        result = run("retry", patch, "--series", str(series / "series"), "--repo", str(repo),
                     "--test", "none")  # fmt: skip
        if "stopped at" in result.stdout + result.stderr:
            run("skip")
    return done


def _resolve_by_hand(worktree: Path, conflicted: list[str]) -> None:
    """Upstream's side of each file (its deletion where it deleted it), and in a Python
    file a line of the maintainer's own."""
    for path in conflicted:
        if git(worktree, "cat-file", "-e", f":2:{path}", check=False).returncode != 0:
            git(worktree, "rm", "-q", "--", path)
            continue
        git(worktree, "checkout", "-q", "--ours", "--", path)
        if path.endswith(".py"):
            with open(worktree / path, "a", encoding="utf-8") as handle:
                handle.write("# resolved by hand\n")
        git(worktree, "add", "--", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["carry", "stops"])
    parser.add_argument("--repo", type=Path, required=True, help="a scratch clone")
    parser.add_argument("--range", required=True, help="BASE..TIP: the fork's commits")
    parser.add_argument("--onto", required=True, help="the upstream commit to carry them onto")
    parser.add_argument("--rebaser", action="append", required=True, help="a rebaser to time")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.repo = args.repo.resolve()
    if git(args.repo, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise SystemExit(f"{args.repo} has local changes: run this in a scratch clone")
    head = git(args.repo, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip()
    head = head or git(args.repo, "rev-parse", "HEAD").stdout.strip()
    # rebaser as installed, its bytecode cached: a shell that sets PYTHONDONTWRITEBYTECODE
    # (as this project's sandbox does) made every command compile its modules again, 0.1 to
    # 0.15 s a command that no maintainer's install pays.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        (carry if args.mode == "carry" else stops)(args)
    finally:  # the clone as it was, less rebaser's state
        forget_rebaser(args.repo)
        git(args.repo, "checkout", "-q", head)


if __name__ == "__main__":
    main()
