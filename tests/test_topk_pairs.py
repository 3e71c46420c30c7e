"""ci/topk_pairs.sh packs the revisions a GPU call times side by side: each revision's own
kernels, read from git, not the working tree's."""

from __future__ import annotations

import subprocess

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
