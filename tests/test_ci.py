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
from conftest import PROJECT

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
    result = run_script(tmp_path, "--releases", "0.19.2", "--test", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [row["base"] for row in report["bases"]] == [
        "pypi:megatron-core",
        "pypi:megatron-core==0.19.2",
    ]
    assert all(row["exit_code"] == 0 for row in report["bases"])
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("### dsa-forkkit: all bases pass")
    assert (tmp_path / "summary").read_text() == summary  # appended to the job summary


@pytest.mark.network
def test_script_fails_loudly_with_the_summary(tmp_path):
    result = run_script(tmp_path, "--releases", "0.18.2", "--test", "none")
    assert result.returncode == 3
    assert "::error::dsa-forkkit series needs attention (rebaser verify exit 3)" in result.stderr
    assert "stopped at `0003-topk-dispatch.patch`" in result.stderr


@pytest.mark.network
def test_script_verifies_a_clone(tmp_path, release_clone):
    repo = release_clone("0.19.1")
    result = run_script(
        tmp_path, "--repo", str(repo.path), "--ref", "v0.19.1", "--releases", "", "--test", "none"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["bases"]
    assert len(row["base"]) == 40 and row["report"]["steps"][-1]["status"] == "clean"
