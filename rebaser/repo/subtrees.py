"""Trees cut down to some of their paths, for probes that ask only about those paths.

A bisection's probe (carry/collision.py) asks whether a patch conflicts in a few files, yet
a merge of whole trees content-merges every file both sides change and, for a file one
side deleted, compares it with every file the other side added. A merge of trees holding
only the files that decide the answer costs a fraction of that on Megatron-LM. Entries are
read from the tree objects themselves (one long-running `git cat-file --batch`): their
modes, submodules and names exactly as git stores them. The cut trees are written as loose
objects (repo/commits.py), so only in a scratch repository.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Collection, Optional

from rebaser.repo.commits import Commits
from rebaser.repo.git import ended

Entry = tuple[bytes, str]  # (mode, object id)
_FOLDER = b"40000"


class Unreadable(Exception):
    """A path the cut cannot read: a name git gave as other bytes than UTF-8, or git's
    answer failed. The caller merges the whole trees."""


class Subtrees:
    """Reads and cuts trees; threads may share it. Close it to end its git process."""

    def __init__(self, commits: Commits) -> None:
        self.commits = commits
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._trees: dict[str, dict[bytes, Entry]] = {}  # tree id -> its entries, by name
        self._roots: dict[str, str] = {}  # a tree's name -> its id
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        ended(process)

    def holds(self, tree: str, path: str) -> bool:
        """Whether `tree` (a name of a tree or commit) has `path` (a file, a folder, a
        submodule). Raises Unreadable."""
        return self.entry(tree, path) is not None

    def entry(self, tree: str, path: str) -> Optional[Entry]:
        """`path`'s entry in `tree`; None when it has none. Raises Unreadable."""
        if "\ufffd" in path:  # git's name was not UTF-8: these bytes are not its name
            raise Unreadable(path)
        with self._lock:
            try:
                folder: Optional[str] = self._root(tree)
                *folders, name = path.encode("utf-8", "surrogateescape").split(b"/")
                for part in folders:
                    if folder is None:
                        return None
                    found = self._entries(folder).get(part)
                    folder = found[1] if found and found[0] == _FOLDER else None
                return None if folder is None else self._entries(folder).get(name)
            except (OSError, EOFError, ValueError) as failed:  # its answers may be out of step
                process, self._process = self._process, None
                ended(process)
                raise Unreadable(path) from failed

    def cut(self, tree: str, paths: Collection[str]) -> Optional[str]:
        """The id of a tree holding only `paths` of `tree` (those it has), each entry as
        `tree` holds it; None where it cannot be written (not a scratch repository, git
        failed). Raises Unreadable."""
        found = {path: self.entry(tree, path) for path in paths}
        return self.commits.tree({path: entry for path, entry in found.items() if entry})

    def _root(self, name: str) -> str:
        if name not in self._roots:
            found = self.commits.tree_of(f"{name}^{{tree}}")
            if found is None:  # our names are all trees or commits: git failed
                raise ValueError(f"no tree for {name}")
            self._roots[name] = found
        return self._roots[name]

    def _entries(self, tree: str) -> dict[bytes, Entry]:
        """A tree object's entries (read once)."""
        if tree not in self._trees:
            if self._process is None:
                self._process = self.commits.git.serving("cat-file", "--batch")
            assert self._process.stdin is not None and self._process.stdout is not None
            self._process.stdin.write(f"{tree}\n".encode())
            self._process.stdin.flush()
            header = self._process.stdout.readline().split()
            if len(header) != 3 or header[1] != b"tree":
                raise EOFError(f"git cat-file --batch said {b' '.join(header)!r} for {tree}")
            data = self._process.stdout.read(int(header[2]) + 1)[:-1]
            width = len(bytes.fromhex(tree))
            entries, at = {}, 0
            while at < len(data):
                space = data.index(b" ", at)
                end = data.index(b"\0", space)
                oid = data[end + 1 : end + 1 + width].hex()
                entries[data[space + 1 : end]] = (data[at:space], oid)
                at = end + 1 + width
            self._trees[tree] = entries
        return self._trees[tree]
