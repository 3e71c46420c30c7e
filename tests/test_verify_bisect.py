"""`rebaser verify --bases` (a matrix of throwaway applies) and `rebaser bisect`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from synthetic import CALC, Change, build_series, edit, git, history
from test_apply_synthetic import OVERLAY_TESTS, conflicting_upstream, two_patch_series
from test_keep_going import series_with_a_knock_on

from rebaser.errors import ExitCode


def test_the_markdown_is_utf8_whatever_the_locale(tmp_path, upstream):
    """Under a locale whose encoding is not UTF-8, `--markdown` crashed on rebaser's own em
    dash (exit 6) after the work, and left the file empty."""
    series = series_with_a_knock_on(tmp_path, upstream)  # 0002 collides with v2: "— collides"
    out_md = tmp_path / "m.md"
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "rebaser", "verify", "--series", str(series), "--repo",
         str(upstream.path), "--bases", "v2", "--test", "none", "--markdown", str(out_md)],
        env=env, capture_output=True, text=True, errors="replace",
    )  # fmt: skip
    assert done.returncode == ExitCode.NOT_APPLIED, done.stdout + done.stderr
    assert "\u2014" in out_md.read_bytes().decode("utf-8")


def test_verify_matrix_over_tags_with_json_and_markdown(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    out_json, out_md = tmp_path / "m.json", tmp_path / "m.md"
    result = rebaser(
        "verify",
        "--series",
        series,
        "--repo",
        upstream.path,
        "--bases",
        "v1",
        "v2",
        "nope",
        "--test",
        "none",
        "--json",
        out_json,
        "--markdown",
        out_md,
    )
    assert result.code == ExitCode.NOT_APPLIED  # the most serious row decides
    rows = {row["base"]: row for row in json.loads(out_json.read_text())["bases"]}
    assert [s["status"] for s in rows["v1"]["report"]["steps"]] == ["laid", "clean", "clean"]
    # one pass (--keep-going): the patch that does not apply is left off, with its stop
    v2_steps = {step["name"]: step for step in rows["v2"]["report"]["steps"]}
    assert v2_steps["0002-change-2.patch"]["status"] == "dropped"
    assert v2_steps["0002-change-2.patch"]["stop"]["conflicts"] == ["pkg/calc.py"]
    assert (
        rows["nope"]["exit_code"] == ExitCode.USAGE
        and "unknown base 'nope'" in rows["nope"]["error"]
    )
    markdown = out_md.read_text()
    assert markdown.startswith("### dsa-forkkit: the series needs attention")
    assert "| `v1` | laid | clean | clean | ok |" in markdown
    assert "**v2** `0002-change-2.patch` dropped: 3-way merge conflicts in pkg/calc.py" in markdown
    # Throwaway branches are gone, and no apply is left in progress; the reports name no
    # branch or worktree to go to, and say how to get one (they said "fix it in <the
    # removed worktree>, then `rebaser continue`": a review).
    assert git(upstream.path, "branch", "--list", "forkkit*") == ""
    v2 = rows["v2"]["report"]
    assert v2["branch"] is None and v2["worktree"] is None
    assert v2["next_steps"] == [
        f"its throwaway branch is removed: `rebaser apply` onto {upstream.path} at v2 makes "
        "one to work on (or verify with --keep)"
    ]
    assert rows["v1"]["report"]["next_steps"] == []
    # and the terminal says it too (a review: only the JSON held a next step)
    said = " ".join(result.out.split())
    assert "v2 next: its throwaway branch is removed: `rebaser apply` onto" in said, result.out
    assert "v1 next:" not in said
    assert rebaser("status", "--repo", upstream.path).out.strip() == "no apply in progress"


def test_verify_merges_the_reports_of_one_base_each_into_the_same_matrix(
    rebaser, tmp_path, upstream
):
    """CI runs one job per base; `verify --merge` makes their JSON reports the table, JSON
    and Markdown one `verify --bases` run over all of them writes, and its exit code."""
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    common = ["--series", series, "--repo", upstream.path, "--test", "none"]
    for name, bases in (("all", ["v1", "v2", "nope"]), ("v1", ["v1"]), ("v2", ["v2", "nope"])):
        rebaser(
            "verify", *common, "--bases", *bases,
            "--json", tmp_path / f"{name}.json", "--markdown", tmp_path / f"{name}.md",
        )  # fmt: skip
    merged_json, merged_md = tmp_path / "merged.json", tmp_path / "merged.md"
    result = rebaser(
        "verify", "--merge", tmp_path / "v1.json", tmp_path / "v2.json",
        "--json", merged_json, "--markdown", merged_md,
    )  # fmt: skip
    assert result.code == ExitCode.NOT_APPLIED, result.out + result.err
    assert json.loads(merged_json.read_text()) == json.loads((tmp_path / "all.json").read_text())
    assert merged_md.read_text() == (tmp_path / "all.md").read_text()
    assert "│ v1 " in result.out and "v2 0002-change-2.patch dropped" in result.out
    # A base twice, or reports of another series, make no matrix (a review got one of 42
    # patch columns, half of them "-", from two series).
    twice = rebaser("verify", "--merge", tmp_path / "all.json", tmp_path / "v1.json")
    assert twice.code == ExitCode.USAGE and "base v1 is in more than one report" in twice.err
    other = build_series(tmp_path / "o", upstream, "v1", [Change("o: n", {"n.py": "N = 1\n"})],
                         name="other")  # fmt: skip
    rebaser("verify", "--series", other, "--repo", upstream.path, "--test", "none",
            "--bases", "v2", "--json", tmp_path / "other.json")  # fmt: skip
    mixed = rebaser("verify", "--merge", tmp_path / "v1.json", tmp_path / "other.json")
    assert mixed.code == ExitCode.USAGE, mixed.out
    assert "reports of different series: demo, other" in mixed.err, mixed.err


def test_verify_merge_names_a_file_that_is_not_a_verify_report(rebaser, tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"bases": [{"base": "v1", "report": {"steps": 3}}]}))
    result = rebaser("verify", "--merge", report)
    assert result.code == ExitCode.USAGE
    assert f"{report} is not the JSON report of `rebaser verify`" in result.err


def test_verify_never_disturbs_an_apply_in_progress(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    assert (
        rebaser(
            "apply", "--series", series, "--repo", upstream.path, "--base", "v2", "--test", "none"
        ).code
        == ExitCode.NOT_APPLIED
    )
    result = rebaser(
        "verify", "--series", series, "--repo", upstream.path, "--bases", "v1", "--test", "none"
    )
    assert result.code == ExitCode.OK
    assert "stopped at 0002-change-2.patch" in rebaser("status", "--repo", upstream.path).out


@pytest.mark.network
def test_verify_matrix_over_pypi_releases(rebaser, tmp_path):
    out_json = tmp_path / "m.json"
    result = rebaser(
        "verify",
        "--bases",
        "pypi:megatron-core==0.19.0",
        "pypi:megatron-core==0.15.3",  # before DSA: nothing of the series can apply
        "--test",
        "none",
        "--json",
        out_json,
    )
    assert result.code == ExitCode.NOT_APPLIED
    rows = {row["base"]: row for row in json.loads(out_json.read_text())["bases"]}
    assert rows["pypi:megatron-core==0.19.0"]["exit_code"] == 0
    # one pass: every patch that does not apply on 0.15.3 is dropped, with its stop in its row
    steps = {s["name"]: s for s in rows["pypi:megatron-core==0.15.3"]["report"]["steps"]}
    assert steps["0003-topk-dispatch.patch"]["status"] == "dropped"
    assert "cannot find the file" in steps["0003-topk-dispatch.patch"]["stop"]["reason"]


def bisect(rebaser, series, upstream, *extra):
    return rebaser(
        "bisect",
        "--series",
        series,
        "--repo",
        upstream.path,
        "--good",
        "v1",
        "--bad",
        "main",
        *extra,
    )


def test_bisect_finds_the_commit_that_breaks_application(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    shas = history(
        upstream, 13, {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n")}
    )
    head = git(upstream.path, "rev-parse", "HEAD")
    out_json = tmp_path / "b.json"
    result = bisect(rebaser, series, upstream, "--json", out_json)
    assert result.code == 0, result.out + result.err
    found = json.loads(out_json.read_text())
    assert found["culprit"] == shas[12] and found["subject"] == "commit 13"
    assert found["report"]["stop"]["patch"] == "0002-change-2.patch"
    assert f"first bad commit: {shas[12]} commit 13" in result.out
    # The user's checkout and branches are as they were; no bisect or worktree is left over.
    assert git(upstream.path, "rev-parse", "HEAD") == head
    assert git(upstream.path, "branch", "--list", "forkkit*") == ""
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 1
    assert git(upstream.path, "for-each-ref", "refs/bisect") == ""


def test_bisect_with_tests_finds_the_commit_that_breaks_them(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream, overlay=OVERLAY_TESTS)
    shas = history(
        upstream,
        7,
        {
            "pkg/extra_upstream.py": "x = 1\n",
            "pkg/calc.py": edit(
                CALC,
                "def mul(a, b):\n    return a * b\n",
                "def mul(a, b):\n    return a * b\n\n\nmul = abs\n",
            ),
        },
        count=10,
    )
    out_json = tmp_path / "b.json"
    result = bisect(rebaser, series, upstream, "--test", "cpu", "--json", out_json)
    assert result.code == 0, result.out + result.err
    found = json.loads(out_json.read_text())
    assert found["subject"] == "commit 7" and found["culprit"] == shas[6]
    assert found["report"]["exit_code"] == ExitCode.TESTS_FAILED
    assert "test_doubled_mul" in result.out


def test_bisect_refuses_a_good_end_that_fails(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    conflicting_upstream(upstream)
    result = rebaser(
        "bisect", "--series", series, "--repo", upstream.path, "--good", "v2", "--bad", "main"
    )
    assert result.code == ExitCode.USAGE and "does not pass at the good revision v2" in result.err


@pytest.mark.network
def test_bisect_over_pypi_releases(rebaser, tmp_path, release_history_series):
    series, breaking_version = release_history_series
    out_json = tmp_path / "b.json"
    result = rebaser(
        "bisect",
        "--series",
        series,
        "--upstream",
        "pypi:megatron-core",
        "--good",
        "0.17.0",
        "--bad",
        "0.19.2",
        "--json",
        out_json,
    )
    assert result.code == 0, result.out + result.err
    assert (
        json.loads(out_json.read_text())["subject"] == f"megatron-core {breaking_version} from PyPI"
    )


@pytest.fixture
def release_history_series(tmp_path, release_clone):
    """A one-patch series made against megatron-core 0.17.0 on a line that 0.19.0 rewrites."""
    repo = release_clone("0.17.0")
    path = "megatron/core/transformer/experimental_attention_variant/dsa.py"
    changed = edit(
        repo.read(path),
        "    topk_k = min(index_topk, seqlen)\n",
        "    topk_k = min(index_topk, seqlen)  # fork: clamp to the keys\n",
    )
    series = build_series(
        tmp_path / "mini", repo, "v0.17.0", [Change("fork: comment the clamp", {path: changed})]
    )
    return series, "0.19.0"


def test_a_long_series_is_one_column_of_counts_in_the_terminal(rebaser, tmp_path, upstream):
    """One column per patch made a 32-patch matrix one letter wide per cell (a review): past
    a handful of patches the terminal shows their statuses counted; JSON and Markdown keep
    a column each."""
    changes = [Change(f"fork: file {n}", {f"pkg/f{n}.py": f"N = {n}\n"}) for n in range(12)]
    series = build_series(tmp_path / "proj", upstream, "v1", changes)
    result = rebaser("verify", "--series", series, "--repo", upstream.path, "--bases", "v1",
                     "--test", "none", "--markdown", tmp_path / "m.md")  # fmt: skip
    assert result.code == ExitCode.OK, result.out
    assert "12 clean" in result.out and "0012" not in result.out
    assert "0012" in (tmp_path / "m.md").read_text()


def test_merge_takes_a_cpu_and_a_gpu_report_of_one_base():
    """docs/ci.md's fork workflow runs a CPU job and a GPU job on the same base and merges
    them: the refusal of a base twice stopped that (a review). Twice means the same tests."""
    from rebaser.commands.verify import BaseResult, _refuse_mixed
    from rebaser.errors import RebaserError
    from rebaser.sequencer.report import Report
    from rebaser.steps.testrun import SuiteResult

    def result(suite: str) -> BaseResult:
        report = Report("apply", "demo", "up", "0" * 40, suites=[SuiteResult(suite, "passed")])
        return BaseResult("pypi:megatron-core", 0, report)

    _refuse_mixed([result("overlay (cpu)"), result("overlay (gpu)")])
    with pytest.raises(RebaserError, match="is in more than one report"):
        _refuse_mixed([result("overlay (cpu)"), result("overlay (cpu)")])


def test_a_base_that_needs_a_clone_is_refused_before_any_work(rebaser, tmp_path, upstream):
    """A review pasted the README's `--bases pypi:megatron-core==0.16.0 ... pypi:...==0.19.2`:
    the `...` (a revision, with no --repo to find it in) was an error row, told only after
    every other base was downloaded, applied and tested."""
    series = two_patch_series(tmp_path, upstream)
    result = rebaser(
        "verify",
        "--series",
        series,
        "--bases",
        "pypi:megatron-core==0.19.2",
        "...",
        "--test",
        "none",
    )
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "'...'" in result.err and "--repo" in result.err
    assert "base pypi:megatron-core==0.19.2" not in result.err + result.out  # nothing began
