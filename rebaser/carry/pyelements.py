"""The items of one statement, merged: dict and set entries, arguments of a call, the names
of `__all__`, the names of a `from ... import`, the parameters of a `def`.

Where a conflict hunk lies inside one statement, the deepest of these that holds it is
merged item by item (a dict entry by its key, an argument by its keyword, a name by its
name, a parameter by its name): both sides may add distinct items (upstream's first, then
the patch's) and change different ones. Items are cut from the statement's own tokens, at
the commas of the container's brackets that lie outside every item's syntax (a lambda's
commas are its own), and read with `ast`. Each keeps its own text, comments inside it
included, and the text between two items stays as its side wrote it; only where an item
that ended its side's list is followed now does it take upstream's separator (its commas,
line break and indent, without comments). No LibCST: loading it took 0.15 to 0.25 s of
every command whose merge met such a hunk, and of each merge helper.

Parameters are the cautious case: keyword-only ones go in any order, but a positional one
added by the patch lands after upstream's, so it must come after every existing parameter
and have a default (callers that passed it by position would otherwise shift).

A hunk that starts in a def's parameters and runs on into its body (git's lines joined
the parameters to a return annotation or docstring upstream changed) is merged as the
def's parameters only when, in the hunk, the patch changes nothing but parameters:
upstream's annotation and body stay as upstream wrote them. Anything else is left to the
statement merge, as before.
"""

from __future__ import annotations

import ast
import bisect
import io
import itertools
import re
import tokenize
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from rebaser.carry import pysyntax
from rebaser.carry.pycontainers import Held, header_end
from rebaser.carry.pysyntax import Facts, Side

Keyed = dict[tuple, "_Item"]  # key -> the item
Outcome = Union[None, str, tuple[int, int, list[str], str]]
# A def's parameters by rank: the fixed ones (positional-only, `/`, `*` or `*args`, `**kw`)
# must be alike on every side; the two fields between them merge.
_RANKS = {"posonly": 0, "/": 1, "params": 2, "*": 3, "kwonly": 4, "**": 5}
_FIXED = ("posonly", "/", "*", "**")
_NEWLINE = re.compile("\n")
_SEPARATOR = -1  # the kind of a comma token between two items (tokenize's kinds are >= 0)


@dataclass(frozen=True)
class _Item:
    """An item of a container (or a def's `/`, `*`, `*args`, `**kw`): its text in the
    statement's source, what it is and what a merge compares."""

    start: int
    end: int
    text: str
    field: str  # "args", "names", "elements", or a def's rank name (_RANKS)
    key: tuple
    code: str  # compared between the sides
    reads: Optional[ast.AST] = None  # what a new item runs (a value, a default)
    shown: str = ""
    default: bool = False  # a parameter with a default


@dataclass
class _Statement:
    """One side's statement: its lines in the file, dedented, and the container of items
    that holds the hunk, cut into items."""

    start: int
    end: int
    indent: str
    source: str  # the statement's lines, dedented
    kind: str  # "call", "import", "params", "dict", "set" or "all"
    span: tuple[int, int]  # the container's text in `source`
    inner: tuple[int, int]  # between its brackets (its items and their separators)
    head: str  # a call's function, an import's module
    items: list[_Item]  # every item, in order
    offset: int = 0  # where the lines `start` counts from begin in the file
    into_body: bool = False  # a def's parameters, the hunk running on into its body

    def fields(self) -> tuple[str, ...]:
        return {"call": ("args",), "import": ("names",), "params": ("params", "kwonly")}.get(
            self.kind, ("elements",)
        )

    def field(self, name: str) -> list[_Item]:
        return [item for item in self.items if item.field == name]

    def around(self) -> str:
        """The statement's code without the container's items, whitespace left out: what a
        side changed besides the items (the function called and the module imported from
        are the container's own)."""
        cut = self.inner if self.kind == "params" else self.span
        text = self.source[: cut[0]] + "\0" + self.source[cut[1] :]
        return " ".join(f"{text} {self.head}".split())

    def fixed(self) -> list[str]:
        """A def's positional-only, `/` and star parameters (which the merge keeps)."""
        return ["".join(item.text.split()) for item in self.items if item.field in _FIXED]

    def gap(self, number: int) -> str:
        """The text after item `number`: up to the next item, or to the closing bracket."""
        items = self.items
        end = items[number + 1].start if number + 1 < len(items) else self.inner[1]
        return self.source[items[number].end : end]


@dataclass
class _Pick:
    key: tuple
    item: _Item
    side: str


def merge(held: dict[str, Held], sides: dict[str, Side], facts: Facts) -> Outcome:
    """(first line, end, new lines, reason) in upstream's file; a refusal; or None when
    no dict, set, call, `__all__`, import or parameter list of the statement holds the hunk
    on every side as items (the statement merge then tries). `held`: pycontainers.held()."""
    # Every side's hunk in a def's header: its lines alone are the statement.
    headers = all(_in_header(node, target, sides[name]) for name, (node, target) in held.items())
    statements = {}
    for name, (node, target) in held.items():
        found = _statement(node, target, sides[name], headers)
        if found is None:
            return None
        statements[name] = found
    if len({s.kind for s in statements.values()}) != 1:
        return None
    merged = _merge_statements(statements, facts)
    if isinstance(merged, str) and any(s.into_body for s in statements.values()):
        return None  # not the parameters alone: the statement merge decides, as before
    return merged


def _merge_statements(statements: dict[str, _Statement], facts: Facts) -> Outcome:
    base, ours, theirs = statements["base"], statements["ours"], statements["theirs"]
    if theirs.around() != base.around():
        return "the patch also changes the statement around these items"
    if not (base.fixed() == ours.fixed() == theirs.fixed()):
        return "a side changes the positional-only or star parameters"
    merged: dict[str, list[_Pick]] = {}
    for field_name in ours.fields():
        picks = _merge_field(statements, field_name)
        if isinstance(picks, str):
            return picks
        merged[field_name] = picks
    problem = _problems(merged, statements, facts)
    if problem:
        return problem
    code = _render(statements, merged)
    if code is None:
        return "a side removes every item"
    lines = [ours.indent + line if line.strip() else line for line in pysyntax.source_lines(code)]
    return ours.start, ours.end, lines, _reason(ours, merged, statements)


def _merge_field(statements: dict[str, _Statement], field_name: str) -> Union[str, list[_Pick]]:
    keyed = {}
    for side, statement in statements.items():
        found = _keyed(statement.field(field_name))
        if isinstance(found, str):
            return found
        keyed[side] = found
    picks = _merge(keyed["base"], keyed["ours"], keyed["theirs"])
    if isinstance(picks, str) or field_name != "params":
        return picks
    return _positional(picks, keyed["base"])


def _positional(picks: list[_Pick], base: Keyed) -> Union[str, list[_Pick]]:
    """New positional parameters only after every existing one, each with a default."""
    last_old = max((n for n, pick in enumerate(picks) if pick.key in base), default=-1)
    for number, pick in enumerate(picks):
        if pick.key in base:
            continue
        if number < last_old:
            return f"a side adds parameter {pick.key[1]} before existing ones"
        if not pick.item.default:
            return f"a side adds positional parameter {pick.key[1]} without a default"
    return picks


# -- finding the container -----------------------------------------------------------------


def _in_header(node: ast.stmt, target: ast.AST, side: Side) -> bool:
    """Whether the hunk lies in the def's header and its body starts on a line of its own
    (so the header's lines are the statement)."""
    if not isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if node is not target or side.span[1] > header_end(target):
        return False
    return pysyntax.body_starts_a_line(side.lines, target)


def _statement(node: ast.stmt, target: ast.AST, side: Side, header: bool) -> Optional[_Statement]:
    """The statement's deepest container holding the hunk (`target`), cut into items.
    `header`: a def's header lines alone are the statement."""
    start, end = node.lineno - 1, node.end_lineno or node.lineno
    is_def = isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef))
    if header:
        end = header_end(target)  # type: ignore[arg-type]
    text = "".join(side.lines[start:end])
    indent = text[: len(text) - len(text.lstrip(" \t"))]
    try:
        source = _dedent(text, indent)
    except ValueError:  # a line indented less: the statement merge's
        return None
    positions = _Positions(source, node.lineno, len(indent))
    if is_def:
        if getattr(target, "type_params", None):
            return None
        first = target.body[0]  # type: ignore[attr-defined]
        first = (getattr(first, "decorator_list", None) or [first])[0]
        body = len(source) if header else positions.offset(first.lineno, first.col_offset)
        if body is None:
            return None
        head_text = source[:body]  # the header, up to its body's first statement
        span = (0, body)
    else:
        found = positions.span(target)
        if found is None:
            return None
        span, head_text = found, source
    cut = _cut(head_text, span, target, positions)
    if cut is None:
        return None
    kind, inner, items, head = cut
    into_body = is_def and side.span[1] > header_end(node)  # type: ignore[arg-type]
    return _Statement(
        start, end, indent, source, kind, span, inner, head, items, side.offset, into_body
    )


def _dedent(text: str, indent: str) -> str:
    """The statement's lines without its indent; whitespace-only lines as they are, as
    _merge_statements leaves them when it indents the result back (inside a string they
    are part of its value)."""
    out = []
    for line in pysyntax.source_lines(text):
        if not line.strip():
            out.append(line)
        elif line.startswith(indent):
            out.append(line[len(indent) :])
        else:
            raise ValueError("a line is indented less than its statement")
    return "".join(out)


class _Positions:
    """Offsets in a statement's dedented source of ast's positions (the statement starts at
    the file's line `first_line`, indented by `indent`; ast's columns count UTF-8 bytes)."""

    def __init__(self, source: str, first_line: int, indent: int) -> None:
        self.source, self.first_line, self.indent = source, first_line, indent
        self.lines = pysyntax.source_lines(source)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, column: int) -> Optional[int]:
        number = line - self.first_line
        if not 0 <= number < len(self.lines) or column < self.indent:
            return None
        try:
            before = self.lines[number].encode()[: column - self.indent].decode()
        except UnicodeDecodeError:
            return None
        return self.starts[number] + len(before)

    def span(self, node: ast.AST) -> Optional[tuple[int, int]]:
        first = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        last = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return (first, last) if first is not None and last is not None and first < last else None

    def text(self, node: ast.AST) -> str:
        found = self.span(node)
        return self.source[found[0] : found[1]] if found else ""


@dataclass(frozen=True)
class _Token:
    kind: int
    text: str
    start: int
    end: int


def _tokens(text: str, begin: int, end: int) -> Optional[list[_Token]]:
    """The tokens of text[begin:end] with offsets in `text`; None where it does not
    tokenize."""
    part = text[begin:end]
    starts = [0] + [match.end() for match in _NEWLINE.finditer(part)]
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(part).readline):
            if token.type in (tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                continue
            (row, column), (end_row, end_column) = token.start, token.end
            first = begin + starts[row - 1] + column
            found.append(
                _Token(token.type, token.string, first, begin + starts[end_row - 1] + end_column)
            )
    except (tokenize.TokenError, SyntaxError):
        return None
    return found


_Cut = tuple[str, tuple[int, int], list[_Item], str]


def _cut(text: str, span: tuple[int, int], target: ast.AST, at: _Positions) -> Optional[_Cut]:
    """(kind, where the items lie, the items, the head) of the container `target`, whose
    text is text[span]."""
    tokens = _tokens(text, *span)
    if not tokens:
        return None
    head = ""
    if isinstance(target, ast.Call):
        func = at.span(target.func)
        opener = next(
            (n for n, t in enumerate(tokens) if func and t.start >= func[1] and t.text == "("),
            None,
        )
        head = at.text(target.func)
        kind, nodes = "call", sorted([*target.args, *target.keywords], key=_position)
    elif isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names = [n for n, t in enumerate(tokens) if t.text == target.name]
        opener = names[0] + 1 if names else None
        kind, nodes = "params", []
    elif isinstance(target, ast.ImportFrom):
        imports = [n for n, t in enumerate(tokens) if t.text == "import"]
        opener = imports[0] + 1 if imports else None
        head = "." * target.level + (target.module or "")
        kind, nodes = "import", list(target.names)
    else:
        opener = 0
        kind = {ast.Dict: "dict", ast.Set: "set"}.get(type(target), "all")
        nodes = list(target.keys) if isinstance(target, ast.Dict) else target.elts  # type: ignore
    if opener is None or opener >= len(tokens):
        return None
    if tokens[opener].text in ("(", "[", "{"):
        region = _region(tokens, opener, bracketed=True)
        if region and isinstance(target, ast.Tuple) and region[0][1] != span[1] - 1:
            region = None  # `(a), b`: the brackets are the first item's
    else:
        region = None
    if region is None and (kind == "import" or isinstance(target, ast.Tuple)):
        region = _region(tokens, opener - 1, bracketed=False)  # without brackets
    if region is None:
        return None
    inner, groups = region
    protected = [found for node in _parts(target) if (found := at.span(node))]
    groups = _split(groups, protected)
    if groups is None:
        return None
    items = _items(kind, target, nodes, groups, text, at)
    return None if items is None else (kind, inner, items, head)


def _position(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _region(
    tokens: list[_Token], opener: int, bracketed: bool
) -> Optional[tuple[tuple[int, int], list[_Token]]]:
    """Where the items lie (after the opening bracket to the closing one; without brackets,
    after token `opener` to the end) and the tokens there at the items' own depth (commas)
    or deeper (everything else), comments and line breaks left out."""
    depth, inside = 0, []
    for token in tokens[opener + 1 :]:
        if token.kind == tokenize.OP and token.text in ")]}":
            if depth == 0:
                if not bracketed:
                    return None
                return (tokens[opener].end, token.start), inside
            depth -= 1
        if token.kind == tokenize.OP and token.text in "([{":
            depth += 1
        if token.kind not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            inside.append(
                token
                if depth or token.text != ","
                else _Token(_SEPARATOR, ",", token.start, token.end)
            )
    if bracketed or not inside:
        return None
    return (tokens[opener].end if opener >= 0 else tokens[0].start, inside[-1].end), inside


def _split(
    tokens: list[_Token], protected: list[tuple[int, int]]
) -> Optional[list[tuple[int, int]]]:
    """Each item's (start, end): the tokens between the separating commas (those outside
    every item's own syntax: a lambda's commas are its own). A trailing comma ends the
    last; None for an empty item."""
    protected = sorted(protected)
    starts = [start for start, _ in protected]
    reach = list(itertools.accumulate((end for _, end in protected), max))

    def separates(token: _Token) -> bool:
        if token.kind != _SEPARATOR:
            return False
        last = bisect.bisect_right(starts, token.start) - 1  # the last part starting before it
        return last < 0 or reach[last] <= token.start  # and no part reaching over it

    groups, current = [], []
    for token in tokens:
        if separates(token):
            if not current:
                return None
            groups.append((current[0].start, current[-1].end))
            current = []
        else:
            current.append(token)
    if current:
        groups.append((current[0].start, current[-1].end))
    return groups


def _parts(target: ast.AST) -> list[ast.AST]:
    """The nodes whose text holds no separating comma."""
    if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = target.args
        return [
            *arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
            *[arg for arg in (arguments.vararg, arguments.kwarg) if arg],
            *arguments.defaults, *[d for d in arguments.kw_defaults if d],
        ]  # fmt: skip
    if isinstance(target, ast.Call):
        return [*target.args, *target.keywords]
    if isinstance(target, ast.Dict):
        return [*[k for k in target.keys if k], *target.values]
    if isinstance(target, ast.ImportFrom):
        return list(target.names)
    return list(target.elts)  # type: ignore[attr-defined]


def _items(
    kind: str,
    target: ast.AST,
    nodes: list,
    groups: list[tuple[int, int]],
    text: str,
    at: _Positions,
) -> Optional[list[_Item]]:
    if kind == "params":
        return _parameters(target, groups, text)  # type: ignore[arg-type]
    if len(groups) != len(nodes):
        return None
    items = []
    for position, (node, (start, end)) in enumerate(zip(nodes, groups)):
        own = text[start:end]
        if kind == "import":
            key: tuple = ("alias", node.name, node.asname or "")
            items.append(_Item(start, end, own, "names", key, own, shown=node.name))
            continue
        if kind == "call":
            field = "args"
            value = node.value if isinstance(node, (ast.keyword, ast.Starred)) else node
            if isinstance(node, ast.keyword) and node.arg:
                key, shown = ("kw", node.arg), node.arg
            else:  # by position: a value, `*args` or `**kwargs`
                shown = at.text(value)
                key = ("pos", position, _norm(shown))
        elif kind == "dict":
            field, value = "elements", target.values[position]  # type: ignore[attr-defined]
            shown = at.text(value if node is None else node)
            key = ("item", "unpack", _norm(shown)) if node is None else ("key", _norm(shown))
        else:
            field = "elements"
            value = node.value if isinstance(node, ast.Starred) else node
            shown = at.text(value)
            key = ("item", type(node).__name__, _norm(shown))
        items.append(_Item(start, end, own, field, key, _norm(own), value, shown))
    return items


def _parameters(
    target: Union[ast.FunctionDef, ast.AsyncFunctionDef], groups: list[tuple[int, int]], text: str
) -> Optional[list[_Item]]:
    """A def's parameters: each named one with its field (positional-only, positional or
    keyword, keyword-only) and default; `/`, `*`, `*args` and `**kw` as fixed items."""
    arguments = target.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    named = iter([*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)])
    field = "posonly" if arguments.posonlyargs else "params"
    items = []
    for start, end in groups:
        own = text[start:end]
        stripped = "".join(own.split())
        if stripped == "/" or own.startswith("*"):
            rank = "/" if stripped == "/" else "**" if own.startswith("**") else "*"
            items.append(_Item(start, end, own, rank, (rank,), stripped))
            field = "params" if rank == "/" else "kwonly"
            continue
        found = next(named, None)
        if found is None:
            return None
        arg, default = found
        key = ("param", arg.arg)
        items.append(_Item(start, end, own, field, key, own, default, arg.arg, default is not None))
    return None if next(named, None) else items


# -- items ---------------------------------------------------------------------------------


def _keyed(items: Sequence[_Item]) -> Union[str, Keyed]:
    keyed: Keyed = {}
    for item in items:
        if item.key in keyed:
            return f"{_show(item.key)} appears twice on one side already"
        keyed[item.key] = item
    return keyed


def _norm(code: str) -> str:
    """What an expression means, formatting left out (its text when it is not one)."""
    try:
        return ast.dump(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return " ".join(code.split())


def _show(key: tuple) -> str:
    return {
        "kw": f"keyword {key[1]}",
        "alias": f"the import of {key[1]}",
        "param": f"parameter {key[1]}",
        "key": "a dict key",
    }.get(key[0], "an item")


def _merge(base: Keyed, ours: Keyed, theirs: Keyed) -> Union[str, list[_Pick]]:
    """Upstream's items in its order, each taking the patch's change when only the patch
    changed it; the patch's new items after the item they follow on its side."""
    refusal = _unmergeable(base, ours, theirs)
    if refusal:
        return refusal
    picks: list[_Pick] = []
    for key, item in ours.items():
        picked = _pick(key, item, base, theirs)
        if isinstance(picked, str):
            return picked
        if picked is not None:
            picks.append(picked)
    return _insert(picks, base, ours, theirs)


def _unmergeable(base: Keyed, ours: Keyed, theirs: Keyed) -> Optional[str]:
    positional = [[k for k in side if k[0] == "pos"] for side in (base, ours, theirs)]
    if positional[1] != positional[0] or positional[2] != positional[0]:
        return "a side changes the call's positional arguments"
    if [k for k in theirs if k in base] != [k for k in base if k in theirs]:
        return "the patch reorders the items"
    return _reworked(base, ours, theirs)


def _reworked(base: Keyed, ours: Keyed, theirs: Keyed) -> Optional[str]:
    """Upstream removed items where the patch adds some, or an item the patch changes."""
    removed = [key for key in base if key not in ours]
    if removed and any(key not in base for key in theirs):
        return f"upstream removes {_show(removed[0])} where the patch adds items"
    for key in removed:
        if key in theirs and theirs[key].code != base[key].code:
            return f"upstream removes {_show(key)}, which the patch changes"
    return None


def _pick(key: tuple, item: _Item, base: Keyed, theirs: Keyed) -> Union[None, str, _Pick]:
    """Upstream's item, the patch's version of it, None when the patch removed it."""
    changed_ours = key not in base or item.code != base[key].code
    if key in base and key not in theirs:
        if changed_ours:
            return f"the patch removes {_show(key)}, which upstream changed"
        if key[0] in ("alias", "param"):  # upstream's code may still use the name, or pass it
            return f"the patch removes {_show(key)}, next to upstream's changes"
        return None
    if key in theirs and theirs[key].code != item.code:
        changed_theirs = key not in base or theirs[key].code != base[key].code
        if changed_ours and changed_theirs:
            return (
                f"both sides change {_show(key)}"
                if key in base
                else f"both sides add {_show(key)}, differently"
            )
        if changed_theirs:
            return _Pick(key, theirs[key], "theirs")
    return _Pick(key, item, "ours")


def _insert(picks: list[_Pick], base: Keyed, ours: Keyed, theirs: Keyed) -> list[_Pick]:
    """The patch's new items, each after the item it follows on the patch's side."""
    keys = [pick.key for pick in picks]
    old = iter(picks)
    return [
        next(old) if key in keys else _Pick(key, theirs[key], "theirs")
        for key in pysyntax.with_additions(keys, base, ours, list(theirs))
    ]


def _problems(
    merged: dict[str, list[_Pick]], statements: dict[str, _Statement], facts: Facts
) -> Optional[str]:
    """Names the patch's new items read that upstream deleted; names imported twice."""
    base_keys = {item.key for item in statements["base"].items}
    for pick in (p for picks in merged.values() for p in picks):
        if pick.side == "theirs" and pick.key not in base_keys and pick.item.reads is not None:
            if bad := sorted(pysyntax.used_names(pick.item.reads) & facts.deleted):
                return f"the patch's code uses {', '.join(bad)}, which upstream deleted"
    if statements["ours"].kind == "import":
        names = [pick.key[2] or pick.key[1] for pick in merged["names"]]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            return f"the result would import {', '.join(twice)} twice"
    return None


# -- the result ----------------------------------------------------------------------------


def _render(statements: dict[str, _Statement], merged: dict[str, list[_Pick]]) -> Optional[str]:
    """Upstream's statement with the merged items. Between two items stays the text their
    side wrote after the first (its comma, comments, line break and indent), but after an
    item that ended its side's list: there, the comment on its line and upstream's
    separator; after the last, upstream's text up to its closing bracket."""
    ours = statements["ours"]
    picks = [_Pick(item.key, item, "ours") for item in ours.items if item.field in _FIXED]
    picks += [pick for field_picks in merged.values() for pick in field_picks]
    picks.sort(key=lambda pick: _RANKS.get(pick.item.field, 0))
    if not picks:
        return None
    model = ours if ours.items else statements["theirs"]
    text = model.source[model.inner[0] : model.items[0].start] if model.items else ""
    for number, pick in enumerate(picks):
        text += pick.item.text
        if number + 1 < len(picks):
            text += _between(pick, statements, model)
    if model.items:
        text += _last(picks[-1], statements, model)
    return ours.source[: ours.inner[0]] + text + ours.source[ours.inner[1] :]


def _own_gap(pick: _Pick, statements: dict[str, _Statement]) -> tuple[str, bool]:
    """The text the pick's side wrote after it, and whether it ended that side's list."""
    side = statements[pick.side]
    number = side.items.index(pick.item)
    return side.gap(number), number + 1 == len(side.items)


def _between(pick: _Pick, statements: dict[str, _Statement], model: _Statement) -> str:
    """The text after an item that another follows: its own where its side wrote one, or
    upstream's after the same item; after the last item of both, the comment on its line
    (with a comma) and the indent of upstream's separator."""
    gap, ended = _own_gap(pick, statements)
    if not ended:
        return gap
    keys = [item.key for item in model.items]
    if pick.key in keys[:-1]:
        return model.gap(keys.index(pick.key))
    count = len(model.items)
    separator = _plain(model.gap(count - 2)) if count > 1 else ", "  # nearest the end
    line, _ = _first_line(gap)
    if "\n" not in line or "\n" not in separator:
        return separator
    return "," + _line_end(line)[1] + separator.rsplit("\n", 1)[1]


def _last(pick: _Pick, statements: dict[str, _Statement], model: _Statement) -> str:
    """The text after the last item up to the closing bracket: upstream's, but the comment
    on the last item's line its own where upstream's last item is followed now."""
    tail = model.gap(len(model.items) - 1)
    line, rest = _first_line(tail)
    if pick.key == model.items[-1].key or "\n" not in line:
        return tail
    comma, _ = _line_end(line)
    own, _ = _first_line(_own_gap(pick, statements)[0])
    return ("," if comma else "") + (_line_end(own)[1] if "\n" in own else "\n") + rest


def _first_line(text: str) -> tuple[str, str]:
    cut = text.find("\n") + 1
    return (text[:cut], text[cut:]) if cut else (text, "")


def _line_end(line: str) -> tuple[bool, str]:
    """Whether the end of an item's line holds its comma, and that end without it."""
    code, mark, comment = line.partition("#")
    return "," in code, code.replace(",", "", 1) + mark + comment


def _plain(separator: str) -> str:
    """A separator without its comments and blank lines: its comma, line break and indent."""
    lines = separator.split("\n")
    if len(lines) == 1:
        return separator
    first = lines[0].split("#", 1)[0].rstrip()
    return first + "\n" + lines[-1]


def _reason(
    ours: _Statement, merged: dict[str, list[_Pick]], statements: dict[str, _Statement]
) -> str:
    base = {item.key for item in statements["base"].items}
    picks = [pick for field_picks in merged.values() for pick in field_picks]
    upstream = [p for p in picks if p.side == "ours" and p.key not in base]
    patch = [p for p in picks if p.side == "theirs" and p.key not in base]
    what = _what(ours)
    if upstream and patch:
        return f"both sides add {what}: upstream's {_names(upstream)} first, then the patch's {_names(patch)}"
    return f"the sides change different items of {what.split(' to ', 1)[-1]}: both kept"


def _what(statement: _Statement) -> str:
    line = statement.start + statement.offset + 1
    return {
        "params": f"parameters to the def at line {line}",
        "import": f"imported names to the import at line {line}",
        "call": f"keyword arguments to the call at line {line}",
        "all": "names to __all__",
        "dict": f"entries to the dict at line {line}",
        "set": f"entries to the set at line {line}",
    }[statement.kind]


def _names(picks: list[_Pick]) -> str:
    shown = [
        (
            str(pick.key[1])
            if pick.key[0] in ("kw", "alias", "param")
            else " ".join(pick.item.shown.split())[:30]
        )
        for pick in picks[:4]
    ]
    return ", ".join(shown) + (", ..." if len(picks) > 4 else "")
