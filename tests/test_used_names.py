"""pysyntax.used_names, the merge checks' names read and not bound, walked depth first
without the nodes that hold no name: the same answers as the walk of every node."""

from __future__ import annotations

import ast
import builtins
import collections
from pathlib import Path

import pytest

from rebaser.carry import pysyntax

ROOT = Path(__file__).resolve().parents[1]

GLOBALS = """\
x = 1
def f(a, *args, b: "Optional[Widget]" = None, **kw):
    global x
    y = x + a
    self.z, (p, q) = y, [w for w in args]
    def g():
        nonlocal y
        y = q
    return g
class C(Base, metaclass=Meta):
    field: "List[Item]" = []
    del field
"""


def walked(node: ast.AST) -> set[str]:
    """used_names as it read every node, in ast.walk's order (the reference). A `global`
    is a statement that binds nothing: the name it declares, bound, is the code's own."""
    loads, own = set(), set()
    queue = collections.deque([node])
    while queue:
        inner = queue.popleft()
        if isinstance(inner, ast.Name):
            (loads if isinstance(inner.ctx, ast.Load) else own).add(inner.id)
            continue
        if isinstance(inner, ast.arg):
            own.add(inner.arg)
        elif isinstance(inner, ast.stmt) and inner is not node:
            own |= bound(inner)
        if isinstance(inner, (ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign)):
            loads |= pysyntax._quoted_in(inner)
        queue.extend(ast.iter_child_nodes(inner))
    return loads - own - set(dir(builtins))


def bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    targets = {
        ast.Assign: lambda: node.targets,
        ast.AnnAssign: lambda: [node.target],
        ast.AugAssign: lambda: [node.target],
        ast.For: lambda: [node.target],
        ast.AsyncFor: lambda: [node.target],
    }.get(type(node), lambda: [])()
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def corpus() -> list[tuple[str, str]]:
    files = sorted((ROOT / "rebaser").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
    return [("globals", GLOBALS)] + [(str(f.relative_to(ROOT)), f.read_text()) for f in files]


@pytest.mark.parametrize("name, text", corpus(), ids=lambda value: value[:40])
def test_used_names_answers_as_the_walk_of_every_node(name, text):
    """Each module, and each def, class and statement in it (a stub's reads are a def's)."""
    tree = ast.parse(text)
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.stmt))]
    for node in nodes:
        assert pysyntax.used_names(node) == walked(node), (name, getattr(node, "lineno", 0))
        if isinstance(node, ast.stmt):
            assert pysyntax.bound_by(node) == bound(node), (name, node.lineno)


def test_the_corpus_first_module_is_not_trivially_answered():
    """Names in string annotations count as read; a name declared global or nonlocal and
    bound, and `self` in `self.z = ...` (as an assignment's target names it), are bound."""
    found = pysyntax.used_names(ast.parse(GLOBALS))
    assert found == {"Optional", "Widget", "List", "Item", "Base", "Meta"}, found
