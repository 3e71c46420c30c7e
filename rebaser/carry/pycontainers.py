"""Which container of items holds a conflict hunk inside one statement, told with `ast`:
a dict, set, call, `__all__` list, `from ... import` or a def's header. The item merge
(carry/pyelements.py) then cuts that container into its items.
"""

from __future__ import annotations

import ast
from typing import Optional, Union

from rebaser.carry import pysyntax
from rebaser.carry.pysyntax import Place, Side

_CONTAINERS = (ast.Dict, ast.Set, ast.Call, ast.List, ast.Tuple, ast.ImportFrom)
Held = tuple[ast.stmt, ast.AST]  # the statement holding the hunk, the container in it


def held(places: dict[str, Place], sides: dict[str, Side]) -> Optional[dict[str, Held]]:
    """Each side's statement holding its hunk and the container holding it there; None when
    a side has none. Each place has one child overlapping its side's hunk (the caller made
    sure: pymerge._one_statement)."""
    found = {}
    for name, place in places.items():
        child = next(c for c in place.children if pysyntax.overlaps(c, sides[name].span))
        target = _target(child.node, sides[name].span)
        if target is None:
            return None
        found[name] = (child.node, target)
    return found


def header_end(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> int:
    """The line (0-based) where a def's body begins: its first statement or decorator."""
    return pysyntax.first_line(node.body[0])


def _target(node: ast.stmt, span: tuple[int, int]) -> Optional[ast.AST]:
    """The smallest dict, set, call, `__all__` list or import holding the span, one whose
    own brackets do first (`Model(...).cuda()`: the inner call, though the outer spans the
    same lines); the def itself when the span lies in its header, or starts there and ends
    in its body."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
        header = header_end(node)
        if node.lineno - 1 <= span[0] and span[1] <= header:
            return node
        if node.lineno - 1 <= span[0] < header < span[1] <= (node.end_lineno or 0):
            return node
    holders = [
        inner
        for inner in ast.walk(node)
        if isinstance(inner, _CONTAINERS)
        and _holds(inner, span)
        and (not isinstance(inner, (ast.List, ast.Tuple)) or _is_all(node))
    ]
    if not holders:
        return None
    return min(
        holders, key=lambda n: (not _holds(n, span, own=True), (n.end_lineno or 0) - n.lineno)
    )


def _holds(node: ast.AST, span: tuple[int, int], own: bool = False) -> bool:
    """Whether the node's lines hold the span (`own`: those of a call's arguments, from
    the line its function ends on)."""
    first, last = node.lineno - 1, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    if own and isinstance(node, ast.Call):
        first = (node.func.end_lineno or node.func.lineno) - 1
    if span[0] == span[1]:
        return first < span[0] < last
    return first <= span[0] and span[1] <= last


def _is_all(node: ast.stmt) -> bool:
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
