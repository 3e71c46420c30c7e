"""The resumable state of an apply that stopped (or is running), kept in the repository.

It lives in `<git-common-dir>/forkkit/state.json`, so it travels with the repository and one
repository has at most one apply in progress. A small registry in the cache folder lets
`rebaser status/continue/abort` find it without arguments.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rebaser.errors import RebaserError
from rebaser.git import Git, find_repo
from rebaser.records import Stop
from rebaser.upstream import cache_dir
from rebaser.workspace import forkkit_dir

STATE_VERSION = 1


class NothingInProgress(RebaserError):
    """`continue`/`abort` found no stopped apply."""


@dataclass
class ApplyState:
    series_file: str
    repo: str  # the repository's git dir (bare) or worktree path
    base_rev: str
    base_sha: str
    base_description: str
    branch: str
    worktree: str
    test: str
    json_report: Optional[str]
    python: str
    next_step: int = 0  # 0: the overlay; i: patch i of the series (1-based)
    steps: list[dict[str, Any]] = field(default_factory=list)
    stopped: Optional[Stop] = None  # why and where the apply stopped
    stopped_head: Optional[str] = None
    version: int = STATE_VERSION
    # Throwaway applies (verify, bisect) keep their state in memory only, so they never
    # disturb an apply the user has in progress in the same repository.
    ephemeral: bool = False

    @property
    def repo_git(self) -> Git:
        return Git(self.repo)

    def save(self) -> None:
        if self.ephemeral:
            return
        path = state_path(self.repo_git)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)
        _registry_file(self.repo).parent.mkdir(parents=True, exist_ok=True)
        _registry_file(self.repo).write_text(self.repo + "\n")

    def clear(self) -> None:
        if self.ephemeral:
            return
        state_path(self.repo_git).unlink(missing_ok=True)
        _registry_file(self.repo).unlink(missing_ok=True)


def state_path(repo: Git) -> Path:
    return forkkit_dir(repo) / "state.json"


def load(repo: Git) -> Optional[ApplyState]:
    path = state_path(repo)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("version") != STATE_VERSION:
        raise RebaserError(
            f"{path} was written by another rebaser version",
            next_step=f"finish it with that version, or remove {path} and the branch by hand",
        )
    try:
        stopped = data.pop("stopped", None)
        return ApplyState(**data, stopped=Stop.from_json(stopped) if stopped else None)
    except (TypeError, ValueError) as exc:
        raise RebaserError(
            f"{path} cannot be read: {exc}",
            next_step=f"finish it with the rebaser version that wrote it, or remove {path} "
            "and the branch by hand",
        ) from None


def find_in_progress(repo_hint: Optional[Path]) -> ApplyState:
    """The apply to continue/abort: in `repo_hint`, the current directory, or the only one."""
    candidates: list[Git] = []
    if repo_hint is not None:
        git = find_repo(repo_hint) or (Git(repo_hint) if (repo_hint / "HEAD").exists() else None)
        if git is None:
            raise RebaserError(f"{repo_hint} is not a git repository")
        candidates = [git]
    elif (here := find_repo(Path.cwd())) is not None and load(here) is not None:
        candidates = [here]
    else:
        candidates = [Git(path) for path in registered_repos()]
    states = [state for git in candidates if (state := load(git)) is not None]
    if not states:
        raise NothingInProgress(
            "no apply is in progress", next_step="start one with `rebaser apply`"
        )
    if len(states) > 1:
        raise RebaserError(
            "several applies are in progress: " + ", ".join(s.repo for s in states),
            next_step="say which with --repo PATH (a PyPI cache repository path works too)",
        )
    return states[0]


def registered_repos() -> list[Path]:
    folder = cache_dir() / "in-progress"
    if not folder.is_dir():
        return []
    repos = [Path(entry.read_text().strip()) for entry in sorted(folder.glob("*"))]
    return [repo for repo in repos if repo.exists()]


def _registry_file(repo: str) -> Path:
    return cache_dir() / "in-progress" / hashlib.sha1(repo.encode()).hexdigest()[:16]
