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
setter and deleter, overloads, singledispatch registrations, a rebound module name
(different changes that leave the same count read as one change made twice). There each
statement counts by its role: a property's part, an overload's or a registration's
signature; other decorators, and edits to a signature or body, keep the role (a role made
of the whole header turned each edit into a deletion and an addition). Where a role stands
twice or more, the sides' statements added and removed are merged by their code. A class
one side renamed counts under its base name, found by the members it shares with the class
the side lacks. Seven review passes shaped these rules (docs/safety.md).
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
        roles = [_by_role(nodes, several) for nodes in (found, *sides)]
        problem = _over(_edits_kept(roles) if several else roles, where, key)
        if problem:
            return problem
    return None


def _by_role(nodes: list[ast.stmt], several: bool) -> Roles:
    """The statements of one name by role (None where the name stands once on every side)."""
    found: Roles = collections.defaultdict(list)
    for node in nodes:
        found[_role(node) if several else None].append(node)
    return found


def _edits_kept(roles: list[Roles]) -> list[Roles]:
    """The merged file's, the base's, upstream's and the patch's roles, where a side's one
    new role beside one of the base's roles it lacks is that role edited (an overload
    moved and given a parameter is still the overload the other side deleted), in the
    merged file too."""
    merged, before, upstream, patch = roles
    for side in (upstream, patch):
        gone = [role for role, nodes in before.items() if len(side.get(role, [])) < len(nodes)]
        new = [role for role in side if role not in before]
        if len(gone) == 1 and len(new) == 1 and _signed(gone[0]) == _signed(new[0]) != ():
            side[gone[0]] = side.get(gone[0], []) + side.pop(new[0])
            if new[0] in merged:
                merged[gone[0]] = merged.get(gone[0], []) + merged.pop(new[0])
    return roles


def _over(sides: list[Roles], where: Where, key: tuple) -> Optional[str]:
    """Why the merged file (first) holds a role of a statement more often than a merge of
    the base's, upstream's and the patch's gives; None where it does not. A role no side
    holds is one the merge made of both sides' edits to one statement (an overload's
    signature, each side changing a parameter): as many of those as the statements of
    this name both sides changed."""
    merged, before, upstream, patch = sides
    place = f" in class {'.'.join(where)}" if where else ""
    made: Optional[int] = None  # read only where needed: it reads every statement's code
    for role, found in merged.items():
        versions = [side.get(role, []) for side in (before, upstream, patch)]
        if not any(versions):
            made = _changed_by_both(before, upstream, patch) if made is None else made
            if len(found) <= made:
                made -= len(found)
                continue
        if len(found) <= _merged_count(*versions):
            continue
        counts = [len(nodes) for nodes in versions]
        for side, deleted_by in ((counts[2], "the patch"), (counts[1], "upstream")):
            if side < counts[0]:
                return f"it would keep {label(key)}{place}, which {deleted_by} deletes"
        return f"it would write {label(key)}{place} {len(found)} times"
    return None


def _merged_count(base: list[ast.stmt], ours: list[ast.stmt], theirs: list[ast.stmt]) -> int:
    """How often a merge writes a statement the base writes len(base) times. Where it stands
    once at most on every side, by count: what one side changes, a change both make once
    (two setters of one property are one too many). Else each side's statements added and
    removed, by their code, a change both make counted once (both deleting `x = 2` while
    upstream adds `x = 5`; each rebinding a name), as git's own merge of those lines counts
    them where they do not touch."""
    b, o, t = len(base), len(ours), len(theirs)
    if max(b, o, t) < 2:
        return o if t == b or o == t else t if o == b else max(0, o + t - b)
    before, mine, other = (_codes(nodes) for nodes in (base, ours, theirs))
    added = (mine - before) | (other - before)
    removed = (before - mine) | (before - other)
    return max(0, b + sum(added.values()) - sum(removed.values()))


def _changed_by_both(before: Roles, upstream: Roles, patch: Roles) -> int:
    """How many of the base's statements of one name both sides changed or removed."""
    base, mine, other = (
        _codes([n for nodes in side.values() for n in nodes]) for side in (before, upstream, patch)
    )
    return sum(((base - mine) & (base - other)).values())


def _codes(nodes: list[ast.stmt]) -> collections.Counter:
    return collections.Counter(ast.dump(node) for node in nodes)


def _role(node: ast.stmt) -> tuple:
    """What tells apart statements of one name: an overload's or a dispatch registration's
    signature, a property's part (`@property`, `@x.setter`); nothing else (a decorator
    each side adds, `@deprecated` or `@abc.abstractmethod`, leaves the statement's role)."""
    decorators = getattr(node, "decorator_list", None) or []
    signature = ast.dump(node.args) if isinstance(node, _DEFS) else ""
    role: tuple = ()
    for decorator in decorators:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _named(target, "overload"):
            return ("overload", signature)
        if _named(target, "register"):
            return ("register", ast.dump(decorator), signature)
        if _named(target, "property") or (
            isinstance(target, ast.Attribute) and _named(target.value, getattr(node, "name", ""))
        ):
            role += (ast.dump(decorator),)
    return role


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _signed(role: Optional[tuple]) -> tuple:
    """What an overload's or a registration's role is without its signature (which a side
    may edit); () for a role without one (a property's setter is never its deleter)."""
    return role[:-1] if role and role[0] in ("overload", "register") else ()


def _named(expression: ast.expr, name: str) -> bool:
    """`name` or `anything.name`."""
    return (isinstance(expression, ast.Name) and expression.id == name) or (
        isinstance(expression, ast.Attribute) and expression.attr == name
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
    it adds under one parent (their nested classes left out), the pairs that share the most
    members' names first, where they share at least half of the smaller class's; a class
    that shares as many with two others is paired with neither (two renamed classes alike
    would pair by chance)."""
    members = collections.defaultdict(set)
    for groups in (before, side):
        for where, key in groups:
            members[where].add(key)
    had, has = ({where for where, _ in groups} for groups in (before, side))
    gone = [w for w in had - has if w and w[:-1] not in had - has]
    new = [w for w in has - had if w and w[:-1] not in has - had]
    shared = {
        (added, old): len(members[old] & members[added])
        for added in new
        for old in gone
        if old[:-1] == added[:-1]
    }
    renames: dict[Where, Where] = {}
    for (added, old), count in sorted(shared.items(), key=lambda item: (-item[1], item[0])):
        if added in renames or old in renames.values():
            continue
        rivals = [n for (a, o), n in shared.items() if (a == added) != (o == old) and n == count]
        if not rivals and 2 * count >= min(len(members[old]), len(members[added])) > 0:
            renames[added] = old
    return renames


def _under_base_names(groups: Groups, renames: dict[Where, Where]) -> Groups:
    def based(where: Where) -> Where:
        """The path with every rename undone: one side's outer class and the other's inner
        one both (each rename applies once)."""
        left = dict(renames)
        while (found := next((n for n in left if where[: len(n)] == n), None)) is not None:
            where = left.pop(found) + where[len(found) :]
        return where

    found: Groups = collections.defaultdict(list)
    for (where, key), nodes in groups.items():
        found[based(where), key].extend(nodes)
    return found
