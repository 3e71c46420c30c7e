"""The codemod framework offline: helpers before/after through LibCST's CodemodTest, and the
runner that loads a series' codemods by path and orders them by REQUIRES. No network."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import SERIES
from libcst.codemod import CodemodContext, CodemodTest
from synthetic import CALC, Change, build_series, edit

from rebaser.codemods import AnchorNotFound, load_codemods
from rebaser.codemods.base import (
    PatchCodemod,
    add_keyword,
    append_element,
    append_import_name,
    append_param,
    calls,
    code,
    comment_lines,
    insert_before,
    param_names,
    statements,
)
from rebaser.errors import ExitCode, RebaserError


class AddTimeout(PatchCodemod):
    """fetch() gains a timeout parameter, passes it on, and exports its default."""

    NAME, PATH, DESCRIPTION = "add_timeout", "pkg/net.py", "fetch takes a timeout"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        fetch = self.find_function(tree, "fetch")
        if "timeout" in param_names(fetch):
            return tree
        (request,) = calls(fetch, "session.request")
        changed = append_param(fetch, "timeout: float = DEFAULT_TIMEOUT").deep_replace(
            request, add_keyword(request, "timeout", "timeout")
        )
        tree = tree.deep_replace(fetch, changed)
        # Each replacement builds a new tree, so each target is found in the current one.
        (exports,) = [line.value for line in _lines(tree) if isinstance(line, cst.Assign)]
        tree = tree.deep_replace(exports, append_element(exports, '"DEFAULT_TIMEOUT"'))
        (imports,) = [line for line in _lines(tree) if isinstance(line, cst.ImportFrom)]
        return tree.deep_replace(imports, append_import_name(imports, "DEFAULT_TIMEOUT"))


def _lines(tree: cst.Module) -> list[cst.BaseSmallStatement]:
    return [s.body[0] for s in tree.body if isinstance(s, cst.SimpleStatementLine)]


class CheckFirst(PatchCodemod):
    """run() validates its input before its first call to work()."""

    NAME, PATH, DESCRIPTION = "check_first", "pkg/run.py", "run validates first"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        run = self.find_method(tree, "Runner", "run")
        if calls(run, "validate"):
            return tree
        anchor = self.find_statement(
            run.body,
            lambda statement: bool(calls(statement, "work")),
            "a call to work() in Runner.run",
            (code(statement).strip() for statement in run.body.body),
        )
        check = statements("validate(job)\n")
        check[0] = check[0].with_changes(leading_lines=comment_lines("Refuse bad jobs early."))
        return tree.deep_replace(run.body, insert_before(run.body, anchor, check))


class TestHelpers(CodemodTest):
    def test_params_keywords_tuples_and_imports_laid_out_one_per_line(self) -> None:
        self.TRANSFORM = AddTimeout
        before = """
            from pkg.defaults import (DEFAULT_RETRIES, SESSION)

            __all__ = ("fetch",)


            def fetch(url, retries=DEFAULT_RETRIES):
                return SESSION.session.request("GET", url, retries=retries)
        """
        after = """
            from pkg.defaults import (
                DEFAULT_RETRIES,
                DEFAULT_TIMEOUT,
                SESSION,
            )

            __all__ = (
                "fetch",
                "DEFAULT_TIMEOUT",
            )


            def fetch(
                url,
                retries=DEFAULT_RETRIES,
                timeout: float = DEFAULT_TIMEOUT,
            ):
                return SESSION.session.request(
                    "GET",
                    url,
                    retries=retries,
                    timeout=timeout,
                )
        """
        self.assertCodemod(before, after)
        self.assertCodemod(after, after)  # idempotent

    def test_insert_before_the_first_matching_statement_keeps_its_comments_above(self) -> None:
        self.TRANSFORM = CheckFirst
        before = """
            class Runner:
                def run(self, job):
                    prepare(job)
                    # Do the work.
                    if job.urgent:
                        work(job)
                    work(job.next)
        """
        after = """
            class Runner:
                def run(self, job):
                    prepare(job)
                    # Do the work.
                    # Refuse bad jobs early.
                    validate(job)

                    if job.urgent:
                        work(job)
                    work(job.next)
        """
        self.assertCodemod(before, after)
        self.assertCodemod(after, after)

    def test_a_missing_anchor_names_the_nearest_candidates(self) -> None:
        no_class = (
            "class Runer:\n    def run(self, job):\n        work(job)\n\nclass Other:\n    pass\n"
        )
        no_statement = (
            "class Runner:\n    def run(self, job):\n        prepare(job)\n        finish(job)\n"
        )
        for source, message in [
            (no_class, "cannot find class Runner (nearest candidates: Runer)"),
            (
                no_statement,
                "cannot find a call to work() in Runner.run "
                "(nearest candidates: prepare(job), finish(job))",
            ),
        ]:
            with pytest.raises(AnchorNotFound) as missing:
                CheckFirst(CodemodContext()).transform_module(cst.parse_module(source))
            assert str(missing.value) == f"pkg/run.py: {message}"

    def test_a_series_codemod_is_testable_with_codemodtest(self) -> None:
        self.TRANSFORM = load_codemods(SERIES.parent / "codemods").lookup("config_validation")
        before = """
            class TransformerConfig:
                def __post_init__(self):
                    # Checks for the attention variant.
                    if self.experimental_attention_variant == "dsa":
                        self.check()
        """
        after = """
            class TransformerConfig:
                def __post_init__(self):
                    # Checks for the attention variant.
                    # Imported here so the hook stays one hunk and adds no import-order coupling.
                    from megatron.core.transformer.experimental_attention_variant import dsa_topk

                    dsa_topk.validate_config(self)

                    if self.experimental_attention_variant == "dsa":
                        self.check()
        """
        self.assertCodemod(before, after)


# -- the runner: codemods loaded by path, in declared order ---------------------------------

GREET = """
import libcst as cst

from rebaser.codemods.base import PatchCodemod, function_in, statements


class Greet(PatchCodemod):
    NAME, PATH, DESCRIPTION = "greet", "pkg/app.py", "add greet()"

    def transform_module_impl(self, tree):
        if function_in(tree, "greet"):
            return tree
        return tree.with_changes(body=[*tree.body, *statements("def greet():\\n    return 'hi'\\n")])
"""
SHOUT = """
from rebaser.codemods.base import PatchCodemod, function_in, statements


class Shout(PatchCodemod):
    NAME, PATH, DESCRIPTION = "shout", "pkg/app.py", "add shout(), built on greet()"
    REQUIRES = ("greet",)

    def transform_module_impl(self, tree):
        self.find_function(tree, "greet")
        if function_in(tree, "shout"):
            return tree
        added = statements("def shout():\\n    return greet().upper()\\n")
        return tree.with_changes(body=[*tree.body, *added])
"""

GREET_AFTER_SHOUT = GREET.replace('"add greet()"\n', '"add greet()"\n    REQUIRES = ("shout",)\n')


def codemods_folder(root: Path, **modules: str) -> Path:
    folder = root / "codemods"
    folder.mkdir(parents=True)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder


def test_codemods_run_after_those_they_require(tmp_path):
    codemods = load_codemods(codemods_folder(tmp_path, greet=GREET, shout=SHOUT))
    assert codemods.names == ["greet", "shout"]
    assert codemods.ordered(["shout", "greet"]) == ["greet", "shout"]
    result = codemods.transform_sources(["shout", "greet"], {"pkg/app.py": "X = 1\n"})
    assert result["pkg/app.py"].index("def greet") < result["pkg/app.py"].index("def shout")
    assert not list((tmp_path / "codemods").glob("__pycache__"))  # loading writes nothing


def test_a_codemod_alone_needs_its_requirements_change_in_the_tree(tmp_path):
    codemods = load_codemods(codemods_folder(tmp_path, greet=GREET, shout=SHOUT))
    greeted = codemods.transform_sources(["greet"], {"pkg/app.py": "X = 1\n"})
    assert "def shout" in codemods.transform_sources(["shout"], greeted)["pkg/app.py"]
    with pytest.raises(AnchorNotFound, match="the change of greet, which shout builds on"):
        codemods.transform_sources(["shout"], {"pkg/app.py": "X = 1\n"})


def test_codemods_that_give_up_write_nothing(tmp_path):
    """apply relies on it: a failed patch's worktree stays clean after its codemod gave up."""
    wave = SHOUT.replace('"shout", "pkg/app.py"', '"wave", "pkg/app.py"').replace(
        '    REQUIRES = ("greet",)\n', ""
    ).replace('find_function(tree, "greet")', 'find_function(tree, "nowhere")')
    codemods = load_codemods(codemods_folder(tmp_path, greet=GREET, wave=wave))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/app.py").write_text("X = 1\n")
    with pytest.raises(AnchorNotFound):
        codemods.run(["greet", "wave"], tmp_path, write=True)  # greet's change is not kept
    assert (tmp_path / "pkg/app.py").read_text() == "X = 1\n"


@pytest.mark.parametrize(
    "modules, message",
    [
        ({"shout": SHOUT}, "codemod shout requires 'greet', which .* does not have"),
        ({"a": GREET, "b": GREET}, "two codemods are named 'greet'"),
        ({"greet": GREET_AFTER_SHOUT, "shout": SHOUT}, "codemods require each other in a cycle"),
        ({"broken": "import no_such_module_here\n"}, "cannot load codemod module broken.py"),
    ],
)
def test_bad_codemod_folders_are_refused_clearly(tmp_path, modules, message):
    with pytest.raises(RebaserError, match=message):
        load_codemods(codemods_folder(tmp_path, **modules))


DOUBLE_MUL = """
import libcst as cst

from rebaser.codemods.base import PatchCodemod, code


class DoubleMul(PatchCodemod):
    NAME, PATH, DESCRIPTION = "double_mul", "pkg/calc.py", "mul() returns twice the product"

    def transform_module_impl(self, tree):
        mul = self.find_function(tree, "mul")
        (line,) = mul.body.body
        returned = line.body[0].value
        if code(returned).startswith("2 * "):
            return tree
        doubled = cst.parse_expression(f"2 * {code(returned)}")
        return tree.deep_replace(returned, doubled)
"""


def test_a_series_codemod_found_by_convention_carries_a_conflicting_patch(
    rebaser, tmp_path, upstream
):
    series = build_series(
        tmp_path / "proj",
        upstream,
        "v1",
        [
            Change(
                "demo: double mul",
                {"pkg/calc.py": edit(CALC, "a * b", "2 * a * b")},
                codemod="double_mul",
            )
        ],
    )
    codemods_folder(series.parent, double_mul=DOUBLE_MUL)  # no @codemods: the convention
    upstream.commit({"pkg/calc.py": edit(CALC, "a * b", "b * a")}, "v2", tag="v2")
    report = tmp_path / "r.json"
    args = ("apply", "--series", series, "--repo", upstream.path, "--test", "none")
    result = rebaser(*args, "--base", "v2", "--json", report)
    assert result.code == ExitCode.OK, result.out + result.err
    data = json.loads(report.read_text())
    assert [step["status"] for step in data["steps"]] == ["laid", "codemod"]
    assert "return 2 * b * a" in (Path(data["worktree"]) / "pkg/calc.py").read_text()
    assert {c["name"]: c["ok"] for c in data["checks"]}["codemods are no-ops"]


def test_a_series_without_codemods_applies_and_refuses_a_named_one(rebaser, tmp_path, upstream):
    plain = build_series(
        tmp_path / "plain",
        upstream,
        "v1",
        [Change("demo", {"pkg/calc.py": edit(CALC, "a + b", "b + a")})],
    )
    ok = rebaser(
        "apply", "--series", plain, "--repo", upstream.path, "--base", "v1", "--test", "none"
    )
    assert ok.code == ExitCode.OK, ok.err
    named = build_series(
        tmp_path / "named",
        upstream,
        "v1",
        [Change("demo", {"pkg/calc.py": edit(CALC, "a + b", "b + a")}, codemod="double_mul")],
    )
    refused = rebaser(
        "apply", "--series", named, "--repo", upstream.path, "--base", "v1", "--force"
    )
    assert refused.code == ExitCode.USAGE
    assert "unknown codemod 'double_mul'" in refused.err
    assert "add a codemods/ folder beside the series" in refused.err
