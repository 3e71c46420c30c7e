"""The apply's worktree gets its files only when a step needs them.

Until then it is a sparse checkout that leaves every path out: git's index holds the whole
tree (each entry marked skip-worktree) and no file is written. The overlay commit needs only
the index, and a fast lane runs its sequencer in another repository: the files are written
beside it, off the critical path (a full checkout of a large tree takes seconds on a slow
disk), or before the first step that reads them (a per-patch apply, verification, a stop).
Beside a lane, the index is then written again once the second the files were written in
is over (settle), so that the lane's last checkout need not read them all again.

The sparse patterns live in the worktree's own git dir (`info/sparse-checkout`), and
`core.sparseCheckout` is passed on the command line, never written to the repository's
config. While that file exists the files are still to be written: `continue` and `abort`
write them after a kill (finish is safe to repeat).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rebaser.repo.git import Git

_PATTERNS = Path("info") / "sparse-checkout"
# rebaser's patterns are not cone patterns, whatever the repository's config says.
_SPARSE = ("-c", "core.sparseCheckout=true", "-c", "core.sparseCheckoutCone=false")
_NONE = "# rebaser: files not written yet (see rebaser/repo/late_checkout.py)\n!/*\n"
_ALL = "/*\n"
_ATTRIBUTES = ".gitattributes\n"
_TICK = 0.02


def begin(worktree: Git, git_dir: Path, attributes: bool = False) -> None:
    """Fill the index of a worktree made with `--no-checkout` from HEAD, writing no file
    but, with `attributes`, the `.gitattributes` files (merges read their drivers there)."""
    (git_dir / _PATTERNS).parent.mkdir(exist_ok=True)
    (git_dir / _PATTERNS).write_text(_NONE + (_ATTRIBUTES if attributes else ""))
    worktree.run(*_SPARSE, "read-tree", "-m", "-u", "HEAD")


def follow_attributes(worktree: Git, rev: str) -> None:
    """The index of a worktree begun with `attributes`, and its `.gitattributes` files (its
    only files), as `rev` has them."""
    worktree.run(*_SPARSE, "read-tree", "-m", "-u", rev)


def pending(git_dir: Path) -> bool:
    """Whether the worktree's files are still to be written (no index yet: killed between
    `worktree add --no-checkout` and begin())."""
    return (git_dir / _PATTERNS).is_file() or not (git_dir / "index").is_file()


def finish(worktree: Git, git_dir: Path) -> bool:
    """Write every file of the index (no-op once written). Index contents and changes in
    the worktree stay as they are: only the skip-worktree marks go. Whether it wrote them."""
    if not pending(git_dir):
        return False
    (git_dir / _PATTERNS).parent.mkdir(exist_ok=True)
    (git_dir / _PATTERNS).write_text(_ALL)
    if (git_dir / "index").is_file():
        worktree.run(*_SPARSE, "sparse-checkout", "reapply")
    else:
        worktree.run(*_SPARSE, "read-tree", "-m", "-u", "HEAD")
    (git_dir / _PATTERNS).unlink()
    return True


def settle(worktree: Git, git_dir: Path, given_up: threading.Event) -> None:
    """After finish(), beside other work: the files written in the second the index was
    written are "racily clean" to git, which reads each of them again at every later write
    of the index (a checkout, a status: 0.25 s for Megatron-LM's 3,300 files), until one
    is written in a later second. Once that second is over, a refresh reads them once and
    writes the index after it; nothing if `given_up` is set first (the caller's own next
    index write reads them instead)."""
    written = (git_dir / "index").stat().st_mtime_ns // 1_000_000_000
    # a file system's clock runs up to a tick (a few ms) behind time.time()
    if given_up.wait(max(0.0, written + 1 + _TICK - time.time())):
        return
    worktree.run("update-index", "-q", "--refresh", check=False)
