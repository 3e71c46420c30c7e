"""Upstream from PyPI: a megatron-core release materialised as a commit in a cache repo.

The wheel carries `megatron/core` and `megatron/training` as upstream ships them. Each
version becomes one root commit (tag `pypi/<package>/<version>`) in a bare repository under
the cache folder, built with `git fast-import` so it takes well under a second and is
byte-for-byte reproducible: the same wheel always gives the same commit sha.
"""

from __future__ import annotations

import calendar
import errno
import fcntl
import json
import os
import re
import stat
import sys
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from rebaser.errors import ExitCode, RebaserError, unwritable
from rebaser.repo.git import FORKKIT_AUTHOR, Git
from rebaser.upstream import pypi_index

_BINARY_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")


@dataclass(frozen=True)
class Release:
    package: str
    version: str
    sha: str

    @property
    def label(self) -> str:
        return f"{self.package}-{self.version}"


class PypiUpstream:
    """A cache of PyPI releases of one package, as commits of one bare git repository."""

    def __init__(
        self, cache_dir: Path, package: str = "megatron-core", wheel_dir: Optional[Path] = None
    ) -> None:
        self.cache_dir = cache_dir
        self.package = package
        self.repo_dir = cache_dir / "upstream" / f"{package}.git"
        self.wheel_dir = wheel_dir or cache_dir / "wheels"

    @property
    def git(self) -> Git:
        if not (self.repo_dir / "HEAD").exists():
            self.repo_dir.mkdir(parents=True, exist_ok=True)
            Git(self.repo_dir).run("init", "--quiet", "--bare")
        return Git(self.repo_dir)

    def tag(self, version: str) -> str:
        return f"pypi/{self.package}/{version}"

    def cached(self, version: str) -> Optional[Release]:
        sha = self.git.rev_parse(f"refs/tags/{self.tag(version)}")
        return Release(self.package, version, sha) if sha else None

    def materialise(self, version: Optional[str] = None) -> Release:
        """The release's commit, downloading and importing the wheel on first use.

        `version=None` asks PyPI for the newest release.
        """
        if version is not None and (release := self.cached(version)):
            return release
        with self._locked():
            if version is not None and (release := self.cached(version)):
                return release
            wheel, version = self._wheel(version)
            return self.cached(version) or self._import_wheel(wheel, version)

    def yanked(self, version: str) -> Optional[str]:
        """Why PyPI yanked `version` ("" for no reason given), or None when it did not.

        Asked of the index once per cache (a release materialised before is asked too) and
        recorded beside the repository, so later runs need no network; offline, with nothing
        recorded, None.
        """
        record = self.repo_dir.with_name(f"{self.package}.yanked.json")
        known = _read_yanked(record)
        if version not in known:
            try:
                known[version] = pypi_index.yanked_reason(self.package, version)
            except RebaserError:
                return None  # the index is out of reach: nothing to say
            _record_yanked(record, version, known[version], self._locked)
        return known[version]

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        lock = self.cache_dir / ".lock"
        try:  # never through a link, never truncating: only its flock matters
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR):
                raise
            raise RebaserError(
                f"{lock} is {_kind(lock)}, where the cache keeps the file it locks",
                next_step="remove it (rebaser makes the file itself), then run again",
                code=ExitCode.ENVIRONMENT,
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _wheel(self, version: Optional[str]) -> tuple[Path, str]:
        """The release's wheel (the newest release when None), checked against PyPI's sha256."""
        if version is not None:
            pattern = f"{_dist_name(self.package)}-{version}-*.whl"
            for cached in sorted(self.wheel_dir.glob(pattern)):
                if not cached.is_file():
                    raise RebaserError(
                        f"{cached} is {_kind(cached)} where the cache expects a wheel file",
                        next_step="remove it (or point DSA_FORKKIT_WHEELS elsewhere), then run "
                        "again",
                        code=ExitCode.ENVIRONMENT,
                    )
                if self._matches_index(cached, version):
                    return cached, version
        version, wheel = pypi_index.find_wheel(self.package, version)
        path = pypi_index.download(wheel, self.wheel_dir)
        _record_digest(path, wheel.sha256)
        return path, version

    def _matches_index(self, wheel: Path, version: str) -> bool:
        """Whether a cached wheel is the file PyPI lists; a wheel that is not is removed."""
        record = _digest_file(wheel)
        # a damaged record (not ASCII) is no sha256: the wheel does not match it
        expected = (
            record.read_bytes().decode(errors="replace").strip() if record.is_file() else None
        )
        if expected is None:  # cached before digests were recorded, or by another tool
            expected = pypi_index.listed_sha256(self.package, version, wheel.name)
            if expected is not None:
                _record_digest(wheel, expected)
        actual = pypi_index.file_sha256(wheel)
        if actual == expected:
            return True
        listed = f"PyPI's sha256 {expected}" if expected else "no file PyPI lists"
        _notice(
            f"the cached {wheel.name} is not {listed} (it has {actual}): "
            "removing it and downloading it again"
        )
        try:
            wheel.unlink()
            record.unlink(missing_ok=True)
        except OSError as exc:  # a read-only shared wheel folder: never imported, then
            raise unwritable("the wheel folder", wheel.parent, exc, "DSA_FORKKIT_WHEELS") from None
        return False

    def _import_wheel(self, wheel: Path, version: str) -> Release:
        digest = pypi_index.file_sha256(wheel)
        try:
            stream = self._fast_import_stream(wheel, version, digest)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise RebaserError(
                f"{wheel.name} is not a readable wheel ({exc}), although its sha256 is PyPI's",
                where=str(wheel),
                next_step="remove it and run again",
                code=ExitCode.ENVIRONMENT,
            ) from exc
        self.git.run("fast-import", "--quiet", "--done", "--date-format=raw", stdin=stream)
        release = self.cached(version)
        assert release is not None, "fast-import did not create the release tag"
        return release

    def _fast_import_stream(self, wheel: Path, version: str, digest: str) -> bytes:
        with zipfile.ZipFile(wheel) as archive:
            members = sorted(
                (info for info in archive.infolist() if _is_upstream_source(info)),
                key=lambda info: info.filename,
            )
            if not members:
                raise RebaserError(
                    f"{wheel.name} holds no megatron/ sources", code=ExitCode.ENVIRONMENT
                )
            timestamp = max(_zip_epoch(info) for info in members)
            message = (
                f"{self.package} {version} from PyPI\n\n"
                f"Materialised by dsa-forkkit from {wheel.name} (sha256 {digest}):\n"
                "megatron/ as the wheel ships it, compiled extensions left out.\n"
            ).encode()
            ident = f"{FORKKIT_AUTHOR} {timestamp} +0000"
            stream = bytearray()
            stream += f"commit refs/tags/{self.tag(version)}\n".encode()
            stream += f"author {ident}\ncommitter {ident}\n".encode()
            stream += _data(message)
            for info in members:
                stream += f"M 100644 inline {info.filename}\n".encode()
                stream += _data(archive.read(info))
            stream += b"done\n"
        return bytes(stream)


def _dist_name(package: str) -> str:
    return re.sub(r"[-.]+", "_", package)


def _is_upstream_source(info: zipfile.ZipInfo) -> bool:
    name = info.filename
    return (
        name.startswith("megatron/")
        and not info.is_dir()
        and not name.endswith(_BINARY_SUFFIXES)
        and " " not in name
    )


def _zip_epoch(info: zipfile.ZipInfo) -> int:
    return calendar.timegm((*info.date_time, 0, 0, 0))


def _data(payload: bytes) -> bytes:
    return f"data {len(payload)}\n".encode() + payload + b"\n"


def _digest_file(wheel: Path) -> Path:
    """Where the sha256 PyPI listed for a downloaded wheel is kept, beside it."""
    return wheel.with_name(wheel.name + ".sha256")


def _record_digest(wheel: Path, sha256: str) -> None:
    try:
        _digest_file(wheel).write_text(sha256 + "\n")
    except OSError:
        pass  # a read-only shared wheel folder: the index is asked again next time


def _kind(path: Path) -> str:
    """What is at `path`, in words (`a folder`, `a FIFO`, ...)."""
    mode = path.lstat().st_mode
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _notice(message: str) -> None:
    print(f"rebaser: {message}", file=sys.stderr)


def _read_yanked(record: Path) -> dict:
    """The yank record, or nothing: never read through a link, never blocking on a FIFO."""
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        try:
            known = json.loads(handle.read())
        except ValueError:
            return {}
    return known if isinstance(known, dict) else {}


def _record_yanked(record: Path, version: str, reason: Optional[str], locked) -> None:
    """Add one release's yank status to the record (under the cache lock, written whole, a
    new file renamed over the old: never written through a link)."""
    part = record.with_name(record.name + ".part")
    try:
        with locked():
            known = {**_read_yanked(record), version: reason}
            part.unlink(missing_ok=True)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(known, indent=1, sort_keys=True) + "\n")
            part.replace(record)
    except OSError:
        pass  # an unwritable cache: the index is asked again next time
