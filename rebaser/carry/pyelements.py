"""The items of one statement, merged with LibCST: dict and set entries, keyword arguments
of a call, the names of `__all__`, the names of a `from ... import`, the parameters of a
`def`.

Where a conflict hunk lies inside one statement, the deepest of these that holds it is
merged item by item (a dict entry by its key, an argument by its keyword, a name by its
name, a parameter by its name): both sides may add distinct items (upstream's first, then
the patch's) and change different ones. LibCST keeps every item's own text, so the result is
both sides' code with only the commas between items made consistent.

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
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import libcst as cst

from rebaser.carry import pysyntax
from rebaser.carry.pycontainers import Held, header_end
from rebaser.carry.pysyntax import Facts, Side

_KINDS = {ast.Dict: cst.Dict, ast.Set: cst.Set, ast.Call: cst.Call, ast.List: cst.List}
_FIELDS = {
    cst.Call: ("args",),
    cst.ImportFrom: ("names",),
    cst.Parameters: ("params", "kwonly_params"),
}
_CODE = cst.Module([]).code_for_node
_STUB = "    pass\n"  # the body of a def's header parsed alone
Keyed = dict[tuple, tuple[cst.CSTNode, str]]  # key -> (the item, its code without comma)
Outcome = Union[None, str, tuple[int, int, list[str], str]]


@dataclass
class _Statement:
    """One side's statement: its lines in the file, dedented, and the container of items
    that holds the hunk, parsed by LibCST: from the container's own text (`span` in
    `source`), or, for a def's parameters, with the def's header (`module`)."""

    start: int
    end: int
    indent: str
    source: str  # the statement's lines, dedented
    container: cst.CSTNode
    span: Optional[tuple[int, int]] = None  # where the container's text lies in `source`
    module: Optional[cst.Module] = None  # the parsed header, where `span` is None
    offset: int = 0  # where the lines `start` counts from begin in the file
    into_body: bool = False  # a def's parameters, the hunk running on into its body
    header: bool = False  # a def's header parsed alone, with _STUB for its body

    def fields(self) -> tuple[str, ...]:
        return _FIELDS.get(type(self.container), ("elements",))

    def items(self, name: str) -> Sequence[cst.CSTNode]:
        found = getattr(self.container, name)
        return () if isinstance(found, cst.ImportStar) else found

    def around(self) -> str:
        """The statement's code without the container's items, whitespace left out: what a
        side changed besides the items (the function called and the module imported from
        are the container's own)."""
        return " ".join(f"{self.spliced(chr(0))} {_head(self.container)}".split())

    def spliced(self, code: str) -> str:
        """The statement with `code` in place of the container's text."""
        if self.span is None:
            return self.source.replace(_CODE(self.container), code, 1)
        return self.source[: self.span[0]] + code + self.source[self.span[1] :]

    def fixed(self) -> list[str]:
        """A def's positional-only and star parameters (which the merge keeps as they are)."""
        container = self.container
        if not isinstance(container, cst.Parameters):
            return []
        parts = [*container.posonly_params, container.star_arg, container.star_kwarg]
        codes = [_CODE(part) if isinstance(part, cst.CSTNode) else "" for part in parts]
        return ["".join(code.replace(",", "").split()) for code in codes]


def _head(container: cst.CSTNode) -> str:
    """What a container holds besides its items: a call's function, an import's module."""
    if isinstance(container, cst.Call):
        return _CODE(container.func)
    if isinstance(container, cst.ImportFrom):
        return "." * len(container.relative) + (_CODE(container.module) if container.module else "")
    return ""


@dataclass
class _Pick:
    key: tuple
    item: cst.CSTNode
    side: str


def merge(held: dict[str, Held], sides: dict[str, Side], facts: Facts) -> Outcome:
    """(first line, end, new lines, reason) in upstream's file; a refusal; or None when
    LibCST finds no dict, set, call, `__all__`, import or parameter list of the statement
    holding the hunk (the statement merge then tries). `held`: pycontainers.held()."""
    # Every side's hunk in a def's header: LibCST parses the headers alone (on the real fork
    # a 300-line __init__, three times a merge, was most of a stop's LibCST time).
    headers = all(_in_header(node, target, sides[name]) for name, (node, target) in held.items())
    statements = {}
    for name, (node, target) in held.items():
        found = _statement(node, target, sides[name], headers)
        if found is None:
            return None
        statements[name] = found
    if len({type(s.container) for s in statements.values()}) != 1:
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
    lines = [ours.indent + line if line.strip() else line for line in pysyntax.source_lines(code)]
    return ours.start, ours.end, lines, _reason(ours, merged, statements)


def _merge_field(statements: dict[str, _Statement], field_name: str) -> Union[str, list[_Pick]]:
    keyed = {}
    for side, statement in statements.items():
        found = _keyed(statement.items(field_name))
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
        if getattr(pick.item, "default", None) is None:
            return f"a side adds positional parameter {pick.key[1]} without a default"
    return picks


# -- finding the container -----------------------------------------------------------------


def _in_header(node: ast.stmt, target: ast.AST, side: Side) -> bool:
    """Whether the hunk lies in the def's header and its body starts on a line of its own
    (so the header's lines parse alone)."""
    if not isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if node is not target or side.span[1] > header_end(target):
        return False
    return pysyntax.body_starts_a_line(side.lines, target)


def _statement(node: ast.stmt, target: ast.AST, side: Side, header: bool) -> Optional[_Statement]:
    """The statement's deepest container holding the hunk (`target`, in `ast`), in LibCST.
    `header`: a def's header alone, its body a stub (_render leaves the stub out)."""
    start, end = node.lineno - 1, node.end_lineno or node.lineno
    if header:
        end = header_end(target)  # type: ignore[arg-type]
    text = "".join(side.lines[start:end])
    indent = text[: len(text) - len(text.lstrip(" \t"))]
    try:
        source = _dedent(text, indent) + (_STUB if header else "")
    except ValueError:  # a line indented less: the statement merge's
        return None
    span, module = None, None
    if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):  # in the def's header
        try:
            module = cst.parse_module(source)
        except (cst.ParserSyntaxError, ValueError):
            return None
        defined = module.body[0] if module.body else None
        container = defined.params if isinstance(defined, cst.FunctionDef) else None
    else:
        span = _span(source, target, node.lineno, len(indent))
        container = _parsed(source[span[0] : span[1]], target) if span else None
    if container is None:
        return None
    into_body = isinstance(container, cst.Parameters) and side.span[1] > header_end(node)
    return _Statement(
        start, end, indent, source, container, span, module, side.offset, into_body, header
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


def _span(source: str, target: ast.AST, first_line: int, indent: int) -> Optional[tuple[int, int]]:
    """Where `target`'s text lies in the statement's dedented `source` (the statement starts
    at the file's line `first_line`, indented by `indent`; ast's columns count UTF-8 bytes)."""
    lines = pysyntax.source_lines(source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> Optional[int]:
        number = line - first_line
        if not 0 <= number < len(lines) or column < indent:
            return None
        try:
            before = lines[number].encode()[: column - indent].decode()
        except UnicodeDecodeError:
            return None
        return starts[number] + len(before)

    first = offset(target.lineno, target.col_offset)  # type: ignore[attr-defined]
    last = offset(target.end_lineno, target.end_col_offset)  # type: ignore[attr-defined]
    return (first, last) if first is not None and last is not None and first < last else None


def _parsed(text: str, target: ast.AST) -> Optional[cst.CSTNode]:
    """`target`'s own text parsed by LibCST as a node of its type (not the whole statement:
    the positions of a long statement's every node cost most of a merge's LibCST time),
    None where it does not give one whose code is that text. An expression is parsed inside
    parentheses, which it may need (a chained call's lines), then taken out of them."""
    kind = _KINDS.get(type(target), cst.Tuple if isinstance(target, ast.Tuple) else cst.ImportFrom)
    try:
        if kind is cst.ImportFrom:
            line = cst.parse_statement(text)
            parsed = line.body[0] if isinstance(line, cst.SimpleStatementLine) else None
        else:
            wrapped = cst.parse_expression(f"({text})")
            parsed = wrapped.with_changes(lpar=wrapped.lpar[1:], rpar=wrapped.rpar[:-1])
    except (cst.ParserSyntaxError, ValueError):
        return None
    return parsed if isinstance(parsed, kind) and _CODE(parsed) == text else None


# -- items ---------------------------------------------------------------------------------


def _keyed(items: Sequence[cst.CSTNode]) -> Union[str, Keyed]:
    keyed: Keyed = {}
    for position, item in enumerate(items):
        key = _key(item, position)
        if key in keyed:
            return f"{_show(key)} appears twice on one side already"
        bare = item.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        keyed[key] = (
            item,
            _CODE(bare) if isinstance(item, (cst.ImportAlias, cst.Param)) else _norm(_CODE(bare)),
        )
    return keyed


def _key(item: cst.CSTNode, position: int) -> tuple:
    if isinstance(item, cst.DictElement):
        return ("key", _norm(_CODE(item.key)))
    if isinstance(item, cst.Arg):
        return (
            ("kw", item.keyword.value)
            if item.keyword
            else ("pos", position, _norm(_CODE(item.value)))
        )
    if isinstance(item, cst.ImportAlias):
        # the name it binds (an AsName's code is " as z")
        return ("alias", _CODE(item.name), _CODE(item.asname.name) if item.asname else "")
    if isinstance(item, cst.Param):
        return ("param", item.name.value)
    return ("item", type(item).__name__, _norm(_CODE(getattr(item, "value", item))))


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
    for key, (item, code) in ours.items():
        picked = _pick(key, item, code, base, theirs)
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
        if key in theirs and theirs[key][1] != base[key][1]:
            return f"upstream removes {_show(key)}, which the patch changes"
    return None


def _pick(
    key: tuple, item: cst.CSTNode, code: str, base: Keyed, theirs: Keyed
) -> Union[None, str, _Pick]:
    """Upstream's item, the patch's version of it, None when the patch removed it."""
    changed_ours = key not in base or code != base[key][1]
    if key in base and key not in theirs:
        if changed_ours:
            return f"the patch removes {_show(key)}, which upstream changed"
        if key[0] in ("alias", "param"):  # upstream's code may still use the name, or pass it
            return f"the patch removes {_show(key)}, next to upstream's changes"
        return None
    if key in theirs and theirs[key][1] != code:
        changed_theirs = key not in base or theirs[key][1] != base[key][1]
        if changed_ours and changed_theirs:
            return (
                f"both sides change {_show(key)}"
                if key in base
                else f"both sides add {_show(key)}, differently"
            )
        if changed_theirs:
            return _Pick(key, theirs[key][0], "theirs")
    return _Pick(key, item, "ours")


def _insert(picks: list[_Pick], base: Keyed, ours: Keyed, theirs: Keyed) -> list[_Pick]:
    """The patch's new items, each after the item it follows on the patch's side."""
    keys = [pick.key for pick in picks]
    old = iter(picks)
    return [
        next(old) if key in keys else _Pick(key, theirs[key][0], "theirs")
        for key in pysyntax.with_additions(keys, base, ours, list(theirs))
    ]


def _problems(
    merged: dict[str, list[_Pick]], statements: dict[str, _Statement], facts: Facts
) -> Optional[str]:
    """Names the patch's new items read that upstream deleted; names imported twice."""
    base = statements["base"]
    base_keys = {_key(item, n) for name in base.fields() for n, item in enumerate(base.items(name))}
    for pick in (p for picks in merged.values() for p in picks):
        if pick.side == "theirs" and pick.key not in base_keys:
            if bad := sorted(_reads(pick.item) & facts.deleted):
                return f"the patch's code uses {', '.join(bad)}, which upstream deleted"
    if isinstance(statements["ours"].container, cst.ImportFrom):
        names = [pick.key[2] or pick.key[1] for pick in merged["names"]]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            return f"the result would import {', '.join(twice)} twice"
    return None


def _reads(item: cst.CSTNode) -> set[str]:
    """The names an item's value (or a parameter's default) reads."""
    value = getattr(item, "value", None) or getattr(item, "default", None)
    if not isinstance(value, cst.CSTNode):
        return set()
    try:
        return pysyntax.used_names(ast.parse(_CODE(value).strip(), mode="eval"))
    except SyntaxError:
        return set()


def _render(statements: dict[str, _Statement], merged: dict[str, list[_Pick]]) -> str:
    """Upstream's statement with the merged items, separated as upstream separates them."""
    ours = statements["ours"]
    changes = {name: _separated(picks, statements, name) for name, picks in merged.items()}
    replaced = ours.container.with_changes(**changes)
    if ours.module is None:
        return ours.spliced(_CODE(replaced))
    code = ours.module.deep_replace(ours.container, replaced).code  # type: ignore[union-attr]
    return code.removesuffix(_STUB) if ours.header else code


def _separated(
    picks: list[_Pick], statements: dict[str, _Statement], field_name: str
) -> list[cst.CSTNode]:
    """The items with commas: each keeps its own but the one that was last on its side
    (whose comma ends the list) takes one of the commas between upstream's items."""
    own = list(statements["ours"].items(field_name)) or list(statements["theirs"].items(field_name))
    lasts = {
        id(side.items(field_name)[-1]) for side in statements.values() if side.items(field_name)
    }
    separator = next(
        (item.comma for item in own[:-1] if isinstance(getattr(item, "comma", None), cst.Comma)),
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
    )
    trailing = own[-1].comma if own else cst.MaybeSentinel.DEFAULT  # type: ignore[attr-defined]
    items = []
    for number, pick in enumerate(picks):
        item = pick.item
        if number == len(picks) - 1:
            item = item.with_changes(comma=trailing)
        elif id(item) in lasts or not isinstance(getattr(item, "comma", None), cst.Comma):
            item = item.with_changes(comma=separator)
        items.append(item)
    return items


def _reason(
    ours: _Statement, merged: dict[str, list[_Pick]], statements: dict[str, _Statement]
) -> str:
    base = {
        _key(item, n)
        for name in ours.fields()
        for n, item in enumerate(statements["base"].items(name))
    }
    picks = [pick for field_picks in merged.values() for pick in field_picks]
    upstream = [p for p in picks if p.side == "ours" and p.key not in base]
    patch = [p for p in picks if p.side == "theirs" and p.key not in base]
    what = _what(ours)
    if upstream and patch:
        return f"both sides add {what}: upstream's {_names(upstream)} first, then the patch's {_names(patch)}"
    return f"the sides change different items of {what.split(' to ', 1)[-1]}: both kept"


def _what(statement: _Statement) -> str:
    line = statement.start + statement.offset + 1
    container = statement.container
    if isinstance(container, cst.Parameters):
        return f"parameters to the def at line {line}"
    if isinstance(container, cst.ImportFrom):
        return f"imported names to the import at line {line}"
    if isinstance(container, cst.Call):
        return f"keyword arguments to the call at line {line}"
    if isinstance(container, (cst.List, cst.Tuple)):
        return "names to __all__"
    kind = "dict" if isinstance(container, cst.Dict) else "set"
    return f"entries to the {kind} at line {line}"


def _names(picks: list[_Pick]) -> str:
    shown = []
    for pick in picks[:4]:
        if pick.key[0] in ("kw", "alias", "param"):
            shown.append(str(pick.key[1]))
        else:
            text = _CODE(getattr(pick.item, "key", None) or getattr(pick.item, "value", pick.item))
            shown.append(" ".join(text.split())[:30])
    return ", ".join(shown) + (", ..." if len(picks) > 4 else "")
