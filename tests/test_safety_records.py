"""Issue 18: resolution records are confined as the overlay is. A record is plain files in
plain folders under `resolutions/`: a link anywhere on its way is refused (its target is
never read or written), sizes are bounded, names are checked; a malformed record is named
and refused with exit 2 before anything is done, never a crash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from synthetic import SyntheticUpstream, git
from test_apply_synthetic import CONFLICT_FIXED, apply, stopped_apply, two_patch_series

from rebaser.errors import ExitCode

PATCH = "0002-change-2.patch"
SECRET = "SECRET_TOKEN=hunter2\n"


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    return folder


def recorded(rebaser, tmp_path, upstream) -> tuple[Path, Path]:
    """The two-patch series stopped on v2, fixed and continued: its resolution recorded.
    Returns the series file and the record's folder."""
    series = two_patch_series(tmp_path, upstream)
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK
    (record,) = (series.parent / "resolutions" / PATCH).iterdir()
    return series, record


def objects_hold(upstream: SyntheticUpstream, text: str) -> bool:
    """Whether any commit reachable from any ref holds `text` in a file."""
    revs = git(upstream.path, "rev-list", "--all").split()
    found = subprocess.run(
        ["git", "grep", "-l", "-F", text.strip(), *revs], cwd=upstream.path, capture_output=True
    )
    assert found.returncode in (0, 1), found.stderr  # 1: not found
    return found.returncode == 0


def test_a_postimage_that_links_elsewhere_is_never_committed(rebaser, tmp_path, upstream, outside):
    """Case 5: a postimage that is a symlink (to a secret) is refused; its target's content
    reaches no branch."""
    series, record = recorded(rebaser, tmp_path, upstream)
    (record / "postimage").unlink()
    os.symlink(outside / "secret.txt", record / "postimage")
    result = apply(rebaser, series, upstream, "v2", "--force")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "postimage" in result.err and "symlink" in result.err, result.err
    assert not objects_hold(upstream, SECRET)


@pytest.mark.parametrize("link", ["resolutions", f"resolutions/{PATCH}"])
def test_continue_never_writes_through_a_linked_records_folder(
    rebaser, tmp_path, upstream, outside, link
):
    """Case 6: `resolutions/` or `resolutions/<patch>` is a symlink: continue refuses (exit
    2, naming it) and writes nothing through it; without the link it goes on."""
    series = two_patch_series(tmp_path, upstream)
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    place = series.parent / link
    place.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, place)
    result = rebaser("continue", "--repo", upstream.path)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert link in result.err and "symlink" in result.err, result.err
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    place.unlink()
    assert rebaser("continue", "--repo", upstream.path).code == ExitCode.OK
    assert (series.parent / "resolutions" / PATCH).is_dir()


def _not_utf8(record: Path) -> None:
    (record / "postimage").write_bytes(b"    return 2 * b * a\xff\n")


def _id_is_a_file(record: Path) -> None:
    for name in ("preimage", "postimage"):
        (record / name).unlink()
    record.rmdir()
    record.write_text("not a folder\n")


def _postimage_is_a_folder(record: Path) -> None:
    (record / "postimage").unlink()
    (record / "postimage").mkdir()


def _links_to_dev_zero(record: Path) -> None:
    (record / "postimage").unlink()
    os.symlink("/dev/zero", record / "postimage")


def _too_large(record: Path) -> None:
    with (record / "postimage").open("ab") as handle:
        handle.truncate(1 << 30)  # sparse: a gigabyte that takes no room


def _not_an_id(record: Path) -> None:
    record.rename(record.with_name("my-notes"))


MALFORMED = {
    "postimage not UTF-8": (_not_utf8, "not UTF-8"),
    "id is a file": (_id_is_a_file, "not a folder"),
    "postimage is a folder": (_postimage_is_a_folder, "not a regular file"),
    "postimage links to /dev/zero": (_links_to_dev_zero, "symlink"),
    "postimage of 1 GiB": (_too_large, "larger than"),
    "folder not named by a conflict id": (_not_an_id, "not a conflict id"),
}


@pytest.mark.parametrize("damage", MALFORMED)
def test_a_malformed_record_is_named_and_refused(rebaser, tmp_path, upstream, damage):
    """Case 12: apply and continue name the record and exit 2 (they crashed with exit 6, or
    read /dev/zero forever); once it is fixed they work."""
    series, record = recorded(rebaser, tmp_path, upstream)
    spoil, said = MALFORMED[damage]
    spoil(record)
    result = apply(rebaser, series, upstream, "v2", "--force")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert said in result.err and f"resolutions/{PATCH}" in result.err, result.err

    # continue at a stop of the same patch (on v3, another base) says the same
    upstream.commit({"pkg/other.py": "X = 1\n"}, "v3", tag="v3")
    healthy = tmp_path / "healthy"
    (series.parent / "resolutions").rename(healthy)
    assert apply(rebaser, series, upstream, "v3", "--force").code == ExitCode.NOT_APPLIED
    (healthy).rename(series.parent / "resolutions")
    continued = rebaser("continue", "--repo", upstream.path)
    assert continued.code == ExitCode.USAGE, continued.out + continued.err
    assert said in continued.err, continued.err
    assert rebaser("abort", "--repo", upstream.path).code == ExitCode.OK


def test_records_of_a_patch_in_a_subfolder_are_written_and_replayed(rebaser, tmp_path, upstream):
    """Review: a series may list a patch in a subfolder (`fixes/0002-....patch`); its
    records go by its file's name (`resolutions/0002-...`), where confinement checks them."""
    series = two_patch_series(tmp_path, upstream)
    (series.parent / "fixes").mkdir()
    (series.parent / PATCH).rename(series.parent / "fixes" / PATCH)
    series.write_text(series.read_text().replace(PATCH, f"fixes/{PATCH}"))
    tree = stopped_apply(rebaser, tmp_path, upstream, series)
    (tree / "pkg/calc.py").write_text(CONFLICT_FIXED)
    git(tree, "add", "pkg/calc.py")
    done = rebaser("continue", "--repo", upstream.path)
    assert done.code == ExitCode.OK, done.out + done.err
    assert len(list((series.parent / "resolutions" / PATCH).iterdir())) == 1
    again = apply(rebaser, series, upstream, "v2", "--force")
    assert again.code == ExitCode.OK and "resolution replayed" in again.out, again.out + again.err
