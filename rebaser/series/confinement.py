"""Nothing rebaser writes may land outside its worktree.

The overlay is copied by path into a checkout of upstream. A symlink on the way (upstream's,
at an overlay path or at one of its folders, or one inside the overlay itself) would send the
write, or the committed content, somewhere else; an entry named `.git` would be dropped by git
or redirect later git commands. These checks refuse such inputs, with the path, before
anything is written (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from rebaser.errors import RebaserError
from rebaser.repo.git import Git

_SKIPPED_FOLDERS = frozenset({"__pycache__"})
_SYMLINK_MODE = "120000"


def overlay_files(overlay_dir: Path) -> list[str]:
    """The overlay's files relative to its root, sorted; refuses symlinks and `.git` entries."""
    files = []
    for folder, subfolders, names in os.walk(overlay_dir):
        subfolders[:] = sorted(name for name in subfolders if name not in _SKIPPED_FOLDERS)
        for name in [*subfolders, *names]:
            path = Path(folder) / name
            relative = path.relative_to(overlay_dir).as_posix()
            if _is_git_name(name):
                raise _refused(
                    f"the overlay has an entry named {name}, which git would not commit "
                    "(or would take for a repository)",
                    path,
                    "rename or remove it",
                )
            if path.is_symlink():
                raise _refused(
                    f"the overlay entry {relative} is a symlink (to {os.readlink(path)}); "
                    "rebaser copies only regular files",
                    path,
                    "replace the link with the file it points to",
                )
        files.extend((Path(folder) / name).relative_to(overlay_dir).as_posix() for name in names)
    return sorted(files)


def check_upstream_paths(repo: Git, commit: str, paths: Sequence[str]) -> None:
    """Refuse when upstream's tree has a symlink or submodule at an overlay path or at one of its
    folders, or a file where the overlay needs a folder (a write there would escape)."""
    if not paths:
        return
    wanted = set(paths)
    checked = _with_parents(paths)
    listing = repo.run(
        "ls-tree",
        "-z",
        "--full-tree",
        commit,
        "--",
        *sorted(checked),
        env={"GIT_LITERAL_PATHSPECS": "1"},
    ).stdout
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        if path not in checked:  # ls-tree also lists the other entries of a named folder
            continue
        mode, kind, _ = meta.split()
        if mode == _SYMLINK_MODE:
            problem = f"upstream has a symlink at {path}"
        elif kind == "commit":
            problem = f"upstream has a submodule at {path}"
        elif kind == "blob" and path not in wanted:
            problem = f"upstream has a file at {path}, where the overlay needs a folder"
        else:
            continue
        raise RebaserError(
            f"{problem}; laying the overlay there would write outside the worktree",
            where=f"{commit[:12]}:{path} (overlay: {', '.join(_under(path, paths))})",
            next_step="move those overlay files to other paths, or apply onto another base",
        )


def check_inside(root: Path, relative: str, *, what: str, where: str) -> None:
    """Refuse a relative path that is absolute or leaves `root` (`..`), lexically."""
    normal = os.path.normpath(relative)
    if os.path.isabs(relative) or normal == ".." or normal.startswith(".." + os.sep):
        raise RebaserError(
            f"{what} {relative} leaves {root}",
            where=where,
            next_step=f"keep it inside {root}",
        )


def write_new_file(root: Path, relative: str, data: bytes) -> None:
    """Create `root/relative` as a new file, never through a symlink (checked again at write
    time: the worktree is the user's to change between runs)."""
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    real_parent = target.parent.resolve()
    if not real_parent.is_relative_to(root.resolve()):
        raise _refused(
            f"the folder of {relative} leads outside the worktree (to {real_parent})",
            target,
            "remove the symlink there",
        )
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError as exc:
        raise _refused(
            f"{relative} already exists in the worktree", target, "remove it, then retry"
        ) from exc
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _is_git_name(name: str) -> bool:
    return name.lower() == ".git"


def _with_parents(paths: Iterable[str]) -> set[str]:
    found = set()
    for path in paths:
        parts = PurePosixPath(path).parts
        found.update(PurePosixPath(*parts[:end]).as_posix() for end in range(1, len(parts) + 1))
    return found


def _under(prefix: str, paths: Sequence[str]) -> list[str]:
    return [path for path in paths if path == prefix or path.startswith(prefix + "/")]


def _refused(what: str, path: Path, next_step: str) -> RebaserError:
    return RebaserError(what, where=str(path), next_step=next_step)
