"""The structured merge's count check (carry/pycounts.py): a fully resolved file holds
each named statement of its module's and classes' bodies no more often than a merge of the
three sides' counts gives. Reviews 20 and 22 found the merges it refuses; review 22's
second pass the right ones it must not refuse."""

from __future__ import annotations

import pytest
from test_structured_merge import reviewed


MOVED_FIELDS = (
    'class C:\n    f0: int = 0\n\n    f1: int = 1\n\n    f2: int = 2\n    """Unused."""\n'
)
MOVED_UP = 'class C:\n    f2: int = 2\n    """Unused."""\n\n    f0: int = 0\n'


@pytest.mark.parametrize(
    "ours, theirs",
    [
        # upstream moves f2 up and changes f1; the patch moves f2 up and deletes f1
        (MOVED_UP + "\n    f1: int = 11\n", MOVED_UP),
        # the same, the sides' roles swapped: upstream deletes what the patch changes
        (MOVED_UP, MOVED_UP + "\n    f1: int = 11\n"),
    ],
    ids=["the-patch-deletes-it", "upstream-deletes-it"],
)
def test_a_field_one_side_deletes_where_both_move_fields_stays_a_conflict(tmp_path, ours, theirs):
    """Both sides moving f2 made git's clean part delete f1 on both sides, and its hunk read
    as two additions (empty base): the field one side deleted came back as the other's
    "addition" (review 20). The merged file may hold a statement no more often than the
    base plus what each side added or removed."""
    text, resolved, kept = reviewed(tmp_path, MOVED_FIELDS, ours, theirs)
    assert kept and not resolved, text
    assert "f1" in kept[0], kept


def test_a_field_both_sides_move_apart_is_written_once(tmp_path):
    """Upstream moved f2 above the section string, the patch moved it below: the merge
    wrote it at both places (review 22's fuzzing). Neither side writes it twice."""
    rest = '    f0: int = 0\n\n    f1: int = 1\n    """doc 1"""\n'
    base = 'class C:\n    """Section"""\n' + rest + "\n    f2: int = 2\n"
    ours = 'class C:\n    f2: int = 2\n\n    """Section"""\n\n' + rest
    theirs = 'class C:\n    """Section"""\n    f2: int = 2\n\n' + rest
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text
    assert "f2 in class C 2 times" in kept[0], kept


OS_IMPORT = "import os\n"
UPSTREAMS_IMPORT, PATCHS_IMPORT = "import os\nimport sys\n", "import os\nimport re\n"
GETTER_SETTER = (
    "import os\n\n\nclass C:\n    @property\n    def x(self):\n        return self._x\n\n"
    "    @x.setter\n    def x(self, v):\n        self._x = v\n\n    def m(self):\n        return 1\n"
)
SETTER = "\n    @x.setter\n    def x(self, v):\n        self._x = v\n"


def _sides(base: str, upstream: tuple[str, str], patch: tuple[str, str]) -> tuple[str, str]:
    """Upstream's and the patch's files: each adds its import (a hunk the merge resolves,
    so the whole-file checks run) and makes its own change."""
    ours = base.replace(OS_IMPORT, UPSTREAMS_IMPORT, 1).replace(*upstream, 1)
    theirs = base.replace(OS_IMPORT, PATCHS_IMPORT, 1).replace(*patch, 1)
    return ours, theirs


@pytest.mark.parametrize(
    "base, upstream, patch",
    [
        (GETTER_SETTER, (SETTER, ""), (SETTER, "")),  # both delete the setter, x twice in the base
        (
            GETTER_SETTER,
            ("class C:", "class D:"),
            ("    def m(", "    def pa(self):\n        pass\n\n    def m("),
        ),
        (
            GETTER_SETTER,
            ("    def m(", "    def up(self):\n        pass\n\n    def m("),
            ("class C:", "class D:"),
        ),
        (  # not Python 3 on the base: the sides' own checks decide
            OS_IMPORT + '\n\ndef g():\n    print "hi"\n',
            ('print "hi"', 'print("hi")'),
            ('print "hi"', 'print("hi")'),
        ),
    ],
    ids=[
        "both-delete-one-of-two",
        "upstream-renames-the-class",
        "the-patch-renames-it",
        "base-py2",
    ],
)
def test_merges_the_count_check_must_not_refuse(tmp_path, base, upstream, patch):
    """Review 22 of the count check: a key the base holds twice that both sides delete once,
    a class one side renames while the other adds to it, and a base that does not parse
    (it raised SyntaxError out of the merge) were refused or crashed; each merge is right."""
    ours, theirs = _sides(base, upstream, patch)
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert resolved and not kept, kept
    assert "import sys\nimport re\n" in text, text


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # the patch backports upstream's rename and moves the method: m0_new twice
            "class C:\n    def m0(self):\n        return 0\n    f1: int = 1\n\n    f2: int = 2\n",
            "class C:\n    def m0_new(self):\n        return 0\n    f1: int = 1\n\n    f2: int = 2\n",
            "class C:\n    f1: int = 1\n    def m0_new(self):\n        return 0\n\n    f2: int = 2\n",
        ),
        (  # both sides add u1 with different values at different places
            "class C:\n    f0: int = 0\n\n    f1: int = 1\n    f2: int = 2\n    def p(self):\n"
            "        return 100\n",
            "class C:\n    f0: int = 0\n\n    u1: int = 10\n    f1: int = 1\n    f2: int = 2\n\n"
            "    def p(self):\n        return 100\n",
            "class C:\n    u1: int = 9\n\n    f1: int = 1\n    f2: int = 2\n    f0: int = 0\n\n"
            "    def p(self):\n        return 100\n",
        ),
    ],
    ids=["backported-rename-moved", "both-add-one-field"],
)
def test_a_statement_both_sides_add_once_is_not_written_twice(tmp_path, base, ours, theirs):
    """An addition both sides make counts once, as git counts a change both sides make
    (review 22: the allowance added them up, and both were written)."""
    text, resolved, kept = reviewed(tmp_path, base, ours, theirs)
    assert kept and not resolved, text


def _class(*members: str, name: str = "C") -> str:
    return "\n".join(["import os", "", "", f"class {name}:", *members, ""])


GETTER = "    @property\n    def x(self):\n        return self._x\n"
SETTER_ = "    @x.setter\n    def x(self, v):\n        self._x = v\n"
DELETER = "    @x.deleter\n    def x(self):\n        del self._x\n"
METHOD = "    def m(self):\n        return 1\n"
OVERLOADS = [
    "    @overload\n    def f(self, x: int) -> int: ...\n",
    "    @overload\n    def f(self, x: str) -> str: ...\n",
    "    @overload\n    def f(self, x: bytes) -> bytes: ...\n",
]
IMPLEMENTATION = "    def f(self, x):\n        return x\n"


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # upstream drops setter and deleter, the patch the deleter: the getter stays
            (GETTER, SETTER_, DELETER, METHOD),
            (GETTER, METHOD),
            (GETTER, SETTER_, METHOD),
        ),
        ((GETTER, METHOD), (GETTER, METHOD, SETTER_), (GETTER, DELETER, METHOD)),  # one each
        ((GETTER, SETTER_, METHOD), (GETTER, METHOD, DELETER), (GETTER, METHOD)),  # swap, drop
        (  # upstream drops two overloads, the patch one of them
            (*OVERLOADS, IMPLEMENTATION),
            (OVERLOADS[1], IMPLEMENTATION),
            (*OVERLOADS[1:], IMPLEMENTATION),
        ),
    ],
    ids=["overlapping-deletions", "setter-and-deleter", "swap-and-drop", "overloads"],
)
def test_several_statements_of_one_name_merge_by_their_headers(tmp_path, base, ours, theirs):
    """A property's halves and overloads share a name: counted by name alone, a merge of
    different changes that leave the same count read as one change made twice, or as
    deletions made twice (review 22, second pass): each counts by its decorators and
    signature."""
    base, ours, theirs = (_class(*members) for members in (base, ours, theirs))
    _merged(tmp_path, base, ours, theirs)


def test_a_name_rebound_by_each_side_merges(tmp_path):
    """`handler = None`, then upstream's `handler = setup` and the patch's `handler =
    teardown`: three assignments, each written once."""
    base = "import os\n\nhandler = None\n\n\ndef setup():\n    return 1\n\n\ndef teardown():\n"
    base += "    return 2\n"
    ours = base.replace("\n\ndef teardown", "\nhandler = setup\n\n\ndef teardown")
    theirs = base + "\n\nhandler = teardown\n"
    _merged(tmp_path, base, ours, theirs)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        ((GETTER, SETTER_, DELETER, METHOD), (GETTER, DELETER, METHOD), (GETTER, SETTER_, METHOD)),
        (
            (*OVERLOADS[:2], IMPLEMENTATION),
            (OVERLOADS[1], IMPLEMENTATION),
            (OVERLOADS[0], IMPLEMENTATION),
        ),
    ],
    ids=["setter-and-deleter-deleted", "two-overloads-deleted"],
)
def test_different_halves_deleted_by_each_side_stay_deleted(tmp_path, base, ours, theirs):
    """Upstream deletes the setter, the patch the deleter: the counts coincide (two on each
    side) and the merge kept the deleter (review 22, second pass)."""
    base, ours, theirs = (_class(*members) for members in (base, ours, theirs))
    _refused(tmp_path, base, ours, theirs)


CONFIG = (
    "import os\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass Config:\n"
    '    """The model\'s settings."""\n\n    a: int = 1\n    """Field a."""\n\n'
    '    b: int = 2\n    """Field b."""\n\n    c: int = 3\n    """Field c."""\n'
)
FIELD_A = '\n    a: int = 1\n    """Field a."""\n'


@pytest.mark.parametrize("renamed_by", ["upstream", "the patch"])
@pytest.mark.parametrize(
    "upstream, patch",
    [
        ((FIELD_A, ""), (FIELD_A, "", "end", FIELD_A)),  # upstream deletes a, the patch moves it
        (
            ("", "", "end", '\n    y: int = 1\n    """Field y."""\n'),
            (FIELD_A, FIELD_A + '\n    y: int = 2\n    """Field y."""\n'),
        ),
    ],
    ids=["deleted-vs-moved", "both-add-y"],
)
def test_a_renamed_class_is_counted_under_its_base_name(tmp_path, renamed_by, upstream, patch):
    """A class one side renamed was left out of the count, so its fields came back or were
    written twice there (review 22, second pass)."""

    def changed(edit: tuple) -> str:
        text = CONFIG.replace(edit[0], edit[1], 1) if edit[0] else CONFIG
        return text + edit[3] if len(edit) > 2 else text

    ours, theirs = changed(upstream), changed(patch)
    if renamed_by == "upstream":
        ours = ours.replace("class Config:", "class ModelConfig:")
    else:
        theirs = theirs.replace("class Config:", "class ModelConfig:")
    _refused(tmp_path, CONFIG, ours, theirs)


def _merged(tmp_path, base: str, ours: str, theirs: str) -> str:
    """The merge of the three, each side with its own import: every hunk resolved."""
    text, resolved, kept = reviewed(tmp_path, base, *_with_imports(base, ours, theirs))
    assert resolved and not kept, kept
    return text


def _refused(tmp_path, base: str, ours: str, theirs: str) -> None:
    """The same, where the file stays git's conflict."""
    text, resolved, kept = reviewed(tmp_path, base, *_with_imports(base, ours, theirs))
    assert kept and not resolved, text


def _with_imports(base: str, ours: str, theirs: str) -> tuple[str, str]:
    """Each side's own import beside `import os` (a hunk the merge resolves, so the whole
    file's checks run)."""
    return (
        ours.replace(OS_IMPORT, UPSTREAMS_IMPORT, 1),
        theirs.replace(OS_IMPORT, PATCHS_IMPORT, 1),
    )


SIGNATURE_BASE = _class(
    GETTER,
    "    @x.setter\n    def x(\n        self,\n        value,\n        check=True,\n    ):\n"
    "        self._x = value\n",
    METHOD,
)


@pytest.mark.parametrize(
    "base, upstream, patch",
    [  # each side edits another line of one setter's signature
        (SIGNATURE_BASE, ("value,", "value: int,"), ("check=True", "check=False")),
        (  # upstream adds a decorator to an overload, the patch edits its signature
            _class(*OVERLOADS[:2], IMPLEMENTATION),
            (
                "    @overload\n    def f(self, x: int)",
                '    @deprecated("g")\n    @overload\n' "    def f(self, x: int)",
            ),
            ("def f(self, x: int)", "def f(self, x: int, /)"),
        ),
        (  # each side edits another line of one of two bindings of DEFAULTS
            "import os\n\nDEFAULTS = dict(\n    a=1,\n    c=3,\n)\n\n\ndef g():\n    return 0\n\n\n"
            "DEFAULTS = dict(\n    a=1,\n    c=4,\n)\n",
            ("    a=1,\n    c=4", "    a=10,\n    c=4"),
            ("c=4", "c=5"),
        ),
    ],
    ids=["setter-signature", "overload", "rebinding"],
)
def test_an_edit_to_one_of_several_statements_of_a_name_keeps_it(tmp_path, base, upstream, patch):
    """Counted by its whole header, a statement both sides edited (different lines) was on
    no side and read as one too many (review 22, third pass): a def counts by its
    decorators, an overload by its signature, an assignment by its name."""
    ours = base.replace(*upstream, 1)
    theirs = base.replace(*patch, 1)
    assert ours != base and theirs != base
    _merged(tmp_path, base, ours, theirs)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # upstream deletes the setter, the patch moves it and edits its signature
            _class(GETTER, SETTER_, METHOD, "    def n(self):\n        return 2\n"),
            _class(GETTER, METHOD, "    def n(self):\n        return 2\n"),
            _class(
                GETTER,
                METHOD,
                "    def n(self):\n        return 2\n",
                SETTER_.replace("v)", "v: int)"),
            ),
        ),
        (  # both sides add a setter, at different places
            _class(GETTER, METHOD, "    def n(self):\n        return 2\n"),
            _class(GETTER, SETTER_, METHOD, "    def n(self):\n        return 2\n"),
            _class(
                GETTER,
                METHOD,
                "    def n(self):\n        return 2\n",
                SETTER_.replace("v)", "value)"),
            ),
        ),
        (  # upstream renames Config and deletes another class: a came back in ModelConfig
            CONFIG + "\n\nclass Unused:\n    z: int = 0\n",
            CONFIG.replace(FIELD_A, "", 1).replace("class Config:", "class ModelConfig:") + "\n",
            CONFIG.replace(FIELD_A, "", 1) + FIELD_A + "\n\nclass Unused:\n    z: int = 0\n",
        ),
    ],
    ids=[
        "deleted-vs-moved-and-edited",
        "two-setters",
        "rename-and-delete",
    ],
)
def test_what_a_header_edit_or_a_second_class_hid_stays_a_conflict(tmp_path, base, ours, theirs):
    """Review 22, third pass: an edited header made a deleted setter or binding the patch's
    "new" one, two setters one each, and a class renamed beside another deleted went
    uncounted."""
    _refused(tmp_path, base, ours, theirs)


SINGLEDISPATCH = (
    "import os\nimport functools\n\n\n@functools.singledispatch\ndef show(v):\n    return str(v)\n"
    '\n\n@show.register\ndef _(v: int):\n    return "int"\n\n\n@show.register\ndef _(v: str):\n'
    '    return "str"\n\n\n@show.register\ndef _(v: bytes):\n    return "bytes"\n'
)
BYTES_HANDLER = '\n\n@show.register\ndef _(v: bytes):\n    return "bytes"\n'
PROPERTY_X = _class(METHOD, GETTER, SETTER_).replace("import os\n", "import os\nimport abc\n")
TWO_CONFIGS = (
    'import os\nimport dataclasses\n\n\n@dataclasses.dataclass\nclass TrainConfig:\n    name: str = ""\n'
    "    enabled: bool = True\n\n\ndef helper():\n    return 0\n\n\n@dataclasses.dataclass\n"
    'class EvalConfig:\n    name: str = ""\n    enabled: bool = True\n'
)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # both delete `x = 2`, upstream also edits `x = 1`
            "import os\n\nx = 1\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n\nx = 2\n",
            "import os\n\nx = 10\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n",
            "import os\n\nx = 1\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n",
        ),
        (  # both delete the bytes handler, upstream also edits the int one
            SINGLEDISPATCH,
            SINGLEDISPATCH.replace(BYTES_HANDLER, "").replace('"int"', '"INT"'),
            SINGLEDISPATCH.replace(BYTES_HANDLER, ""),
        ),
        (  # each side adds a decorator to the getter
            PROPERTY_X,
            PROPERTY_X.replace("    @property\n", '    @deprecated("x")\n    @property\n'),
            PROPERTY_X.replace("    @property\n", "    @property\n    @abc.abstractmethod\n"),
        ),
        (  # upstream renames both configs (alike members), the patch adds to one
            TWO_CONFIGS,
            TWO_CONFIGS.replace("Config:", "Settings:"),
            TWO_CONFIGS.replace(
                "enabled: bool = True\n\n\ndef",
                "enabled: bool = True\n" "    steps: int = 0\n\n\ndef",
            ),
        ),
        (  # a class decorated with something named overload, twice in the module
            "import os\n\n\n@overload\nclass Spec:\n    a = 1\n\n\ndef g():\n    return 0\n\n\n"
            "@overload\nclass Spec:\n    a = 2\n",
            "import os\n\n\n@overload\nclass Spec:\n    a = 1\n\n\ndef g():\n    return 0\n\n\n"
            "@overload\nclass Spec:\n    a = 2\n",
            "import os\n\n\n@overload\nclass Spec:\n    a = 1\n\n\ndef g():\n    return 0\n\n\n"
            "@overload\nclass Spec:\n    a = 3\n",
        ),
    ],
    ids=[
        "both-delete-one-edits",
        "singledispatch",
        "two-decorators",
        "two-renames",
        "class-overload",
    ],
)
def test_more_right_merges_the_count_check_keeps(tmp_path, base, ours, theirs):
    """Review 22, fourth pass: a deletion both sides make beside an edit read as two
    deletions; a decorator each side adds made a role no side has; two renamed classes
    alike paired by set order (crossed in 3 of 8 hash seeds); a class decorated with
    something named `overload` raised AttributeError out of the merge."""
    _merged(tmp_path, base, ours, theirs)


BLOCK = _class(
    "    def __init__(self, n):\n        self.n = n\n",
    "    def forward(self, x):\n        return x * self.n\n",
    "    def extra(self):\n        return self.n\n",
    "    def reset(self):\n        self.n = 0\n",
    "    def size(self):\n        return self.n\n",
    name="Block",
)
EXTRA = "\n    def extra(self):\n        return self.n\n"
ADAPTER = (
    "\n\nclass Adapter:\n    def __init__(self, n):\n        self.k = n\n\n    def forward(self, x):\n"
    "        return x + self.k\n"
)


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # both add `x = x + [3]` (at different places), upstream also edits `x = [1]`
            "import os\n\nx = [1]\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n\n"
            "x = x + [2]\n",
            "import os\n\nx = [10]\nx = x + [3]\n\n\ndef g():\n    return 0\n\n\ndef h():\n"
            "    return 1\n\n\nx = x + [2]\n",
            "import os\n\nx = [1]\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n\n"
            "x = x + [3]\n\n\nx = x + [2]\n",
        ),
        (  # upstream deletes extra, renames Block and adds a small class; the patch moves extra
            BLOCK,
            BLOCK.replace(EXTRA, "").replace("class Block:", "class TransformerBlock:") + ADAPTER,
            BLOCK.replace(EXTRA, "") + EXTRA,
        ),
    ],
    ids=["both-add-one-edits", "rename-beside-a-new-class"],
)
def test_more_wrong_merges_the_count_check_refuses(tmp_path, base, ours, theirs):
    """Review 22, fourth pass: an addition both sides make beside an edit read as two
    additions; a small new class took the renamed class's pairing, and the deleted method
    came back."""
    _refused(tmp_path, base, ours, theirs)


X_TWICE = "import os\n\nx = 1\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 1\n\n\nx = 2\n"
HANDLERS = (
    'import os\n\nHANDLERS = {"a": 1}\n\n\ndef a():\n    return 1\n\n\n'
    'HANDLERS = {**HANDLERS, "legacy": 2}\n\n\ndef b():\n    return 2\n'
)
LEGACY = '\n\nHANDLERS = {**HANDLERS, "legacy": 2}\n'


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # both delete `x = 2`, upstream adds `x = 5`
            X_TWICE,
            X_TWICE.replace("\n\n\nx = 2\n", "\n\n").replace("def h", "x = 5\n\n\ndef h"),
            X_TWICE.replace("\n\n\nx = 2\n", "\n\n"),
        ),
        (  # the same, the patch adding `x = 5`
            X_TWICE,
            X_TWICE.replace("\n\n\nx = 2\n", "\n\n"),
            X_TWICE.replace("\n\n\nx = 2\n", "\n\n").replace("def h", "x = 5\n\n\ndef h"),
        ),
        (  # a dispatch table rebuilt by rebinding: both drop a line, upstream adds one
            HANDLERS,
            HANDLERS.replace(LEGACY, "") + '\n\nHANDLERS = {**HANDLERS, "b": b}\n',
            HANDLERS.replace(LEGACY, ""),
        ),
        (  # upstream deletes a second binding, the patch moves it up and edits it (git's
            # own merge of those lines is clean, and keeps the patch's)
            "import os\n\nhandler = None\n\n\ndef g():\n    return 0\n\n\nhandler = dict()\n",
            "import os\n\nhandler = None\n\n\ndef g():\n    return 0\n\n",
            "import os\n\nhandler = None\nhandler = dict(a=1)\n\n\ndef g():\n    return 0\n\n",
        ),
        (  # upstream renames two configs alike; a tie of shared members pairs none
            TWO_CONFIGS,
            TWO_CONFIGS.replace("TrainConfig", "TrainingConfig").replace(
                "EvalConfig", "ValidationConfig"
            ),
            TWO_CONFIGS.replace(
                "enabled: bool = True\n\n\ndef", "enabled: bool = True\n    steps: int = 0\n\n\ndef"
            ),
        ),
    ],
    ids=["upstream-adds-one", "the-patch-adds-one", "dispatch-table", "moved-and-edited", "tie"],
)
def test_a_name_standing_twice_merges_by_each_sides_changes(tmp_path, base, ours, theirs):
    """Review 22, fifth pass: where one side's count came back to the base's, it read as
    unchanged (both deleting `x = 2` while upstream adds `x = 5` was refused), and a tie of
    two renamed classes alike paired them across by name. A name standing several times
    merges each side's additions and removals by code, always; a tie pairs nothing."""
    _merged(tmp_path, base, ours, theirs)


def test_an_addition_both_make_is_written_once_whatever_else_changes(tmp_path):
    """Both add `x = x + 3` (at different places), the patch `x = 9` too: counts alone
    allowed five, and `x = x + 3` was written twice (review 22, fifth pass)."""
    ours = X_TWICE.replace("x = 1\n", "x = 1\nx = x + 3\n")
    theirs = X_TWICE.replace("def h", "x = 9\n\n\ndef h").replace(
        "\nx = 2\n", "\nx = x + 3\n\n\nx = 2\n"
    )
    _refused(tmp_path, X_TWICE, ours, theirs)


def test_an_overload_both_sides_edit_keeps_its_merged_signature(tmp_path):
    """Upstream edits one parameter of an overload, the patch adds another: git merges the
    signature cleanly, and the merged overload's role (its signature) stood on no side, so
    it read as one too many (review 22, sixth pass, on Megatron's typed_torch.py). A role
    the merge made of both sides' edits counts where both sides changed that name."""
    overload = "    @overload\n    def f(\n        self,\n        x: int,\n        y: int,\n    ) -> int: ...\n"
    base = _class(overload, OVERLOADS[1], IMPLEMENTATION)
    ours = base.replace("        x: int,", "        x: float,")
    theirs = base.replace("        y: int,\n", "        y: int,\n        z: int = 0,\n")
    text = _merged(tmp_path, base, ours, theirs)
    assert "x: float" in text and "z: int = 0" in text, text


def test_an_overload_upstream_deletes_stays_deleted_beside_one_both_edit(tmp_path):
    """The allowance for a merged role is for the statements both sides edited, not for one
    a side deleted: upstream deletes the str overload and both edit the int one."""
    overload = "    @overload\n    def f(\n        self,\n        x: int,\n        y: int,\n    ) -> int: ...\n"
    base = _class(overload, OVERLOADS[1], IMPLEMENTATION)
    ours = base.replace("        x: int,", "        x: float,").replace(OVERLOADS[1], "")
    theirs = base.replace("        y: int,\n", "        y: int,\n        z: int = 0,\n")
    text, resolved, kept = reviewed(tmp_path, base, *_with_imports(base, ours, theirs))
    assert not (resolved and not kept) or "x: str" not in text, text


def _method(name: str, indent: str = "    ") -> str:
    """A method long enough that git's alignment keeps it whole."""
    body = "".join(f"{indent}    v{n} = '{name}{n}'\n" for n in range(5))
    return f"{indent}def {name}(self):\n{body}{indent}    return v0\n"


def _overload(kind: str, extra: str = "") -> str:
    return (
        f"    @overload\n    def o(\n        self,\n        x: {kind},\n{extra}        y: int = 0,\n"
        f"    ) -> {kind}:\n        ...\n"
    )


OVERLOADED = "import os\nfrom typing import overload\n\n\nclass C:\n" + "\n".join(
    [_method("a"), _overload("int"), _method("m"), _overload("str"), _overload("bytes")]
    + [_method("zz"), "    def o(self, x, y=0):\n        return x\n"]
)
STRICT = "        strict: bool = False,\n"


def _nested(outer: str, inner: str, members: str) -> str:
    methods = "\n".join(_method(name, "        ") for name in members)
    return (
        f"import os\n\n\nclass {outer}:\n    x = 1\n\n    class {inner}:\n        y = 2\n\n"
        f"{methods}\n    def tail(self):\n        return 3\n"
    )


@pytest.mark.parametrize(
    "base, ours, theirs",
    [
        (  # upstream deletes the str overload; the patch moves it up and adds a parameter
            OVERLOADED,
            OVERLOADED.replace(_overload("str") + "\n", ""),
            OVERLOADED.replace(_overload("str") + "\n", "").replace(
                "class C:\n", "class C:\n" + _overload("str", STRICT) + "\n"
            ),
        ),
        (  # upstream renames Outer and deletes Inner.m; the patch renames Inner, moves m
            _nested("Outer", "Inner", "ambc"),
            _nested("Outer2", "Inner", "abc"),
            _nested("Outer", "Inner2", "abcm"),
        ),
    ],
    ids=["overload-moved-and-edited", "nested-double-rename"],
)
def test_a_deletion_behind_an_edited_signature_or_two_renames_stays(tmp_path, base, ours, theirs):
    """Review 22, seventh pass (wrong in 625ccf9 too): an overload's signature is its role,
    so the patch's moved and edited overload read as a new one beside upstream's deletion;
    and a class path renamed twice (the outer class by one side, the inner by the other)
    was mapped once, so its body went uncounted. A side's one new role where one of the
    base's roles went is that role edited; renames map a path until none applies."""
    _refused(tmp_path, base, ours, theirs)
