"""ci/topk_pairs.sh packs the revisions a GPU call times side by side (each revision's own
kernels, read from git, not the working tree's) and runs them round by round there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import PROJECT

SCRIPT = PROJECT / "ci" / "topk_pairs.sh"
KERNEL = (
    "megatron_overlay/megatron/core/transformer/experimental_attention_variant/dsa_topk_triton.py"
)


def git_out(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(PROJECT), *args], capture_output=True, text=True, check=True
    ).stdout


def test_pack_lays_out_each_revisions_kernels_and_bench(tmp_path):
    parent = git_out("rev-parse", "HEAD~1").strip()
    revisions = ["HEAD", parent]
    result = subprocess.run(
        ["bash", str(SCRIPT), "pack", str(tmp_path), *revisions],
        capture_output=True,
        text=True,
        cwd=PROJECT,
    )
    assert result.returncode == 0, result.stderr
    head = tmp_path / "HEAD"
    assert (head / KERNEL).read_text() == git_out("show", f"HEAD:{KERNEL}")
    assert (head / "ci" / "bench_topk.py").read_text() == git_out("show", "HEAD:ci/bench_topk.py")
    assert (tmp_path / parent / KERNEL).read_text() == git_out("show", f"{parent}:{KERNEL}")
    assert f"{tmp_path / parent}: {parent[:7]}" in result.stdout


def test_pack_refuses_no_revision_and_fails_on_an_unknown_one(tmp_path):
    empty = subprocess.run(
        ["bash", str(SCRIPT), "pack", str(tmp_path)], capture_output=True, text=True
    )
    assert empty.returncode == 2 and "name at least one revision" in empty.stderr
    unknown = subprocess.run(
        ["bash", str(SCRIPT), "pack", str(tmp_path), "no-such/revision"],
        capture_output=True,
        text=True,
        cwd=PROJECT,
    )
    assert unknown.returncode != 0
    assert not (tmp_path / "no-such-revision" / "ci").exists()


FAKE_BENCH = """\
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
ms = float(open("ms").read())
records = [
    {"shape": "4x8 relu k=2", "dtype": "bfloat16", "method": "torch backend, tie 1", "ms": ms},
    {"shape": "4x8 relu k=2", "dtype": "bfloat16", "method": "torch.topk", "ms": 99.0},
]
json.dump({"records": records}, open(path, "w"))
print("timed", ms)
"""


def fake_gpu(tmp_path, card: str) -> dict:
    """A PATH whose nvidia-smi names `card`, and two revisions, fast and slow, whose bench
    reports 1.0 ms and 2.0 ms for the torch backend in every round."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{card}, 580.159.04'\n")
    smi.chmod(0o755)
    for name, ms in (("fast", 1.0), ("slow", 2.0)):
        (tmp_path / "pairs" / name / "ci").mkdir(parents=True)
        (tmp_path / "pairs" / name / "ci" / "bench_topk.py").write_text(FAKE_BENCH)
        (tmp_path / "pairs" / name / "ms").write_text(str(ms))
    python = Path(sys.executable).parent  # the script runs python3
    return {"PATH": f"{bin_dir}:{python}:/usr/bin:/bin", "HOME": str(tmp_path)}


def run_pairs(tmp_path, env: dict, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "run", str(tmp_path / "pairs"), "2", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**env, **extra},
    )


def test_run_times_every_revision_each_round_and_prints_their_medians(tmp_path):
    env = fake_gpu(tmp_path, "NVIDIA H200")
    result = run_pairs(tmp_path, env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("=== fast, round 1") < out.index("=== slow, round 1")
    assert out.index("=== slow, round 1") < out.index("=== fast, round 2")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fast-1.json", "fast-2.json", "slow-1.json", "slow-2.json",
    ]  # fmt: skip
    # Only the torch backend's timings count (not torch.topk's 99 ms).
    assert "fast                     4x8 relu k=2" in out
    assert "median 1.000 ms (2 timings, 1.000-1.000)" in out
    assert "median 2.000 ms (2 timings, 2.000-2.000)" in out


def test_run_on_another_card_than_asked_times_nothing(tmp_path):
    env = fake_gpu(tmp_path, "NVIDIA H100 80GB HBM3")
    result = run_pairs(tmp_path, env, TOPK_PAIRS_CARD="H200")
    assert result.returncode == 3
    assert "HBM3, 580.159.04 is not the H200 asked for: nothing timed" in result.stderr
    assert "===" not in result.stdout and not (tmp_path / "out").exists()
    asked = run_pairs(tmp_path, env, TOPK_PAIRS_CARD="H100")
    assert asked.returncode == 0, asked.stderr
    assert "median 2.000 ms" in asked.stdout
