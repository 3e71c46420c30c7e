"""How often a merged file may hold each named statement of its module's and classes' bodies,
for carry/pymerge.py's check of a fully resolved file.

git's clean part can hide a change from the structured merge: both sides moving the fields
around a third merges that field's deletion as both sides', and the hunk left reads as two
additions, one of them the field the other side deleted (it came back, exit 0). A field both
sides moved to different places, or added once each, was written twice. So the merged file's
count of each def, class, field, assignment and argparse flag is checked against a merge of
the three sides' counts, as git merges a change: what one side changes, a change both make
once.

Counting by name is ambiguous where one name stands several times (a property's getter,
setter and deleter; overloads; `handler = None` rebound later): there each statement counts
by its header (decorators and signature, or the whole assignment). A class one side renamed
is counted under its base name.
"""

from __future__ import annotations

import ast
import collections
import copy
from typing import Optional

from rebaser.carry import pysyntax
from rebaser.carry.pystatements import label

Where = tuple[str, ...]  # the names of the classes around a body: () for the module's
Counts = collections.Counter  # (where, key) -> how often


def excess(text: str, base: str, ours: str, theirs: str) -> Optional[str]:
    """Why the merged `text` holds a named statement more often than the sides allow; None
    where it does not, or where a side does not parse."""
    try:
        merged, before, upstream, patch = (
            _statements(pysyntax.parse(t)) for t in (text, base, ours, theirs)
        )
    except (SyntaxError, ValueError):
        return None
    renames = {**_renamed(before, upstream), **_renamed(before, patch)}
    merged, upstream, patch = (_under_base_names(s, renames) for s in (merged, upstream, patch))
    classes = [{where for where, _ in side} for side in (before, upstream, patch)]
    sides = [_by_name(side) for side in (merged, before, upstream, patch)]
    for where, key in sides[0]:
        if key[0] not in ("name", "names", "flag") or not all(where in c for c in classes):
            continue  # known by its code, any edit makes it another key; or a new class
        counts = [side[where, key] for side in sides]
        if max(counts[1:]) > 1:  # one name, several statements: each by its header
            named = [_by_header(side, where, key) for side in (merged, before, upstream, patch)]
            problem = _over(named, where, key)
        else:
            problem = _over([collections.Counter({None: n}) for n in counts], where, key)
        if problem:
            return problem
    return None


def _over(counts: list[Counts], where: Where, key: tuple) -> Optional[str]:
    """Why the merged count (first) of a statement exceeds the merge of the base's,
    upstream's and the patch's; None where it does not."""
    merged, before, upstream, patch = counts
    place = f" in class {'.'.join(where)}" if where else ""
    for header, count in merged.items():
        sides = before[header], upstream[header], patch[header]
        if count <= _merged_count(*sides):
            continue
        for side, deleted_by in ((sides[2], "the patch"), (sides[1], "upstream")):
            if side < sides[0]:
                return f"it would keep {label(key)}{place}, which {deleted_by} deletes"
        return f"it would write {label(key)}{place} {count} times"
    return None


def _merged_count(base: int, ours: int, theirs: int) -> int:
    """How often a merge writes a statement the base writes `base` times: what a side
    changes, the change both make once."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return max(0, ours + theirs - base)


Statement = tuple[Where, ast.stmt]


def _statements(tree: ast.Module) -> list[Statement]:
    """The statements of the module's body and of each class's body, by where they stand."""
    found: list[Statement] = []
    bodies: list[tuple[Where, list[ast.stmt]]] = [((), tree.body)]
    while bodies:
        where, body = bodies.pop()
        for node in body:
            found.append((where, node))
            if isinstance(node, ast.ClassDef):
                bodies.append(((*where, node.name), node.body))
    return found


def _by_name(statements: list[Statement]) -> Counts:
    return collections.Counter((where, pysyntax.key_of(node)) for where, node in statements)


def _by_header(statements: list[Statement], where: Where, key: tuple) -> Counts:
    """The statements of `key` at `where`, each by its code without its body (a def's
    decorators and signature, an assignment whole)."""
    found: Counts = collections.Counter()
    for at, node in statements:
        if at == where and pysyntax.key_of(node) == key:
            header = copy.copy(node)
            if hasattr(header, "body"):
                header.body = []
            found[ast.dump(header)] += 1
    return found


def _renamed(before: list[Statement], side: list[Statement]) -> dict[Where, Where]:
    """A class `side` renamed: {its new path: its base path}, where the one class path the
    side lacks and the one it adds (their nested classes left out) share their parent."""
    had, has = ({where for where, _ in s} for s in (before, side))
    gone = [w for w in had - has if w and w[:-1] not in had - has]
    new = [w for w in has - had if w and w[:-1] not in has - had]
    if len(gone) == 1 and len(new) == 1 and gone[0][:-1] == new[0][:-1]:
        return {new[0]: gone[0]}
    return {}


def _under_base_names(statements: list[Statement], renames: dict[Where, Where]) -> list[Statement]:
    def based(where: Where) -> Where:
        for new, old in renames.items():
            if where[: len(new)] == new:
                return old + where[len(new) :]
        return where

    return [(based(where), node) for where, node in statements]
