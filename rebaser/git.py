"""A thin, explicit git runner over GitPython.

Every command runs with settings that keep results independent of the user's git
configuration: no signing, no hooks, no colour, fixed diff options.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import git as gitpython

from rebaser.errors import ExitCode, RebaserError

# The committer of everything rebaser writes; authors come from the patches.
FORKKIT_IDENTITY = ("dsa-forkkit", "dsa-forkkit@localhost")

_NEUTRAL_CONFIG = (
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.autocrlf=false",
    "-c", "color.ui=false",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.renames=false",
    "-c", "advice.detachedHead=false",
    "-c", "init.defaultBranch=main",
)  # fmt: skip


@dataclass(frozen=True)
class GitResult:
    status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0


class Git:
    """Runs git in one directory (a worktree, or a git dir for bare repositories)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._runner = gitpython.Git(str(self.path))

    def run(
        self,
        *args: str,
        check: bool = True,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[bytes] = None,
    ) -> GitResult:
        full_env = dict(os.environ)
        full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
        if env:
            full_env.update(env)
        command = ["git", *_NEUTRAL_CONFIG, *args]
        try:
            status, out, err = self._runner.execute(
                command,
                with_extended_output=True,
                with_exceptions=False,
                env=full_env,
                istream=_as_stream(stdin),
                strip_newline_in_stdout=False,
            )
        except gitpython.exc.GitCommandNotFound as exc:
            raise RebaserError(
                "git is not installed or not on PATH",
                next_step="install git (2.30 or newer)",
                code=ExitCode.ENVIRONMENT,
            ) from exc
        result = GitResult(int(status), out, err)
        if check and not result.ok:
            raise RebaserError(
                f"git {' '.join(args)} failed ({result.status}): {result.stderr.strip()}",
                where=str(self.path),
                code=ExitCode.ENVIRONMENT,
            )
        return result

    def out(self, *args: str, env: Optional[Mapping[str, str]] = None) -> str:
        return self.run(*args, env=env).stdout.strip()

    def rev_parse(self, rev: str) -> Optional[str]:
        """The commit a revision names, or None."""
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return result.stdout.strip() if result.ok else None

    def common_dir(self) -> Path:
        return (self.path / self.out("rev-parse", "--git-common-dir")).resolve()

    def ref_exists(self, ref: str) -> bool:
        return self.run("show-ref", "--verify", "--quiet", ref, check=False).ok

    def status_porcelain(self) -> list[str]:
        """Changed, staged and untracked (not ignored) paths, one `git status` line each."""
        out = self.run("status", "--porcelain=v1", "--untracked-files=all").stdout
        return [line for line in out.splitlines() if line.strip()]

    def unmerged_paths(self) -> list[str]:
        out = self.run("diff", "--name-only", "--diff-filter=U").stdout
        return sorted(set(out.split()))

    def commit(self, message: str, *, author: str, date: str, allow_empty: bool = False) -> str:
        """Commit the index (or `paths`) with a fixed committer, so shas are reproducible."""
        name, email = FORKKIT_IDENTITY
        env = {
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": date,
            "GIT_AUTHOR_DATE": date,
        }
        self.run(
            "commit", "--quiet", "--no-verify", "--allow-empty-message",
            *(["--allow-empty"] if allow_empty else []),
            f"--author={author}", "--cleanup=verbatim", "-F", "-",
            env=env, stdin=message.encode(),
        )  # fmt: skip
        return self.out("rev-parse", "HEAD")


def _as_stream(data: Optional[bytes]):
    if data is None:
        return None
    stream = tempfile.TemporaryFile()
    stream.write(data)
    stream.seek(0)
    return stream


def find_repo(path: Path) -> Optional[Git]:
    """The git repository (worktree) containing `path`, or None."""
    try:
        top = gitpython.Repo(path, search_parent_directories=True).working_tree_dir
    except (gitpython.exc.InvalidGitRepositoryError, gitpython.exc.NoSuchPathError):
        return None
    return Git(top) if top else None
