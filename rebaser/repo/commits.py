"""Commits written without a `git commit-tree` process each, for a bisection's probes.

A probe merges two commits made for it (carry/collision.py): trees on a parent made for
the probe, read by nothing but `git merge-tree`. A stop's triage on a real fork made 15 of
them, a process each (5 to 10 ms, one after the other). Here the trees are named by one
long-running `git cat-file --batch-check` and each commit is written as git writes a
loose object: its text (repo/git.py's commit_text, beside commit_tree: how a commit by
rebaser is spelled stays in one place) with a `commit <size>` header, zlib-deflated, in a
file named by its hash, put in place by a rename. Only into a scratch repository (repo/scratch.py: its own
objects folder, which nothing else reads, and no shared-repository permissions to keep);
elsewhere, where the environment sets a commit date, or where that process fails, each
commit is made by `git commit-tree` as before; a name that is no tree fails there as it
always did. Trees are written the same way for probes cut to a few paths (repo/subtrees.py).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Optional, Sequence

from rebaser.repo import tempdirs
from rebaser.repo.git import Git, commit_text, commit_tree, ended

# Where set, git writes elsewhere or at another date than a commit written here.
_REDIRECTING = frozenset(
    {"GIT_DIR", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY", "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"}
)


class Commits:
    """Commits by rebaser (as `commit_tree` with no author or date makes them) in `git`'s
    repository; threads may share it. Close it (or use it as a context manager) to end the
    git process."""

    def __init__(self, git: Git) -> None:
        self.git = git
        objects = git.path / ".git" / "objects"
        scratch = (git.path / tempdirs.OWNER).is_file() and objects.is_dir()
        redirected = _REDIRECTING & set(git.environment())
        self._objects: Optional[Path] = objects if scratch and not redirected else None
        self._hash = "sha256" if self._objects and _sha256(objects.parent / "config") else "sha1"
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._lock = threading.Lock()

    def __enter__(self) -> "Commits":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def commit(self, tree: str, parents: Sequence[str], message: str) -> str:
        """A commit of `tree` (a name of a tree object, `<commit>^{tree}`) on `parents`;
        its id."""
        with self._lock:
            if self._objects is not None:
                try:
                    found = self._tree(tree)
                    if found is not None:
                        return self._written(found, parents, message)
                except (OSError, EOFError, ValueError):
                    self._objects = None  # git's own process from now on
                    self._close()
        return commit_tree(self.git, tree, parents, message)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        process, self._process = self._process, None
        ended(process)

    def tree_of(self, name: str) -> Optional[str]:
        """The id of the tree `name` names; None when it names none, or git cannot say."""
        with self._lock:
            try:
                return self._tree(name)
            except (OSError, EOFError, ValueError):
                self._close()
                return None

    def tree(self, entries: dict[str, tuple[bytes, str]]) -> Optional[str]:
        """The id of a tree of `entries` (path -> (mode, id)), its folders written as
        needed; None outside a scratch repository (repo/subtrees.py)."""
        with self._lock:
            if self._objects is None:
                return None
            try:
                return self._nested(entries)
            except OSError:
                return None

    def _nested(self, entries: dict[str, tuple[bytes, str]]) -> str:
        here: dict[bytes, tuple[bytes, str]] = {}  # name -> (mode, id)
        below: dict[str, dict[str, tuple[bytes, str]]] = {}
        for path, entry in entries.items():
            folder, slash, rest = path.partition("/")
            if slash:
                below.setdefault(folder, {})[rest] = entry
            else:
                here[path.encode("utf-8", "surrogateescape")] = entry
        for folder, inside in below.items():
            here[folder.encode("utf-8", "surrogateescape")] = (b"40000", self._nested(inside))
        text = b"".join(  # git's order: a folder's name sorts as if it ended with "/"
            b"%s %s\0" % (mode, name) + bytes.fromhex(oid)
            for name, (mode, oid) in sorted(
                here.items(), key=lambda item: item[0] + (b"/" if item[1][0] == b"40000" else b"")
            )
        )
        return self._stored(text, b"tree")

    def _tree(self, name: str) -> Optional[str]:
        """The id of the tree `name` names; None when it names no tree (commit-tree then
        fails, saying why)."""
        if self._process is None:
            self._process = self.git.serving("cat-file", "--batch-check")
        assert self._process.stdin is not None and self._process.stdout is not None
        if "\n" in name:
            raise ValueError("a name of more than one line")
        self._process.stdin.write(f"{name}\n".encode())
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise EOFError("git cat-file --batch-check ended")
        fields = answer.decode().split()
        return fields[0] if len(fields) == 3 and fields[1] == "tree" else None

    def stored(self, text: bytes) -> str:
        """The commit whose text is exactly `text`; its id. A lane's commits keep their
        patch's author and message (steps/fastlane.py)."""
        with self._lock:
            if self._objects is not None:
                try:
                    return self._stored(text)
                except OSError:
                    self._objects = None
                    self._close()
        return self.git.run(
            "hash-object", "-t", "commit", "-w", "--stdin", stdin=text
        ).stdout.strip()

    def _written(self, tree: str, parents: Sequence[str], message: str) -> str:
        return self._stored(commit_text(tree, parents, message))

    def _stored(self, text: bytes, kind: bytes = b"commit") -> str:
        assert self._objects is not None
        stored = b"%s %d\0" % (kind, len(text)) + text
        oid = hashlib.new(self._hash, stored).hexdigest()
        path = self._objects / oid[:2] / oid[2:]
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix="tmp_obj_")
            with os.fdopen(handle, "wb") as file:
                file.write(zlib.compress(stored))
            os.chmod(temporary, 0o444)  # as git leaves its objects
            os.replace(temporary, path)
        return oid


def _sha256(config: Path) -> bool:
    """Whether a scratch repository (which `git init` made: its config is git's own writing)
    names its objects by SHA-256."""
    try:
        return "objectformat = sha256" in config.read_text(encoding="utf-8").lower()
    except OSError:
        return False
