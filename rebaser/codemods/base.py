"""What every patch codemod shares: a LibCST `Codemod` bound to one upstream file, a
precise "anchor not found" error, and small helpers to find and build syntax.

A codemod's contract:
* it is a `libcst.codemod.Codemod` constructed with a `CodemodContext` (so LibCST's
  `CodemodTest` can test it) and sets NAME, PATH (the upstream file it edits) and
  DESCRIPTION; REQUIRES names the codemods whose change it builds on;
* it makes its patch's change by meaning (anchored on names, not line numbers);
* it is idempotent: on a tree that already has the change it returns the module unchanged;
* when its anchor is gone it raises `AnchorNotFound`, naming the anchor and the nearest
  candidates (renamed classes, moved functions) so a maintainer knows where to look.
"""

from __future__ import annotations

import difflib
from typing import Callable, ClassVar, Iterable, Optional, Sequence, Union

import libcst as cst
from libcst.codemod import Codemod

from rebaser.codemods.anchors import AnchorNotFound

Body = Union[cst.Module, cst.IndentedBlock]


class PatchCodemod(Codemod):
    """Makes one patch's change to one upstream file (subclasses set NAME, PATH, DESCRIPTION)."""

    NAME: ClassVar[str]
    PATH: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    REQUIRES: ClassVar[tuple[str, ...]] = ()  # run after these; their change must be there

    def missing(self, anchor: str, candidates: Iterable[str] = ()) -> AnchorNotFound:
        return AnchorNotFound(self.NAME, self.PATH, anchor, list(candidates)[:6])

    # -- finding ---------------------------------------------------------------------------

    def find_class(self, module: cst.Module, name: str) -> cst.ClassDef:
        classes = [node for node in module.body if isinstance(node, cst.ClassDef)]
        for node in classes:
            if node.name.value == name:
                return node
        raise self.missing(f"class {name}", nearest(name, [c.name.value for c in classes]))

    def find_function(self, body: Body, name: str, owner: str = "module") -> cst.FunctionDef:
        found = function_in(body, name)
        if found is not None:
            return found
        functions = [node.name.value for node in body.body if isinstance(node, cst.FunctionDef)]
        raise self.missing(f"function {name} in {owner}", nearest(name, functions))

    def find_method(self, module: cst.Module, class_name: str, name: str) -> cst.FunctionDef:
        owner = self.find_class(module, class_name)
        return self.find_function(owner.body, name, owner=f"class {class_name}")

    def find_statement(
        self,
        body: Body,
        matches: Callable[[cst.BaseStatement], bool],
        anchor: str,
        candidates: Iterable[str] = (),
    ) -> cst.BaseStatement:
        """The first statement directly in `body` that `matches`; else `AnchorNotFound` naming
        `anchor` and the `candidates` (a generator is only run when the anchor is missing)."""
        for statement in body.body:
            if matches(statement):
                return statement
        raise self.missing(anchor, candidates)


def function_in(body: Body, name: str) -> Optional[cst.FunctionDef]:
    """The function `name` defined directly in `body` (a module or a function's body)."""
    for node in body.body:
        if isinstance(node, cst.FunctionDef) and node.name.value == name:
            return node
    return None


def nearest(name: str, names: Iterable[str]) -> list[str]:
    names = sorted(set(names))
    close = difflib.get_close_matches(name, names, n=4, cutoff=0.5)
    return close or [n for n in names if n.split("_")[0] == name.split("_")[0]][:4]


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def mentions(node: cst.CSTNode, text: str) -> bool:
    return text in code(node)


def calls(node: cst.CSTNode, dotted: str) -> list[cst.Call]:
    """Every call in `node` whose callee is spelled `dotted` or ends with `.dotted`."""
    found: list[cst.Call] = []

    class _Collect(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            callee = code(call.func)
            if callee == dotted or callee.endswith("." + dotted):
                found.append(call)

    node.visit(_Collect())
    return found


def statements(source: str) -> list[cst.BaseStatement]:
    """Parse statements written at column 0 (re-indented by LibCST where they are placed)."""
    return [statement.visit(_UnindentBlankLines()) for statement in cst.parse_module(source).body]


def blank_line() -> cst.EmptyLine:
    return cst.EmptyLine(indent=False)


class _UnindentBlankLines(cst.CSTTransformer):
    """Blank lines carry no indentation (LibCST would indent them inside a block)."""

    def leave_EmptyLine(self, original: cst.EmptyLine, updated: cst.EmptyLine) -> cst.EmptyLine:
        return updated if updated.comment is not None else updated.with_changes(indent=False)


def param_names(function: cst.FunctionDef) -> list[str]:
    return [param.name.value for param in function.params.params]


def bound_names(function: cst.FunctionDef) -> set[str]:
    """Names a function binds: parameters and assignment targets (nested ones included)."""
    names = set(param_names(function))

    class _Collect(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            names.update(_target_names(node.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            names.update(_target_names(node.target))

    function.body.visit(_Collect())
    return names


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    return []


def has_keyword(call: cst.Call, keyword: str) -> bool:
    return any(arg.keyword is not None and arg.keyword.value == keyword for arg in call.args)


def add_keyword(call: cst.Call, keyword: str, value: str) -> cst.Call:
    """Append `keyword=value` to a call, laid out one argument per line."""
    new_arg = cst.Arg(
        keyword=cst.Name(keyword),
        value=cst.parse_expression(value),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    return _exploded_call(call, [*call.args, new_arg])


def append_param(function: cst.FunctionDef, source: str) -> cst.FunctionDef:
    """Append a parameter written as in a def (`name: T = default`), one per line."""
    param = cst.parse_statement(f"def _({source}): pass\n").params.params[0]  # type: ignore[attr-defined]
    params = [
        p.with_changes(whitespace_after_param=cst.SimpleWhitespace(""))
        for p in function.params.params
    ]
    params = _one_per_line([*params, param])
    return function.with_changes(
        whitespace_before_params=_ITEM_LINE, params=function.params.with_changes(params=params)
    )


def append_element(items: cst.Tuple, value: str) -> cst.Tuple:
    elements = _one_per_line([*items.elements, cst.Element(value=cst.parse_expression(value))])
    lpar = [paren.with_changes(whitespace_after=_ITEM_LINE) for paren in items.lpar]
    rpar = [paren.with_changes(whitespace_before=cst.SimpleWhitespace("")) for paren in items.rpar]
    return items.with_changes(elements=elements, lpar=lpar, rpar=rpar)


def append_import_name(node: cst.ImportFrom, name: str) -> cst.ImportFrom:
    """Add `name` to a `from x import (...)`, keeping the names sorted, one per line."""
    names = [alias for alias in node.names] if not isinstance(node.names, cst.ImportStar) else []
    new = cst.ImportAlias(name=cst.Name(name))
    at = sum(1 for alias in names if code(alias.name) < name)
    names = _one_per_line([*names[:at], new, *names[at:]])
    return node.with_changes(
        names=names,
        lpar=cst.LeftParen(whitespace_after=_ITEM_LINE),
        rpar=cst.RightParen(),
    )


# Line breaks for black's "magic trailing comma" layout. indent=True starts from the
# enclosing block's indentation, so items sit 4 spaces in and the closer lines up.
_ITEM_LINE = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace("    "))
_CLOSER_LINE = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))


def _one_per_line(items: list) -> list:
    laid = [item.with_changes(comma=cst.Comma(whitespace_after=_ITEM_LINE)) for item in items[:-1]]
    return [*laid, items[-1].with_changes(comma=cst.Comma(whitespace_after=_CLOSER_LINE))]


def _exploded_call(call: cst.Call, args: list[cst.Arg]) -> cst.Call:
    args = [arg.with_changes(whitespace_after_arg=cst.SimpleWhitespace("")) for arg in args]
    return call.with_changes(whitespace_before_args=_ITEM_LINE, args=_one_per_line(args))


def replace_in_body(
    body: Body, old: cst.CSTNode, new: Union[cst.CSTNode, Sequence[cst.CSTNode]]
) -> Body:
    """Replace one statement of a body with one or more statements."""
    replacement = list(new) if isinstance(new, (list, tuple)) else [new]
    items: list[cst.CSTNode] = []
    for statement in body.body:
        items.extend(replacement if statement is old else [statement])
    return body.with_changes(body=items)


def insert_before(
    body: Body, anchor: cst.CSTNode, new: Sequence[cst.BaseStatement], *, gap: bool = True
) -> Body:
    """Insert statements before `anchor`; its comments move above the inserted ones, and a
    blank line separates them from the anchor when `gap`."""
    leading = getattr(anchor, "leading_lines", ())
    first, *rest = new
    first = first.with_changes(leading_lines=[*leading, *getattr(first, "leading_lines", ())])
    moved = anchor.with_changes(leading_lines=[blank_line()] if gap else [])
    return replace_in_body(body, anchor, [first, *rest, moved])


def comment_lines(*texts: str) -> list[cst.EmptyLine]:
    return [cst.EmptyLine(comment=cst.Comment(f"# {text}")) for text in texts]
