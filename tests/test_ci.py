"""The fork CI kit in ci/: the GitHub Actions workflow is well-formed and calls what exists,
and ci/verify-upstream.sh verifies, reports and fails loudly."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
import yaml
from conftest import PROJECT, readme_pypi_rows
from synthetic import ADD_DOC, CALC, calc_series, edit, git

WORKFLOW = PROJECT / "ci" / "github-workflow.yml"
SCRIPT = PROJECT / "ci" / "verify-upstream.sh"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_workflow_triggers_nightly_and_on_series_changes(workflow):
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert triggers["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]  # every day
    for event in ("push", "pull_request"):
        assert {"patches/**", "megatron_overlay/**", "rebaser/**"} <= set(triggers[event]["paths"])
    assert "workflow_dispatch" in triggers


def test_workflow_jobs_run_the_script_cache_wheels_and_upload_reports(workflow):
    extras = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for name, job in workflow["jobs"].items():
        steps = job["steps"]
        runs = "\n".join(step.get("run", "") for step in steps)
        assert "ci/verify-upstream.sh" in runs, name
        for line in runs.splitlines():
            if line.startswith("ci/"):
                assert (PROJECT / shlex.split(line)[0]).is_file()
        installed = re.findall(r"pip install -e '\.\[(\w+)\]'", runs)
        assert installed and all(extra in extras for extra in installed), name
        uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
        assert (
            uploads
            and uploads[0]["if"] == "always()"
            and uploads[0]["with"]["path"] == "forkkit-report/"
        )
        assert job["timeout-minutes"] <= 90
    cache = [
        s
        for s in workflow["jobs"]["pypi-releases"]["steps"]
        if s.get("uses", "").startswith("actions/cache@")
    ]
    assert cache and cache[0]["with"]["path"] == ".wheel-cache"
    assert workflow["jobs"]["pypi-releases"]["env"]["DSA_FORKKIT_WHEELS"].endswith("/.wheel-cache")
    assert os.access(SCRIPT, os.X_OK)


def test_workflow_verifies_the_readme_supported_releases(workflow):
    """The nightly job checks every release the README says the series serves."""
    runs = "\n".join(s.get("run", "") for s in workflow["jobs"]["pypi-releases"]["steps"])
    (releases,) = re.findall(r'--releases "([^"]*)"', runs)
    supported = [version for versions, _, _ in readme_pypi_rows() for version in versions]
    assert releases.split() == supported
    default = re.search(r'releases="([^"]*)"', SCRIPT.read_text()).group(1)
    assert default.split() == supported  # the script's own default too


def test_workflow_checks_upstream_main_and_dev_and_uploads_the_refreshed_series(workflow):
    job = workflow["jobs"]["upstream"]
    assert job["strategy"]["matrix"]["ref"] == ["main", "dev"]
    (upstream,) = [s for s in job["steps"] if s.get("with", {}).get("path") == "upstream"]
    assert upstream["with"]["ref"] == "${{ matrix.ref }}"
    for job in workflow["jobs"].values():
        (refreshed,) = [
            s
            for s in job["steps"]
            if s.get("with", {}).get("path", "").endswith("refreshed-series/")
        ]
        assert refreshed["if"].startswith("always() && hashFiles('forkkit-report/refreshed-series/")


def run_script(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        REBASER=f"{sys.executable} -m rebaser",
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary"),
    )
    return subprocess.run(
        [str(SCRIPT), "--out", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.mark.network
def test_script_verifies_latest_pypi_and_releases(tmp_path):
    result = run_script(tmp_path, "--releases", "0.18.2 0.19.2", "--test", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [row["base"] for row in report["bases"]] == [
        "pypi:megatron-core",
        "pypi:megatron-core==0.18.2",
        "pypi:megatron-core==0.19.2",
    ]
    assert all(row["exit_code"] == 0 for row in report["bases"])
    # 0.18.2 (v1 DSA) takes the codemods, by design: no refreshed series is offered from the
    # releases matrix, which would have that older shape.
    assert "codemod" in [step["status"] for step in report["bases"][1]["report"]["steps"]]
    assert not (tmp_path / "out" / "refreshed-series").exists()
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("### dsa-forkkit: all bases pass")
    assert (tmp_path / "summary").read_text() == summary  # appended to the job summary


@pytest.mark.network
def test_script_fails_loudly_with_the_summary(tmp_path):
    result = run_script(tmp_path, "--releases", "0.15.3", "--test", "none")  # before DSA
    assert result.returncode == 3
    assert "::error::dsa-forkkit series needs attention (rebaser verify exit 3)" in result.stderr
    assert "`0003-topk-dispatch.patch` dropped" in result.stderr


@pytest.mark.network
def test_script_verifies_a_clone(tmp_path, release_clone):
    repo = release_clone("0.19.1")
    result = run_script(
        tmp_path, "--repo", str(repo.path), "--ref", "v0.19.1", "--releases", "", "--test", "none"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["bases"]
    assert len(row["base"]) == 40 and row["report"]["steps"][-1]["status"] == "clean"


# -- offline: a synthetic upstream with a `main` and a `dev` branch ---------------------------


def fork_upstream(tmp_path, upstream, overlay_tests=None):
    """A series of one patch on v1; `dev` drifts inside the patch's context, `main` does not."""
    overlay = {"pkg/extra.py": "X = 1\n", **(overlay_tests or {})}
    series = calc_series(tmp_path, upstream, [("demo: document add", ADD_DOC)], overlay=overlay)
    git(upstream.path, "checkout", "-q", "-b", "dev")
    drifted = edit(
        CALC, '"""A tiny upstream module."""\n\n', '"""A tiny upstream module."""\n# dev\n'
    )
    upstream.commit({"pkg/calc.py": drifted}, "dev drifts")
    git(upstream.path, "checkout", "-q", "main")
    return series


def test_script_verifies_main_and_dev_of_a_clone(tmp_path, upstream):
    series = fork_upstream(tmp_path, upstream)
    result = run_script(
        tmp_path, "--repo", str(upstream.path), "--ref", "main", "--ref", "dev",
        "--releases", "", "--series", str(series), "--test", "none",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["bases"]
    assert [row["base"] for row in rows] == [
        git(upstream.path, "rev-parse", ref) for ref in ("main", "dev")
    ]
    main_row, dev_row = (row["report"]["steps"][1]["status"] for row in rows)
    assert main_row == "clean" and dev_row in ("3-way", "cherry-pick")  # a merge carried it
    # Verify's throwaway branches are gone; the user's checkout is as it was.
    assert "forkkit" not in git(upstream.path, "branch", "--list")
    assert git(upstream.path, "worktree", "list").count("\n") == 0
    assert git(upstream.path, "status", "--porcelain") == ""


def test_script_hands_back_the_refreshed_series_with_its_range_diff(tmp_path, upstream):
    series = fork_upstream(tmp_path, upstream)
    original = (series.parent / "0001-change-1.patch").read_text()
    result = run_script(
        tmp_path, "--repo", str(upstream.path), "--ref", "main", "--ref", "dev",
        "--releases", "", "--series", str(series), "--test", "none",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    dev = git(upstream.path, "rev-parse", "dev")
    refreshed = tmp_path / "out" / "refreshed-series" / dev
    assert sorted(p.name for p in (tmp_path / "out" / "refreshed-series").iterdir()) == [dev]
    patch = (refreshed / "patches" / "0001-change-1.patch").read_text()
    assert patch != original and "\n # dev\n" in patch  # the new context, ready to commit
    assert (refreshed / "overlay" / "pkg" / "extra.py").read_text() == "X = 1\n"
    assert (series.parent / "0001-change-1.patch").read_text() == original  # checkout untouched
    summary = (tmp_path / "summary").read_text()
    assert f"refreshed series for `{dev}` (artifact: refreshed-series/{dev})" in summary
    assert summary.count("### Patch series changes") == 1
    assert (refreshed / "range-diff.md").read_text() in summary


def test_script_offers_no_refreshed_series_from_a_base_whose_tests_failed(tmp_path, upstream):
    """dev needs a merge to carry the patch and the series' test fails there: the merged
    series is no fix to take."""
    no_dev_marker = """\
        import inspect

        import pkg.calc


        def test_no_dev_marker():
            assert "# dev" not in inspect.getsource(pkg.calc)
        """
    series = fork_upstream(tmp_path, upstream, {"tests/test_calc_marker.py": no_dev_marker})
    result = run_script(
        tmp_path, "--repo", str(upstream.path), "--ref", "main", "--ref", "dev",
        "--releases", "", "--series", str(series), "--test", "cpu",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    main_row, dev_row = json.loads((tmp_path / "out" / "report.json").read_text())["bases"]
    assert (main_row["exit_code"], dev_row["exit_code"]) == (0, 1)
    assert dev_row["report"]["steps"][1]["status"] in ("3-way", "cherry-pick")
    assert not (tmp_path / "out" / "refreshed-series").exists()
    dev = git(upstream.path, "rev-parse", "dev")
    summary = (tmp_path / "summary").read_text()
    assert f"no refreshed series for `{dev}`: a patch needed a fallback there, but" in summary
    assert "### Patch series changes" not in summary
    assert "forkkit" not in git(upstream.path, "branch", "--list")
