"""What the structured merge (carry/pymerge.py) knows about Python: where a conflict sits
in the syntax tree, the items of that place, what names they define, and what a result
must not do.

Statements are read with `ast` (fast on a 5,000-line module) and handled as text spans of
whole lines: a statement's span runs from the end of the one before it (so its comments
and blank lines travel with it) to its last line. Two statements are the same code when
their `ast.dump` is the same: formatting, comments and quotes do not count.
"""

from __future__ import annotations

import ast
import builtins
import collections
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Callable, Container, Hashable, Iterator, Optional, Sequence, Union

Lines = list[str]
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
Key = tuple[str, ...]
# Fields of a compound statement that hold statement lists, in source order.
_BODIES = ("body", "orelse", "finalbody")


def source_lines(text: str) -> Lines:
    """The text's lines as Python numbers them, ends kept: broken at \\n, \\r\\n and \\r
    only. str.splitlines also breaks at form feeds and a few other characters inside a
    line, and its line numbers then drift from ast's."""
    return _LINE.findall(text)


@dataclass(frozen=True)
class Child:
    """One statement of a list, with its text span in the file's lines."""

    node: ast.stmt
    start: int  # first line (0-based), its leading comments and blank lines included
    end: int  # one past its last line
    lines: Lines = field(compare=False, repr=False)  # the lines it was parsed from

    def text(self) -> str:
        return "".join(self.lines[self.start : self.end])

    @functools.cached_property
    def code(self) -> str:
        """The statement's meaning, formatting left out."""
        return ast.dump(self.node)

    @functools.cached_property
    def source(self) -> str:
        """Its own lines (decorators on) and columns: the same source is the same code."""
        node = self.node
        own = "".join(self.lines[first_line(node) : self.end])
        return own + f"\0{node.col_offset}:{node.end_col_offset}"

    def same_code(self, other: Child) -> bool:
        """Whether the two mean the same: a dump of both only where their sources differ
        (most statements are the same text on every side; a dump of a class is costly)."""
        return self.source == other.source or self.code == other.code


@dataclass(frozen=True)
class Place:
    """A statement list where a conflict sits: its owner (None: the module) and children."""

    owner: Optional[ast.AST]
    children: tuple[Child, ...]
    path: tuple[tuple[int, int], ...]  # from the module: (statement number, its body number)

    @property
    def span(self) -> tuple[int, int]:
        return (self.children[0].start, self.children[-1].end) if self.children else (0, 0)

    def describe(self, offset: int = 0) -> str:
        """ "class Config", "forward()", "the if block at line N" (`offset`: where the lines
        the place was parsed from start in the file)."""
        owner = self.owner
        if owner is None:
            return "the module"
        if isinstance(owner, ast.ClassDef):
            return f"class {owner.name}"
        if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return f"{owner.name}()"
        return f"the {type(owner).__name__.lower()} block at line {owner.lineno + offset}"


def children(lines: Lines, statements: Sequence[ast.stmt], floor: int) -> tuple[Child, ...]:
    """The statements as spans; `floor` is the first line the first one may claim."""
    found = []
    previous = floor
    for statement in statements:
        first = first_line(statement)
        start = _leading(lines, previous, first)
        end = statement.end_lineno or statement.lineno
        found.append(Child(statement, start, end, lines))
        previous = end
    return tuple(found)


def first_line(statement: ast.stmt) -> int:
    """The statement's first line (0-based), its decorators' included."""
    return min([statement.lineno, *(d.lineno for d in _decorators(statement))]) - 1


def body_starts_a_line(lines: Lines, node: ast.stmt) -> bool:
    """Whether a def's or class's body starts on a line of its own, not after its colon
    (ast's columns count UTF-8 bytes)."""
    first = node.body[0]  # type: ignore[attr-defined]
    if getattr(first, "decorator_list", None):
        return True
    return not lines[first.lineno - 1].encode()[: first.col_offset].strip()


def _leading(lines: Lines, floor: int, first: int) -> int:
    """The first line of the comments and blank lines right above line `first`."""
    start = first
    while start > floor and (not lines[start - 1].strip() or lines[start - 1].lstrip()[:1] == "#"):
        start -= 1
    return start


def _decorators(statement: ast.stmt) -> list[ast.expr]:
    return list(getattr(statement, "decorator_list", []))


def place_of(tree: ast.Module, lines: Lines, span: tuple[int, int], depth: int = 1_000) -> Place:
    """The deepest statement list (at most `depth` levels down) holding the lines `span`
    (0-based, end excluded; an empty span is a point between lines) without touching its
    owner's header."""
    place = Place(None, children(lines, tree.body, 0), ())
    while len(place.path) < depth:
        inner = _inner(place, lines, span)
        if inner is None:
            return place
        place = inner
    return place


def _inner(place: Place, lines: Lines, span: tuple[int, int]) -> Optional[Place]:
    touched = [n for n, child in enumerate(place.children) if overlaps(child, span)]
    if len(touched) != 1:
        return None
    number = touched[0]
    statement = place.children[number].node
    for index, (_, _, body) in enumerate(_bodies(statement)):
        if not body:
            continue
        # The owner's header ends before the body's first statement (or its comments).
        header_end = first_line(body[0])
        inner = children(lines, body, _header_floor(lines, statement, header_end))
        start, end = inner[0].start, inner[-1].end
        if start <= span[0] and span[1] <= end:
            return Place(statement, inner, (*place.path, (number, index)))
    return None


def _header_floor(lines: Lines, statement: ast.stmt, header_end: int) -> int:
    """The line after the owner's header: comments between header and body go with the
    body's first statement."""
    floor = header_end
    while floor > statement.lineno and (
        not lines[floor - 1].strip() or lines[floor - 1].lstrip()[:1] == "#"
    ):
        floor -= 1
    return floor


def _bodies(statement: ast.stmt) -> Iterator[tuple[str, int, list[ast.stmt]]]:
    for name in _BODIES:
        body = getattr(statement, name, None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            yield name, 0, body
    for index, handler in enumerate(getattr(statement, "handlers", []) or []):
        yield "handlers", index + 1, handler.body
    for index, case in enumerate(getattr(statement, "cases", []) or []):
        yield "cases", index + 1, case.body


def overlaps(child: Child, span: tuple[int, int]) -> bool:
    if span[0] == span[1]:  # a point: inside the statement, or right after its last line
        return child.start < span[0] <= child.end
    return child.start < span[1] and span[0] < child.end


def with_additions(
    merged: Sequence[Optional[Hashable]],
    base: Container,
    ours: Container,
    theirs: Sequence[Hashable],
) -> list[Optional[Hashable]]:
    """Upstream's keys in its order (None where an item went) with the keys only the patch
    has, each after the key it follows on the patch's side and after upstream's own
    additions right there ("upstream's items first")."""
    result = list(merged)
    mine = set(theirs)

    def after(position: int) -> int:
        while position < len(result) and (
            result[position] is None
            or (result[position] not in base and result[position] not in mine)
        ):
            position += 1
        return position

    cursor = after(0)
    for key in theirs:
        if key in base or key in ours:
            if key in result:
                cursor = after(result.index(key) + 1)
            continue
        result.insert(cursor, key)
        cursor += 1
    return result


# -- what a statement is -------------------------------------------------------------------


def key_of(node: ast.stmt) -> Key:
    """How a statement is recognised on the other side: by the name it defines (a def, a
    class, a field or an assignment), an import by what it imports, an argparse flag by
    the flag; anything else by its code."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ("name", node.name)
    target = _single_target(node)
    if target is not None:
        return ("name", target)
    names = _assigned_names(node)
    if names:  # `low, high = ...`, `low = high = ...`: one item, whatever its values
        return ("names", ",".join(sorted(names)))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return ("import", ast.dump(node))
    flag = argparse_flag(node)
    if flag is not None:
        return ("flag", flag)
    return ("code", ast.dump(node))


def _single_target(node: ast.stmt) -> Optional[str]:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        return node.targets[0].id
    return None


def _assigned_names(node: ast.stmt) -> Optional[set[str]]:
    """The names an assignment of several targets binds (tuples, chains); None where a
    target is no name (an attribute, a subscript)."""
    if not isinstance(node, ast.Assign):
        return None
    names: set[str] = set()
    targets = list(node.targets)
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        else:
            return None
    return names


def argparse_flag(node: ast.stmt) -> Optional[str]:
    """`--flag` of a `<parser>.add_argument('--flag', ...)` statement."""
    return next((option for option in _options(node) if option[:2] == "--"), None)


def _options(node: ast.AST) -> list[str]:
    """The option strings of a `<parser>.add_argument(...)` statement (none for others)."""
    call = node.value if isinstance(node, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "add_argument"
    ):
        return []
    return [
        arg.value
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] == "-"
    ]


def kind_of(node: ast.stmt) -> str:
    """What an inserted statement is, for the report and the order-free test."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return "member"
    if isinstance(node, ast.AnnAssign):
        return "field"
    if isinstance(node, ast.Assign):
        return "assignment"
    if argparse_flag(node) is not None:
        return "argparse flag"
    return "statement"


def order_free(place: Place, kinds: set[str]) -> bool:
    """Whether statements of these kinds may go in any order at this place: imports
    anywhere, members and fields of a class, argparse flags (order only changes the help)."""
    if kinds <= {"import"} or kinds <= {"argparse flag"}:
        return True
    return isinstance(place.owner, ast.ClassDef) and kinds <= {"member", "field", "assignment"}


def is_dataclass(place: Place) -> bool:
    """A class whose annotated fields become parameters in their order: a dataclass (any
    decorator named so, pydantic's too), a NamedTuple."""
    owner = place.owner
    if not isinstance(owner, ast.ClassDef):
        return False
    for decorator in owner.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _named(target) == "dataclass":
            return True
    return any(_named(base) == "NamedTuple" for base in owner.bases)


def is_enum(place: Place) -> bool:
    """A class deriving from an enum (Enum, IntEnum, Flag, StrEnum, ...) by its base's name."""
    owner = place.owner
    return isinstance(owner, ast.ClassDef) and any(
        _named(base).endswith(("Enum", "Flag")) for base in owner.bases
    )


def _named(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def field_order_problem(nodes: Sequence[ast.stmt]) -> Optional[str]:
    """A dataclass field without a default after one with a default (a TypeError when the
    class is made), or None."""
    defaulted = None
    for node in nodes:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if _classvar(node.annotation):
            continue
        if _has_default(node.value):
            defaulted = defaulted or node.target.id
        elif defaulted is not None:
            return f"dataclass field {node.target.id} without a default would follow {defaulted}"
    return None


def _has_default(value: Optional[ast.expr]) -> bool:
    """Whether a field's value gives it a default: `field(...)` only with default= or
    default_factory= (`field(metadata=...)` gives none)."""
    if value is None:
        return False
    if isinstance(value, ast.Call) and _named(value.func) == "field":
        return any(k.arg in ("default", "default_factory") for k in value.keywords)
    return True


def _classvar(annotation: ast.expr) -> bool:
    return "ClassVar" in ast.dump(annotation)


# -- names ---------------------------------------------------------------------------------


def module_names(tree: ast.Module) -> Optional[set[str]]:
    """The names a module binds at its top level (in `if`/`try` blocks too); None when a
    star import makes that unknowable."""
    names: set[str] = set()
    for node in _top_statements(tree.body):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        names |= bound_by(node)
    return names


def _top_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for _, _, inner in _bodies(node):
                yield from _top_statements(inner)


def statements(tree: ast.AST) -> Iterator[ast.AST]:
    """The statements under `tree` in ast.walk's order, without walking the expressions
    (no statement is inside one): a tenth of a module's nodes."""
    queue = collections.deque([tree])
    while queue:
        node = queue.popleft()
        yield node
        queue.extend(_children(node, _HOLDS_STATEMENTS))


_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _children(node: ast.AST, kinds: Union[type, tuple[type, ...]]) -> list[ast.AST]:
    """A node's children of `kinds`, in ast.iter_child_nodes' order."""
    found = []
    for name in node._fields:
        value = getattr(node, name, None)
        if type(value) is list:
            found.extend(item for item in value if isinstance(item, kinds))
        elif isinstance(value, kinds):
            found.append(value)
    return found


def bound_by(node: ast.stmt) -> set[str]:
    """The names one statement binds in its scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    return {name for target in targets for name in _names_in(target)}


def _names_in(node: ast.AST) -> set[str]:
    """The ids of the Names in a piece of code (ast.walk's, without its generators: an
    assignment's target is most often one Name, or one in an attribute)."""
    if type(node) is ast.Name:
        return {node.id}
    found, stack = set(), [node]
    while stack:
        inner = stack.pop()
        kind = type(inner)
        if kind is ast.Name:
            found.add(inner.id)
            continue
        _push_named(stack, inner, kind)
    return found


def used_names(node: ast.AST) -> set[str]:
    """Names a piece of code reads and does not bind itself (its parameters, assignments,
    loop and comprehension variables, imports and nested definitions are its own, and so
    is a name it declares global or nonlocal and binds); names in string annotations
    ("Optional[RouterReplay]") count as read.

    Its own walk: on a whole module this runs for every check of a merged file, ast.walk's
    generators were most of its time, and contexts and operators, which hold no name, were
    a third of the nodes."""
    loads, own = set(), set()
    stack = [node]
    while stack:
        inner = stack.pop()
        kind = type(inner)
        if kind is ast.Name:
            (loads if type(inner.ctx) is ast.Load else own).add(inner.id)
            continue  # its one child is the context
        if kind is ast.arg:
            own.add(inner.arg)
        elif isinstance(inner, ast.stmt) and inner is not node:
            own |= bound_by(inner)
        if kind in _ANNOTATED:
            loads |= _quoted_in(inner)
        _push_named(stack, inner, kind)
    return loads - own - _BUILTINS


# The fields of each kind of node that may hold a name (all but contexts and operators).
_NAMED_FIELDS: dict[type, tuple[str, ...]] = {}


def _push_named(stack: list[ast.AST], node: ast.AST, kind: type) -> None:
    """The node's children that may hold a name, onto `stack`."""
    fields = _NAMED_FIELDS.get(kind)
    if fields is None:
        fields = _NAMED_FIELDS[kind] = tuple(
            name for name in kind._fields if name not in ("ctx", "op", "ops")
        )
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            stack.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            stack.append(value)


def _quoted_in(node: ast.AST) -> set[str]:
    """The names of the string annotations of a parameter, def or annotated assignment."""
    return {
        name
        for annotation in _annotations(node)
        for part in ast.walk(annotation)
        if isinstance(part, ast.Constant) and isinstance(part.value, str)
        for name in _quoted_names(part.value)
    }


_BUILTINS = frozenset(dir(builtins))
_ANNOTATED = frozenset({ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign})


def definition_time_names(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> set[str]:
    """The names a def reads when it runs (its decorators, defaults and annotations), not
    Python's builtins."""
    arguments = node.args
    parts: list[Optional[ast.expr]] = [*node.decorator_list, node.returns]
    parts += [*arguments.defaults, *arguments.kw_defaults]
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None]
    parts += [arg.annotation for arg in every]
    return set().union(*(used_names(part) for part in parts if part is not None))


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def comments(text: str) -> Optional[list[str]]:
    """The comments of a piece of code, in order (None when it cannot be read)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [token.string for token in tokens if token.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _quoted_names(text: str) -> set[str]:
    """The names of a string that reads as a type expression ("RouterReplay", "List[X]")."""
    if (
        not text
        or len(text) > 200
        or not text.replace(".", "")
        .replace("[", "")
        .replace("]", "")
        .replace(",", "")
        .replace(" ", "")
        .replace("_", "")
        .isalnum()
    ):
        return set()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def all_bound(tree: ast.Module) -> set[str]:
    """Every name a module binds anywhere (its functions' locals and parameters too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.stmt):
            names |= bound_by(node)
    return names


@functools.lru_cache(maxsize=6)
def parse(text: str) -> ast.Module:
    """ast.parse, kept for the last few texts: a merge parses upstream's file and the
    merged one for several checks (a 3,000-line module takes 30 ms each time). The trees
    are shared: read them, never change them."""
    return ast.parse(text)


@functools.lru_cache(maxsize=6)
def unbound(text: str) -> frozenset[str]:
    """Names a module reads that nothing in it binds (nor Python's builtins)."""
    return frozenset(used_names(parse(text)))


def placed_comments(lines: Lines) -> list[tuple[str, str]]:
    """From each `#` to its line's end (a `#` in a string too, which every side holding
    the line holds alike), with the head of the code it sits beside: the code before it on
    its line or, alone on its line, the next line of code; up to the first bracket, `=`,
    `:` or comma, whitespace left out (the item or statement the line starts, whatever an
    item merge adds to it)."""
    found = []
    for number, line in enumerate(lines):
        if "#" not in line:
            continue
        at = line.index("#")
        beside = line[:at]
        if not beside.strip():  # on a line of its own: it belongs to the code below
            below = (later.strip() for later in lines[number + 1 :])
            beside = next((code for code in below if code[:1] not in "#"), "")
        found.append((line[at:].rstrip(), "".join(_HEAD.split(beside, 1)[0].split())))
    return found


_HEAD = re.compile(r"[(\[{=:,]")


def parses(text: str) -> Optional[str]:
    """None when the text compiles, else what is wrong (line and message)."""
    try:
        compile(parse(text), "<merged>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except ValueError as error:  # e.g. a NUL byte
        return str(error)
    return None


def flag_counts(tree: ast.Module) -> dict[str, int]:
    """How often each argparse option string is added in a module: short ones too (`-v`),
    and each long one also as the attribute it sets (`--use-x` and `--use_x` set one)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        for option in _option_strings(node):
            counts[option] = counts.get(option, 0) + 1
    return counts


def _option_strings(node: ast.AST) -> list[str]:
    """Each option string, and each long one also as `dest <attribute>`."""
    found = []
    for option in _options(node):
        found.append(option)
        if option[:2] == "--":
            found.append("dest " + option[2:].replace("-", "_"))
    return found


# -- what the merge of one file works with ---------------------------------------------

# An in-repository module's top-level names on upstream's side (None: not in the repository
# or unknowable), for "does the patch import a name upstream deleted?": given the module as
# written (`a.b`, or `.b` relative to the file) and the importing file's path.
ModuleNames = Callable[[str, str], Optional[set[str]]]


@dataclass
class Side:
    """The file with this hunk as one side wrote it (the other hunks as upstream's)."""

    name: str
    lines: Lines
    tree: ast.Module
    span: tuple[int, int]  # the hunk's lines
    offset: int = 0  # where these lines start in the file (a class or function parsed alone)


class Facts:
    """What holds for the whole file: the names upstream deleted from it, and where its
    imports point."""

    def __init__(
        self, base: str, ours: str, theirs: str, modules: Optional[ModuleNames], path: str
    ) -> None:
        self.modules, self.path = modules, path
        self._texts = (base, ours, theirs)

    @functools.cached_property
    def deleted(self) -> set[str]:
        """The names the module bound on the base and upstream's side no longer does."""
        before, after = _bound_names(self._texts[0]), _bound_names(self._texts[1])
        return (before - after) if before is not None and after is not None else set()

    @functools.cached_property
    def repeated(self) -> set[Key]:
        """The key_of() of each statement the base writes more than once in one statement
        list, the same code however spelled (`x = None` twice in a body)."""
        try:
            tree = parse(self._texts[0])
        except (SyntaxError, ValueError):
            return set()
        lines = source_lines(self._texts[0])
        found: set[Key] = set()
        for node in statements(tree):
            if isinstance(node, (ast.excepthandler, ast.match_case)):
                continue  # their bodies come with their try or match
            for _, _, body in _bodies(node):
                alike = collections.defaultdict(list)  # dumped only where one may equal another
                for statement in body:
                    alike[_alike(statement, lines)].append(statement)
                for group in (group for group in alike.values() if len(group) > 1):
                    codes = [ast.dump(statement) for statement in group]
                    written = collections.Counter(codes)
                    found |= {key_of(s) for s, code in zip(group, codes) if written[code] > 1}
        return found

    @functools.cached_property
    def patch_binds(self) -> set[str]:
        """Every name the patch's version of the file binds somewhere."""
        try:
            return all_bound(parse(self._texts[2]))
        except (SyntaxError, ValueError):
            return set()


def _alike(statement: ast.stmt, lines: Lines) -> tuple:
    """What two statements of the same code share, cheap to tell: a def's or class's name,
    an assignment's targets, a block's first line (whitespace left out), else the kind."""
    kind = type(statement).__name__
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (kind, statement.name)
    if isinstance(statement, ast.Assign):
        return (kind, *(ast.dump(target) for target in statement.targets))
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return (kind, ast.dump(statement.target))
    if any(isinstance(getattr(statement, name, None), list) for name in _BODIES):
        return (kind, "".join(lines[statement.lineno - 1].split()))
    return (kind,)


def _bound_names(text: str) -> Optional[set[str]]:
    try:
        return module_names(parse(text))
    except (SyntaxError, ValueError):
        return None
