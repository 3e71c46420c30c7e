"""PyPI's JSON API: a release's wheel, its sha256, and a verified download.

The index's sha256 is the only trustworthy record of what a wheel holds: rebaser downloads
against it, keeps it beside the cached wheel and checks the wheel against it again before
importing it (see `PypiUpstream`). `$DSA_FORKKIT_PYPI_URL` points at another index that
speaks the same JSON API (a mirror, or a test's local server).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import platform
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from rebaser.config import index_url
from rebaser.errors import ExitCode, RebaserError, unwritable

# Releases since 0.17 require Python >= 3.12; their sources still parse on 3.11.
WHEEL_PYTHON_VERSION = "3.12"
_TIMEOUT_S = 60
_CHUNK = 1 << 20
_PY = WHEEL_PYTHON_VERSION.replace(".", "")
_PYTHON_TAGS = frozenset({"py3", f"py{_PY}", f"cp{_PY}"})


@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    sha256: str
    yanked: bool = False  # still served for an exact version, as pip does (PEP 592)


def release_versions(package: str) -> list[str]:
    """Final releases that have a wheel for Python 3.12, oldest first."""
    releases = _project(package)["releases"]
    return sorted(
        (
            version
            for version, files in releases.items()
            if _final(version) and any(not wheel.yanked for wheel in _wheels(files))
        ),
        key=Version,
    )


def find_wheel(package: str, version: Optional[str]) -> tuple[str, WheelFile]:
    """The version (the newest when None) and the wheel to download for it."""
    project = _project(package)
    version = version or project["info"]["version"]
    wheels = _wheels(project["releases"].get(version, []))
    if not wheels:
        recent = sorted((v for v in project["releases"] if _final(v)), key=Version)[-8:]
        missing = (
            f"no wheel {package}=={version} for Python {WHEEL_PYTHON_VERSION}"
            if version in project["releases"]
            else f"no release {package}=={version}"  # not "no wheel": there is nothing
        )
        raise RebaserError(
            f"PyPI has {missing}" + (f"; recent releases: {', '.join(recent)}" if recent else ""),
            next_step="check the version",
            code=ExitCode.USAGE,
        )
    return version, min(wheels, key=_preference)


def yanked_reason(package: str, version: str) -> Optional[str]:
    """Why PyPI yanked the release ("" when it gives no reason), or None when it is not
    yanked. A release is yanked when all its files are (PEP 592)."""
    files = _project(package)["releases"].get(version, [])
    if not files or not all(entry.get("yanked") for entry in files):
        return None
    return next((entry["yanked_reason"] for entry in files if entry.get("yanked_reason")), "")


def listed_sha256(package: str, version: str, filename: str) -> Optional[str]:
    """The sha256 PyPI lists for one file of a release, or None when it lists no such file."""
    for entry in _project(package)["releases"].get(version, []):
        if entry["filename"] == filename:
            return entry["digests"]["sha256"]
    return None


def download(wheel: WheelFile, folder: Path) -> Path:
    """Download `wheel` into `folder`, checked against its sha256 before it gets its name."""
    digest = hashlib.sha256()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False)
    except OSError as exc:
        raise unwritable("the wheel folder", folder, exc, "DSA_FORKKIT_WHEELS") from None
    with part:
        try:
            with _open(wheel.url) as response:
                while chunk := response.read(_CHUNK):
                    digest.update(chunk)
                    part.write(chunk)
        except (urllib.error.HTTPError, http.client.HTTPException, OSError) as exc:
            Path(part.name).unlink(missing_ok=True)
            raise _unreachable(wheel.url, str(exc)) from None
        except BaseException:
            Path(part.name).unlink(missing_ok=True)
            raise
    if digest.hexdigest() != wheel.sha256:
        Path(part.name).unlink()
        raise RebaserError(
            f"the download of {wheel.filename} does not match the sha256 PyPI lists for it "
            f"({wheel.sha256}, got {digest.hexdigest()})",
            where=wheel.url,
            next_step="run again; if it persists, the index or a proxy serves altered files",
            code=ExitCode.ENVIRONMENT,
        )
    target = folder / wheel.filename
    Path(part.name).replace(target)
    return target


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _project(package: str) -> dict[str, Any]:
    url = f"{index_url()}/{package}/json"
    try:
        with _open(url) as response:
            project = json.load(response)
        for files in project["releases"].values():
            for entry in files:  # mirrors may list file urls relative to the JSON's
                entry["url"] = urllib.parse.urljoin(url, entry["url"])
        return project
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise RebaserError(
                f"PyPI has no project {package}", where=url, next_step="check the package name"
            ) from None
        raise _unreachable(url, f"HTTP {exc.code} {exc.reason}") from None
    except (ValueError, KeyError, TypeError, http.client.HTTPException, OSError) as exc:
        raise _unreachable(url, f"no readable answer ({exc!r})") from None


def _open(url: str) -> http.client.HTTPResponse:
    """The response; HTTP errors are raised as they are, a missing connection as exit 5."""
    try:
        return urllib.request.urlopen(url, timeout=_TIMEOUT_S)
    except urllib.error.HTTPError:
        raise
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _unreachable(url, str(getattr(exc, "reason", exc))) from None


def _unreachable(url: str, reason: str) -> RebaserError:
    return RebaserError(
        f"could not reach PyPI: {reason}",
        where=url,
        next_step="check the network (or DSA_FORKKIT_PYPI_URL), then run again",
        code=ExitCode.ENVIRONMENT,
    )


def _wheels(files: list[dict[str, Any]]) -> list[WheelFile]:
    return [
        WheelFile(
            entry["filename"], entry["url"], entry["digests"]["sha256"], bool(entry.get("yanked"))
        )
        for entry in files
        if entry.get("packagetype") == "bdist_wheel"
        and _PYTHON_TAGS & set(_tags(entry["filename"])[0].split("."))
    ]


def _preference(wheel: WheelFile) -> tuple[bool, int, str]:
    """Files not yanked first; then pure-Python wheels, then this machine's architecture (the
    sources are the same in every wheel of a release; compiled extensions are left out)."""
    plat = _tags(wheel.filename)[2]
    fit = 0 if plat == "any" else 1 if platform.machine() in plat else 2
    return wheel.yanked, fit, wheel.filename


def _tags(filename: str) -> tuple[str, str, str]:
    python, abi, plat = re.sub(r"\.whl$", "", filename).split("-")[-3:]
    return python, abi, plat


def _final(version: str) -> bool:
    try:
        return not Version(version).is_prerelease
    except InvalidVersion:
        return False
