"""A throwaway repository in memory, where git's sequencer runs for a fast lane.

`git rebase` writes about fifteen small files for every commit it picks (its todo list,
the index, locks, pseudo-refs, reflogs, the new objects). Where creating a file on disk
costs a millisecond (a cloud VM's disk: 1 ms here, 0.04 ms on tmpfs) that is most of its
time. So the lane runs in a repository on tmpfs (/dev/shm; the system's temporary folder
where there is none) that borrows the real repository's objects (alternates) and config
(an include), with a sparse index and no file checked out; the objects it made go back to
the real repository in one pack, and the apply's worktree then moves its branch to them.

A kill leaves the folder behind: the next lane removes those no living process holds (a
lock, repo/tempdirs.py: not a pid, which means nothing in another PID namespace sharing
/dev/shm), and `continue`/`abort` remove the one their worktree names. Where /dev/shm is
missing, small or full, the lane runs in the system's temporary folder on disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from rebaser.errors import RebaserError
from rebaser.repo import late_checkout, tempdirs
from rebaser.repo.git import Git

PREFIX = "forkkit-lane-"
_MEMORY = Path("/dev/shm")
# After the real repository's config (its merge settings apply, as in its own worktrees),
# what makes this a repository of its own: not bare, its own work tree, no fsmonitor
# daemon started for it, git's sparse checkout on, not in cone mode (late_checkout's
# patterns leave out all).
_OWN_CONFIG = """[core]
\tbare = false
\tworktree = {root}
\tfsmonitor = false
\tsparseCheckout = true
\tsparseCheckoutCone = false
\tpreloadIndex = false
[sparse]
\texpectFilesOutsideOfPatterns = true
"""


@contextlib.contextmanager
def repository(real_git_dir: Path, head: str) -> Iterator[Git]:
    """A repository whose HEAD is `head` (detached), reading `real_git_dir`'s objects;
    removed after the block. In memory when there is room, else on disk."""
    for place in _places():  # a kill's leftovers, wherever the lane ran then
        tempdirs.sweep(place, PREFIX)
    roots = _roots()
    for number, parent in enumerate(roots, start=1):
        folder = None
        try:
            # "held-": an older rebaser took a name of digits after the prefix for a pid
            folder = tempdirs.Owned(f"{PREFIX}held-", parent)
            scratch = _made(folder.path, real_git_dir, head)
        except (OSError, RebaserError):  # e.g. no space left in /dev/shm: on disk then
            if folder is not None:
                folder.release()
            if number == len(roots):
                raise
            continue
        try:
            yield scratch
        finally:
            folder.release()
        return


def _made(root: Path, real_git_dir: Path, head: str) -> Git:
    scratch = Git(root)
    object_format = "sha256" if len(head) == 64 else "sha1"
    scratch.run("init", "--quiet", "--template=", f"--object-format={object_format}")
    git_dir = root / ".git"
    common = _common_dir(real_git_dir)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "exclude").write_text(f"/{tempdirs.OWNER}\n")  # its holder's lock
    # The repository's own attributes (merge drivers, line endings) hold for its merges here
    # too, as in its worktrees.
    if (common / "info" / "attributes").is_file():
        shutil.copyfile(common / "info" / "attributes", git_dir / "info" / "attributes")
    (git_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
    alternates = git_dir / "objects" / "info" / "alternates"
    alternates.write_text(f"{_quoted(common / 'objects')}\n", encoding="utf-8")
    with (git_dir / "config").open("a", encoding="utf-8") as config:
        config.write(f"[include]\n\tpath = {_quoted(common / 'config')}\n")
        config.write(_OWN_CONFIG.format(root=_quoted(root)))
    (git_dir / "HEAD").write_text(f"{head}\n")
    # The index; no file written but the .gitattributes, as ort reads merge drivers there.
    late_checkout.begin(scratch, git_dir, attributes=True)
    return scratch


def bring_back(scratch: Git, real: Git, tip: str, head: str) -> None:
    """The objects the scratch repository made for `tip` since `head`, into `real`'s
    object store as one pack (those it borrowed are there already). Nothing to do when it
    wrote no object: the same patches carried again make the same commits."""
    store = scratch.path / ".git" / "objects"
    if not any(len(entry.name) == 2 for entry in store.iterdir()) and not any(
        (store / "pack").glob("*.pack")
    ):
        return
    # A conflict makes ort write its marked-up files as blobs, which no commit keeps: with
    # the same patches carried again, the tip is known already and nothing is to go back.
    written = (scratch.path / ".git" / "HEAD").read_text().strip() if tip == "HEAD" else tip
    if not written.startswith("ref:") and real.run("cat-file", "-e", written, check=False).ok:
        return
    wanted = f"{tip}\n^{head}\n".encode()
    pack = scratch.output_bytes(
        "pack-objects", "--revs", "--local", "--stdout", "--quiet", stdin=wanted
    )
    if int.from_bytes(pack[8:12], "big"):  # the pack header's object count
        real.run("index-pack", "--stdin", stdin=pack)


def remove(folder: str) -> None:
    """Remove a scratch repository a kill left (a marker named it), and nothing else."""
    path = Path(folder)
    if path.name.startswith(PREFIX) and path.parent in _places() and not path.is_symlink():
        if not tempdirs.held(path):  # never a lane that still runs
            shutil.rmtree(path, ignore_errors=True)


def scratch_root() -> Path:
    """tmpfs where Linux has it, else the system's temporary folder."""
    return _roots()[0]


# Below this much free space in /dev/shm the lane starts on disk (a full /dev/shm is common
# where PyTorch jobs run; Docker's default is 64 MB in all).
_MEMORY_FLOOR = 32 << 20


def _places() -> list[Path]:
    """Every folder a scratch repository may be in, whatever room there is now."""
    disk = Path(tempfile.gettempdir())
    return [_MEMORY, disk] if _MEMORY.is_dir() else [disk]


def _roots() -> list[Path]:
    """Where a scratch repository may go, in order: /dev/shm when it has room, then the
    system's temporary folder."""
    disk = Path(tempfile.gettempdir())
    if _MEMORY.is_dir() and os.access(_MEMORY, os.W_OK | os.X_OK):
        try:
            room = os.statvfs(_MEMORY)
        except OSError:
            return [disk]
        if room.f_bavail * room.f_frsize >= _MEMORY_FLOOR:
            return [_MEMORY, disk]
    return [disk]


def _quoted(path: Path) -> str:
    """A path as git reads it from a config value or an alternates line, whatever it holds
    (`#` and `;` start comments there, a quote or a newline would end it)."""
    escaped = str(path).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'


def _common_dir(git_dir: Path) -> Path:
    """The repository's own git dir, from a worktree's git dir (its `commondir` file)."""
    pointer = git_dir / "commondir"
    if pointer.is_file():
        return (git_dir / pointer.read_text().strip()).resolve()
    return git_dir.resolve()
