"""Where upstream comes from: a user's Megatron-LM clone, or a PyPI release in the cache."""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rebaser.config import cache_dir, wheels_dir
from rebaser.errors import RebaserError
from rebaser.repo.git import Git, find_repo

if TYPE_CHECKING:  # imported on use: HTTP and TLS cost every command 15 ms to load
    from rebaser.upstream.pypi import PypiUpstream

_VERSION_RE = re.compile(r"^\d+(\.\d+)+([a-z]+\d*|\.post\d+|rc\d+)?$")
_PYPI_RE = re.compile(r"^pypi:(?P<package>[A-Za-z0-9_.-]+)(==(?P<version>[^\s]+))?$")
_GIT_RE = re.compile(r"^git:(?P<sha>[0-9a-f]{4,64})$")


def pypi_cache(package: str) -> PypiUpstream:
    """The PyPI release cache; $DSA_FORKKIT_WHEELS may point at a shared wheel folder."""
    from rebaser.upstream.pypi import PypiUpstream

    return PypiUpstream(cache_dir(), package, wheels_dir())


@dataclass(frozen=True)
class PypiSpec:
    package: str
    version: Optional[str]

    @classmethod
    def parse(cls, text: str) -> Optional["PypiSpec"]:
        match = _PYPI_RE.match(text.strip())
        return cls(match["package"], match["version"]) if match else None

    def __str__(self) -> str:
        return f"pypi:{self.package}" + (f"=={self.version}" if self.version else "")


@dataclass(frozen=True)
class RecordedBase:
    """A series' `@base`, the upstream its patches were exported against, read once:
    `git:<sha>` (a commit of the fork's repository, as `rebaser import` writes it) or
    `pypi:<package>[==<version>]` (a release)."""

    text: str
    commit: Optional[str] = None
    release: Optional[PypiSpec] = None

    @classmethod
    def parse(cls, text: str) -> Optional["RecordedBase"]:
        text = text.strip()
        if match := _GIT_RE.match(text):
            return cls(text, commit=match["sha"])
        spec = PypiSpec.parse(text)
        return cls(text, release=spec) if spec else None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Target:
    """The repository to work in and the base commit to apply onto."""

    git: Git
    base_rev: str
    base_sha: str
    label: str  # short, branch-safe name of the base
    description: str


def resolve_target(
    *,
    repo: Optional[Path],
    upstream: Optional[str],
    base: Optional[str],
    default_upstream: Optional[RecordedBase],
) -> Target:
    """Resolve --repo/--upstream/--base into a target; unknown bases are usage errors."""
    if repo is not None and upstream is not None:
        raise RebaserError(
            "--repo and --upstream are alternatives",
            next_step="give --repo PATH for a Megatron-LM clone, or --upstream pypi:megatron-core==X",
        )
    if repo is not None:
        if base is None:
            raise RebaserError(
                "--base is required with --repo", next_step="e.g. --base core_v0.19.0"
            )
        return _resolve_in_clone(repo, base)
    if upstream is not None:
        spec = PypiSpec.parse(upstream)
        if spec is None:
            raise RebaserError(
                f"cannot read upstream {upstream!r}",
                next_step="write it as pypi:megatron-core==0.19.2 (or pypi:megatron-core for the "
                "newest)",
            )
        if spec.version is None or base is None or base == spec.version:
            return resolve_pypi(spec, base)
        # A revision may name the pinned release itself (its tag, its commit).
        pinned = None if _VERSION_RE.match(base) else resolve_pypi(spec)
        if pinned is None or resolve_pypi(spec, base).base_sha != pinned.base_sha:
            raise RebaserError(
                f"--upstream {upstream} pins {spec.version}, and --base says {base}",
                next_step=f"give one: --upstream {spec} alone, "
                f"or --upstream pypi:{spec.package} --base {base}",
            )
        return pinned
    if default_upstream is None:
        raise RebaserError(
            "no upstream given and the series names no @base",
            next_step="give --repo PATH --base REV, or --upstream pypi:megatron-core==X",
        )
    if default_upstream.release is None:
        raise RebaserError(
            f"the series' @base {default_upstream} is a commit of a git repository, not a release",
            next_step="give --repo PATH (the repository holding it) and --base REV (where to apply)",
        )
    return resolve_pypi(default_upstream.release, base)


def resolve_pypi(spec: PypiSpec, base: Optional[str] = None) -> Target:
    cache = pypi_cache(spec.package)
    version = spec.version
    if base is not None and _VERSION_RE.match(base):
        version = base
    elif base is not None:
        sha = cache.git.rev_parse(base)
        if sha is None:
            _refuse_ambiguous(cache.git, base)
            raise RebaserError(
                f"unknown base {base!r} for {spec}",
                next_step="give a release version such as --base 0.19.1",
            )
        return Target(cache.git, base, sha, _label(base), f"{spec} at {base}")
    release = cache.materialise(version)
    pinned = PypiSpec(spec.package, release.version)
    description = f"{pinned} (PyPI wheel)"
    reason = cache.yanked(release.version)
    if reason is not None:
        # Used as asked, as pip installs a yanked release pinned exactly (PEP 592); said.
        why = f": {reason}" if reason else ""
        description = f"{pinned} (PyPI wheel, yanked{why})"
        print(
            f"rebaser: warning: {pinned} is yanked on PyPI{why}; using it as asked",
            file=sys.stderr,
        )
    return Target(
        git=cache.git,
        base_rev=f"refs/tags/{cache.tag(release.version)}",
        base_sha=release.sha,
        label=_label(release.label),
        description=description,
    )


def _resolve_in_clone(repo: Path, base: str) -> Target:
    git = find_repo(repo.expanduser())
    if git is None:
        there = "is not inside a git repository" if repo.expanduser().exists() else "does not exist"
        raise RebaserError(f"{repo} {there}", next_step="point --repo at a Megatron-LM clone")
    sha = git.rev_parse(base)
    if sha is None:
        _refuse_ambiguous(git, base)
        kind = git.run("cat-file", "-t", base, check=False).stdout.strip()
        if kind in ("tree", "blob"):  # it exists, but a branch is built on a commit
            raise RebaserError(
                f"base {base!r} is a {kind}, not a commit",
                where=str(git.path),
                next_step="name the commit (a sha from `git log`, a tag or a branch)",
            )
        names = git.out(
            "for-each-ref", "--format=%(refname:short)", "refs/tags", "refs/heads", "refs/remotes"
        ).split()
        close = difflib.get_close_matches(base, names, n=5, cutoff=0.5)
        hint = f"did you mean: {', '.join(close)}?" if close else "fetch it first: git fetch --tags"
        raise RebaserError(
            f"unknown base {base!r}: not a commit, tag or branch",
            where=str(git.path),
            next_step=hint,
        )
    # The report shows the sha itself; a description names what the user asked for.
    named_by_sha = re.fullmatch(r"[0-9a-f]{7,40}", base) and sha.startswith(base)
    where = str(git.path) if named_by_sha else f"{git.path} at {base}"
    return Target(git, base, sha, _label(base), where)


def _refuse_ambiguous(git: Git, rev: str) -> None:
    """A short sha naming several commits gets its own message (`rev-parse --quiet` says only
    "unknown"), with git's list of candidates."""
    stderr = git.run("rev-parse", "--verify", f"{rev}^{{commit}}", check=False).stderr
    if "is ambiguous" not in stderr:
        return
    candidates = [
        line.removeprefix("hint:").strip()
        for line in stderr.splitlines()
        if re.match(r"hint:\s+[0-9a-f]{4,} ", line)
    ]
    raise RebaserError(
        f"base {rev!r} is ambiguous: it is the start of several objects' ids"
        + (f" ({'; '.join(candidates[:6])})" if candidates else ""),
        where=str(git.path),
        next_step="give more characters of the sha",
    )


def _label(rev: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", rev.removeprefix("refs/tags/")).strip("-.") or "base"
