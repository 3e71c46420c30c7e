"""ci/pack_site.py: wheels packed into one archive unpack into the folder that
`pip install --target` makes of the same wheels, with file modes, and duplicates stored once."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from conftest import PROJECT

BIG = os.urandom(1 << 17)  # a shared library zip holds twice (libz.so and libz.so.1)


def make_wheel(folder: Path, name: str, files: dict[str, tuple[bytes, int]]) -> Path:
    """A wheel of `name` 1.0 with `files` (path -> (bytes, mode)) and a valid RECORD."""
    info = f"{name}-1.0.dist-info"
    files = {
        **files,
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(), 0o644),
        f"{info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                          b"Tag: py3-none-any\n", 0o644),
    }  # fmt: skip
    record = []
    for path, (data, _) in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, (data, mode) in [*files.items(), (f"{info}/RECORD", ("\n".join(record).encode(), 0o644))]:  # fmt: skip
            member = zipfile.ZipInfo(path)
            member.external_attr = (0o100000 | mode) << 16
            archive.writestr(member, data)
    return wheel


def tree(site: Path) -> dict[str, tuple[bytes, int]]:
    """Each file's bytes and permission bits (pip's own RECORD and INSTALLER left out: pip
    rewrites them)."""
    return {
        str(path.relative_to(site)): (path.read_bytes(), path.stat().st_mode & 0o777)
        for path in site.rglob("*")
        if path.is_file()
        and path.name not in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
    }


def test_packed_wheels_unpack_as_pip_target_installs_them(tmp_path):
    wheels = [
        make_wheel(tmp_path, "alpha", {
            "alpha/__init__.py": (b"VALUE = 1\n", 0o644),
            "alpha/lib/libz.so": (BIG, 0o755),
            "alpha/lib/libz.so.1": (BIG, 0o755),
            "alpha-1.0.data/scripts/alpha-tool": (b"#!/bin/sh\necho alpha\n", 0o755),
            "alpha-1.0.data/data/bin/alpha-cli": (b"binary", 0o755),
        }),
        make_wheel(tmp_path, "beta", {
            "beta-1.0.data/purelib/beta.py": (b"from alpha import VALUE\n", 0o644),
        }),
    ]  # fmt: skip
    archive = tmp_path / "site.tar.xz"
    packed = subprocess.run(
        [sys.executable, str(PROJECT / "ci" / "pack_site.py"), str(archive), *map(str, wheels)],
        capture_output=True,
        text=True,
    )
    assert packed.returncode == 0, packed.stderr
    assert "2 wheels" in packed.stdout
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(archive) as tar:
        links = [member.name for member in tar.getmembers() if member.islnk()]
    subprocess.run(["tar", "-xJf", str(archive), "-C", str(unpacked)], check=True)  # as there
    assert len(links) == 1 and links[0].endswith("libz.so.1"), links  # stored once
    by_pip = tmp_path / "pip"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
         "--target", str(by_pip), *map(str, wheels)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    expected = tree(by_pip)
    assert {"bin/alpha-tool", "bin/alpha-cli", "beta.py", "alpha/lib/libz.so.1"} <= set(expected)
    assert tree(unpacked) == expected


def test_a_file_that_is_no_wheel_is_named_and_nothing_is_written(tmp_path):
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_text("not a zip file")
    archive = tmp_path / "site.tar.xz"
    packed = subprocess.run(
        [sys.executable, str(PROJECT / "ci" / "pack_site.py"), str(archive), str(broken)],
        capture_output=True,
        text=True,
    )
    assert packed.returncode == 1
    assert f"{broken} is not a readable wheel" in packed.stderr, packed.stderr
    assert "Traceback" not in packed.stderr and not archive.exists()
