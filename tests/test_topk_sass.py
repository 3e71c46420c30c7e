"""ci/topk_sass.py compiles the overlay's top-k kernel for the H200 on this CPU machine and
finds the collecting loops it reports on: a change to the kernel's launch arguments that
the script did not follow would otherwise show only on the next GPU day."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import PROJECT

pytest.importorskip("triton.backends.nvidia")


@pytest.mark.parametrize("bits", ["32", "16"])
def test_counts_the_collecting_loops(bits):
    result = subprocess.run(
        [sys.executable, str(PROJECT / "ci" / "topk_sass.py"), "--bits", bits],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    per_score = [
        float(found) for found in re.findall(r"([\d.]+) a score \(collecting\)", result.stdout)
    ]
    # The first pass and the retry, each for raw and for transformed keys.
    assert len(per_score) == 4, result.stdout
    assert all(0 < figure < 100 for figure in per_score), result.stdout
