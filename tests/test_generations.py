"""One series, every DSA generation: the README's supported matrix is kept true on the real
PyPI releases, the codemods make each generation's shape, and a tree derived from 0.19.2 the
way NVIDIA dev changed it (an 18th indexer-loss input) carries with its suite green."""

from __future__ import annotations

import ast
import json
import re

import pytest
from conftest import SERIES
from matrix import readme_pypi_rows
from packaging.version import Version
from synthetic import edit

from rebaser.errors import ExitCode
from rebaser.series.patches import load_series
from rebaser.upstream import pypi_cache, pypi_index

pytestmark = pytest.mark.network

CONFIG = "megatron/core/transformer/transformer_config.py"
DSA = "megatron/core/transformer/experimental_attention_variant/dsa.py"
CODEMODS = load_series(SERIES).codemods


def failed_tests(report) -> str:
    """Each base's failing tests, with their messages: the table alone names no test."""
    if not report.exists():
        return "no report written\n"
    return "".join(
        f"{row['base']}: {suite['name']}: {failure}\n"
        for row in json.loads(report.read_text())["bases"]
        for suite in (row["report"] or {"suites": []})["suites"]
        for failure in suite["failures"]
    )


def test_readme_matrix_holds_on_every_listed_release(rebaser, tmp_path):
    """Each listed release applies with the statuses the README gives and passes the CPU
    suite; every release PyPI has in the range is listed; the yanked marks are PyPI's."""
    claims = {
        version: (version in yanked, statuses)
        for versions, yanked, statuses in readme_pypi_rows()
        for version in versions
    }
    assert len(claims) >= 10
    report = tmp_path / "matrix.json"
    bases = [f"pypi:megatron-core=={version}" for version in claims]
    result = rebaser(
        "verify", "--series", SERIES, "--bases", *bases, "--test", "cpu", "--json", report
    )
    assert result.code == ExitCode.OK, (
        failed_tests(report) + result.out[-4000:] + result.err[-2000:]
    )
    for row, (version, (yanked, statuses)) in zip(
        json.loads(report.read_text())["bases"], claims.items()
    ):
        data = row["report"]
        assert [step["status"] for step in data["steps"]] == statuses, version
        assert all(check["ok"] for check in data["checks"]), version
        (overlay,) = [suite for suite in data["suites"] if suite["name"] == "overlay (cpu)"]
        assert overlay["status"] == "passed" and overlay["failed"] == overlay["errors"] == 0
        assert overlay["passed"] >= 180, (version, overlay)
        assert ("yanked" in data["upstream"]) == yanked, version
        warning = f"pypi:megatron-core=={version} is yanked on PyPI"
        assert (warning in result.err) == yanked, version
    low, high = min(map(Version, claims)), max(map(Version, claims))
    on_pypi = {v for v in pypi_index.release_versions("megatron-core") if low <= Version(v) <= high}
    assert on_pypi <= set(claims), f"PyPI releases missing from the README: {on_pypi - set(claims)}"
    for version, (yanked, _) in claims.items():
        assert (pypi_index.yanked_reason("megatron-core", version) is not None) == yanked, version


def base_sources(version: str) -> dict[str, str]:
    cache = pypi_cache("megatron-core")
    sha = cache.materialise(version).sha
    return {path: cache.git.run("show", f"{sha}:{path}").stdout for path in (CONFIG, DSA)}


def function(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)  # type: ignore
    return node  # type: ignore[return-value]


def calls(node: ast.AST) -> list[str]:
    return [ast.unparse(call.func) for call in ast.walk(node) if isinstance(call, ast.Call)]


@pytest.mark.parametrize("version", ["0.16.1", "0.17.0"])
def test_codemods_make_each_v1_shape_and_only_add(version):
    """v1 DSA (0.16: selection inside DSAIndexer; 0.17-0.18: fused_qk_topk_naive of five
    parameters) gets the same hooks at its own places; upstream's lines stay, except the
    calls the hooks reroute; the codemods are no-ops on the result."""
    before = base_sources(version)
    after = CODEMODS.transform_sources(CODEMODS.names, before)
    assert CODEMODS.transform_sources(CODEMODS.names, after) == after
    tree = ast.parse(after[DSA])
    indexer = function(tree, "DSAIndexer.forward_with_scores")
    attention = function(tree, "DSAttention.forward")
    assert "dsa_blockwise.scatter_ready" in calls(function(tree, "unfused_dsa_fn"))
    assert "dsa_blockwise.plan_from_config" in calls(attention)
    if version == "0.16.1":
        assert "dsa_blockwise.select_topk" in calls(indexer)
        assert "dsa_blockwise.IndexerInputs" in calls(indexer)
        assert "dsa_blockwise.preselected_loss_function" in calls(attention)
    else:
        naive = function(tree, "fused_qk_topk_naive")
        assert [a.arg for a in naive.args.args][-1] == "topk_policy"
        (select,) = [
            c
            for c in ast.walk(naive)
            if isinstance(c, ast.Call) and "select_topk" in ast.unparse(c.func)
        ]
        assert [k.arg for k in select.keywords] == ["mask"]  # all the masks v1 has
        assert "dsa_blockwise.indexer_loss_function" in calls(attention)
    removed = [
        line
        for line in set(before[DSA].splitlines()) - set(after[DSA].splitlines())
        if line.strip()
    ]
    rerouted = re.compile(
        r"(indexer_loss|topk_indices, indexer_loss) = (compute_dsa_indexer_loss|"
        r"FusedDSAIndexerLoss\.apply)\($|index_scores, topk_indices = fused_qk_topk_naive\("
    )
    assert all(rerouted.search(line.strip()) for line in removed), removed


def dev_shaped(text: str) -> str:
    """0.19.2's dsa.py with FusedDSAIndexerLoss taking an 18th input, as NVIDIA dev
    d48bd6be0 does (non_compressed_lse, gradient None, backward trimmed to the inputs given)."""
    text = edit(text, '    "use_relu",\n)\n', '    "use_relu",\n    "non_compressed_lse",\n)\n')
    text = edit(
        text,
        '        use_relu: bool = True,\n    ):\n        """\n        Fused forward:',
        "        use_relu: bool = True,\n        non_compressed_lse=None,\n    ):\n"
        '        """\n        Fused forward:',
    )
    text = edit(
        text,
        "        ctx.use_relu = use_relu\n",
        "        ctx.use_relu = use_relu\n        ctx.num_inputs = len(ctx.needs_input_grad)\n",
    )
    return edit(
        text,
        "        return tuple(grad_by_name.get(name) for name in _FUSED_DSA_INDEXER_LOSS_INPUT_NAMES)\n",
        "        gradients = tuple(grad_by_name.get(name) for name in _FUSED_DSA_INDEXER_LOSS_INPUT_NAMES)\n"
        "        return gradients[: ctx.num_inputs]\n",
    )


def test_a_dev_shaped_indexer_loss_carries_and_its_suite_passes(rebaser, release_clone, tmp_path):
    """The failure NVIDIA dev showed: the indexer loss gained an 18th input and the block-wise
    stand-in took 17, so the overlay's interface test failed there."""
    repo = release_clone("0.19.2")
    repo.commit({DSA: dev_shaped(repo.read(DSA))}, "dev: an 18th indexer-loss input", tag="dev")
    report = tmp_path / "report.json"
    result = rebaser(
        "apply", "--series", SERIES, "--repo", repo.path, "--base", "dev", "--json", report
    )
    assert result.code == ExitCode.OK, result.out[-3000:] + result.err[-2000:]
    data = json.loads(report.read_text())
    assert all(check["ok"] for check in data["checks"])
    (overlay,) = [suite for suite in data["suites"] if suite["name"] == "overlay (cpu)"]
    assert overlay["status"] == "passed" and overlay["skipped"] == 0 and overlay["passed"] >= 200
