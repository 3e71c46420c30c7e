"""A tree that moves from commit to commit, for a bisection's probes.

Each probe of a bisection runs tests in the files of one commit of the apply's branch.
Exporting a 3,000-file tree for each would write every file each time; this tree is
written once (with a private index, so nothing is registered in the repository and a kill
leaves no worktree behind) and then moved with `read-tree -m -u`, which writes only the
files that differ between the two commits.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator, Optional

from rebaser.repo import tempdirs
from rebaser.repo.git import Git


class ProbeTree:
    def __init__(self, repo: Git, folder: Path) -> None:
        self.repo = repo
        self.path = folder / "tree"
        self._index = {"GIT_INDEX_FILE": str(folder / "index")}
        self._at: Optional[str] = None

    def at(self, sha: str) -> Path:
        """The tree holding exactly the files of `sha`."""
        if self._at == sha:
            return self.path
        moved = (
            self._at is not None
            and self.repo.run(
                "--work-tree",
                str(self.path),
                "read-tree",
                "-m",
                "-u",
                self._at,
                sha,
                env=self._index,
                check=False,
            ).ok
        )
        if not moved:  # the first probe, or files a test wrote stand in the way: anew
            shutil.rmtree(self.path, ignore_errors=True)
            self.path.mkdir()
            self.repo.run("--work-tree", str(self.path), "read-tree", sha, env=self._index)
            self.repo.run("--work-tree", str(self.path), "checkout-index", "--all", env=self._index)
        self._at = sha
        return self.path


@contextlib.contextmanager
def probe_tree(repo: Git, purpose: str) -> Iterator[ProbeTree]:
    """A ProbeTree in a temporary folder this process holds, removed after the block (one a
    kill left, the next probe tree removes: repo/tempdirs.py)."""
    with tempdirs.owned(f"forkkit-{purpose}-") as folder:
        yield ProbeTree(repo, folder)
