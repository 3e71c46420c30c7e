"""Synthetic upstream repositories and series built from real commits, for rebaser's tests."""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rebaser.repo.git import Git
from rebaser.series.export import export_patch

AUTHOR = "Test Author <test@example.com>"
DATE = "Mon, 2 Nov 2026 10:00:00 +0000"


def commit_verbatim(repo: Path, message: str, *, author: str, date: Optional[str] = None) -> str:
    """Commit the index with exactly `message` (no cleanup), by `author`; the new sha."""
    dated = [f"--date={date}"] if date else []
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--cleanup=verbatim"]
        + [f"--author={author}", *dated, "-F", "-"],
        cwd=repo,
        input=message.encode(),
        check=True,
    )
    return git(repo, "rev-parse", "HEAD")


def commit_files(repo: Path, files: dict[str, Optional[str]], message: str) -> str:
    """Commit `files` (path -> text; None deletes it), or nothing; the new sha."""
    for name, text in files.items():
        if text is None:
            git(repo, "rm", "-q", name)
            continue
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
        git(repo, "add", name)
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


CALC = '''\
"""A tiny upstream module."""


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def neg(a):
    return -a
'''


@dataclass
class SyntheticUpstream:
    """A git repository standing in for Megatron-LM, with tags for its 'releases'."""

    path: Path

    def write(self, files: dict[str, Optional[str]]) -> None:
        """Each file's text; None deletes it."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def commit(
        self, files: dict[str, Optional[str]], message: str, tag: Optional[str] = None
    ) -> str:
        self.write(files)
        git(self.path, "add", "--all")
        git(self.path, "commit", "-qm", message)
        if tag:
            git(self.path, "tag", tag)
        return git(self.path, "rev-parse", "HEAD")

    def read(self, name: str, rev: str = "HEAD") -> str:
        return git(self.path, "show", f"{rev}:{name}") + "\n"


@dataclass
class Change:
    """One patch of a synthetic series: files after the change, and its trailers."""

    subject: str
    files: dict[str, str]
    codemod: Optional[str] = None
    symbols: list[str] = field(default_factory=list)


def build_series(
    root: Path,
    upstream: SyntheticUpstream,
    base: str,
    changes: list[Change],
    *,
    overlay: Optional[dict[str, str]] = None,
    name: str = "demo",
    extra_directives: str = "",
) -> Path:
    """Commit each change on a scratch branch from `base`, export it, and write the series."""
    patches_dir = root / "patches"
    patches_dir.mkdir(parents=True)
    git(upstream.path, "checkout", "-q", "-b", "scratch-series", base)
    names = []
    try:
        for number, change in enumerate(changes, start=1):
            upstream.write(change.files)
            trailers = ([f"Forkkit-Codemod: {change.codemod}"] if change.codemod else []) + [
                f"Forkkit-Symbol: {symbol}" for symbol in change.symbols
            ]
            message = change.subject + ("\n\n" + "\n".join(trailers) if trailers else "") + "\n"
            git(upstream.path, "add", "--all")
            subprocess.run(
                [
                    "git",
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "commit",
                    "-q",
                    f"--author={AUTHOR}",
                    f"--date={DATE}",
                    "-F",
                    "-",
                ],
                cwd=upstream.path,
                input=message,
                text=True,
                check=True,
            )
            patch_name = f"{number:04d}-change-{number}.patch"
            (patches_dir / patch_name).write_text(export_patch(Git(upstream.path), "HEAD"))
            names.append(patch_name)
    finally:
        git(upstream.path, "checkout", "-q", "main")
        git(upstream.path, "branch", "-q", "-D", "scratch-series")
    directives = f"@name {name}\n"
    if overlay is not None:
        overlay_dir = root / "overlay"
        for rel, text in overlay.items():
            (overlay_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (overlay_dir / rel).write_text(textwrap.dedent(text))
        directives += "@overlay ../overlay\n"
    series = patches_dir / "series"
    series.write_text(
        "# synthetic series\n" + directives + extra_directives + "\n".join(names) + "\n"
    )
    return series


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


ADD_DOC = edit(CALC, "def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n')
DOUBLE_MUL = edit(ADD_DOC, "    return a * b\n", "    return 2 * a * b\n")
DOUBLED = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")  # mul alone


def calc_series(
    tmp_path: Path, upstream: SyntheticUpstream, versions: list[tuple[str, str]], **kwargs
) -> Path:
    """One patch per (subject, pkg/calc.py after it), in tmp_path/proj, exported against v1."""
    changes = [Change(subject, {"pkg/calc.py": text}) for subject, text in versions]
    return build_series(tmp_path / "proj", upstream, "v1", changes, **kwargs)


def two_patch_series(tmp_path: Path, upstream: SyntheticUpstream, **kwargs) -> Path:
    """Two patches on pkg/calc.py, exported against v1 (the second builds on the first)."""
    versions = [("demo: document add", ADD_DOC), ("demo: double mul", DOUBLE_MUL)]
    return calc_series(tmp_path, upstream, versions, **kwargs)


def apply_args(series: Path, upstream: SyntheticUpstream, base: str, *extra: str) -> list[str]:
    """`rebaser apply` arguments for a series onto a revision of a synthetic upstream, no tests."""
    return [
        "apply",
        "--series",
        str(series),
        "--repo",
        str(upstream.path),
        "--base",
        base,
        "--test",
        "none",
        *extra,
    ]


def apply(rebaser, series: Path, upstream: SyntheticUpstream, base: str, *extra: str):
    return rebaser(*apply_args(series, upstream, base, *extra))


def history(
    upstream: SyntheticUpstream, breaking_at: int, breaking_files: dict[str, str], count: int = 20
) -> list[str]:
    """`count` commits on main after v1; commit number `breaking_at` writes `breaking_files`."""
    shas = []
    for number in range(1, count + 1):
        files = {"pkg/other.py": f"VERSION = {number}\n"}
        if number == breaking_at:
            files.update(breaking_files)
        shas.append(upstream.commit(files, f"commit {number}"))
    return shas
