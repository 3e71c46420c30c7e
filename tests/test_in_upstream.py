"""Patches upstream already has: found before a failure is declared, and named."""

from __future__ import annotations

import json
from pathlib import Path

from synthetic import CALC, Change, build_series, edit, git
from test_apply_synthetic import apply

from rebaser.errors import ExitCode

DOUBLE_MUL = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")
CHECK_DIV = edit(CALC, "    return a / b\n", "    assert b\n    return a / b\n")
DOUBLING = [Change("fork: double mul", {"pkg/calc.py": DOUBLE_MUL})]


def series_on_v1(tmp_path, upstream, changes):
    base = git(upstream.path, "rev-parse", "v1")
    return build_series(
        tmp_path / "proj", upstream, "v1", changes, extra_directives=f"@base git:{base}\n"
    )


def apply_onto(rebaser, tmp_path, series, upstream, base) -> tuple[int, dict]:
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, base, "--json", report)
    return result.code, json.loads(report.read_text())


def drift_div(upstream) -> None:
    """v2 rewrites a context line of the mul change: no exact apply, a clean merge."""
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "def div(a, b):\n", "def div(a, b):  # true division\n")},
        "v2",
        tag="v2",
    )


def in_upstream_detail(code: int, report: dict) -> str:
    """The one patch's detail, after checking the apply passed with it `in upstream`."""
    assert code == ExitCode.OK, report
    assert step(report, 1)["status"] == "in upstream"
    return step(report, 1)["detail"]


def step(report: dict, number: int) -> dict:
    return report["steps"][number]  # 0 is the overlay


def test_same_change_upstream_is_an_empty_cherry_pick_named_by_patch_id(
    rebaser, tmp_path, upstream
):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    upstream.commit({"pkg/other.py": "X = 1\n"}, "unrelated")
    landed = upstream.commit({"pkg/calc.py": DOUBLE_MUL}, "upstream: double mul too", tag="v2")
    detail = in_upstream_detail(*apply_onto(rebaser, tmp_path, series, upstream, "v2"))
    assert "cherry-pick is empty" in detail
    assert landed[:12] in detail


def test_without_a_recorded_base_a_reverse_apply_finds_it_upstream(rebaser, tmp_path, upstream):
    series = build_series(tmp_path / "proj", upstream, "v1", DOUBLING)
    upstream.commit({"pkg/calc.py": DOUBLE_MUL}, "upstream: double mul too", tag="v2")
    detail = in_upstream_detail(*apply_onto(rebaser, tmp_path, series, upstream, "v2"))
    assert "reverse-applies" in detail


def test_empty_cherry_pick_is_in_upstream(rebaser, tmp_path, upstream):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    # the same change, plus a context line rewritten: the reverse apply fails, the merge is empty
    upstream.commit(
        {"pkg/calc.py": edit(DOUBLE_MUL, "def div(a, b):\n", "def div(a, b):  # true division\n")},
        "upstream: double mul and more",
        tag="v2",
    )
    detail = in_upstream_detail(*apply_onto(rebaser, tmp_path, series, upstream, "v2"))
    assert "cherry-pick is empty" in detail


def test_same_patch_id_upstream_then_changed_again_is_in_upstream(rebaser, tmp_path, upstream):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    landed = upstream.commit({"pkg/calc.py": DOUBLE_MUL}, "upstream: take the fork's change")
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return 3 * a * b\n")},
        "upstream: triple it instead",
        tag="v2",
    )
    detail = in_upstream_detail(*apply_onto(rebaser, tmp_path, series, upstream, "v2"))
    assert landed[:12] in detail


def test_an_upstream_commit_with_the_change_and_more_is_not_the_same_patch(
    rebaser, tmp_path, upstream
):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    upstream.commit({"pkg/calc.py": DOUBLE_MUL, "pkg/other.py": "X = 1\n"}, "upstream: and more")
    upstream.commit(
        {"pkg/calc.py": edit(CALC, "    return a * b\n", "    return 3 * a * b\n")},
        "upstream: triple it instead",
        tag="v2",
    )
    report = tmp_path / "r.json"
    result = apply(rebaser, series, upstream, "v2", "--json", report, "--keep-going")
    assert result.code == ExitCode.NOT_APPLIED, result.out
    assert step(json.loads(report.read_text()), 1)["status"] == "dropped"


def test_a_patch_on_a_file_git_quotes_is_found_upstream_by_patch_id(rebaser, tmp_path, upstream):
    text = "".join(f"line {number}\n" for number in range(20))
    ours, theirs = (text.replace("line 5\n", f"line 5 {who}\n") for who in ("fork", "later"))
    upstream.commit({"a.py": text, "café.py": text}, "two files", tag="v1b")
    base = git(upstream.path, "rev-parse", "v1b")
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1b",
        [Change("fork: both", {"a.py": ours, "café.py": ours})],
        extra_directives=f"@base git:{base}\n",
    )
    landed = upstream.commit({"a.py": ours, "café.py": ours}, "upstream takes it")
    upstream.commit({"a.py": theirs, "café.py": theirs}, "upstream changes it again", tag="v2")
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v2")
    assert landed[:12] in in_upstream_detail(code, report)
    assert step(report, 1)["files"] == ["a.py", "café.py"]  # git's quoting undone


def test_lines_already_upstream_are_flagged_possibly_superseded(rebaser, tmp_path, upstream):
    helper = "\n\ndef clamp01(x):\n    return min(max(x, 0), 1)\n"
    series = series_on_v1(
        tmp_path,
        upstream,
        [
            Change(
                "fork: clamp01",
                {"pkg/calc.py": edit(CALC, "def sub(", helper.lstrip() + "\n\ndef sub(")},
            )
        ],
    )
    upstream.commit({"pkg/calc.py": CALC + helper}, "upstream: clamp01 at the end", tag="v2")
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v2")
    assert code == ExitCode.OK
    assert step(report, 1)["status"] in ("clean", "offset")
    assert "possibly superseded" in step(report, 1)["detail"]
    assert "pkg/calc.py" in step(report, 1)["detail"]


def test_new_change_is_not_flagged(rebaser, tmp_path, upstream):
    series = series_on_v1(
        tmp_path, upstream, [Change("fork: check div", {"pkg/calc.py": CHECK_DIV})]
    )
    upstream.commit({"pkg/other.py": "X = 1\n"}, "unrelated", tag="v2")
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v2")
    assert code == ExitCode.OK
    assert step(report, 1)["status"] == "clean" and "superseded" not in step(report, 1)["detail"]


def test_git_base_missing_from_the_repository_falls_back_to_three_way(rebaser, tmp_path, upstream):
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1",
        DOUBLING,
        extra_directives="@base git:" + "1" * 40 + "\n",
    )
    drift_div(upstream)
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v2")
    assert code == ExitCode.OK
    assert step(report, 1)["status"] == "3-way"


def test_recorded_commits_are_cached(rebaser, tmp_path, upstream):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    drift_div(upstream)
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v2")
    assert code == ExitCode.OK and step(report, 1)["status"] == "cherry-pick"
    cached = git(upstream.path, "for-each-ref", "--format=%(objectname)", "refs/forkkit/replay/")
    assert len(cached.split()) == 1
    assert git(upstream.path, "rev-parse", f"{cached}^") == git(upstream.path, "rev-parse", "v1")
    assert Path(report["worktree"], "pkg/calc.py").read_text().count("2 * a * b") == 1


def test_git_base_without_repo_says_what_to_give(rebaser, tmp_path, upstream):
    series = series_on_v1(tmp_path, upstream, DOUBLING)
    result = rebaser("apply", "--series", series, "--test", "none")
    assert result.code == ExitCode.USAGE
    assert "is a commit of a git repository" in result.err and "--repo PATH" in result.err


def test_lines_the_file_already_had_on_the_fork_base_are_no_sign(rebaser, tmp_path, upstream):
    """A patch whose only added line the file already held elsewhere on the fork's own
    base (`input_ids=input_ids,` in Megatron's gpt_model.py) was "possibly superseded" even
    applied onto that base (a review): upstream added nothing. A sign needs a line that
    is in upstream's file now and was not in the file the patch was made on."""
    base_text = edit(CALC, "def sub(", "LIMIT = 10\n\n\ndef sub(")
    upstream.commit({"pkg/calc.py": base_text}, "limits", tag="v1b")
    repeated = edit(base_text, "def mul(", "LIMIT = 10\n\n\ndef mul(")
    changes = [Change("fork: limit again", {"pkg/calc.py": repeated})]
    series = build_series(tmp_path / "proj", upstream, "v1b", changes)
    code, report = apply_onto(rebaser, tmp_path, series, upstream, "v1b")
    assert code == ExitCode.OK
    assert "superseded" not in step(report, 1)["detail"], step(report, 1)
