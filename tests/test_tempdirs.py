"""repo/tempdirs.py: a folder is judged by the lock its process holds, and only the user's
own folders are ever judged (root in a shared /tmp must not sweep another user's)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from rebaser.repo import tempdirs

HOLD = """
import sys, time
from pathlib import Path
from rebaser.repo import tempdirs
folder = tempdirs.Owned("forkkit-probe-", Path(sys.argv[1]))
print(folder.path, flush=True)
sys.stdin.read()  # held until the test closes our stdin
folder.release()
"""


def test_a_held_folder_stays_an_orphan_goes_another_users_stays(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        held = tmp_path / os.path.basename(holder.stdout.readline().strip())
        orphan = tmp_path / "forkkit-probe-orphan"
        orphan.mkdir()
        (orphan / tempdirs.OWNER).write_text("")  # its process is gone: nothing holds it
        foreign = tmp_path / "forkkit-probe-foreign"
        foreign.mkdir()
        (foreign / tempdirs.OWNER).write_text("")
        if os.getuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(foreign, 65534, 65534)  # another user's
        assert tempdirs.sweep(tmp_path, "forkkit-probe-") == [orphan]
        assert held.is_dir() and foreign.is_dir() and not orphan.exists()
    finally:
        holder.communicate("")
    assert not held.exists()  # released by its holder


def test_a_probe_tree_a_kill_left_is_swept_by_the_next(tmp_path, monkeypatch):
    """A review: `kill -9` during the test blame's bisection left its probe tree (a copy of
    the whole tree) in the temporary folder for good. It is an owned folder now: the next
    probe tree sweeps it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["-c", "user.name=x", "-c", "user.email=x@y", "commit",
                                  "-q", "--allow-empty", "-m", "root"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=repo, check=True)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    hold = (
        "import sys\nfrom rebaser.repo.git import Git\nfrom rebaser.repo.probe import probe_tree\n"
        "with probe_tree(Git(sys.argv[1]), 'blame') as probe:\n"
        "    print(probe.path.parent, flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(repo)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    left = holder.stdout.readline().strip()
    holder.kill()
    holder.wait()
    assert os.path.isdir(left)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    from rebaser.repo.git import Git
    from rebaser.repo.probe import probe_tree

    with probe_tree(Git(repo), "blame") as probe:
        assert probe.path.parent.parent == temporary
        assert not os.path.exists(left)
