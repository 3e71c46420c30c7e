"""Upstream from PyPI: a megatron-core release materialised as a commit in a cache repo.

The wheel carries `megatron/core` and `megatron/training` as upstream ships them. Each
version becomes one root commit (tag `pypi/<package>/<version>`) in a bare repository under
the cache folder, built with `git fast-import` so it takes well under a second and is
byte-for-byte reproducible: the same wheel always gives the same commit sha.
"""

from __future__ import annotations

import calendar
import fcntl
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from rebaser.errors import ExitCode, RebaserError
from rebaser.git import FORKKIT_AUTHOR, Git

# Releases since 0.17 require Python >= 3.12; their sources still parse on 3.11.
WHEEL_PYTHON_VERSION = "3.12"
_BINARY_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")
_WHEEL_RE = re.compile(r"^(?P<dist>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-")


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
            wheel = self._download(version)
            version = _wheel_version(wheel)
            return self.cached(version) or self._import_wheel(wheel, version)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _download(self, version: Optional[str]) -> Path:
        requirement = self.package if version is None else f"{self.package}=={version}"
        if version is not None:
            existing = sorted(self.wheel_dir.glob(f"{_dist_name(self.package)}-{version}-*.whl"))
            if existing:
                return existing[0]
        self.wheel_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.wheel_dir) as tmp:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                WHEEL_PYTHON_VERSION,
                "--dest",
                tmp,
                requirement,
            ]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise _download_error(requirement, result.stderr)
            wheels = list(Path(tmp).glob("*.whl"))
            if len(wheels) != 1:
                raise RebaserError(
                    f"pip download {requirement} gave {len(wheels)} wheels, expected one",
                    code=ExitCode.ENVIRONMENT,
                )
            target = self.wheel_dir / wheels[0].name
            wheels[0].replace(target)
            return target

    def _import_wheel(self, wheel: Path, version: str) -> Release:
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
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
        self.git.run("fast-import", "--quiet", "--done", "--date-format=raw", stdin=bytes(stream))
        release = self.cached(version)
        assert release is not None, "fast-import did not create the release tag"
        return release


def _dist_name(package: str) -> str:
    return re.sub(r"[-.]+", "_", package)


def _wheel_version(wheel: Path) -> str:
    match = _WHEEL_RE.match(wheel.name)
    if not match:
        raise RebaserError(f"cannot read a version from {wheel.name}", code=ExitCode.ENVIRONMENT)
    return match["version"]


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


def _download_error(requirement: str, stderr: str) -> RebaserError:
    if "No matching distribution" in stderr or "Could not find a version" in stderr:
        found = re.search(r"\(from versions: ([^)]*)\)", stderr)
        releases = [v.strip() for v in found.group(1).split(",")] if found else []
        recent = [v for v in releases if re.fullmatch(r"[\d.]+(post\d+)?", v)][-8:]
        return RebaserError(
            f"PyPI has no wheel {requirement} for Python {WHEEL_PYTHON_VERSION}"
            + (f"; recent releases: {', '.join(recent)}" if recent else ""),
            next_step="check the version",
            code=ExitCode.USAGE,
        )
    lines = [line for line in stderr.splitlines() if line.strip() and "WARNING" not in line]
    return RebaserError(
        f"could not download {requirement} from PyPI: {' '.join(lines[-2:])[:400]}",
        next_step="check the network or pip's index settings, then run again",
        code=ExitCode.ENVIRONMENT,
    )
