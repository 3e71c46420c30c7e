"""The real thing: megatron-core releases from PyPI, the real series, the real CPU suite."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import SERIES

from rebaser.errors import ExitCode
from rebaser.upstream import pypi_cache

pytestmark = pytest.mark.network
OVERLAY_TESTS = "tests/unit_tests/transformer/experimental_attention_variant"


def test_pypi_releases_materialise_as_tagged_reproducible_commits(tmp_path, monkeypatch):
    cache = pypi_cache("megatron-core")
    releases = {version: cache.materialise(version) for version in ("0.19.1", "0.19.2")}
    for version, release in releases.items():
        assert cache.git.rev_parse(f"refs/tags/pypi/megatron-core/{version}") == release.sha
        files = cache.git.out("ls-tree", "-r", "--name-only", release.sha).splitlines()
        assert "megatron/core/transformer/experimental_attention_variant/dsa.py" in files
        assert "megatron/training/arguments.py" in files
        assert not [f for f in files if f.endswith(".so")]
    assert releases["0.19.1"].sha != releases["0.19.2"].sha
    assert cache.materialise("0.19.2") == releases["0.19.2"]  # reused from the tag
    # Another cache, the same wheel: the same commit, byte for byte.
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(tmp_path / "other-cache"))
    assert pypi_cache("megatron-core").materialise("0.19.2").sha == releases["0.19.2"].sha


def test_unknown_release_is_a_usage_error(rebaser):
    result = rebaser("apply", "--upstream", "pypi:megatron-core==0.0.42", "--test", "none")
    assert result.code == ExitCode.USAGE
    assert "PyPI has no release megatron-core==0.0.42" in result.err


@pytest.mark.parametrize("version", ["0.19.0", "0.19.1", "0.19.2"])
def test_series_applies_cleanly_to_the_019_releases(rebaser, tmp_path, version):
    report = tmp_path / "report.json"
    result = rebaser(
        "apply", "--upstream", f"pypi:megatron-core=={version}", "--test", "none", "--json", report
    )
    assert result.code == ExitCode.OK, result.out + result.err
    data = json.loads(report.read_text())
    assert [step["status"] for step in data["steps"]] == [
        "laid",
        "clean",
        "clean",
        "clean",
        "clean",
    ]
    assert [check["name"] for check in data["checks"] if check["ok"]] == [
        "everything committed",
        "no conflict markers",
        "python compiles",
        "git diff --check",
        "promised symbols exist",
        "codemods are no-ops",
    ]


def test_embedded_default_applies_and_runs_the_cpu_suite(rebaser, tmp_path, monkeypatch):
    """What the README's first command does: the series' @base (PyPI 0.19.2) and CPU tests,
    the overlay's Triton-interpreter tests included (the one apply here that runs them)."""
    monkeypatch.delenv("PYTEST_ADDOPTS")
    report = tmp_path / "report.json"
    result = rebaser("apply", "--series", SERIES, "--json", report)
    assert result.code == ExitCode.OK, result.out + result.err
    suites = {suite["name"]: suite for suite in json.loads(report.read_text())["suites"]}
    overlay = suites["overlay (cpu)"]
    assert overlay["status"] == "passed" and overlay["failed"] == overlay["errors"] == 0
    assert overlay["passed"] >= 130 and overlay["skipped"] == 0
    assert suites["upstream"]["status"] == "not run"  # wheels ship no tests
    assert f"{overlay['passed']} passed" in result.out


def test_a_release_before_dsa_stops_at_the_first_patch_with_the_missing_anchor(rebaser, tmp_path):
    """0.15.3 has no DSA: the config codemod finds no dsa_* field, and says so."""
    report = tmp_path / "report.json"
    result = rebaser(
        "apply", "--upstream", "pypi:megatron-core==0.15.3", "--test", "none", "--json", report
    )
    assert result.code == ExitCode.NOT_APPLIED
    data = json.loads(report.read_text())
    assert [step["status"] for step in data["steps"]][:1] == ["laid"]
    assert data["stop"]["patch"] == "0001-config-fields.patch"
    assert (
        "codemod config_fields: megatron/core/transformer/transformer_config.py: cannot find "
        "a dsa_* field in class TransformerConfig" in data["stop"]["reason"]
    )
    assert data["stop"]["hunks"], "each failing hunk is shown against upstream's text"
    assert rebaser("abort").code == ExitCode.OK


def test_overlay_suite_runs_under_plain_pytest(rebaser, tmp_path):
    """Upstream developers' command in the patched tree, without rebaser's pytest plugin: the
    overlay's conftest alone makes megatron.training importable (typing.override on 3.11)."""
    report = tmp_path / "report.json"
    result = rebaser("apply", "--series", SERIES, "--test", "none", "--json", report)
    assert result.code == ExitCode.OK, result.out + result.err
    tree = json.loads(report.read_text())["worktree"]
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", OVERLAY_TESTS, "-q", "-p", "no:cacheprovider", "-k=cli"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"\b3 passed, \d+ deselected", run.stdout), run.stdout[-1000:]
    # The marker the other applies here leave out names exactly the interpreter's tests.
    env.pop("PYTEST_ADDOPTS")
    marked = subprocess.run(
        [sys.executable, "-m", "pytest", OVERLAY_TESTS, "-q", "-p", "no:cacheprovider",
         "--collect-only", "-m", "triton_interpreter"],
        cwd=tree, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert marked.returncode == 0, marked.stdout[-3000:] + marked.stderr[-2000:]
    assert sorted(re.findall(r"::(test_\w+)", marked.stdout)) == [
        "test_candidates_holding_a_nan_leave_the_row_to_the_radix_select",
        "test_cuda_kernel_logic_is_exact_for_any_layout",
        "test_filtered_cuda_select_is_exact_in_every_branch",
        "test_interpreter_spelled_true_runs_no_inline_assembly",
    ]
