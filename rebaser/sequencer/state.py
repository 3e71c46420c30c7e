"""The resumable state of an apply that stopped (or is running), kept in the repository.

It lives in `<git-common-dir>/forkkit/state.json`, so it travels with the repository and one
repository has at most one apply in progress. A small registry in the cache folder lets
`rebaser status/continue/abort` find it without arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rebaser.errors import RebaserError, machine_refused
from rebaser.repo.git import Git, find_repo
from rebaser.steps.records import StepRow, Stop
from rebaser.config import cache_dir
from rebaser.repo.workspace import forkkit_dir

STATE_VERSION = 1


class NothingInProgress(RebaserError):
    """`continue`/`abort` found no stopped apply."""


class InProgressElsewhere(NothingInProgress):
    """None in the repository of the current folder; one in another of the user's."""


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
    next_step: int = 0  # the plan's step to run next (0: the overlay; i: patch i, 1-based)
    steps: list[StepRow] = field(default_factory=list)  # the finished steps' rows
    stopped: Optional[Stop] = None  # why and where the apply stopped
    stopped_head: Optional[str] = None
    head: Optional[str] = None  # HEAD after the last finished step: where to resume from
    running: Optional[str] = None  # the step (or "verification", "tests") under way
    version: int = STATE_VERSION
    # Throwaway applies (verify, bisect) keep their state in memory only, so they never
    # disturb an apply the user has in progress in the same repository.
    ephemeral: bool = False
    keep_going: bool = False  # drop failing patches and go on (apply --keep-going, verify)
    fast_lane: bool = True  # carry runs of patches in one lane (apply --no-fast-lane)
    triage: bool = True  # keep/drop proposals on the report's rows (sequencer/proposals.py)
    retry_step: Optional[int] = None  # `rebaser retry`: the one step to run, then verification
    set_aside: Optional[str] = None  # a `skip`'s backup of the stop's work, until it ends

    @property
    def repo_git(self) -> Git:
        return Git(self.repo)

    def save(self) -> None:
        """Write the state (a new file renamed over the old: a failure keeps the last one)."""
        if self.ephemeral:
            return
        path = state_path(self.repo_git)
        tmp = path.with_suffix(".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
            tmp.replace(path)
            _registry_file(self.repo).parent.mkdir(parents=True, exist_ok=True)
            _registry_file(self.repo).write_text(self.repo + "\n")
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise machine_refused(
                "cannot save the apply's state",
                exc,
                exc.filename or path,
                "free space there (or make it writable); the apply stands as after an "
                "interruption: `rebaser continue` redoes the step under way, `rebaser status` "
                "says where it stands, `rebaser abort` drops it",
            ) from None

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
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BrokenState(repo, path, str(exc)) from None
    if not isinstance(data, dict):
        raise BrokenState(repo, path, "it is not a JSON object")
    if data.get("version") != STATE_VERSION:
        raise BrokenState(
            repo, path, f"it was written by another rebaser version ({data.get('version')})"
        )
    if wrong := _wrong_field(data):
        raise BrokenState(repo, path, f"{wrong} (not a state this rebaser writes)")
    try:
        stopped = data.pop("stopped", None)
        steps = [StepRow(**row) for row in data.pop("steps", [])]
        return ApplyState(**data, steps=steps, stopped=Stop.from_json(stopped) if stopped else None)
    except (TypeError, ValueError) as exc:
        raise BrokenState(repo, path, f"{exc} (not a state this rebaser writes)") from None


def _wrong_field(data: dict[str, Any]) -> Optional[str]:
    """The first field whose value is not of the type the state has there (JSON: a stop
    and the steps' rows are objects); unknown fields are left to the constructor."""
    hints = typing.get_type_hints(ApplyState)
    for name, value in data.items():
        if name in hints and not _is_a(value, hints[name]):
            return f"its {name} is {json.dumps(value)}"
    return None


def _is_a(value: Any, kind: Any) -> bool:
    if typing.get_origin(kind) is typing.Union:
        return any(_is_a(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is list:
        element = typing.get_args(kind)[0]
        return isinstance(value, list) and all(_is_a(item, element) for item in value)
    if kind in (Stop, StepRow):
        return isinstance(value, dict)
    return type(value) is kind  # an int is no bool, a bool no int


class BrokenState(RebaserError):
    """A state file that cannot be read: `abort` still cleans up what it can tell."""

    def __init__(self, repo: Git, path: Path, why: str) -> None:
        super().__init__(
            f"the apply state {path} cannot be read: {why}",
            next_step="`rebaser abort` removes the apply it belonged to (its commits are kept "
            "under refs/forkkit/backups/) and sets the file aside",
        )
        self.repo, self.path = repo, path

    def salvage(self) -> dict[str, str]:
        """The string fields still legible in the damaged file (a truncated one keeps its
        first fields: the branch and worktree among them)."""
        try:
            text = self.path.read_text(errors="replace")
        except OSError:
            return {}
        found = {}
        for key in ("repo", "branch", "worktree"):
            if match := re.search(rf'"{key}":\s*("(?:[^"\\]|\\.)*")', text):
                found[key] = json.loads(match.group(1))
        return found

    def set_aside(self) -> Path:
        """Move the damaged file (or whatever sits there) out of the way, keeping it."""
        kept = self.path.with_name(f"{self.path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
        self.path.rename(kept)
        return kept


def find_in_progress(repo_hint: Optional[Path]) -> ApplyState:
    """The apply to continue/abort: in `repo_hint`, the current directory, or the only one
    (from inside another repository, only one in rebaser's cache: a PyPI base's)."""
    inside = None  # the repository of the current folder, when it has no apply
    if repo_hint is not None:
        git = find_repo(repo_hint) or (Git(repo_hint) if (repo_hint / "HEAD").exists() else None)
        if git is None:
            raise RebaserError(f"{repo_hint} is not a git repository")
        states = [state for state in [load(git)] if state is not None]
    elif (here := find_repo(Path.cwd())) is not None and (found := load(here)) is not None:
        states = [found]  # read once (a stop's state holds every row so far)
    else:
        inside = here
        repos = [Git(path) for path in registered_repos()]
        states = [state for git in repos if (state := load(git)) is not None]
    if inside is not None:  # from another repository, only an apply in rebaser's cache
        cache = cache_dir().resolve()
        users = [s for s in states if not Path(s.repo).resolve().is_relative_to(cache)]
        if users:
            raise InProgressElsewhere(
                f"no apply is in progress in {inside.path}; one is, in {users[0].repo}",
                next_step=f"run the command there, or pass --repo {users[0].repo}",
            )
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
    repos = []
    for entry in sorted(folder.glob("*")):
        try:
            repos.append(Path(entry.read_text().strip()))
        except (OSError, UnicodeDecodeError):
            continue  # not a registry entry of ours (a folder, unreadable): nothing to find
    return [repo for repo in repos if repo.exists()]


def check_registry(repo: str) -> None:
    """Refuse, before anything is created, a registry entry that could not be written."""
    entry = _registry_file(repo)
    if entry.exists() and not entry.is_file():
        raise RebaserError(
            f"{entry} is a folder, where rebaser keeps a file noting the apply in progress",
            next_step="remove it (rebaser writes the file again), then run the command again",
        )


def _registry_file(repo: str) -> Path:
    return cache_dir() / "in-progress" / hashlib.sha1(repo.encode()).hexdigest()[:16]
