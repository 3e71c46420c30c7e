"""rebaser's settings: the DSA_FORKKIT_* environment variables, each read in one place."""

from __future__ import annotations

import math
import os
import shlex
import tempfile
from pathlib import Path
from typing import Optional

from rebaser.errors import RebaserError, unwritable

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INDEX = "https://pypi.org/pypi"
TEST_MODES = ("cpu", "gpu", "none")  # --test


def series_file(given: Optional[Path]) -> Path:
    """The series a command works on: --series, else $DSA_FORKKIT_SERIES, else the series
    of this checkout."""
    if given is None and "DSA_FORKKIT_SERIES" not in os.environ:
        own = PROJECT_ROOT / "patches" / "series"
        if not own.is_file():  # installed without its checkout: the series is not packaged
            raise RebaserError(
                f"no --series given, and this rebaser has no series of its own ({own} is "
                "not there: it was installed without its checkout)",
                next_step="pass --series PATH (or set DSA_FORKKIT_SERIES); the embedded "
                "series comes with `pip install -e` of the dsa-forkkit checkout",
            )
        return own.resolve()
    return (given or Path(os.environ["DSA_FORKKIT_SERIES"])).resolve()


def series_argument(file: Path) -> str:
    """What a printed command needs to work on `file`: nothing where the default series is
    that one, else ` --series PATH`."""
    try:
        default: Optional[Path] = series_file(None)
    except RebaserError:  # an installed rebaser without its own series
        default = None
    if default == file.resolve():
        return ""
    return f" --series {shlex.quote(str(file))}"


def cache_dir() -> Path:
    """Downloads and materialised releases: $DSA_FORKKIT_CACHE, else the user cache folder."""
    if explicit := os.environ.get("DSA_FORKKIT_CACHE"):
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "dsa-forkkit"


def require_writable_cache() -> Path:
    """The cache folder, created; exit 5 before any work when it cannot be written (an apply
    would otherwise stop half-way, with a branch and no way to find its state)."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise unwritable("the cache folder", folder, exc, "DSA_FORKKIT_CACHE") from None
    return folder


def wheels_dir() -> Optional[Path]:
    """$DSA_FORKKIT_WHEELS: a wheel folder shared between caches (None: the cache's own)."""
    wheels = os.environ.get("DSA_FORKKIT_WHEELS")
    return Path(wheels).expanduser() if wheels else None


def index_url() -> str:
    """$DSA_FORKKIT_PYPI_URL: an index with PyPI's JSON API (a mirror, a test's server)."""
    return os.environ.get("DSA_FORKKIT_PYPI_URL", DEFAULT_INDEX).rstrip("/")


def test_timeout() -> float:
    """$DSA_FORKKIT_TEST_TIMEOUT: the seconds one pytest run may take (an hour by default):
    a test that hangs costs each run (the carried tree, the fork's branch, each probe) that."""
    given = os.environ.get("DSA_FORKKIT_TEST_TIMEOUT")
    if given is None:
        return 3600.0
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise RebaserError(
            f"DSA_FORKKIT_TEST_TIMEOUT={given!r} is no number of seconds above 0",
            next_step="set it to the seconds one pytest run may take (e.g. 600), or unset it",
        )
    return seconds
