"""The syntax-aware merge of Python files (carry/pymerge.py, as git's merge driver): each
class of hunk it resolves and each reason it keeps one, on real git histories where git's own
merge conflicts (each test checks that first), carried by `rebaser apply`."""

from __future__ import annotations

import ast
import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from synthetic import Change, SyntheticUpstream, build_series, git
from test_apply_synthetic import apply

from rebaser.carry import filemerges, pymerge
from rebaser.repo.git import Git


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture
def carried(rebaser, tmp_path, upstream):
    """carry() on this test's repositories; a text stands for pkg/mod.py."""

    def run(base, fork, tip, *extra: str):
        as_files = [f if isinstance(f, dict) else {"pkg/mod.py": f} for f in (base, fork, tip)]
        return carry(rebaser, tmp_path, upstream, *as_files, *extra)

    return run


def carry(
    rebaser, tmp_path, upstream: SyntheticUpstream, base: dict, fork: dict, tip: dict, *extra: str
):
    """`base` committed upstream, the fork's one patch on it, upstream moves on to `tip`;
    the patch carried with --keep-going. (its row, the worktree)"""
    files = {name: dedent(text) for name, text in base.items()}
    sha = upstream.commit(files, "base", tag="base")
    changes = [Change("fork: the change", {n: dedent(t) for n, t in fork.items()})]
    series = build_series(
        tmp_path / "proj", upstream, "base", changes, extra_directives=f"@base git:{sha}\n"
    )
    upstream.commit({n: dedent(t) for n, t in tip.items()}, "upstream moves on", tag="tip")
    assert git_conflicts(tmp_path, upstream), "git's own merge must conflict here"
    report_file = tmp_path / "report.json"
    apply(rebaser, series, upstream, "tip", "--keep-going", "--json", report_file, *extra)
    report = json.loads(report_file.read_text())
    return report["steps"][1], Path(report["worktree"])


def git_conflicts(tmp_path: Path, upstream: SyntheticUpstream) -> bool:
    """Whether plain `git cherry-pick` of the fork's commit onto the tip conflicts."""
    fork = git(upstream.path, "log", "--all", "--format=%H", "--grep=fork: the change", "-1")
    clone = tmp_path / "plain-git"
    git(tmp_path, "clone", "-q", str(upstream.path), str(clone))
    git(clone, "checkout", "-q", "tip")
    picked = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "cherry-pick", "--no-commit", fork],
        cwd=clone,
        capture_output=True,
    )
    return picked.returncode != 0


def merged(worktree: Path, name: str = "pkg/mod.py") -> str:
    return (worktree / name).read_text()


# -- what it resolves ----------------------------------------------------------------------

IMPORTS = "import os\nimport sys\n\nVALUE = 1\n"


@pytest.mark.parametrize("lane", [[], ["--no-fast-lane"]], ids=["fast-lane", "per-patch"])
def test_both_sides_add_imports(carried, lane):
    """In the fast lane's git rebase (the scratch repository; going on past stops, in the
    lane's merge helper: carry/filemerges.py's Aside) and after the per-patch cherry-pick
    (the worktree) alike."""
    row, tree = carried(
        IMPORTS,
        "import os\nimport json\nimport sys\n\nVALUE = 1\n",
        "import os\nimport re\nimport sys\n\nVALUE = 1\n",
        *lane,
    )
    assert row["status"] == "structured merge"
    assert "both sides add imports to the module" in row["detail"]
    assert merged(tree) == "import os\nimport re\nimport json\nimport sys\n\nVALUE = 1\n"
    # the patch's message alone: the lane's `rebase --continue` kept git's commit template
    body = git(tree, "log", "-1", "--format=%B")
    assert body.startswith("fork: the change\n") and "#" not in body, body


def test_both_sides_add_members_to_a_class(carried):
    base = dedent(
        """
        class Model:
            def forward(self, x):
                return x
        """
    )
    row, tree = carried(
        base,
        base + "\n    def detach(self):\n        return None\n",
        base + "\n    def reset(self):\n        return 0\n",
    )
    assert row["status"] == "structured merge", row
    assert "upstream's reset first, then the patch's detach" in row["detail"]
    text = merged(tree)
    assert text.index("def reset") < text.index("def detach")
    compile(text, "mod.py", "exec")


DATACLASS = dedent(
    """
    from dataclasses import dataclass


    @dataclass
    class Config:
        hidden: int = 8
        layers: int = 2
    """
)


def test_both_sides_add_dataclass_fields(carried):
    row, tree = carried(
        DATACLASS,
        DATACLASS + "    topk_backend: str = 'torch'\n",
        DATACLASS + "    dropout: float = 0.1\n",
    )
    assert row["status"] == "structured merge"
    assert "upstream's dropout first, then the patch's topk_backend" in row["detail"]
    assert merged(tree).endswith("    dropout: float = 0.1\n    topk_backend: str = 'torch'\n")


@pytest.mark.parametrize(
    "base, fork, tip, expected",
    [
        (  # dict literal
            'TABLE = {\n    "a": 1,\n}\n',
            'TABLE = {\n    "a": 1,\n    "b": 2,\n}\n',
            'TABLE = {\n    "a": 1,\n    "c": 3,\n}\n',
            'TABLE = {\n    "a": 1,\n    "c": 3,\n    "b": 2,\n}\n',
        ),
        (  # set literal, one line
            "NAMES = {'a', 'b'}\n",
            "NAMES = {'a', 'b', 'x'}\n",
            "NAMES = {'a', 'b', 'y'}\n",
            "NAMES = {'a', 'b', 'y', 'x'}\n",
        ),
        (  # keyword arguments
            "run(model, steps=1)\n",
            "run(model, steps=1, topk='torch')\n",
            "run(model, steps=1, seed=0)\n",
            "run(model, steps=1, seed=0, topk='torch')\n",
        ),
        (  # __all__
            '__all__ = [\n    "a",\n]\n',
            '__all__ = [\n    "a",\n    "fork_thing",\n]\n',
            '__all__ = [\n    "a",\n    "new_thing",\n]\n',
            '__all__ = [\n    "a",\n    "new_thing",\n    "fork_thing",\n]\n',
        ),
        (  # names of one import
            "from typing import Optional\n",
            "from typing import List, Optional\n",
            "from typing import Dict, Optional\n",
            "from typing import Dict, List, Optional\n",
        ),
    ],
    ids=["dict", "set", "kwargs", "__all__", "import-names"],
)
def test_both_sides_add_items_inside_one_statement(carried, base, fork, tip, expected):
    row, tree = carried(base, fork, {"pkg/mod.py": tip})
    assert row["status"] == "structured merge", row
    assert merged(tree) == expected


SIGNATURE = dedent(
    '''
    def build(
        experts=None,
        norm=False,
    ) -> Spec:
        """Build the spec."""
        return Spec(experts, norm)
    '''
)
SIGNATURE_TIP = SIGNATURE.replace(
    '    norm=False,\n) -> Spec:\n    """Build the spec."""',
    "    norm=False,\n    fusion=False,\n) -> Submodules:\n"
    '    """Build the submodules\n    (no longer a spec)."""',
)
POST_NORM = SIGNATURE.replace("    norm=False,\n", "    norm=False,\n    post_norm=False,\n")


def test_parameters_beside_upstreams_new_signature_and_docstring(carried):
    """The hunk runs from the def's parameters into its docstring: upstream adds a
    parameter, changes the return annotation and the docstring, the patch only adds a
    parameter. Merged as the def's parameters, the rest upstream's (on the real fork:
    post_self_attn_layernorm in get_gpt_layer_with_transformer_engine_submodules)."""
    assert SIGNATURE_TIP != SIGNATURE
    row, tree = carried(SIGNATURE, POST_NORM, SIGNATURE_TIP)
    assert row["status"] == "structured merge", row
    assert "upstream's fusion first, then the patch's post_norm" in row["detail"]
    assert merged(tree) == SIGNATURE_TIP.replace(
        "    fusion=False,\n", "    fusion=False,\n    post_norm=False,\n"
    )


@pytest.mark.parametrize(
    "fork",
    [
        POST_NORM.replace("Build the spec.", "Build the spec, normed after."),
        SIGNATURE.replace("    norm=False,\n", "    norm=False,\n    fusion=True,\n"),
        "NORM = False\n"
        + SIGNATURE.replace("    norm=False,\n", "    norm=False,\n    post_norm=NORM,\n"),
    ],
    ids=["patch-changes-docstring", "same-parameter-differently", "name-upstream-deleted"],
)
def test_a_signature_hunk_into_the_body_stays_a_conflict(carried, fork):
    """Refused: the patch also changes the docstring; both sides add parameter fusion,
    differently (it would be defined twice); the patch's default reads NORM, which upstream
    deleted."""
    base = "NORM = False\n" + SIGNATURE if "post_norm=NORM" in fork else SIGNATURE
    row, tree = carried(base, fork, SIGNATURE_TIP)
    assert row["status"] == "dropped", row
    assert row["stop"]["conflicts"] == ["pkg/mod.py"]
    assert "the structured merge kept every hunk" in row["detail"]


FUNCTIONS = dedent(
    """
    import os


    def save_grads(path):
        return os.path.join(path, "grads")


    def save_checkpoint(iteration, model, release=False):
        return iteration
    """
)
FUNCTIONS_TIP = FUNCTIONS.replace(
    "def save_checkpoint(iteration, model, release=False):",
    "def save_checkpoint(\n    iteration,\n    model,\n    release=False,\n    prefix: str = '',\n):",
)
HELPER = '\n\ndef _nvme_dir(name, sub="nvme"):\n    return os.path.join(name, sub)\n'


def test_a_function_the_patch_adds_beside_one_upstream_changed(carried):
    """At the module, functions go in any order, as members of a class: the patch's new
    function lands where it put it, upstream's changed signature as upstream wrote it (on
    the real fork: _iter_nvme_state_stores before save_checkpoint)."""
    fork = FUNCTIONS.replace("\n\ndef save_checkpoint", HELPER + "\n\ndef save_checkpoint")
    row, tree = carried(FUNCTIONS, fork, FUNCTIONS_TIP)
    assert row["status"] == "structured merge", row
    assert "upstream's save_checkpoint, the patch's _nvme_dir" in row["detail"]
    assert merged(tree) == FUNCTIONS_TIP.replace(
        "\n\ndef save_checkpoint", HELPER + "\n\ndef save_checkpoint"
    )


@pytest.mark.parametrize(
    "added, why",
    [
        (  # a decorator made further down the module: it runs when the module is imported
            "\n\n@cached\ndef _nvme_dir(name):\n    return name\n",
            "where order matters",
        ),
        (  # a default read when the def runs
            "\n\ndef _nvme_dir(name, sub=SUBDIR):\n    return name\n",
            "where order matters",
        ),
        ("\n\nclass Store:\n    pass\n", ""),  # a class: its body runs on import
        ("\n\nPREFIX = 'nvme'\n", "where order matters"),  # a statement
        (  # the same name twice
            "\n\ndef save_checkpoint(iteration):\n    return 0\n",
            "both sides change save_checkpoint",
        ),
    ],
    ids=["decorator", "default", "class", "statement", "defined-twice"],
)
def test_module_level_additions_that_stay_a_conflict(carried, added, why):
    base = FUNCTIONS + "\n\nSUBDIR = 'x'\n\n\ndef cached(f):\n    return f\n"
    tip = FUNCTIONS_TIP + "\n\nSUBDIR = 'x'\n\n\ndef cached(f):\n    return f\n"
    fork = base.replace("\n\ndef save_checkpoint", added + "\n\ndef save_checkpoint")
    row, tree = carried(base, fork, tip)
    assert row["status"] == "dropped", row
    assert "the structured merge kept every hunk" in row["detail"]
    assert why in row["detail"]


def test_a_function_the_patch_removes_beside_one_upstream_changed_stays(carried):
    """Other modules may still call save_grads."""
    fork = FUNCTIONS.replace(
        '\n\ndef save_grads(path):\n    return os.path.join(path, "grads")\n', ""
    )
    row, tree = carried(FUNCTIONS, fork, FUNCTIONS_TIP)
    assert row["status"] == "dropped", row
    assert "the structured merge kept every hunk" in row["detail"]


MOVED_BASE = dedent(
    """
    def step(x):
        y = x + 1
        return y


    def other():
        return 1
    """
)


def test_an_edit_to_a_function_upstream_moved(carried):
    row, tree = carried(
        MOVED_BASE,
        MOVED_BASE.replace("x + 1", "x + 2"),
        {
            "pkg/mod.py": """
            def first():
                return 0


            def other():
                return 1


            def step(x):
                y = x + 1
                return y
            """
        },  # upstream moves step() below other() and adds a function where step was
    )
    assert row["status"] == "structured merge", row
    assert "upstream moved step (now at line 9); the patch's change to" in row["detail"]
    text = merged(tree)
    assert text.index("def first") < text.index("def other") < text.index("def step")
    assert "y = x + 2" in text and "x + 1" not in text


def test_an_edit_to_code_upstream_reformatted(carried):
    base = dedent(
        """
        def total(a, b):
            value = compute(a, b, option=True, other=False, third=None, fourth=1)
            return value
        """
    )
    row, tree = carried(
        base,
        base.replace("return value", "return value * 2"),
        {
            "pkg/mod.py": """
            def total(a, b):
                value = compute(
                    a, b, option=True, other=False, third=None, fourth=1
                )
                return value
            """
        },
    )
    assert row["status"] == "structured merge", row
    assert "upstream only reformatted value" in row["detail"]
    assert merged(tree) == dedent(
        """
        def total(a, b):
            value = compute(
                a, b, option=True, other=False, third=None, fourth=1
            )
            return value * 2
        """
    )


# -- what it refuses -----------------------------------------------------------------------

PARSER = dedent(
    """
    def add_arguments(parser):
        parser.add_argument("--layers", type=int)
    """
)


@pytest.mark.parametrize("lane", [[], ["--no-fast-lane"]], ids=["fast-lane", "per-patch"])
def test_a_duplicated_argparse_flag_stays_a_conflict(carried, lane):
    """Going on, the fast lane judges the stop itself (steps/lanestop.py): its row says
    what the structured merge kept, word for word as the per-patch path's."""
    row, tree = carried(
        PARSER,
        PARSER + '    parser.add_argument("--topk", type=str)\n',
        PARSER + '    parser.add_argument("--topk", type=int)\n',
        *lane,
    )
    assert row["status"] == "dropped"
    assert row["stop"]["conflicts"] == ["pkg/mod.py"]
    assert row["detail"] == (
        "cherry-pick conflicts in pkg/mod.py; the structured merge kept every hunk "
        "(pkg/mod.py line 3: both sides add flag --topk: the result would define it twice); "
        "the patch names no codemod"
    )


def test_a_flag_upstream_adds_elsewhere_in_the_file_stays_a_conflict(carried):
    base = PARSER + '\n\ndef more(parser):\n    parser.add_argument("--x")\n'
    row, _ = carried(
        base,
        {
            "pkg/mod.py": base.replace(
                '"--layers", type=int)\n',
                '"--layers", type=int)\n    parser.add_argument("--topk")\n',
            )
        },
        {
            "pkg/mod.py": base.replace(
                '"--layers", type=int)\n',
                '"--layers", type=int)\n    parser.add_argument("--seed")\n',
            ).replace('"--x")\n', '"--x")\n    parser.add_argument("--topk")\n')
        },
    )
    assert row["status"] == "dropped"
    assert "argparse flag --topk twice" in row["detail"]


def test_importing_a_name_upstream_deleted_stays_a_conflict(carried):
    util = "def helper():\n    return 1\n\n\ndef other():\n    return 2\n"
    row, _ = carried(
        {"pkg/mod.py": IMPORTS, "pkg/util.py": util},
        "import os\nfrom pkg.util import helper\nimport sys\n\nVALUE = 1\n",
        {
            "pkg/mod.py": "import os\nimport re\nimport sys\n\nVALUE = 1\n",
            "pkg/util.py": "def other():\n    return 2\n",
        },
    )
    assert row["status"] == "dropped"
    assert "the patch imports helper from pkg.util, which upstream deleted" in row["detail"]


def test_using_a_name_upstream_deleted_from_the_file_stays_a_conflict(carried):
    base = dedent(
        """
        def _scale(x):
            return 2 * x


        class Model:
            def forward(self, x):
                return x
        """
    )
    without_scale = """
        class Model:
            def forward(self, x):
                return x

            def reset(self):
                return 0
        """
    row, _ = carried(
        base,
        base + "\n    def scaled(self, x):\n        return _scale(x)\n",
        without_scale,
    )
    assert row["status"] == "dropped"
    assert "uses _scale, which upstream deleted" in row["detail"]


def test_a_result_that_does_not_compile_stays_a_conflict(carried):
    """The patch adds a __future__ import at the top; upstream's new import goes first, so
    the merged module would not compile."""
    row, _ = carried(
        IMPORTS,
        "from __future__ import annotations\nimport os\nimport sys\n\nVALUE = 1\n",
        "import re\nimport os\nimport sys\n\nVALUE = 1\n",
    )
    assert row["status"] == "dropped"
    assert "the result would not compile" in row["detail"]
    assert "from __future__ imports must occur at the beginning" in row["detail"]


def test_both_sides_changing_one_function_stays_a_conflict(carried):
    row, tree = carried(
        MOVED_BASE,
        MOVED_BASE.replace("x + 1", "x + 2"),
        MOVED_BASE.replace("x + 1", "x + 3"),
    )
    assert row["status"] == "dropped"
    assert row["stop"]["conflicts"] == ["pkg/mod.py"]


# -- the engine on its own -----------------------------------------------------------------


def merge_files(
    tmp_path: Path, base: str, ours: str, theirs: str, as_written: bool = False
) -> pymerge.Merged:
    """`as_written`: the texts as given (dedent empties whitespace-only lines)."""
    for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
        (tmp_path / name).write_text(text if as_written else dedent(text))
    diff3 = subprocess.run(
        ["git", "merge-file", "-p", "--diff3", "ours", "base", "theirs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    ).stdout
    texts = [(tmp_path / name).read_text() for name in ("base", "ours", "theirs")]
    return pymerge.merge(*texts, diff3)


def test_only_the_real_hunks_stay_as_markers(tmp_path):
    """One hunk mechanical (imports), one real (both change the same line): the first is
    resolved, the second stays, as git's markers."""
    base = "import os\nimport sys\n\n\ndef f():\n    return 1\n"
    result = merge_files(
        tmp_path,
        base,
        base.replace("import sys", "import re\nimport sys").replace("return 1", "return 2"),
        base.replace("import sys", "import json\nimport sys").replace("return 1", "return 3"),
    )
    assert len(result.resolved) == 1 and len(result.kept) == 1
    assert result.text.startswith("import os\nimport re\nimport json\nimport sys\n")
    assert result.text.count("<<<<<<<") == 1 and "return 2" in result.text
    shown = pymerge.as_style(result.text, 7, diff3=False)
    assert "|||||||" not in shown and shown.count("=======") == 1


CLASS = dedent(
    """
    class Optimizer:
        def first(self):
            return 1

        def middle(self):
            return 2

        def last(self, state):
            save(state, flat=True)
    """
)


def test_a_hunk_in_a_method_is_merged_with_the_other_members_left_as_they_are(tmp_path):
    """A hunk in a method is parsed in its class with only that method (the others blank:
    a 3,000-line class cost most of a hunk's time); the members before it, and the hunks in
    them, come back as they were."""
    result = merge_files(
        tmp_path,
        CLASS,
        CLASS.replace("return 1", "return 10").replace("flat=True", "flat=True, fused=True"),
        CLASS.replace("return 1", "return 11").replace("flat=True", "flat=True, strict=False"),
    )
    assert len(result.resolved) == 1 and "keyword arguments" in result.resolved[0], result
    assert len(result.kept) == 1 and "line 3:" in result.kept[0], result
    text = pymerge.as_style(result.text, 7, diff3=False)
    assert "save(state, flat=True, fused=True, strict=False)\n" in text
    assert "<<<<<<<" in text and "        return 10\n=======\n        return 11\n" in text
    assert text.endswith(
        CLASS[CLASS.index("    def middle") :].replace(
            "flat=True", "flat=True, fused=True, strict=False"
        )
    )


@pytest.mark.parametrize(
    "ours, theirs",
    [
        # in a method: both sides add keyword arguments; another hunk in a method before it
        (("return 1", "return 10"), ("return 1", "return 11")),
        (("flat=True", "flat=True, fused=True"), ("flat=True", "flat=True, strict=False")),
        # the patch's side of a hunk in `middle` reaches out of it: a method after it
        (("return 2", "return 20"),
         ("return 2", "return 21\n\n    def extra(self):\n        return 3")),
        # both sides add members after `middle`: a hunk of the class itself
        (("return 2\n", "return 2\n\n    def a(self):\n        pass\n"),
         ("return 2\n", "return 2\n\n    def b(self):\n        pass\n")),
    ],
)  # fmt: skip
def test_a_narrowed_window_merges_as_the_whole_class_does(tmp_path, monkeypatch, ours, theirs):
    """Whatever a hunk's place, the narrowed window (or the wider one it falls back to)
    resolves and keeps what the whole class's window does, for the same reasons."""
    sides = (CLASS, CLASS.replace(*ours), CLASS.replace(*theirs))
    narrowed = merge_files(tmp_path, *sides)
    windows = pymerge._windows
    monkeypatch.setattr(pymerge, "_windows", lambda *args: windows(*args)[-1:])
    whole_class = merge_files(tmp_path, *sides)
    assert (narrowed.text, narrowed.resolved, narrowed.kept) == (
        whole_class.text,
        whole_class.resolved,
        whole_class.kept,
    )
    assert narrowed.resolved or narrowed.kept


def test_a_hunk_upstream_emptied_stays_when_another_resolves(tmp_path):
    """Upstream deleted g, which the patch edits: that hunk's upstream side is empty. It
    stays a conflict (it was lost once another hunk of the file was resolved)."""
    base = "import os\nimport sys\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n"
    upstream = base.replace("import sys", "import re\nimport sys").replace(
        "\n\ndef g():\n    return 2\n", ""
    )
    result = merge_files(
        tmp_path,
        base,
        upstream,
        base.replace("import sys", "import json\nimport sys").replace("return 2", "return 3"),
    )
    assert len(result.resolved) == 1 and len(result.kept) == 1, result
    assert result.text.startswith("import os\nimport re\nimport json\nimport sys\n")
    assert result.text.count("<<<<<<<") == 1 and "return 3" in result.text


def test_identical_additions_on_both_sides_are_kept_once(tmp_path):
    result = merge_files(
        tmp_path,
        "class A:\n    x = 1\n",
        "class A:\n    x = 1\n    y = 2\n    z = 3\n",
        "class A:\n    x = 1\n    y = 2\n    w = 4\n",
    )
    assert result.clean
    assert result.text == "class A:\n    x = 1\n    y = 2\n    z = 3\n    w = 4\n"


def test_a_dataclass_field_without_default_after_a_defaulted_one_stays(tmp_path):
    base = "@dataclass\nclass C:\n    a: int\n"
    result = merge_files(
        tmp_path,
        base,
        base + "    b: int = 0\n",
        base + "    c: int\n",
    )
    assert not result.resolved
    assert "dataclass field c without a default would follow b" in result.kept[0]


def test_items_the_patch_adds_where_upstream_removed_some_stay_a_conflict(tmp_path):
    """Upstream removed hand-written flags (it now makes them from a config); the patch
    adds flags beside them: a place upstream reworked, not an order-free insertion."""
    flags = (
        "def add(p):\n"
        "    p.add_argument('--norm')\n"
        "    p.add_argument('--eps')\n"
        "    p.add_argument('--seed')\n"
    )
    result = merge_files(
        tmp_path,
        flags,
        flags.replace("    p.add_argument('--norm')\n    p.add_argument('--eps')\n", ""),
        flags.replace(
            "    p.add_argument('--eps')\n",
            "    p.add_argument('--eps')\n    p.add_argument('--post-norm')\n",
        ),
    )
    assert not result.resolved
    assert (
        "upstream removes flag --norm, flag --eps where the patch adds flag --post-norm"
        in result.kept[0]
    )


def test_a_parameter_the_patch_removes_next_to_upstreams_stays_a_conflict(tmp_path):
    """Upstream's callers may still pass it (on the real fork: router_replay)."""
    base = "def route(logits, fused=False, replay=None):\n    return logits\n"
    result = merge_files(
        tmp_path,
        base,
        base.replace("replay=None)", "replay=None, dense=False)"),
        base.replace("replay=None)", "is_mtp=False)"),
    )
    assert not result.resolved
    assert "the patch removes parameter replay, next to upstream's changes" in result.kept[0]


def test_the_structured_merge_never_loads_libcst(tmp_path):
    """LibCST takes 0.15 to 0.25 s to load, in every command (and merge helper) whose merge
    met a container of items: the item merge now cuts items from ast and tokens."""
    import sys

    base = "D = {\n    'a': 1,\n}\n"
    ours, theirs = base.replace("}", "    'b': 2,\n}"), base.replace("}", "    'c': 3,\n}")
    for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
        (tmp_path / name).write_text(text)
    script = textwrap.dedent(
        """
        import subprocess, sys
        from rebaser.carry import pymerge
        texts = [open(name).read() for name in ("base", "ours", "theirs")]
        diff3 = subprocess.run(
            ["git", "merge-file", "-p", "--diff3", "ours", "base", "theirs"],
            capture_output=True, text=True,
        ).stdout
        merged = pymerge.merge(*texts, diff3)
        print(merged.clean, "libcst" in sys.modules, merged.resolved)
        """
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("True False ") and "both sides add entries to the dict" in out, out


LONG_DEF = dedent(
    '''
    class Buffer:
        @staticmethod
        def build(
            size,
            dtype=None,  # the element type
        ) -> "Buffer":  # built lazily
            # the body starts after this comment
            """Build a buffer."""
            total = size
            for step in range(size):
                total += step
            return Buffer()
    '''
)
LONG_DEF_OURS = LONG_DEF.replace(
    "dtype=None,  # the element type\n", "dtype=None,  # the element type\n        device=None,\n"
)
LONG_DEF_THEIRS = LONG_DEF.replace(
    "dtype=None,  # the element type\n", "dtype=None,  # the element type\n        pinned=False,\n"
)


def test_parameters_of_a_long_def_are_merged_from_its_header_alone(tmp_path, monkeypatch):
    """Where every side's hunk lies in a def's header, only the header is read for its
    items, not the body (on the real fork a 300-line __init__, three times a merge): the
    header's comments kept and the body left as upstream wrote it."""
    from rebaser.carry import pyelements

    parsed, tokens = [], pyelements._tokens
    monkeypatch.setattr(
        pyelements,
        "_tokens",
        lambda text, begin, end: parsed.append(text[begin:end]) or tokens(text, begin, end),
    )
    result = merge_files(tmp_path, LONG_DEF, LONG_DEF_OURS, LONG_DEF_THEIRS)
    assert result.clean, result.kept
    assert "upstream's device first, then the patch's pinned" in result.resolved[0]
    assert result.text == LONG_DEF_OURS.replace(
        "device=None,\n", "device=None,\n        pinned=False,\n"
    )
    assert len(parsed) == 3 and not any("total += step" in source for source in parsed)


def test_a_def_whose_body_starts_on_its_headers_last_line_is_parsed_whole(tmp_path):
    """No lines hold the header alone: its items are read up to the body's first statement."""
    base = "def f(a, *, b=1,\n      c=2): return a\n"
    result = merge_files(
        tmp_path, base, base.replace("b=1,", "b=1, x=3,"), base.replace("b=1,", "b=1, y=4,")
    )
    assert result.clean, result.kept
    assert result.text == "def f(a, *, b=1, x=3,\n      y=4,\n      c=2): return a\n"


def test_statements_compare_by_code_and_dump_only_where_their_sources_differ():
    """Child.same_code: the same source needs no dump (a dump of a long class is most of a
    merge's comparing); another formatting of the same code is the same; two statements
    sharing a line are told apart by their columns."""
    from rebaser.carry import pysyntax

    def statements(text: str) -> tuple[pysyntax.Child, ...]:
        lines = text.splitlines(keepends=True)
        return pysyntax.children(lines, ast.parse(text).body, 0)

    first, again = statements("class A:\n    x = 1\n")[0], statements("\nclass A:\n    x = 1\n")[0]
    assert first.same_code(again)
    assert "code" not in vars(first) and "code" not in vars(again)
    assert first.same_code(statements("class A:\n    x = (1)  # one\n")[0])
    assert not first.same_code(statements("class A:\n    x = 2\n")[0])
    a, b = statements("a = 1; b = 2\n")
    assert not a.same_code(b) and a.same_code(statements("a = 1; c = 3\n")[0])


@pytest.mark.parametrize("mark", ["\x0c", "\x0b", "\x85", "\u2028"])
def test_a_form_feed_does_not_shift_the_lines_the_merge_reads(tmp_path, mark):
    """str.splitlines also breaks lines at form feeds and a few other characters, ast does
    not: lines read by ast's numbers were then the wrong ones, and the patch's change to y
    was lost as "only reformatted" (on the line above the class, or in a comment)."""
    heads = [f"# page{mark}break\n"] + ([f"{mark}\n"] if mark == "\x0c" else [])
    for head in heads:  # alone on a line, only a form feed is Python
        base = f"{head}class A:\n    x = 1\n    y = 2\n"
        result = merge_files(
            tmp_path,
            base,
            base.replace("    x = 1\n", "    x = 1\n    z = 3\n"),
            base.replace("y = 2", "y = 3"),
        )
        assert result.clean, result.kept
        assert result.text == f"{head}class A:\n    x = 1\n    z = 3\n    y = 3\n"


def test_statements_sharing_a_line_stay_a_conflict(tmp_path):
    """Merged line by line, both statements of `a = 1; b = 2` claim the line, and the
    result held it twice (a call there would run twice)."""
    base = "class A:\n    a = 1; b = 2\n    c = 3\n"
    result = merge_files(tmp_path, base, base + "    d = 4\n", base + "    e = 5\n")
    assert not result.resolved
    assert "share a line" in result.kept[0]


def test_an_item_merge_keeps_whitespace_lines_inside_strings(tmp_path):
    """The statement is dedented for LibCST and indented back: a whitespace-only line lost
    its indentation on the way, which inside a string changes the value."""
    base = (
        'def f():\n    D = {\n        "a": """x\n        \n        y""",\n        "b": 1,\n    }\n'
    )
    ours = base.replace('"b": 1,\n', '"b": 1,\n        "c": 3,\n')
    theirs = base.replace('"b": 1,\n', '"b": 1,\n        "d": 4,\n')
    result = merge_files(tmp_path, base, ours, theirs, as_written=True)
    assert result.clean, result.kept
    assert result.text == ours.replace('"c": 3,\n', '"c": 3,\n        "d": 4,\n')


# -- a hostile review (seventeenth session): resolutions that were wrong -------------------


def reviewed(tmp_path: Path, base: str, ours: str, theirs: str) -> tuple[str, list, list]:
    """filemerges.merge_file on the three texts as written: (text, resolved, kept)."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    text, resolved, kept, _ = filemerges.merge_file(
        Git(tmp_path / "repo"), "pkg/mod.py", base, ours, theirs, "patch"
    )
    return text, resolved, kept


def test_conflict_markers_inside_a_string_leave_the_file_to_git(tmp_path):
    """A fixture string holding a diff3 sample was read as a hunk and "resolved": its value
    changed. git counts the file's real hunks; a file that reads as more is left to git."""
    base = (
        'import os\nimport sys\n\nFIXTURE = """\n<<<<<<< HEAD\nx = 1\n||||||| base\nx = 1\n'
        '=======\nx = 2\n>>>>>>> patch\n"""\n'
    )
    ours = base.replace("import sys\n", "import re\nimport sys\n")
    theirs = base.replace("import sys\n", "import json\nimport sys\n")
    _, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert not resolved and kept, (resolved, kept)


def test_a_comment_header_above_both_sides_imports_is_kept_once(tmp_path):
    header = (
        "# Copyright (c) 2024 Example Corp.\n# Licensed under the Apache License, Version 2.0\n\n"
    )
    base = header + "import os\n"
    text, resolved, kept = reviewed(
        tmp_path, base, header + "import argparse\nimport os\n", header + "import abc\nimport os\n"
    )
    assert resolved and not kept, kept
    assert text.count("# Copyright") == 1, text
    assert "import argparse\n" in text and "import abc\n" in text


def test_a_name_imported_as_an_alias_and_plainly_stays_a_conflict(tmp_path):
    text, resolved, kept = reviewed(
        tmp_path,
        "from a import (\n    x,\n)\n",
        "from a import (\n    x,\n    y as z,\n)\n",
        "from a import (\n    x,\n    z,\n)\n",
    )
    assert kept and not resolved, (text, resolved)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (
            "class Limits:\n    low, high = 0, 10\n",
            "class Limits:\n    low, high = 0, 100\n",
            "class Limits:\n    low, high = -5, 10\n",
        ),
        (
            "class Limits:\n    low = high = 0\n    other = 1\n",
            "class Limits:\n    low = high = 1\n    other = 1\n",
            "class Limits:\n    low = high = 2\n    other = 1\n",
        ),
    ],
    ids=["tuple", "chained"],
)
def test_both_sides_editing_one_assignment_of_several_names_stays_a_conflict(
    tmp_path, base, ours, theirs
):
    """Both edits were kept, one after the other (upstream's overridden): statements
    assigning several names were told apart by their code, not by the names they bind."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text


def test_a_comment_the_patch_adds_beside_upstreams_change_is_not_lost(tmp_path):
    """The patch's `# noqa: F401` on a line beside one upstream adds was dropped ("the
    patch only reformatted"): a comment is a change of the patch's."""
    text, resolved, kept = reviewed(
        tmp_path,
        "import os\nimport sys\n\nVALUE = 1\n",
        "import os\nimport re\nimport sys\n\nVALUE = 1\n",
        "import os  # noqa: F401\nimport sys\n\nVALUE = 1\n",
    )
    assert kept or "# noqa: F401" in text, (text, resolved)


def test_a_file_python_cannot_parse_stays_a_conflict(tmp_path):
    """A file CPython's parser runs out of memory on (20,000 nested minus signs) raised
    MemoryError out of the merge; it is git's conflict."""
    deep = "X = " + "-" * 20000 + "1\n"
    _, resolved, kept = reviewed(
        tmp_path,
        "import os\n" + deep,
        "import os\nimport re\n" + deep,
        "import os\nimport json\n" + deep,
    )
    assert not resolved and kept


@pytest.mark.parametrize(
    "header, field",
    [
        ("from typing import NamedTuple\n\n\nclass P(NamedTuple):\n", "c: int"),
        (
            "from dataclasses import dataclass, field\n\n\n@dataclass\nclass P:\n",
            "c: int = field(metadata={'help': 'c'})",
        ),
    ],
    ids=["namedtuple", "field-without-default"],
)
def test_a_field_without_a_default_after_upstreams_defaulted_one_stays_a_conflict(
    tmp_path, header, field
):
    """A NamedTuple's fields were not checked for their order, and `field(metadata=...)`
    counted as a default: both merges failed when the class was made (TypeError)."""
    base = header + "    a: int\n"
    text, resolved, kept = reviewed(
        tmp_path, base, base + "    b: int = 0\n", base + f"    {field}\n"
    )
    assert kept and not resolved, text


def test_a_name_upstream_defines_where_the_patch_imports_it_stays_a_conflict(tmp_path):
    """The patch imports `dumps as helper`; upstream adds `def helper()` in another hunk.
    Each hunk resolved alone, and upstream's def shadowed the patch's import (TypeError when
    the patch's code called it): the whole file may not bind a name more often than either
    side did."""
    text, resolved, kept = reviewed(
        tmp_path,
        "import os\nimport sys\n\n\ndef main():\n    return os.sep\n",
        "import os\nimport re\nimport sys\n\n\ndef main():\n    return os.sep\n\n\n"
        "def helper():\n    return 'upstream'\n",
        "import os\nfrom json import dumps as helper\nimport sys\n\n\ndef main():\n"
        "    return os.sep\n\n\ndef fork_feature():\n    return helper({'a': 1})\n",
    )
    assert kept and not resolved, text
    assert "helper" in kept[0], kept


@pytest.mark.parametrize(
    "base, ours, theirs, merged",
    [
        (
            "import os\n",
            "import os\nimport sys\n",
            "import os\nimport re\n# keep re last\n",
            None,
        ),
        (
            "D = {\n    'a': 1,\n}\n",
            "D = {\n    'a': 1,\n    'b': 2,  # upstream: keep in sync with B\n}\n",
            "D = {\n    'a': 1,\n    'c': 3,  # fork: see PR 12\n}\n",
            "D = {\n    'a': 1,\n    'b': 2,  # upstream: keep in sync with B\n"
            "    'c': 3,  # fork: see PR 12\n}\n",
        ),
    ],
    ids=["after-the-last-statement", "on-a-dict-entry"],
)
def test_a_comment_a_side_adds_is_never_lost(tmp_path, base, ours, theirs, merged):
    """A comment after the last statement of a place belongs to no item, and the item merge
    rewrote a dict entry without its comment: both were dropped. A resolution that lacks a
    comment a side adds in the hunk stays a conflict; the item merge now keeps each item's
    comment on its line, and the dict entries merge with both."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    if merged is None:
        assert kept and not resolved, text
    else:
        assert resolved and not kept, kept
        assert text == merged


@pytest.mark.parametrize(
    "ours_flag, theirs_flag",
    [
        ("'-v', '--verbose', action='store_true'", "'-v', '--version', action='store_true'"),
        ("'--use-flash-attn', action='store_true'", "'--use_flash_attn', default=True"),
    ],
    ids=["short-flag", "one-attribute"],
)
def test_argparse_flags_that_clash_stay_a_conflict(tmp_path, ours_flag, theirs_flag):
    """Both sides add `-v` (with other long flags): the parser failed to build. Both add a
    flag for the same attribute (`--use-flash-attn`, `--use_flash_attn`): the patch's default
    was lost. Only the first long flag of each was compared."""
    base = (
        "import argparse\n\n\ndef parser():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--seed', type=int)\n    return p\n"
    )
    here = "type=int)\n"
    text, resolved, kept = reviewed(
        tmp_path,
        base,
        base.replace(here, here + f"    p.add_argument({ours_flag})\n"),
        base.replace(here, here + f"    p.add_argument({theirs_flag})\n"),
    )
    assert kept and not resolved, text


def test_both_sides_adding_enum_members_stays_a_conflict(tmp_path):
    """Both sides add the next value (MUL = 3, XOR = 3): merged, Op.XOR was an alias of
    Op.MUL. An enum's members are no order-free items."""
    base = "import enum\n\n\nclass Op(enum.Enum):\n    ADD = 1\n    SUB = 2\n"
    text, resolved, kept = reviewed(tmp_path, base, base + "    MUL = 3\n", base + "    XOR = 3\n")
    assert kept and not resolved, text


TOPK = "import torch\n\n\ndef select(scores, k):\n    return torch.topk(scores, k=k, dim=-1)\n"


def test_a_patch_that_changes_the_called_function_stays_a_conflict(carried):
    """The item merge kept upstream's `torch.topk` and gave it the patch's keyword: the
    patch's switch to its own function was lost, and the call raised a TypeError."""
    patched = "from pkg.topk import dsa_topk\n" + TOPK.replace(
        "torch.topk(scores, k=k, dim=-1)", 'dsa_topk(scores, k=k, dim=-1, backend="flashinfer")'
    )
    upstream = TOPK.replace("dim=-1)", "dim=-1, sorted=False)")
    row, tree = carried(TOPK, patched, upstream)
    assert row["status"] == "dropped", row["detail"]
    assert "the patch also changes the statement around these items" in row["detail"]


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # the patch only switches the called function
            TOPK,
            TOPK.replace("dim=-1)", "dim=-1, sorted=False)"),
            TOPK.replace("torch.topk(scores, k=k, dim=-1)", "dsa_topk(scores, k=k, dim=-1)"),
        ),
        (  # the patch switches the module the names come from
            "from apex.normalization import FusedLayerNorm\n\nNorm = FusedLayerNorm\n",
            "from apex.normalization import FusedLayerNorm, FusedRMSNorm\n\nNorm = FusedLayerNorm\n",
            "from te.pytorch import FusedLayerNorm, LayerNormLinear\n\nNorm = FusedLayerNorm\n",
        ),
        (  # ... or its leading dots
            "from .norms import Fused\n\nNorm = Fused\n",
            "from .norms import Fused, RMS\n\nNorm = Fused\n",
            "from ..norms import Fused, Linear\n\nNorm = Fused\n",
        ),
    ],
    ids=["callee", "module", "relative"],
)
def test_what_the_patch_changes_besides_the_items_is_never_dropped(tmp_path, base, ours, theirs):
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text


def test_an_edit_to_one_of_two_identical_statements_upstream_cut_to_one_stays(tmp_path):
    """Statements are known by name and count: upstream deleting the first of two `result =
    None` made the second look like the first, and the patch's edit of the deleted one
    landed on the one upstream kept."""
    base = (
        "def run(step):\n    result = None\n    out = step()\n    result = None\n    return out\n"
    )
    ours = base.replace("    result = None\n    out", "    out", 1)
    theirs = base.replace("result = None", "result = 0", 1)
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text


CALL_WITH_COMMENT = dedent(
    """
    def build(args, spec):
        return GPTModel(
            spec,  # type: ignore[arg-type]
            vocab_size=args.vocab_size,
        )
    """
)
DICT_WITH_COMMENT = dedent(
    """
    DEFAULTS = {
        "topk": 2048,
        # --- deprecated ---
        "legacy_topk": 1024,
    }
    """
)
CALL_WITH_TRAILING_COMMENT = "cfg = Config(\n    a=1,\n    b=2,  # must match the checkpoint\n)\n"


def _added(text: str, after: str, line: str) -> str:
    return text.replace(after, after + line, 1)


@pytest.mark.parametrize(
    "base, ours, theirs, merged",
    [
        (  # the first argument's comment copied onto upstream's new keyword
            CALL_WITH_COMMENT,
            _added(CALL_WITH_COMMENT, "vocab_size,\n", "        rotary_base=args.rotary_base,\n"),
            _added(CALL_WITH_COMMENT, "vocab_size,\n", "        topk_backend=args.backend,\n"),
            _added(
                CALL_WITH_COMMENT,
                "vocab_size,\n",
                "        rotary_base=args.rotary_base,\n        topk_backend=args.backend,\n",
            ),
        ),
        (  # a comment line written again above the patch's new entry
            DICT_WITH_COMMENT,
            _added(DICT_WITH_COMMENT, "1024,\n", '    "legacy_mask": None,\n'),
            _added(DICT_WITH_COMMENT, "1024,\n", '    "topk_backend": "torch",\n'),
            _added(
                DICT_WITH_COMMENT,
                "1024,\n",
                '    "legacy_mask": None,\n    "topk_backend": "torch",\n',
            ),
        ),
        (  # the comment of the item upstream changed moved onto the patch's new one
            CALL_WITH_TRAILING_COMMENT,
            CALL_WITH_TRAILING_COMMENT.replace("b=2", "b=3"),
            _added(CALL_WITH_TRAILING_COMMENT, "checkpoint\n", "    c=True,\n"),
            _added(
                CALL_WITH_TRAILING_COMMENT.replace("b=2", "b=3"), "checkpoint\n", "    c=True,\n"
            ),
        ),
    ],
    ids=["copied-onto-an-item", "copied-above-an-item", "moved-onto-an-item"],
)
def test_a_comment_is_never_copied_or_moved_onto_another_item(tmp_path, base, ours, theirs, merged):
    """LibCST kept a comment inside the comma before it, and the item merge reused commas:
    it carried comments to items no side wrote them beside (a `type: ignore` hiding errors
    on the patch's new line), and the comment check then kept the hunk. The text between two
    items is now their side's own, and after an item that ended its side's list, upstream's
    separator without comments: each comment once, beside the item it was written on."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, kept
    assert text == merged


TYPED_CALL = "x = f(\n    a=1,\n    b=2,  # type: ignore[arg-type]\n)\n"
NOTED_CALL = "x = f(\n    a=1,\n    b=2,  # keep me\n    c=3,\n)\n"
COMMENTED_CALL = "x = f(\n    a=1,  # ca\n    b=2  # cb\n)\n"
HANGING_DEF = "def g(x, *, a=1,\n          b=2,\n          c=3):\n    return x\n"


@pytest.mark.parametrize(
    "base, ours, theirs, merged",
    [
        (  # the patch changes upstream's last item
            TYPED_CALL,
            TYPED_CALL.replace("a=1", "a=3"),
            TYPED_CALL.replace("b=2", "b=4"),
            TYPED_CALL.replace("a=1", "a=3").replace("b=2", "b=4"),
        ),
        (  # upstream removes the last item, the patch changes the one before it
            NOTED_CALL,
            NOTED_CALL.replace("    c=3,\n", ""),
            NOTED_CALL.replace("b=2", "b=5"),
            NOTED_CALL.replace("    c=3,\n", "").replace("b=2", "b=5"),
        ),
        (  # the patch appends after a last item without a trailing comma
            COMMENTED_CALL,
            COMMENTED_CALL.replace("a=1", "a=3"),
            COMMENTED_CALL.replace("b=2  # cb", "b=2,  # cb\n    t=6  # ct"),
            COMMENTED_CALL.replace("a=1", "a=3").replace("b=2  # cb", "b=2,  # cb\n    t=6  # ct"),
        ),
        (  # parameters aligned under the first: the separator nearest the end
            HANGING_DEF,
            HANGING_DEF.replace("c=3", "c=3,\n          d=4"),
            HANGING_DEF.replace("c=3", "c=3,\n          t=6"),
            HANGING_DEF.replace("c=3", "c=3,\n          d=4,\n          t=6"),
        ),
    ],
    ids=[
        "patch-changes-the-last",
        "upstream-removes-the-last",
        "appended-after-the-last",
        "hanging",
    ],
)
def test_an_items_line_comment_and_layout_stay_with_it(tmp_path, base, ours, theirs, merged):
    """A hostile review of the item merge without LibCST: where upstream's last item was
    no longer the same object (the patch's version of it, or another item) the comment on
    its line was dropped or lost (`# type: ignore` gone from a resolved call), and an item
    added after parameters aligned under the first joined upstream's last line."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, kept
    assert text == merged


def _both_add(base: str, old: str, upstream: str, patch: str) -> tuple[str, str, str]:
    return base, base.replace(old, upstream, 1), base.replace(old, patch, 1)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        _both_add(  # a header comment above the import both sides add names to
            "# Copyright (c) 2024, NVIDIA CORPORATION.\n\nfrom typing import Optional, Union\n",
            "Union",
            "Union, List",
            "Union, Tuple",
        ),
        _both_add(  # a comment above the call both sides add keywords to
            TOPK.replace("    return", "    # top-k over the last dim\n    return"),
            "dim=-1)",
            "dim=-1, sorted=False)",
            "dim=-1, largest=True)",
        ),
        _both_add(  # a comment at the end of the import both sides add names to
            "import os\nfrom .layers import Linear, Norm  # noqa: F401\n\nX = 1\n",
            "Norm",
            "Norm, Attention",
            "Norm, DSA",
        ),
        _both_add(  # a `#` in a string of the call both sides add keywords to
            'def add(p):\n    p.add_argument("--n", type=int, help="# of heads")\n',
            "type=int",
            "type=int, default=1",
            "type=int, required=False",
        ),
    ],
    ids=["header-above", "comment-above", "noqa-after", "hash-in-a-string"],
)
def test_a_comment_on_a_statement_whose_items_merge_stays_with_it(tmp_path, base, ours, theirs):
    """The comment check refused these: it read a comment's place from the whole line, and
    the item merge changes the line."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, (kept, text)


PROPERTY_AND_SETTER = dedent(
    """
    class A:
        @property
        def name(self):
            return 1

        @name.setter
        def name(self, value):
            pass


    class B:
        def forward(self, x):
            return x
    """
)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # a property and its setter, two defs of one name, elsewhere in the file
            PROPERTY_AND_SETTER,
            PROPERTY_AND_SETTER + "\n    def reset(self):\n        return None\n",
            PROPERTY_AND_SETTER + '\n    def name(self):\n        return "b"\n',
        ),
        (  # a name assigned twice, as code does
            "def f(a):\n    x = compute(a, 1)\n    x = x * 2\n    return x\n",
            "def f(a):\n    x = compute(\n        a, 1\n    )\n    x = x * 2\n    return x\n",
            "def f(a):\n    x = compute(a, 1)\n    x = x + 1\n    x = x * 2\n    return x\n",
        ),
    ],
    ids=["property-and-setter", "reassigned"],
)
def test_a_name_bound_twice_differently_still_merges(tmp_path, base, ours, theirs):
    """Only a statement written twice word for word makes counted keys ambiguous."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, (kept, text)


DOCUMENTED_FIELDS = dedent(
    '''
    from dataclasses import dataclass


    @dataclass
    class TransformerConfig:
        num_layers: int = 0
        """Number of transformer layers."""
    '''
)


def test_both_sides_add_fields_with_their_docstrings_stays_a_conflict(carried):
    """Megatron documents each field with a string right below it. Read as one item with
    its field, a string changed fields where a side only added or removed a blank line
    (reviews 19 and 20: a docstring the patch deleted came back, one moved under the
    patch's new field): a docstring is a statement of its own, and this stays git's."""
    upstream = '\n    mtp_num_layers: int = 0\n    """Number of multi-token-prediction layers."""\n'
    patch = '\n    topk_backend: str = "torch"\n    """Top-k backend of the DSA indexer."""\n'
    row, _ = carried(DOCUMENTED_FIELDS, DOCUMENTED_FIELDS + patch, DOCUMENTED_FIELDS + upstream)
    assert row["status"] == "dropped", row["detail"]
    assert "where order matters" in row["detail"]


@pytest.mark.parametrize(
    "upstream_doc, patch_doc",
    [('"""Layers, counted."""', '"""Number of transformer layers."""'), (None, '"""Layers."""')],
    ids=["both-change-it", "upstream-deletes-it"],
)
def test_a_field_docstring_both_sides_change_stays_a_conflict(tmp_path, upstream_doc, patch_doc):
    """A docstring is part of its field: upstream changing it while the patch changes the
    field is a change of one item by both."""
    doc = '    """Number of transformer layers."""\n'
    ours = DOCUMENTED_FIELDS.replace(doc, f"    {upstream_doc}\n" if upstream_doc else "")
    theirs = DOCUMENTED_FIELDS.replace("int = 0", "int = 12").replace(doc, f"    {patch_doc}\n")
    text, resolved, kept = reviewed(tmp_path, DOCUMENTED_FIELDS, ours, theirs)
    assert kept and not resolved, text


@pytest.mark.parametrize("first, second", [('x = "a"', "x = 'a'"), ("x = None", "x=None")])
def test_one_statement_twice_in_two_spellings_keeps_its_hunk_a_conflict(tmp_path, first, second):
    """Written twice means the same code, however spelled: quotes and spacing too."""
    base = f"class C:\n    {first}\n\n    def f(self):\n        return 1\n\n    {second}\n"
    ours = base.replace(f"    {first}\n\n", "", 1)
    theirs = base.replace(first, "x = 1", 1)
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text


@pytest.mark.parametrize(
    "base, added",
    [
        ('class C:\n    a = 1\n    """---- Section B ----"""\n    b = 2\n', "    {}\n"),
        ('class C:\n    a = 1\n    """---- Section B ----"""\n\n    b = 2\n', "    {}\n"),
        ('class C:\n    a = 1\n    """---- Section B ----"""\n\n    b = 2\n', "\n    {}\n"),
    ],
    ids=["section", "spaced-section", "spaced-items"],
)
def test_a_string_below_an_assignment_is_written_once_below_both_sides_items(tmp_path, base, added):
    """Read as the docstring of the assignment above it, a string went to each side's new
    item put between them, and the merge wrote it twice: a string is a statement of its
    own, whatever the blank lines around it."""
    at = "a = 1\n"
    ours, theirs = (base.replace(at, at + added.format(new)) for new in ("a2 = 5", "a3 = 6"))
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, kept
    assert text == base.replace(at, at + added.format("a2 = 5") + added.format("a3 = 6"))


@pytest.mark.parametrize(
    "base, anchor, ours, theirs",
    [
        # The call holding the hunk and the call making its function start at one place
        # (the real fork's router.py met the inner one, whose empty arguments made the
        # patch's change look like one around the items).
        pytest.param(
            "tracker().record(\n    name,\n    total=1,\n)\n",
            "total=1,\n",
            "    group=None,\n",
            "    scale=2,\n",
            id="call-on-a-calls-result",
        ),
        # ast counts columns in UTF-8 bytes: a dict after a non-ASCII string on its line.
        pytest.param(
            'names = ["é", {\n    "a": 1,\n}]\n',
            '"a": 1,\n',
            '    "b": 2,\n',
            '    "c": 3,\n',
            id="after-wide-characters",
        ),
        # The outer call spans the same lines; the hunk lies in the inner one's brackets.
        pytest.param(
            "m = Model(\n    a=1,\n).cuda()\n",
            "a=1,\n",
            "    b=2,\n",
            "    c=3,\n",
            id="a-call-whose-result-is-called-on",
        ),
        # A chained call whose text parses only inside brackets.
        pytest.param(
            "x = (\n    builder\n    .opt(\n        a=1,\n    )\n)\n",
            "a=1,\n",
            "        b=2,\n",
            "        c=3,\n",
            id="a-chained-call-over-lines",
        ),
    ],
)
def test_both_sides_add_items_to_the_container_that_holds_the_hunk(
    tmp_path, base, anchor, ours, theirs
):
    """Each side adds an item after the same one: the container found for the hunk is the
    one whose own brackets hold it, and both items go in, upstream's first."""
    result = merge_files(
        tmp_path, base, base.replace(anchor, anchor + ours), base.replace(anchor, anchor + theirs)
    )
    assert result.clean, result.kept
    assert result.text == base.replace(anchor, anchor + ours + theirs)


def _each_adds(base: str, old: str, upstream: str, patch: str, both: str) -> tuple:
    return base, base.replace(old, upstream), base.replace(old, patch), base.replace(old, both)


@pytest.mark.parametrize(
    "base, ours, theirs, merged",
    [
        # LibCST kept the newline before `)` with the last argument: the patch's keyword
        # landed after a blank line at column 0
        _each_adds(
            "x = f(\n    a,\n    c=1\n)\n",
            "c=1\n",
            "c=1,\n    u=2\n",
            "c=1,\n    t=3\n",
            "c=1,\n    u=2,\n    t=3\n",
        ),
        # a lambda's commas are its own, not the call's
        _each_adds(
            "x = f(key=lambda a, b: a, c=1)\n", "c=1)", "c=1, u=2)", "c=1, t=3)", "c=1, u=2, t=3)"
        ),
        # keyword-only parameters between `*` and `**kw`
        _each_adds(
            "def g(a, *, b=1, **kw):\n    return a\n",
            "b=1,",
            "b=1, u=2,",
            "b=1, t=3,",
            "b=1, u=2, t=3,",
        ),
        # a tuple without brackets
        _each_adds('__all__ = "a", "b"\n', '"b"', '"b", "u"', '"b", "t"', '"b", "u", "t"'),
    ],
    ids=["no-trailing-comma", "lambda-in-a-call", "keyword-only", "bare-tuple"],
)
def test_items_are_cut_at_their_containers_own_commas(tmp_path, base, ours, theirs, merged):
    """The item merge reads items from the container's tokens: at its own brackets'
    commas, outside every item's syntax; the text between items is their side's."""
    result = merge_files(tmp_path, base, ours, theirs)
    assert result.clean, result.kept
    assert result.text == merged


def test_a_statement_with_a_line_indented_less_leaves_only_its_own_hunk(tmp_path):
    """A continuation line indented less than its statement cannot be dedented for the item
    merge: that hunk goes to the statement merge, and the file's other hunks still resolve
    (it used to fail the whole file)."""
    base = dedent(
        """\
        import os


        def f():
            x = g(
          a=1,
            )
            return x
        """
    )
    ours = base.replace("import os\n", "import os\nimport re\n").replace(
        "  a=1,\n", "  a=1,\n  b=2,\n"
    )
    theirs = base.replace("import os\n", "import os\nimport json\n").replace(
        "  a=1,\n", "  a=1,\n  c=3,\n"
    )
    result = merge_files(tmp_path, base, ours, theirs, as_written=True)
    assert any("line 2" in reason for reason in result.resolved), result
    assert "import re\nimport json\n" in result.text


def _long_def(name: str, body_word: str) -> str:
    lines = "".join(f"    {body_word}_{n} = sys.path[{n}]\n" for n in range(12))
    return f"def {name}():\n{lines}    return {body_word}_0\n"


MODULE = "import os\nimport sys\n\n\n" + _long_def("a", "alpha") + "\n\n" + _long_def("b", "beta")


def test_a_hunk_among_a_modules_statements_is_parsed_without_the_defs_bodies(tmp_path, monkeypatch):
    """Both sides add a function between two long ones: the module's statements are parsed
    with the bodies of a() and b() left out (each a stub reading what it read), the
    resolution goes in, and b(), now further down, gets its body back."""
    from rebaser.carry import pysyntax

    parsed = []
    parse = pysyntax.parse.__wrapped__
    monkeypatch.setattr(pysyntax, "parse", lambda text: parsed.append(text) or parse(text))
    anchor = "\n\n" + _long_def("b", "beta")
    ours = MODULE.replace(anchor, "\n\ndef up():\n    return 1\n" + anchor)
    theirs = MODULE.replace(anchor, "\n\ndef mine():\n    return 2\n" + anchor)
    result = merge_files(tmp_path, MODULE, ours, theirs, as_written=True)
    assert result.clean, result.kept
    both = "\n\ndef up():\n    return 1\n\n\ndef mine():\n    return 2\n" + anchor
    assert result.text == MODULE.replace(anchor, both)
    windows = [text for text in parsed if "__forkkit_hollow_" in text]
    assert len(windows) >= 4  # the three sides and the result
    assert not any("alpha_5 =" in text or "beta_5 =" in text for text in windows)


def test_an_import_a_left_out_body_still_reads_is_not_dropped(tmp_path):
    """The patch deletes `import sys` where upstream adds an import beside it; a() and b(),
    left out of the window, read sys: their stubs say so, and the hunk stays."""
    ours = MODULE.replace("import os\n", "import os\nimport re\n")
    theirs = MODULE.replace("import sys\n", "import json\n")
    result = merge_files(tmp_path, MODULE, ours, theirs, as_written=True)
    assert not result.clean
    assert any("sys" in reason for reason in result.kept), result.kept


def _numbered_def(name: str, prefix: str, count: int) -> str:
    body = "".join(f"    {prefix}{n} = {n}\n" for n in range(count))
    return f"def {name}():\n{body}    return {prefix}0\n"


def test_an_edit_to_a_function_upstream_moved_is_merged_beside_left_out_bodies(tmp_path):
    """Upstream moves g() below B(), the patch edits g(): g()'s body, outside the hunk in
    upstream's file, is not left out of the window, so the moved g() is still told the same
    code as the base's and the patch's change goes where g() now is."""
    g, b = _numbered_def("g", "g", 8), _numbered_def("B", "b", 12)
    head = "def A():\n    pass\n\n\n"
    base = head + g + "\n\n" + b
    ours = head + b + "\n\n" + g
    theirs = head + g.replace("g4 = 4", "g4 = 44") + "\n\n" + b
    result = merge_files(tmp_path, base, ours, theirs, as_written=True)
    assert result.clean, result.kept
    assert result.text == head + b + "\n\n" + g.replace("g4 = 4", "g4 = 44")
    assert "upstream moved g" in result.resolved[0]


def test_a_file_that_names_the_stub_marker_still_merges(tmp_path):
    """A file's own text may hold the name the stubs start with: only the stubs' own lines
    count as stubs."""
    base = "# see __forkkit_hollow_\nimport os\n"
    result = merge_files(
        tmp_path, base, base + "import re\n", base + "import json\n", as_written=True
    )
    assert result.clean, result.kept
    assert result.text == base + "import re\nimport json\n"
