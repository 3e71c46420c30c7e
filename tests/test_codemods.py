"""Codemods against real megatron-core sources: they make exactly the patches' change,
are idempotent, and carry the series through drift that breaks the plain patches."""

from __future__ import annotations

import json
import re

import pytest
import unidiff
from conftest import SERIES
from synthetic import SyntheticUpstream, git

from rebaser.codemods import AnchorNotFound
from rebaser.errors import ExitCode
from rebaser.series.patches import load_series
from rebaser.upstream import pypi_cache

pytestmark = pytest.mark.network

CONFIG = "megatron/core/transformer/transformer_config.py"
DSA = "megatron/core/transformer/experimental_attention_variant/dsa.py"
CODEMODS = load_series(SERIES).codemods  # the series' own, loaded by path from patches/codemods


def sources(repo: SyntheticUpstream, rev: str = "HEAD") -> dict[str, str]:
    return {path: repo.read(path, rev) for path in (CONFIG, DSA)}


@pytest.fixture(scope="module")
def patched_0192(tmp_path_factory):
    """0.19.2 with the series applied by `git apply` (the patches, not the codemods)."""
    series = load_series(SERIES)
    cache = pypi_cache("megatron-core")
    release = cache.materialise("0.19.2")
    tree = tmp_path_factory.mktemp("patched") / "tree"
    cache.git.run("worktree", "add", "--quiet", "--detach", str(tree), release.sha)
    for patch in series.patches:
        git(tree, "apply", str(patch.path))
    yield {path: (tree / path).read_text() for path in (CONFIG, DSA)}
    cache.git.run("worktree", "remove", "--force", str(tree))


def base_sources(version: str) -> dict[str, str]:
    cache = pypi_cache("megatron-core")
    sha = cache.materialise(version).sha
    return {path: cache.git.run("show", f"{sha}:{path}").stdout for path in (CONFIG, DSA)}


def test_codemods_make_exactly_the_patches_change(patched_0192):
    result = CODEMODS.transform_sources(CODEMODS.names, base_sources("0.19.2"))
    for path in (CONFIG, DSA):
        assert result[path] == patched_0192[path], f"{path}: codemods and patches differ"


def test_codemods_are_idempotent(patched_0192):
    assert CODEMODS.transform_sources(CODEMODS.names, patched_0192) == patched_0192


def test_each_codemod_alone_matches_its_patch():
    """Codemod i on (base + patches before i) gives (base + patches up to i)."""
    series = load_series(SERIES)
    current = base_sources("0.19.2")
    for patch in series.patches:
        expected = dict(current)
        for patched_file in unidiff.PatchSet(patch.path.read_text()):
            expected[patched_file.path] = _apply_hunks(expected[patched_file.path], patched_file)
        assert CODEMODS.transform_sources([patch.codemod], current) == expected, patch.name
        current = expected


def _apply_hunks(text: str, patched_file: unidiff.PatchedFile) -> str:
    lines = text.splitlines(keepends=True)
    for hunk in reversed(list(patched_file)):
        start = hunk.source_start - 1
        source = [line.value for line in hunk.source_lines()]
        assert lines[start : start + len(source)] == source
        lines[start : start + len(source)] = [line.value for line in hunk.target_lines()]
    return "".join(lines)


# -- drift: upstream moves, the series must keep applying ----------------------------------


def reformatted(files: dict[str, str]) -> dict[str, str]:
    """A formatter pass over the regions the patches touch."""
    dsa = files[DSA].replace(
        "        index_scores, topk_indices = fused_qk_topk_naive(\n"
        "            q, k, weights, self.index_topk, mask, use_relu=self.config.dsa_indexer_scoring_relu\n"
        "        )",
        "        index_scores, topk_indices = fused_qk_topk_naive(\n"
        "            q,\n            k,\n            weights,\n            self.index_topk,\n"
        "            mask,\n            use_relu=self.config.dsa_indexer_scoring_relu,\n        )",
    )
    dsa = dsa.replace(
        "    dsa_indexer_loss,\n    dsa_kernels,\n    dsa_layout,\n    dsa_masking,\n)",
        "    dsa_indexer_loss, dsa_kernels, dsa_layout, dsa_masking\n)",
    )
    dsa = dsa.replace(
        "if use_fused_kernels and computes_topk:", "if (use_fused_kernels and computes_topk):"
    )
    config = files[CONFIG].replace(
        '    """Whether DSA indexer key LayerNorm should run on fp32 inputs."""',
        "    '''Whether DSA indexer key LayerNorm should run on fp32 inputs.'''",
    )
    return {CONFIG: config, DSA: dsa}


def fields_inserted_and_reordered(files: dict[str, str]) -> dict[str, str]:
    config = files[CONFIG]
    backend_field = (
        '    dsa_kernel_backend: Literal["none", "tilelang", "cudnn"] = "none"\n'
        '    """Optional fused DSA kernel backend.\n'
    )
    start = config.index(backend_field)
    end = config.index('"""', start + len(backend_field)) + 4
    block, config = config[start:end], config[:start] + config[end:].lstrip("\n")
    anchor = '    """Whether DSA indexer key LayerNorm should run on fp32 inputs."""\n'
    extra = (
        '\n    dsa_indexer_extra_option: int = 0\n    """A field upstream added after ours."""\n\n'
    )
    config = config.replace(anchor, anchor + extra + block)
    return {CONFIG: config, DSA: files[DSA]}


def comment_in_every_hunk(files: dict[str, str]) -> dict[str, str]:
    """Upstream adds a comment right where each hunk of the series changes something."""
    series = load_series(SERIES)
    lines = {path: text.splitlines(keepends=True) for path, text in files.items()}
    inserts: dict[str, list[int]] = {path: [] for path in files}
    for patch in series.patches:
        for patched_file in unidiff.PatchSet(patch.path.read_text()):
            for hunk in patched_file:
                first_change = next(i for i, line in enumerate(hunk) if not line.is_context)
                before = sum(1 for line in list(hunk)[:first_change] if line.is_context)
                inserts[patched_file.path].append(hunk.source_start - 1 + before)
    for path, positions in inserts.items():
        for position in sorted(set(positions), reverse=True):
            indent = re.match(r"\s*", lines[path][position]).group(0)
            lines[path].insert(position, f"{indent}# upstream drift comment\n")
    return {path: "".join(text) for path, text in lines.items()}


def functions_moved(files: dict[str, str]) -> dict[str, str]:
    """Upstream moves the naive top-k helpers to the end of dsa.py."""
    dsa = files[DSA]
    start = dsa.index("def fused_qk_topk_naive(")
    end = dsa.index("def bwd_fused_indexer_loss_naive(")
    return {
        CONFIG: files[CONFIG],
        DSA: dsa[:start] + dsa[end:] + "\n\n" + dsa[start:end].rstrip() + "\n",
    }


@pytest.mark.parametrize(
    "drift", [reformatted, fields_inserted_and_reordered, comment_in_every_hunk, functions_moved]
)
def test_series_survives_drift_and_the_cpu_suite_passes(rebaser, release_clone, tmp_path, drift):
    repo = release_clone("0.19.2")
    drifted = drift(sources(repo))
    for path, text in drifted.items():
        compile(text, path, "exec")
    repo.commit(drifted, f"drift: {drift.__name__}", tag="drift")
    report = tmp_path / "report.json"
    result = rebaser("apply", "--repo", repo.path, "--base", "drift", "--json", report)
    assert result.code == ExitCode.OK, result.out + result.err
    data = json.loads(report.read_text())
    statuses = [step["status"] for step in data["steps"][1:]]
    assert any(status != "clean" for status in statuses), "the drift did not affect the patches"
    if drift is reformatted:  # code upstream only reformatted: the structured merge's case
        assert "structured merge" in statuses, statuses
    elif drift is not functions_moved:
        assert "codemod" in statuses, statuses
    assert all(check["ok"] for check in data["checks"])
    (overlay,) = [s for s in data["suites"] if s["name"] == "overlay (cpu)"]
    assert overlay["status"] == "passed" and overlay["passed"] >= 130


def test_a_renamed_anchor_stops_with_the_codemod_and_candidates(rebaser, release_clone, tmp_path):
    repo = release_clone("0.19.2")
    files = sources(repo)
    files[DSA] = files[DSA].replace("use_fused_kernels", "fused_kernels_enabled")
    repo.commit(files, "upstream renames use_fused_kernels", tag="renamed")
    report = tmp_path / "report.json"
    result = rebaser(
        "apply", "--repo", repo.path, "--base", "renamed", "--test", "none", "--json", report
    )
    assert result.code == ExitCode.NOT_APPLIED
    stop = json.loads(report.read_text())["stop"]
    assert stop["patch"] == "0003-topk-dispatch.patch"
    assert (
        f"codemod topk_dispatch: {DSA}: cannot find the `use_fused_kernels = ...` assignment"
        in stop["reason"]
    )
    assert "nearest candidates: dsa_kernels.use_fused_dsa_kernels" in stop["reason"]
    status = rebaser("status", "--repo", repo.path)
    assert "stopped at 0003-topk-dispatch.patch" in status.out


def test_missing_file_is_named(tmp_path):
    with pytest.raises(AnchorNotFound, match="the file .*dsa.py"):
        CODEMODS.run(["topk_dispatch"], tmp_path, write=False)
