"""A thin, explicit git runner.

Every command runs in a directory it names, with settings that keep results independent of
the user's git configuration: no signing, no hooks, no colour, fixed diff options.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NoReturn, Optional, Sequence

from rebaser.errors import ExitCode, RebaserError

Person = tuple[str, str]  # name, email
# The committer of everything rebaser writes (authors come from the patches), and the
# author of the commits rebaser makes on its own (saved work, PyPI releases, histories).
FORKKIT_IDENTITY: Person = ("dsa-forkkit", "dsa-forkkit@localhost")
FORKKIT_AUTHOR = "{} <{}>".format(*FORKKIT_IDENTITY)


def committer_env(date: Optional[str] = None) -> dict[str, str]:
    """rebaser as the committer, at `date` (None: git's clock, or the author date where git
    is told to use it). The only place a commit's identity is spelled out: every commit
    rebaser makes is reproducible from its author and date, whatever the user's config."""
    name, email = FORKKIT_IDENTITY
    env = {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    if date:
        env["GIT_COMMITTER_DATE"] = date
    return env


def commit_env(date: Optional[str], author: Optional[Person] = None) -> dict[str, str]:
    """A commit by `author` (None: rebaser itself) at `date`, committed by rebaser then."""
    name, email = author or FORKKIT_IDENTITY
    env = {**committer_env(date), "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return env


def commit_tree(
    git: "Git",
    tree: str,
    parents: Sequence[str],
    message: str,
    *,
    author: Optional[Person] = None,
    date: Optional[str] = None,
) -> str:
    """A commit of `tree` on `parents`, not on any branch; its id."""
    parent_args = [arg for parent in parents for arg in ("-p", parent)]
    made = git.run(
        "commit-tree",
        tree,
        *parent_args,
        "-F",
        "-",
        env=commit_env(date, author),
        stdin=message.encode(),
    )
    return made.stdout.strip()


def commit_text(tree: str, parents: Sequence[str], message: str) -> bytes:
    """The commit `commit_tree` makes of the tree id `tree` on `parents` with no author or
    date given (rebaser's, at git's clock and time zone now), as git stores it: for a
    writer of loose objects that spares the process (repo/commits.py)."""
    name, email = FORKKIT_IDENTITY
    now = int(time.time())
    offset = time.localtime(now).tm_gmtoff // 60
    zone = f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    person = f"{name} <{email}> {now} {zone}"
    return (
        f"tree {tree}\n"
        + "".join(f"parent {parent}\n" for parent in parents)
        + f"author {person}\ncommitter {person}\n\n{message}"
    ).encode()


def picked_commit_text(tree: str, parent: str, author: bytes, message: bytes) -> bytes:
    """The commit `git rebase --committer-date-is-author-date` makes of a commit by
    `author` (its author line's value, `name <email> seconds zone`) with `message`: rebaser
    as the committer, at the author's date (steps/fastlane.py writes it as an object)."""
    name, email = FORKKIT_IDENTITY
    date = author.rsplit(b">", 1)[1].strip()
    committer = f"{name} <{email}>".encode()
    return (
        b"tree %s\nparent %s\nauthor %s\ncommitter %s %s\n\n"
        % (tree.encode(), parent.encode(), author, committer, date)
        + message
    )


# ort follows renames (of files and folders) only when asked: the neutral config below turns
# diff renames off, and git leaves a folder rename to the user unless told to follow it.
# Every cherry-pick rebaser makes, in a worktree or as a merge of trees, follows them.
FOLLOW_RENAMES = ("-c", "merge.renames=true", "-c", "merge.directoryRenames=true")


# Every git command rebaser runs behaves the same whatever the user's global, system or
# repository config says (`-c` wins over all three, and over GIT_CONFIG_* in the
# environment). Each setting below would otherwise change a result: a commit, a patch's
# bytes, a stop, a recorded resolution, or whether a command runs at all. Settings that
# describe the machine (core.fileMode, core.symlinks, core.ignoreCase, safe.directory,
# core.excludesFile: what counts as noise in a worktree) and the repository's own
# .gitattributes stay the user's: they hold for `git rebase` too.
NEUTRAL_SETTINGS: dict[str, str] = {
    # no signing, hooks, daemons or editors: nothing that may fail, wait or print for us
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "merge.verifySignatures": "false",
    "log.showSignature": "false",
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "user.useConfigOnly": "false",  # rebaser names every identity in the environment
    "init.templateDir": "",
    "init.defaultBranch": "main",
    # bytes stay bytes: no line-ending or filter conversion from the user's attributes
    "core.autocrlf": "false",
    "core.safecrlf": "false",
    "core.attributesFile": "/dev/null",
    "core.bigFileThreshold": "512m",  # git's default: what counts as a binary diff
    # `diff --check`: git's defaults, but a CR before a line end is a line end (CRLF files)
    "core.whitespace": "blank-at-eol,blank-at-eof,space-before-tab,cr-at-eol",
    "core.quotePath": "true",
    "core.abbrev": "auto",  # shas in conflict markers
    "core.commentChar": "#",
    "core.sparseCheckout": "false",  # late_checkout asks for it where it wants it
    "core.sparseCheckoutCone": "false",
    "core.splitIndex": "false",
    "index.sparse": "false",
    "i18n.commitEncoding": "UTF-8",
    "i18n.logOutputEncoding": "UTF-8",
    # commit messages as given, never cleaned up (`git commit` and git's sequencer)
    "commit.cleanup": "verbatim",
    "commit.verbose": "false",
    # diff output: the stable export's rules (series/export.py), and plain text
    "diff.noprefix": "false",
    "diff.mnemonicPrefix": "false",
    "diff.renames": "false",
    "diff.algorithm": "myers",
    "diff.context": "3",
    "diff.interHunkContext": "0",
    "diff.indentHeuristic": "true",
    "diff.suppressBlankEmpty": "false",
    "diff.relative": "false",
    "diff.orderFile": "/dev/null",
    # Not a command: a `git diff` that prints patch text must pass --no-ext-diff.
    "diff.external": "",
    "diff.submodule": "short",
    "diff.colorMoved": "no",
    "status.renames": "false",
    # `git grep` prints a match as `rev:file\0name`, no line or column between
    "grep.lineNumber": "false",
    "grep.column": "false",
    "log.mailmap": "false",
    "color.ui": "false",
    **{f"color.{kind}": "false" for kind in ("diff", "status", "branch", "decorate", "advice")},
    "format.coverLetter": "false",
    "format.signOff": "false",
    "format.useAutoBase": "false",
    "format.notes": "false",
    "format.from": "false",
    "format.forceInBodyFrom": "false",
    "format.encodeEmailHeaders": "true",
    "format.mboxrd": "false",
    # applying and merging: exactly, as git does by default, with nothing remembered
    "apply.whitespace": "warn",
    "apply.ignoreWhitespace": "no",
    "merge.conflictStyle": "merge",  # the stop's markers, and so the resolutions' ids
    "merge.renormalize": "false",
    "merge.renameLimit": "7000",  # git's default: which renames ort follows
    "rerere.enabled": "false",
    "rerere.autoUpdate": "false",
    "submodule.recurse": "false",
    "fetch.recurseSubmodules": "false",
    "branch.autoSetupMerge": "false",  # `checkout -B` writes no tracking config
    "worktree.guessRemote": "false",
    "add.ignoreErrors": "false",
    # git's sequencer (the fast lane's `git rebase`) picks the commits and nothing else
    "rebase.backend": "merge",
    "rebase.autoSquash": "false",
    "rebase.autoStash": "false",
    "rebase.updateRefs": "false",
    "rebase.missingCommitsCheck": "ignore",
    "rebase.forkPoint": "false",
    "rebase.rebaseMerges": "false",
    "rebase.stat": "false",
    "advice.detachedHead": "false",
    # No housekeeping started in the middle of an apply (gc may detach and compete with
    # it); the user's next git command runs it.
    "maintenance.auto": "false",
    "gc.auto": "0",
}
_NEUTRAL_CONFIG = tuple(
    part for key, value in NEUTRAL_SETTINGS.items() for part in ("-c", f"{key}={value}")
)
# Environment variables that change what git writes or shows, as config would.
_BEHAVIOUR_VARIABLES = frozenset(
    {
        "GIT_EXTERNAL_DIFF",
        "GIT_DIFF_OPTS",
        "GIT_NOTES_REF",
        "GIT_NOTES_DISPLAY_REF",
        "GIT_ATTR_SOURCE",
        # how a pathspec reads (and git refuses --literal-pathspecs beside the first two)
        "GIT_GLOB_PATHSPECS",
        "GIT_ICASE_PATHSPECS",
        "GIT_NOGLOB_PATHSPECS",
        "GIT_LITERAL_PATHSPECS",
    }
)


# A command line holds a few MiB of arguments, each under 128 KiB (Linux's MAX_ARG_STRLEN):
# file names listed past these go unnamed (the caller asks git about all files instead).
_MANY_PATHS = 200_000  # characters of file names in all
_LONGEST_PATH = 100_000  # bytes of one


def nameable(listed: str) -> Optional[list[str]]:
    """The paths of a NUL-separated listing (`git diff --name-only -z`), when a command
    line can name them all: not too many characters, no path too long for one argument,
    every path UTF-8 (git's bytes that are not come as U+FFFD: no argument spells them)."""
    if len(listed) > _MANY_PATHS or "\ufffd" in listed:
        return None
    paths = [path for path in listed.split("\0") if path]
    if any(len(path.encode()) > _LONGEST_PATH for path in paths):
        return None
    return paths


_LOCATION_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_PREFIX",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    }
)


@dataclass(frozen=True)
class GitResult:
    status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0


def _batchable(name: str) -> bool:
    """Whether `cat-file --batch` reads the name as given: it reads a name a line (one
    holding a newline would be two), and drops a carriage return at a line's end."""
    return "\n" not in name and not name.endswith("\r")


class Git:
    """Runs git in one directory (a worktree, or a git dir for bare repositories)."""

    def __init__(self, path: Path | str, env: Optional[Mapping[str, str]] = None) -> None:
        self.path = Path(path)
        self.env = dict(env or {})  # for every command (e.g. alternates to read objects from)

    def run(
        self,
        *args: str,
        check: bool = True,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[bytes] = None,
    ) -> GitResult:
        completed = self._completed(args, env, stdin)
        result = GitResult(
            completed.returncode,
            completed.stdout.decode("utf-8", errors="replace"),
            completed.stderr.decode("utf-8", errors="replace"),
        )
        if check and not result.ok:
            self._failed(args, result)
        return result

    def output_bytes(self, *args: str, stdin: Optional[bytes] = None) -> bytes:
        """A command's stdout as git wrote it (file contents: sizes count bytes)."""
        completed = self._completed(args, None, stdin)
        if completed.returncode != 0:
            stdout, stderr = (
                out.decode("utf-8", "replace") for out in (completed.stdout, completed.stderr)
            )
            self._failed(args, GitResult(completed.returncode, stdout, stderr))
        return completed.stdout

    def _failed(self, args: tuple[str, ...], result: GitResult) -> NoReturn:
        raise RebaserError(
            f"git {' '.join(args)} failed ({result.status})"
            + _output("stdout", result.stdout)
            + _output("stderr", result.stderr),
            where=str(self.path),
            code=ExitCode.ENVIRONMENT,
        )

    def blobs(self, names: Sequence[str], kind: str = "blob") -> dict[str, Optional[bytes]]:
        """Each object name (`<sha>`, `<rev>:<path>`) -> its bytes when it is a blob (or
        another `kind` of object: "commit"), else None (missing, or not of that kind), in
        one `cat-file --batch`; each name once, in the order first given."""
        if not names:
            return {}
        unique = list(dict.fromkeys(names))
        batched = [name for name in unique if _batchable(name)]
        # a path that is not UTF-8 is held as Python holds file names (surrogate escapes)
        stdin = "".join(f"{n}\n" for n in batched).encode("utf-8", "surrogateescape")
        out = self.output_bytes("cat-file", "--batch", stdin=stdin) if batched else b""
        found: dict[str, Optional[bytes]] = {}
        cursor = 0
        for name in batched:
            end = out.index(b"\n", cursor)
            line = out[cursor:end]
            cursor = end + 1
            if line.endswith((b" missing", b" ambiguous")):  # "<name> missing": no content
                found[name] = None
                continue
            header = line.split()  # "<sha> <type> <size>"
            if len(header) == 3 and header[1] == kind.encode():
                size = int(header[2])
                found[name] = out[cursor : cursor + size]
                cursor += size + 1
            else:
                found[name] = None
                if len(header) == 3:  # another kind of object: its content follows too
                    cursor += int(header[2]) + 1
        for name in unique:
            if not _batchable(name):  # `cat-file <kind>` fails for what is of another kind
                alone = self._completed(("cat-file", kind, name), None, None)
                found[name] = alone.stdout if alone.returncode == 0 else None
        return {name: found[name] for name in unique}

    def _completed(
        self, args: tuple[str, ...], env: Optional[Mapping[str, str]], stdin: Optional[bytes]
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            completed = subprocess.run(
                self.command(*args),
                cwd=self.path,
                env=self.environment(env),
                input=stdin,
                capture_output=True,
            )
        except FileNotFoundError as exc:
            if not self.path.is_dir():  # the folder to run in, not git, is what is missing
                raise RebaserError(
                    f"the folder {self.path} does not exist (moved or deleted?)",
                    next_step="`rebaser status` says what rebaser expected there",
                ) from None
            raise RebaserError(
                "git is not installed or not on PATH",
                next_step="install git (2.30 or newer)",
                code=ExitCode.ENVIRONMENT,
            ) from exc
        if completed.returncode < 0:
            # Killed by a signal (a terminal's Ctrl-C reaches git too): what it wrote is no
            # answer, even to a caller that reads a failure as "none found".
            raise RebaserError(
                f"git {_subcommand(args)} was killed by signal {-completed.returncode}",
                where=str(self.path),
                next_step="run the command again; `rebaser status` says where an apply stands",
                code=ExitCode.ENVIRONMENT,
            )
        return completed

    @staticmethod
    def command(*args: str) -> list[str]:
        """The command line of a git command as rebaser runs it (the neutral config)."""
        return ["git", *_NEUTRAL_CONFIG, *args]

    def environment(self, env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """The environment a git command runs in: this Git's and `env` over the process's."""
        # Repository-locating variables (set e.g. by `git bisect run` for its command) would
        # redirect every command to that repository; each Git names its own directory.
        full_env = {
            key: value
            for key, value in os.environ.items()
            if key not in _LOCATION_VARIABLES and key not in _BEHAVIOUR_VARIABLES
        }
        full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **self.env})
        if env:
            full_env.update(env)
        return full_env

    def serving(self, *args: str) -> "subprocess.Popen[bytes]":
        """A long-running git command that answers requests written to its stdin
        (`--stdin`, `--batch-check`); end it with `ended`."""
        return subprocess.Popen(
            self.command(*args),
            cwd=self.path,
            env=self.environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def out(self, *args: str, env: Optional[Mapping[str, str]] = None) -> str:
        return self.run(*args, env=env).stdout.strip()

    def rev_parse(self, rev: str) -> Optional[str]:
        """The commit a revision names, or None."""
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return result.stdout.strip() if result.ok else None

    def common_dir(self) -> Path:
        # A main checkout's .git folder is its own common dir (a linked worktree's `.git` is a
        # file, its git dir names another in `commondir`): no process for that, the usual case.
        dot_git = self.path / ".git"
        if dot_git.is_dir() and not (dot_git / "commondir").exists():
            return dot_git.resolve()
        return (self.path / self.out("rev-parse", "--git-common-dir")).resolve()

    def ref_exists(self, ref: str) -> bool:
        return self.run("show-ref", "--verify", "--quiet", ref, check=False).ok

    def status_porcelain(self) -> list[str]:
        """Changed, staged and untracked (not ignored) paths, one `git status` line each."""
        out = self.run("status", "--porcelain=v1", "--untracked-files=all").stdout
        return [line for line in out.splitlines() if line.strip()]

    def discard_changes(self, to: str = "HEAD") -> None:
        """Back to commit `to`: tracked changes and untracked files go, ignored files stay.
        Callers make sure nothing of the user's is among them (a clean tree, or a backup)."""
        self.run("reset", "--quiet", "--hard", to, "--")  # "--": a file may be named HEAD
        self.run("clean", "--quiet", "-d", "--force")

    def unmerged_paths(self) -> list[str]:
        return sorted(set(self.changed_paths("--diff-filter=U")))

    def changed_paths(self, *args: str) -> list[str]:
        """`git diff --name-only` with `args`, each path as it is (a space, or a byte git
        would quote, kept; one that is not UTF-8 as Python holds file names)."""
        out = self.output_bytes("diff", "--name-only", "-z", *args)
        return [path.decode("utf-8", "surrogateescape") for path in out.split(b"\0") if path]

    def commit(self, message: str, *, author: str, date: str, allow_empty: bool = False) -> str:
        """Commit the index (or `paths`) with a fixed committer, so shas are reproducible."""
        self.run(
            "commit",
            "--quiet",
            "--no-verify",
            "--allow-empty-message",
            *(["--allow-empty"] if allow_empty else []),
            f"--author={author}",
            "--cleanup=verbatim",
            "-F",
            "-",
            env=commit_env(date),  # --author overrides the author's name and email
            stdin=message.encode(),
        )
        return self.out("rev-parse", "HEAD")


def _subcommand(args: Sequence[str]) -> str:
    """The git command of a command line (its options and `-c` settings left out)."""
    words = iter(args)
    for word in words:
        if word == "-c":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return " ".join(args)


def _output(name: str, text: str, limit: int = 2000) -> str:
    """A failed command's output for its error message (git says some failures on stdout)."""
    text = text.strip()
    if len(text) > limit:
        text = "..." + text[-limit:]
    return f"\n  {name}: " + text.replace("\n", "\n    ") if text else f"\n  {name}: (empty)"


def find_repo(path: Path) -> Optional[Git]:
    """The git repository containing `path` (its worktree; a bare repository's git dir,
    where rebaser works in worktrees of its own), or None. git itself is asked: GitPython
    cost 0.1 s of import at every command for this alone."""
    if not path.is_dir():
        return None
    if (path / ".git").is_dir():  # a checkout's top, as most --repo are: no process
        return Git(path.resolve())
    top = Git(path).run("rev-parse", "--show-toplevel", check=False)
    if top.ok and top.stdout.strip():
        return Git(top.stdout.rstrip("\n"))
    bare = Git(path).run("rev-parse", "--is-bare-repository", "--absolute-git-dir", check=False)
    if bare.ok and bare.stdout.startswith("true\n"):
        return Git(bare.stdout.splitlines()[1])
    return None


def ended(process: "Optional[subprocess.Popen[bytes]]") -> None:
    """Close a serving git command's input and wait for it to end (a dead one's broken pipe
    is no error)."""
    if process is None:
        return
    assert process.stdin is not None
    try:
        process.stdin.close()
    except OSError:
        pass
    process.wait()
