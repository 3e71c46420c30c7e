"""What a stop tells the maintainer: hints only for hunks git really rejected, none below a
useful similarity, the base sha once in the header, and code in brackets shown intact."""

from __future__ import annotations

import json

from synthetic import CALC, Change, build_series, calc_series, edit, git

from rebaser.errors import ExitCode

OTHER = "".join(f"line_{n} = {n}\n" for n in range(1, 11))
MUL_DOUBLED = edit(CALC, "    return a * b\n", "    return 2 * a * b\n")


def double_mul_series(tmp_path, upstream):
    return calc_series(tmp_path, upstream, [("demo: double mul", MUL_DOUBLED)])


def stop_of(rebaser, tmp_path, upstream, series, base="v2"):
    report = tmp_path / "r.json"
    result = rebaser(
        "apply", "--series", series, "--repo", upstream.path, "--base", base,
        "--test", "none", "--json", report,
    )  # fmt: skip
    assert result.code == ExitCode.NOT_APPLIED, result.out + result.err
    return json.loads(report.read_text())["stop"], result


def test_hints_only_for_hunks_git_rejects(rebaser, tmp_path, upstream):
    upstream.commit({"pkg/other.py": OTHER}, "other", tag="v1.1")
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1.1",
        [
            Change(
                "demo: two files",
                {
                    "pkg/calc.py": MUL_DOUBLED,
                    "pkg/other.py": edit(OTHER, "line_5 = 5", "line_5 = 50"),
                },
            )
        ],
    )
    # Upstream conflicts with the calc.py hunk; in other.py it changes a context line only,
    # which a 3-way merge takes (the hunk's context no longer matches verbatim).
    upstream.commit(
        {
            "pkg/calc.py": edit(CALC, "    return a * b\n", "    return b * a\n"),
            "pkg/other.py": edit(OTHER, "line_3 = 3", "line_3 = 30"),
        },
        "v2",
        tag="v2",
    )
    stop, _ = stop_of(rebaser, tmp_path, upstream, series)
    assert stop["conflicts"] == ["pkg/calc.py"]
    assert [hint.split(":")[0] for hint in stop["hunks"]] == ["pkg/calc.py"]
    assert "% similar" in stop["hunks"][0]


def test_no_hint_below_a_useful_similarity(rebaser, tmp_path, upstream):
    series = double_mul_series(tmp_path, upstream)
    rewritten = "".join(f"CONSTANT_{n} = {n}  # generated\n" for n in range(40))
    upstream.commit({"pkg/calc.py": rewritten}, "v2", tag="v2")
    stop, result = stop_of(rebaser, tmp_path, upstream, series)
    (hint,) = stop["hunks"]
    assert hint.startswith("pkg/calc.py: @@ -")
    assert "nothing upstream resembles its context" in hint
    assert "% similar" not in result.out and "pkg/calc.py:1:" not in result.out


def test_the_header_names_the_base_sha_once(rebaser, tmp_path, upstream):
    series = double_mul_series(tmp_path, upstream)
    sha = git(upstream.path, "rev-parse", "v1")
    for base in ("v1", sha):
        result = rebaser(
            "apply", "--series", series, "--repo", upstream.path, "--base", base,
            "--test", "none", "--force",
        )  # fmt: skip
        assert result.code == ExitCode.OK, result.err
        header = result.out.splitlines()[0]
        assert header.count(sha[:12]) == 1, header
        assert header.endswith(
            f"onto {upstream.path}{' at v1' if base == 'v1' else ''} ({sha[:12]})"
        )


def test_status_and_report_show_bracketed_code_intact(rebaser, tmp_path, upstream):
    series = double_mul_series(tmp_path, upstream)
    upstream.commit(
        {
            "pkg/calc.py": edit(
                CALC, "    return a * b\n", "    return a * b  # Optional[torch.Tensor]\n"
            )
        },
        "v2",
        tag="v2",
    )
    stop, result = stop_of(rebaser, tmp_path, upstream, series)
    assert "Optional[torch.Tensor]" in stop["hunks"][0]
    assert "# Optional[torch.Tensor]" in result.out
    status = rebaser("status", "--repo", upstream.path)
    assert status.code == 0 and "# Optional[torch.Tensor]" in status.out


def test_a_stops_hunks_are_located_in_its_conflicted_files_only(monkeypatch):
    """The hunks of files the merge took are neither read, checked nor located: a stop
    reports its conflicted files' hunks, and the others cost as much in a long module."""
    from rebaser.carry import hunks
    from rebaser.carry.hunks import hunks_in_texts

    parsed: list[str] = []

    def parsed_diff(text: str):
        parsed.append(text)
        return real_parsed_diff(text)

    real_parsed_diff = hunks.parsed_diff
    monkeypatch.setattr(hunks, "parsed_diff", parsed_diff)

    patch = "Subject: [PATCH] demo\n\n---\n" + "".join(
        f"diff --git a/pkg/{name}.py b/pkg/{name}.py\nindex {'1' * 40}..{'2' * 40} 100644\n"
        f"--- a/pkg/{name}.py\n+++ b/pkg/{name}.py\n"
        "@@ -1,2 +1,2 @@\n line_1 = 1\n-line_2 = 2\n+line_2 = 20\n"
        for name in ("calc", "other")
    )
    read: list[str] = []

    class Texts(dict):
        def get(self, path, default=None):
            read.append(path)
            return super().get(path, default)

    texts = Texts({f"pkg/{n}.py": b"line_1 = 1\nline_2 = 3\n" for n in ("calc", "other")})
    reports = hunks_in_texts(patch.encode(), texts, ["pkg/calc.py"])
    assert [report.file for report in reports] == ["pkg/calc.py"]
    assert set(read) == {"pkg/calc.py"}
    assert "pkg/calc.py" in parsed[0] and "pkg/other.py" not in parsed[0]
    everywhere = hunks_in_texts(patch.encode(), texts, [])
    assert [report.file for report in everywhere] == ["pkg/calc.py", "pkg/other.py"]
