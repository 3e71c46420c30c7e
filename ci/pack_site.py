"""Pack wheels into one xz archive of the folder `pip install --target` would make, for a
machine with no package index whose carry is smaller than the wheels: the GPU suite's
working set is 96 MB of wheels and 51 MB packed, under one 64 MiB carry.

    python ci/pack_site.py ARCHIVE WHEEL...        (here: any Python, no pip needed)
    tar -xJf ARCHIVE -C SITE                       (there: then PYTHONPATH=SITE)

A wheel is unzipped as pip lays it out under --target: its `.data/purelib` and `platlib`
at the top, `scripts` in `bin/`, `data` at the top; file modes kept. Files with the same
bytes (zip has no links: z3-solver ships libz3.so twice, 22 MB each) become hard links,
which tar stores once. Dependencies are not resolved: pass every wheel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def unpack_wheel(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            target = site / _placed(member.filename)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            mode = member.external_attr >> 16 & 0o777
            if mode:
                target.chmod(mode)


def _placed(name: str) -> str:
    """Where pip --target puts a wheel's file."""
    top, _, rest = name.partition("/")
    if not top.endswith(".data"):
        return name
    scheme, _, path = rest.partition("/")
    return f"bin/{path}" if scheme == "scripts" else path


def link_duplicates(site: Path) -> int:
    """Hard-link files with the same bytes to the first; the bytes saved."""
    first: dict[tuple[int, str], Path] = {}
    saved = 0
    for path in sorted(p for p in site.rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        if size < 1 << 16:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        original = first.setdefault((size, digest), path)
        if original != path:
            path.unlink()
            os.link(original, path)
            saved += size
    return saved


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    archive, wheels = Path(sys.argv[1]).resolve(), [Path(w) for w in sys.argv[2:]]
    with tempfile.TemporaryDirectory(prefix="pack-site-") as folder:
        site = Path(folder)
        for wheel in wheels:
            try:
                unpack_wheel(wheel, site)
            except (OSError, zipfile.BadZipFile) as error:
                sys.exit(f"pack_site: {wheel} is not a readable wheel ({error}); nothing written")
        saved = link_duplicates(site)
        subprocess.run(
            ["tar", "-C", str(site), "--use-compress-program=xz -T0 -6", "-cf", str(archive), "."],
            check=True,
        )
    print(
        f"pack_site: {len(wheels)} wheels -> {archive} "
        f"({archive.stat().st_size / 2**20:.1f} MiB; {saved / 2**20:.0f} MiB of duplicates linked)"
    )


if __name__ == "__main__":
    main()
