"""The fork CI kit in ci/: the GitHub Actions workflow is well-formed and calls what exists,
and ci/verify-upstream.sh verifies, reports and fails loudly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import PROJECT
from matrix import supported_releases
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


def local_action(path: str) -> dict:
    return yaml.safe_load((PROJECT / path / "action.yml").read_text())


def test_workflow_fans_out_from_a_plan_and_merges_one_table(workflow):
    """A plan job computes the bases; each is its own job through the kit's action; one job
    merges their reports; the GPU job waits on a runner label; least privilege; one run per
    ref at a time."""
    jobs = workflow["jobs"]
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["cancel-in-progress"] is True
    assert "github.ref" in workflow["concurrency"]["group"]
    assert "python ci/matrix.py" in jobs["plan"]["steps"][-1]["run"]
    verify = jobs["verify"]
    assert verify["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert verify["strategy"]["fail-fast"] is False
    (uses,) = [step for step in verify["steps"] if step.get("uses") == "./ci"]
    assert set(uses["with"]) <= set(local_action("ci")["inputs"])
    assert jobs["report"]["needs"] == ["verify", "gpu"] and jobs["report"]["if"] == "always()"
    assert [step.get("uses") for step in jobs["report"]["steps"]][-1] == "./ci/merge"
    gpu = jobs["gpu"]
    assert gpu["if"] == "needs.plan.outputs.gpu-runner != ''"
    assert gpu["runs-on"] == ["self-hosted", "${{ needs.plan.outputs.gpu-runner }}"]
    (uses,) = [step for step in gpu["steps"] if step.get("uses") == "./ci"]
    assert uses["with"]["test"] == "gpu" and set(uses["with"]) <= set(local_action("ci")["inputs"])
    assert all(job["timeout-minutes"] <= 90 for job in jobs.values())


@pytest.mark.parametrize("path", ["ci", "ci/merge"])
def test_the_actions_use_only_inputs_they_declare_and_scripts_that_exist(path):
    action = local_action(path)
    text = (PROJECT / path / "action.yml").read_text()
    assert set(re.findall(r"inputs\.([\w-]+)", text)) <= set(action["inputs"])
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        assert "run" not in step or step["shell"] == "bash"
        for script in re.findall(r"\$GITHUB_ACTION_PATH/([\w./-]+\.sh)", step.get("run", "")):
            assert os.access(PROJECT / path / script, os.X_OK), script
    extras = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert local_action("ci")["inputs"]["extras"]["default"] in extras


def test_the_wheel_cache_is_keyed_by_release():
    (cache,) = [
        s for s in local_action("ci")["runs"]["steps"] if "actions/cache@" in s.get("uses", "")
    ]
    assert cache["with"]["key"] == "megatron-core-${{ inputs.release }}"
    assert cache["if"] == "inputs.repository == '' && inputs.release != 'latest'"


def plan(*args: str) -> tuple[list[dict], str]:
    result = subprocess.run(
        [sys.executable, str(PROJECT / "ci" / "matrix.py"), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    return json.loads(outputs["matrix"])["include"], outputs["gpu-runner"]


def test_the_plan_is_every_readme_release_then_nvidia_main_and_dev_and_the_forks():
    rows, gpu_runner = plan("--offline", "--fork-branches", "radixark/Megatron-LM@miles-main")
    releases = [row["release"] for row in rows if row["release"]]
    assert releases == supported_releases() and len(releases) >= 10
    assert len({row["id"] for row in rows}) == len(rows)  # artifact names
    assert [(row["repository"], row["ref"], row["refresh"]) for row in rows if row["ref"]] == [
        ("NVIDIA/Megatron-LM", "main", True),
        ("NVIDIA/Megatron-LM", "dev", True),
        ("radixark/Megatron-LM", "miles-main", False),  # a fork's shape: no refreshed series
    ]
    assert not any(row["refresh"] for row in rows if row["release"])  # no newest known
    assert gpu_runner == ""  # ci/bases.toml as shipped: the GPU job is skipped
    bad = subprocess.run(
        [sys.executable, str(PROJECT / "ci" / "matrix.py"), "--offline", "--fork-branches", "x"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "'x' is not owner/repo@branch" in bad.stderr


def test_the_newest_release_on_pypi_offers_a_refresh_and_gets_a_job_when_new(fake_pypi):
    rows, _ = plan()  # fake PyPI: 9.9.0 only
    newest = [row for row in rows if row["release"] == "9.9.0"]
    assert [(row["refresh"], "not in the README yet" in row["name"]) for row in newest] == [
        (True, True)
    ]
    fake_pypi.add(supported_releases()[-1])
    fake_pypi.yanked["9.9.0"] = "broken"
    rows, _ = plan()
    assert [row["release"] for row in rows if row["refresh"] and row["release"]] == [
        supported_releases()[-1]
    ]
    assert len([row for row in rows if row["release"]]) == len(supported_releases())  # no twice


def action_arguments(tmp_path, **inputs: str) -> list[str]:
    """The arguments the kit's action passes to verify-upstream.sh for these inputs (the
    step's own bash, run with the script replaced by one that prints them)."""
    action = local_action("ci")
    (step,) = [s for s in action["runs"]["steps"] if s.get("name") == "Verify the series"]
    fake = tmp_path / "action"
    fake.mkdir(exist_ok=True)
    (fake / "verify-upstream.sh").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "verify-upstream.sh").chmod(0o755)
    defaults = {name: spec["default"] for name, spec in action["inputs"].items()}
    values = {**defaults, **inputs}
    env = {name.upper(): values[name.lower()] for name in step["env"] if name.lower() in values}
    env = dict(os.environ, GITHUB_ACTION_PATH=str(fake), **env)
    out = subprocess.run(["bash", "-c", step["run"]], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_action_maps_each_kind_of_base_to_the_script(tmp_path):
    older = action_arguments(tmp_path, release="0.16.0", refresh="false")
    assert older[:2] == ["--releases", "0.16.0"] and "--no-latest" in older
    newest = action_arguments(tmp_path, release="0.19.2", refresh="true")
    assert newest[:2] == ["--releases", ""] and newest[-2:] == ["--pypi", "0.19.2"]
    assert "--no-latest" not in newest
    assert "--pypi" not in action_arguments(tmp_path, release="latest")
    dev = action_arguments(tmp_path, repository="NVIDIA/Megatron-LM", ref="dev")
    assert dev[:2] == ["--releases", ""] and dev[-4:] == [
        "--repo",
        "forkkit-upstream",
        "--ref",
        "HEAD",
    ]
    fork = action_arguments(tmp_path, repository="radixark/Megatron-LM", refresh="false")
    assert "--no-latest" in fork and "--repo" in fork
    series = action_arguments(tmp_path, series="patches/series", test="gpu")
    assert ["--series", "patches/series"] == series[series.index("--series") :][:2]
    assert ["--test", "gpu"] == series[series.index("--test") :][:2]


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


NO_DEV_MARKER = """\
    import inspect

    import pkg.calc


    def test_no_dev_marker():
        assert "# dev" not in inspect.getsource(pkg.calc)
    """


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
    series = fork_upstream(tmp_path, upstream, {"tests/test_calc_marker.py": NO_DEV_MARKER})
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


def test_script_offers_no_refreshed_series_from_a_base_that_is_not_the_latest(tmp_path, upstream):
    """--no-latest (an older release, a fork's branch): dev needs a merge, but a series
    refreshed from a base of another shape is none to take."""
    series = fork_upstream(tmp_path, upstream)
    result = run_script(
        tmp_path, "--repo", str(upstream.path), "--ref", "dev", "--no-latest",
        "--releases", "", "--series", str(series), "--test", "none",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["bases"]
    assert row["report"]["steps"][1]["status"] in ("3-way", "cherry-pick")
    assert not (tmp_path / "out" / "refreshed-series").exists()
    assert "forkkit" not in git(upstream.path, "branch", "--list")
    nothing = run_script(tmp_path, "--no-latest", "--releases", "", "--test", "none")
    assert nothing.returncode == 2 and "nothing to verify" in nothing.stderr


def test_the_merge_action_makes_one_table_and_fails_when_a_base_is_red(tmp_path, upstream):
    """The merge step's own bash on the reports of two jobs (dev red): one Markdown table in
    the job summary, the merged JSON, and the exit code of the worst base."""
    series = fork_upstream(tmp_path, upstream, {"tests/test_calc_marker.py": NO_DEV_MARKER})
    for ref in ("main", "dev"):
        run_script(
            tmp_path / ref, "--repo", str(upstream.path), "--ref", ref,
            "--releases", "", "--series", str(series), "--test", "cpu",
        )  # fmt: skip
        job = tmp_path / "work" / "forkkit-reports" / f"dsa-forkkit-report-{ref}"
        job.mkdir(parents=True)
        (tmp_path / ref / "out" / "report.json").rename(job / "report.json")
    (step,) = [
        s for s in local_action("ci/merge")["runs"]["steps"] if s.get("name") == "Merge the reports"
    ]
    summary = tmp_path / "summary.md"
    env = dict(
        os.environ,
        GITHUB_STEP_SUMMARY=str(summary),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHONPATH=str(PROJECT),
    )
    merged = subprocess.run(
        ["bash", "-c", step["run"]], cwd=tmp_path / "work", env=env, capture_output=True, text=True
    )
    assert merged.returncode == 1, merged.stdout + merged.stderr  # dev's tests failed
    rows = json.loads((tmp_path / "work" / "forkkit-report" / "report.json").read_text())["bases"]
    assert [row["exit_code"] for row in rows] == [1, 0]  # the artifacts' order: dev, main
    text = summary.read_text()
    assert text.startswith("### dsa-forkkit: the series needs attention")
    assert text.count("| `") == 2  # one table, a row per job
    empty = subprocess.run(
        ["bash", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert empty.returncode == 2 and "no dsa-forkkit report to merge" in empty.stdout
