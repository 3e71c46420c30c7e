"""repo/tempdirs.py: a folder is judged by the lock its process holds, and only the user's
own folders are ever judged (root in a shared /tmp must not sweep another user's)."""

from __future__ import annotations

import os
import subprocess
import sys

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
