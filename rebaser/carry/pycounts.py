"""How often a merged file may hold each named statement of its module's and classes' bodies,
for carry/pymerge.py's check of a fully resolved file.

git's clean part can hide a change from the structured merge: both sides moving the fields
around a third merges that field's deletion as both sides', and the hunk left reads as two
additions, one of them the field the other side deleted (it came back, exit 0). A field both
sides moved to different places, or added once each, was written twice. So the merged file's
count of each def, class, field, assignment and argparse flag is checked against a merge of
the three sides' counts, as git merges a change: what one side changes, a change both make
once.

Counting by name is ambiguous where one name stands several times: a property's getter,
setter and deleter, or overloads (different changes that leave the same count read as one
change made twice). There a def counts by its role: its decorators, an overload by its
signature; an edit to a def's signature or body keeps its role (a role made of the whole
header turned each edit into a deletion and an addition). A class one side renamed counts
under its base name, found by the members it shares with the class the side lacks.
"""

from __future__ import annotations

import ast
import collections
from typing import Optional

from rebaser.carry import pysyntax
from rebaser.carry.pystatements import label

Where = tuple[str, ...]  # the names of the classes around a body: () for the module's
Groups = dict[tuple[Where, tuple], list[ast.stmt]]  # (where, key_of) -> its statements
Roles = dict[Optional[tuple], list[ast.stmt]]  # one name's statements by role


def excess(text: str, base: str, ours: str, theirs: str) -> Optional[str]:
    """Why the merged `text` holds a named statement more often than the sides allow; None
    where it does not, or where a side does not parse."""
    try:
        merged, before, upstream, patch = (
            _groups(pysyntax.parse(t)) for t in (text, base, ours, theirs)
        )
    except (SyntaxError, ValueError):
        return None
    renames = {**_renamed(before, upstream), **_renamed(before, patch)}
    merged, upstream, patch = (_under_base_names(g, renames) for g in (merged, upstream, patch))
    classes = [{where for where, _ in side} for side in (before, upstream, patch)]
    for (where, key), found in merged.items():
        if key[0] not in ("name", "names", "flag") or not all(where in c for c in classes):
            continue  # known by its code, any edit makes it another key; or a new class
        sides = [side.get((where, key), []) for side in (before, upstream, patch)]
        several = max(map(len, sides)) > 1  # one name, several statements: each by its role
        problem = _over([_by_role(nodes, several) for nodes in (found, *sides)], where, key)
        if problem:
            return problem
    return None


def _by_role(nodes: list[ast.stmt], several: bool) -> Roles:
    """The statements of one name by role (None where the name stands once on every side)."""
    found: Roles = collections.defaultdict(list)
    for node in nodes:
        found[_role(node) if several else None].append(node)
    return found


def _over(sides: list[Roles], where: Where, key: tuple) -> Optional[str]:
    """Why the merged file (first) holds a role of a statement more often than a merge of
    the base's, upstream's and the patch's gives; None where it does not."""
    merged, before, upstream, patch = sides
    place = f" in class {'.'.join(where)}" if where else ""
    for role, found in merged.items():
        counts = [len(side.get(role, [])) for side in (before, upstream, patch)]
        # Upstream and the patch holding it as often is one change made by both, unless
        # their codes differ where it stood several times (each rebinding a name, `handler
        # = setup` and `handler = teardown`; two setters of one property are one too many).
        same = max(counts) < 2 or _codes(upstream.get(role, [])) == _codes(patch.get(role, []))
        if len(found) <= _merged_count(*counts, same=same):
            continue
        for side, deleted_by in ((counts[2], "the patch"), (counts[1], "upstream")):
            if side < counts[0]:
                return f"it would keep {label(key)}{place}, which {deleted_by} deletes"
        return f"it would write {label(key)}{place} {len(found)} times"
    return None


def _codes(nodes: list[ast.stmt]) -> collections.Counter:
    return collections.Counter(ast.dump(node) for node in nodes)


def _merged_count(base: int, ours: int, theirs: int, *, same: bool = True) -> int:
    """How often a merge writes a statement the base writes `base` times: what one side
    changes, a change both make once (`same`: the sides made the same change)."""
    if theirs == base:
        return ours
    if ours == base:
        return theirs
    if ours == theirs and same:
        return ours
    return max(0, ours + theirs - base)


def _role(node: ast.stmt) -> tuple:
    """What tells apart statements of one name: an overload's signature, a def's or class's
    decorators (a getter from its setter); nothing for others."""
    decorators = getattr(node, "decorator_list", None) or []
    if any(_names_overload(decorator) for decorator in decorators):
        return ("overload", ast.dump(node.args))  # type: ignore[attr-defined]
    return tuple(ast.dump(decorator) for decorator in decorators)


def _names_overload(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Name) and decorator.id == "overload") or (
        isinstance(decorator, ast.Attribute) and decorator.attr == "overload"
    )


def _groups(tree: ast.Module) -> Groups:
    """The statements of the module's body and of each class's body, by where they stand
    and their key_of()."""
    found: Groups = collections.defaultdict(list)
    bodies: list[tuple[Where, list[ast.stmt]]] = [((), tree.body)]
    while bodies:
        where, body = bodies.pop()
        for node in body:
            found[where, pysyntax.key_of(node)].append(node)
            if isinstance(node, ast.ClassDef):
                bodies.append(((*where, node.name), node.body))
    return found


def _renamed(before: Groups, side: Groups) -> dict[Where, Where]:
    """The classes `side` renamed, {new path: base path}: of the classes it lacks and those
    it adds under one parent (their nested classes left out), each new one paired with the
    lacking one that shares most of its members' names, if at least half of them."""
    members = collections.defaultdict(set)
    for groups in (before, side):
        for where, key in groups:
            members[where].add(key)
    had, has = ({where for where, _ in groups} for groups in (before, side))
    gone = [w for w in had - has if w and w[:-1] not in had - has]
    renames = {}
    for new in sorted(w for w in has - had if w and w[:-1] not in has - had):
        shared = {old: len(members[old] & members[new]) for old in gone if old[:-1] == new[:-1]}
        old = max(shared, key=shared.__getitem__, default=None)
        if old is not None and 2 * shared[old] >= min(len(members[old]), len(members[new])):
            renames[new] = old
            gone.remove(old)
    return renames


def _under_base_names(groups: Groups, renames: dict[Where, Where]) -> Groups:
    def based(where: Where) -> Where:
        for new, old in renames.items():
            if where[: len(new)] == new:
                return old + where[len(new) :]
        return where

    found: Groups = collections.defaultdict(list)
    for (where, key), nodes in groups.items():
        found[based(where), key].extend(nodes)
    return found
