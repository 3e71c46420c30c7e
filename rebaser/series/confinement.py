"""Nothing rebaser writes may land outside its worktree, nor anything it reads come from
outside the series.

The overlay is copied by path into a checkout of upstream. A symlink on the way (upstream's,
at an overlay path or at one of its folders, or one inside the overlay itself) would send the
write, or the committed content, somewhere else; an entry named `.git` would be dropped by git
or redirect later git commands. These checks refuse such inputs, with the path, before
anything is written (exit 2).

The resolution records beside a series (`resolutions/<patch>/<id>/{preimage,postimage}`)
are read into commits and written by `continue`: they are plain folders and bounded UTF-8
files, checked when the series loads (check_records) and opened again without following a
link at any step (read_confined, write_confined).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
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
            if name in names and not stat.S_ISREG(path.lstat().st_mode):  # a FIFO would hang
                raise _refused(
                    f"the overlay entry {relative} is not a regular file (a FIFO, socket or "
                    "device); rebaser copies only regular files",
                    path,
                    "remove it from the overlay",
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


RECORDS = "resolutions"  # the records' folder beside the series file
RECORD_FILES = ("preimage", "postimage")
RECORD_LIMIT = 8 << 20  # bytes in one preimage or postimage: far more than a conflict
_ID_RE = re.compile(r"^[0-9a-f]{40}$")  # rerere's id of a conflict


def check_records(series_dir: Path, patches: Sequence[str]) -> None:
    """Refuse (exit 2, naming it) a record of one of `patches` (their file names) that is
    not plain folders holding a bounded UTF-8 preimage and postimage, before any work: a
    link is never followed, a malformed record never crashes an apply. Records of patches
    no longer listed are never read (refresh removes them)."""
    top = series_dir / RECORDS
    if not os.path.lexists(top):
        return
    _plain_folder(series_dir, top)
    for name in patches:
        folder = top / name
        if os.path.lexists(folder):
            _plain_folder(series_dir, folder)
            for record in _entries(folder):
                _check_record(series_dir, record)


def _check_record(series_dir: Path, record: Path) -> None:
    if not _ID_RE.match(record.name):
        raise _bad_record(series_dir, record, "is not a conflict id (40 hex digits)")
    _plain_folder(series_dir, record)
    for name in sorted({entry.name for entry in _entries(record)} - set(RECORD_FILES)):
        raise _bad_record(series_dir, record / name, "is not part of a record")
    for name in RECORD_FILES:  # missing, linked, large or not UTF-8: refused
        read_record(series_dir, record.relative_to(series_dir).parts + (name,))


def record_parts(patch: str, conflict: str, file: str) -> tuple[str, ...]:
    """A record file's path in the series folder, as parts (`patch`: its file's name)."""
    return (RECORDS, patch, conflict, file)


def read_record(series_dir: Path, parts: Sequence[str]) -> str:
    """A record file's text, opened step by step from the series folder without following
    a link; refused (exit 2) when it is not a bounded UTF-8 regular file."""
    path = series_dir.joinpath(*parts)
    data = _read_confined(series_dir, parts, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad_record(series_dir, path, f"is not UTF-8 (byte {exc.start})") from None


def write_record(series_dir: Path, parts: Sequence[str], text: str) -> None:
    """Write a record file, making its folders, never through a link at any step."""
    path = series_dir.joinpath(*parts)
    folder = os.open(series_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth, part in enumerate(parts[:-1], start=1):
            try:
                os.mkdir(part, dir_fd=folder)
            except FileExistsError:
                pass
            folder = _step(series_dir, series_dir.joinpath(*parts[:depth]), folder)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=folder)
        except OSError as exc:
            raise _confined_error(series_dir, path, exc) from None
        with os.fdopen(_regular(series_dir, path, fd), "wb") as out:
            out.write(text.encode("utf-8"))
    finally:
        os.close(folder)


def write_record_folder(series_dir: Path, patch: str, conflict: str, texts: dict[str, str]) -> None:
    """A conflict's record written whole or not at all: its files go to a hidden folder
    beside it, which then takes the record's name (the one it replaces, if any, set aside
    first). A kill leaves the old record or none, and hidden folders, which check_records
    and replay never read and the next record of the conflict replaces."""
    staged, old = f".staged-{conflict}", f".replaced-{conflict}"
    folder_path = series_dir / RECORDS / patch
    for way in (series_dir / RECORDS, folder_path):  # no link on the way to what goes
        if os.path.lexists(way):
            _plain_folder(series_dir, way)
    for leftover in (staged, old):
        _remove_hidden(folder_path / leftover)
    for name, text in texts.items():
        write_record(series_dir, (RECORDS, patch, staged, name), text)
    folder = os.open(series_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth in (1, 2):
            folder = _step(series_dir, series_dir.joinpath(*(RECORDS, patch)[:depth]), folder)
        try:
            os.rename(staged, conflict, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
                raise _confined_error(series_dir, folder_path / conflict, exc) from None
            os.rename(conflict, old, src_dir_fd=folder, dst_dir_fd=folder)
            os.rename(staged, conflict, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)
    _remove_hidden(folder_path / old)


def _remove_hidden(path: Path) -> None:
    """A hidden folder (or anything else) a record's write left, never through a link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _read_confined(series_dir: Path, parts: Sequence[str], path: Path) -> bytes:
    folder = os.open(series_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth in range(1, len(parts)):
            folder = _step(series_dir, series_dir.joinpath(*parts[:depth]), folder)
        try:  # O_NONBLOCK: a FIFO there must not hang the open
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except OSError as exc:
            raise _confined_error(series_dir, path, exc) from None
        with os.fdopen(_regular(series_dir, path, fd), "rb") as handle:
            data = handle.read(RECORD_LIMIT + 1)
    finally:
        os.close(folder)
    if len(data) > RECORD_LIMIT:
        raise _bad_record(series_dir, path, f"is larger than {RECORD_LIMIT >> 20} MiB")
    return data


def _regular(series_dir: Path, path: Path, fd: int) -> int:
    """`fd`, when it is a regular file's (else closed, and refused)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    raise _bad_record(series_dir, path, "is not a regular file")


def _step(series_dir: Path, path: Path, folder: int) -> int:
    """The folder `path` inside `folder`, opened without following a link; `folder` is
    closed once it is open (the caller closes it when this fails)."""
    try:
        inner = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
    except OSError as exc:
        raise _confined_error(series_dir, path, exc) from None
    os.close(folder)
    return inner


def _confined_error(series_dir: Path, where: Path, exc: OSError) -> RebaserError:
    """What an open on a record's way met at `where`, said of that step."""
    if exc.errno == errno.ELOOP:
        return _bad_record(series_dir, where, "is a symlink (records are plain files)")
    if exc.errno == errno.ENOTDIR:
        return _bad_record(series_dir, where, "is not a folder")
    if exc.errno == errno.EISDIR:
        return _bad_record(series_dir, where, "is not a regular file")
    if exc.errno == errno.ENOENT:
        return _bad_record(series_dir, where, "is missing (a record is a preimage and a postimage)")
    return _bad_record(series_dir, where, f"cannot be used: {exc.strerror}")


def _plain_folder(series_dir: Path, path: Path) -> None:
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise _bad_record(series_dir, path, "is a symlink (records are plain folders)")
    if not stat.S_ISDIR(mode):
        raise _bad_record(series_dir, path, "is not a folder")


def _entries(folder: Path) -> list[Path]:
    return sorted(entry for entry in folder.iterdir() if not entry.name.startswith("."))


def _bad_record(series_dir: Path, path: Path, problem: str) -> RebaserError:
    shown = path.relative_to(series_dir) if path.is_relative_to(series_dir) else path
    return RebaserError(
        f"the resolution record {shown} {problem}",
        where=str(path),
        next_step=f"remove it (or restore it from git); records under {RECORDS}/ are "
        "written by `rebaser continue` after a conflict is resolved",
    )
