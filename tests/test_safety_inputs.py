"""Smaller hostile or careless inputs: each gets a clear exit-2 message naming what is wrong,
and nothing of the series is lost; hunk diagnosis stays proportional; the test run's pytest
plugin loads whatever interpreter runs the tests."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections import defaultdict
from pathlib import Path

import pytest
from synthetic import CALC, apply, edit, git, two_patch_series

from rebaser.errors import ExitCode
from rebaser.carry import hunks
from rebaser.steps.testrun import run_pytest


def test_refresh_of_a_stopped_apply_keeps_the_unapplied_patches(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    upstream.commit({"pkg/calc.py": edit(CALC, "a * b", "b * a")}, "v2", tag="v2")
    report = tmp_path / "r.json"
    assert apply(rebaser, series, upstream, "v2", "--json", report).code == ExitCode.NOT_APPLIED
    tree = Path(__import__("json").loads(report.read_text())["worktree"])
    before = {path.name: path.read_bytes() for path in series.parent.iterdir()}
    result = rebaser("refresh", "--series", series, "--repo", tree)
    assert result.code == ExitCode.USAGE
    assert "stopped at 0002-change-2.patch" in result.err and "drop" in result.err
    assert {path.name: path.read_bytes() for path in series.parent.iterdir()} == before


def test_the_same_patch_under_two_spellings_is_refused(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    series.write_text("@name demo\n0001-change-1.patch\n./0001-change-1.patch\n")
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert "patch 0001-change-1.patch listed twice" in result.err and f"{series}:3" in result.err


@pytest.mark.parametrize("name", ["my series", "a..b", "../escape", ".hidden", "x.lock"])
def test_a_series_name_that_cannot_name_a_branch_is_a_usage_error(
    rebaser, tmp_path, upstream, name
):
    series = two_patch_series(tmp_path, upstream)
    series.write_text(series.read_text().replace("@name demo", f"@name {name}"))
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE, result.err
    assert f"series name {name!r} cannot be part of a branch name" in result.err
    assert git(upstream.path, "for-each-ref", "refs/heads/forkkit") == ""


@pytest.mark.parametrize("base", ["v1", "git:not-a-sha", "https://example.com/x.git"])
def test_a_base_that_is_neither_a_commit_nor_a_release_is_named_where_it_stands(
    rebaser, tmp_path, upstream, base
):
    """@base is read once, when the series is: a malformed one stops every command there,
    with its line, not half-way through an apply."""
    series = two_patch_series(tmp_path, upstream)
    series.write_text(f"@base {base}\n" + series.read_text())
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE, result.err
    assert f"@base {base} is neither a commit nor a release" in result.err
    assert f"{series}:1" in result.err and "git:<sha> or pypi:" in result.err
    assert git(upstream.path, "for-each-ref", "refs/heads/forkkit") == ""


def test_a_pinned_upstream_and_another_release_are_refused(rebaser):
    """A review: `--upstream pypi:megatron-core==0.19.2 --base 0.18.2` applied onto 0.18.2,
    exit 0, the pin silently ignored (a revision: test_safety_cache.py)."""
    result = rebaser(
        "apply", "--upstream", "pypi:megatron-core==0.19.2", "--base", "0.18.2", "--test", "none"
    )
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "pins 0.19.2" in result.err and "--base" in result.err, result.err


def test_an_ambiguous_sha_prefix_says_so(rebaser, tmp_path, upstream):
    # Empty commits until two share their first four hex digits (git's shortest prefix).
    stream = b"".join(
        b"commit refs/heads/noise\ncommitter T <t@t> 1700000000 +0000\n"
        + f"data {len(message)}\n{message}\n".encode()
        for message in (f"noise {number}\n" for number in range(1500))
    )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=upstream.path, input=stream, check=True)
    by_prefix = defaultdict(list)
    for sha in git(upstream.path, "rev-list", "noise").split():
        by_prefix[sha[:4]].append(sha)
    prefix, shas = next((p, s) for p, s in by_prefix.items() if len(s) > 1)
    result = apply(rebaser, two_patch_series(tmp_path, upstream), upstream, prefix)
    assert result.code == ExitCode.USAGE
    assert f"base '{prefix}' is ambiguous" in result.err
    assert all(sha[:7] in result.err for sha in shas)
    assert "more characters" in result.err


def test_a_patch_that_is_not_utf8_is_named(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    patch = series.parent / "0002-change-2.patch"
    patch.write_bytes(patch.read_bytes().replace(b"demo: double mul", b"demo: d\xe9double mul"))
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert "the patch is not UTF-8" in result.err and f"where: {patch}" in result.err


def test_hunk_diagnosis_is_proportional(tmp_path, monkeypatch):
    """600 failing hunks in a 30,000-line file: 29 s when each hunk scanned the whole file.
    Counted in windows compared, not seconds: a loaded machine must not fail it."""
    compared = []
    original = hunks.difflib.SequenceMatcher.set_seq1
    monkeypatch.setattr(
        hunks.difflib.SequenceMatcher,
        "set_seq1",
        lambda self, window: compared.append(len(window)) or original(self, window),
    )
    lines = [f"def f{i}(x):" if i % 5 == 0 else f"    y{i} = x + {i}" for i in range(30000)]
    (tmp_path / "big.py").write_text("\n".join(lines) + "\n")
    diff = ["diff --git a/big.py b/big.py", "--- a/big.py", "+++ b/big.py"]
    for number in range(600):
        start = number * 50 + 10
        context = lines[start : start + 6]
        context[1] += "  # the patch's version"  # fails exactly, but still locatable
        diff.append(f"@@ -{start + 1 - 7},6 +{start + 1 - 7},7 @@")  # nominal place off by 7
        diff += [" " + line for line in context[:3]] + ["+    new = 1"]
        diff += [" " + line for line in context[3:]]
    reports = hunks.diagnose("\n".join(diff) + "\n", tmp_path)
    assert len(reports) == 600 and not any(report.applies for report in reports)
    assert [report.found_at for report in reports] == [n * 50 + 11 for n in range(600)]
    assert "upstream now (line 11)" in reports[0].describe()
    # a handful of candidate windows per hunk, never a scan of the file's 30,000 lines
    assert len(compared) <= 600 * (hunks._CANDIDATES + 1), len(compared)


def test_the_pytest_plugin_loads_when_the_test_interpreter_cannot_import_rebaser(tmp_path):
    # `python -S` skips site-packages' .pth files: the editable install of rebaser is gone,
    # as for `python -m rebaser` from an uninstalled checkout; pytest stays importable.
    python = tmp_path / "python-without-rebaser"
    site = sysconfig.get_paths()["purelib"]
    python.write_text(f'#!/bin/sh\nPYTHONPATH="$PYTHONPATH:{site}" exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    probe = subprocess.run([python, "-c", "import rebaser"], cwd=tmp_path, capture_output=True)
    assert probe.returncode != 0
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "test_override.py").write_text(
        "import typing\n\ndef test_plugin_loaded():\n    assert hasattr(typing, 'override')\n"
    )
    result = run_pytest(tree, ["tests/test_override.py"], "plugin", python=str(python))
    assert (result.status, result.passed) == ("passed", 1), (result.note, result.failures)


@pytest.mark.parametrize("command", [["retry", "0002"], ["refresh"], ["apply", "--base", "v1"]])
def test_no_series_given_and_none_installed_says_so(
    rebaser, tmp_path, upstream, monkeypatch, command
):
    """Installed without its checkout (no `pip install -e`), rebaser has no default series:
    a review was sent to `site-packages/patches/series`, "not found"."""
    from rebaser import config

    monkeypatch.delenv("DSA_FORKKIT_SERIES", raising=False)
    monkeypatch.setattr(config, "PROJECT_ROOT", tmp_path / "site-packages")
    result = rebaser(*command, "--repo", upstream.path)
    assert result.code == ExitCode.USAGE
    said = " ".join(result.err.split())
    assert "no --series given, and this rebaser has no series of its own" in said, said
    assert "pass --series PATH" in said
