"""The statements of one list (a module, a class body, a function body, a block), merged by
identity for carry/pymerge.py.

Each statement is known by what it defines (a def, class, field or assignment by its name),
an import by what it imports, an argparse call by its flag, anything else by its code; the
three sides' lists are merged on those keys: upstream's order, the patch's changes to items
upstream left as they were, the patch's new items after the item they follow on its side
(and after upstream's own additions there). What is refused, and why, is in `_refusal`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Optional, Union

from rebaser.carry import pysyntax
from rebaser.carry.pysyntax import Child, Facts, Key, Lines, Place, Side

Keyed = dict[Key, Child]
Outcome = Union[str, tuple[int, int, Lines, str]]
WHO = {"ours": "upstream", "theirs": "the patch"}


@dataclass
class _Item:
    key: Key
    child: Child
    side: str


def keyed(place: Place) -> Keyed:
    """The place's statements by key (a key met again gets its count: `x = 1` twice)."""
    seen: dict[Key, int] = {}
    found = {}
    for child in place.children:
        key = pysyntax.key_of(child.node)
        seen[key] = seen.get(key, 0) + 1
        found[(*key, str(seen[key]))] = child
    return found


class StatementMerge:
    """The three sides' statements of one place, and how each side changed those the hunk
    touches: none, format (the same code written differently, or moved), semantic."""

    def __init__(self, places: dict[str, Place], sides: dict[str, Side]) -> None:
        self.places, self.sides = places, sides
        self.keyed = {name: keyed(place) for name, place in places.items()}
        touched = dict.fromkeys(  # in the files' order, so reasons read the same every run
            key
            for name in ("base", "ours", "theirs")
            for key, child in self.keyed[name].items()
            if pysyntax.overlaps(child, sides[name].span)
        )
        self.changes = {key: self._change(key) for key in touched}

    def merge(self, facts: Facts) -> Outcome:
        """(first line, end, the new lines, reason) in upstream's lines, or why not."""
        refusal = (
            self._shared_line() or self._uncountable(facts) or self._refusal() or self._lost_words()
        )
        if refusal:
            return refusal
        order = _order(self.keyed["base"], self.keyed["ours"], self.keyed["theirs"])
        if isinstance(order, str):
            return order
        items = [item for item in order if item is not None]
        problem = self._problem(items, facts)
        if problem:
            return problem
        text = self._text(items)
        start, end = self.places["ours"].span
        return start, end, pysyntax.source_lines(text), self._reason()

    def _text(self, items: list[_Item]) -> str:
        """The merged items' lines. An item the patch adds carries the comments above it on
        its side; where an item before it carries the same (a file's header above both
        sides' first new import), they are not written twice."""
        written: set[str] = set()
        parts = []
        for item in items:
            child = item.child
            first = pysyntax.first_line(child.node)
            leading = "".join(child.lines[child.start : first])
            added = item.side == "theirs" and item.key not in self.keyed["base"]
            if added and leading.strip() and leading in written:
                parts.append("".join(child.lines[first : child.end]))
            else:
                parts.append(child.text())
            if leading.strip():
                written.add(leading)
        return "".join(parts)

    def _change(self, key: Key) -> dict[str, str]:
        base = self.keyed["base"].get(key)
        found = {}
        for side in WHO:
            mine = self.keyed[side].get(key)
            if base is None and mine is None:
                found[side] = "none"
            elif base is None or mine is None or not mine.same_code(base):
                found[side] = "semantic"
            elif mine.text() == base.text():
                found[side] = "none"
            else:
                found[side] = "format"
        return found

    def _semantic(self, side: str) -> list[Key]:
        return [key for key, change in self.changes.items() if change[side] == "semantic"]

    def _shared_line(self) -> Optional[str]:
        """Statements on one line (`a = 1; b = 2`): each would carry the whole line."""
        for place in self.places.values():
            for before, child in zip(place.children, place.children[1:]):
                if pysyntax.first_line(child.node) < before.end:
                    return "statements share a line here: merged by line, it would be written twice"
        return None

    def _uncountable(self, facts: Facts) -> Optional[str]:
        """A statement the base writes more than once in one place, where a side adds or
        removes one of them: counted, the others' keys shift (upstream deleting the first
        of two `x = None` made the second look like the first, and the patch's edit went to
        it). The base's own file tells: a side's lines here hold other hunks too."""
        for key in self.changes:
            counts = {sum(k[:-1] == key[:-1] for k in keys) for keys in self.keyed.values()}
            if len(counts) > 1 and self._twice_in_base(key) and key[:-1] in facts.repeated:
                return f"{label(key)} is written more than once here, and not as often on each side"
        return None

    def _twice_in_base(self, key: Key) -> bool:
        """Whether the base's lines here hold two statements of this key with one code (the
        base's own file is asked only then)."""
        alike = [child for k, child in self.keyed["base"].items() if k[:-1] == key[:-1]]
        return any(a.same_code(b) for n, a in enumerate(alike) for b in alike[n + 1 :])

    def _refusal(self) -> Optional[str]:
        """Both sides change one item; upstream reworked the place; both change a place
        where order matters (unless the patch edits what upstream only moved or
        reformatted); or nobody changes meaning."""
        ours, theirs = self._semantic("ours"), self._semantic("theirs")
        both = [key for key in ours if key in theirs and not self._same_code(key)]
        if both:
            if both[0] not in self.keyed["base"]:
                return f"both sides add {label(both[0])}: the result would define it twice"
            return f"both sides change {label(both[0])}"
        reworked = self._reworked(ours, theirs)
        if reworked:
            return reworked
        if not ours and not theirs:
            return "neither side changes what the code does here: a conflict of formatting only"
        if (
            ours
            and theirs
            and not self._order_free(ours + theirs)
            and not self._edits_moved(theirs)
        ):
            where = self.places["ours"].describe(self.sides["ours"].offset)
            return f"both sides change code in {where}, where order matters"
        return None

    def _reworked(self, ours: list[Key], theirs: list[Key]) -> Optional[str]:
        """Upstream removed items where the patch adds some: a place upstream reworked (it
        may make those items another way now, e.g. flags from a config), not an insertion
        in an order-free list."""
        base, upstream = self.keyed["base"], self.keyed["ours"]
        removed = [key for key in ours if key in base and key not in upstream]
        removed = [key for key in removed if not _replaced(key, base, upstream)]  # not edits
        added = [key for key in theirs if key not in base]
        if removed and added:
            return (
                f"upstream removes {self.names(removed)} where the patch adds {self.names(added)}"
            )
        return None

    def _order_free(self, keys: list[Key]) -> bool:
        kinds = {pysyntax.kind_of(self.version(key).node) for key in keys}
        return pysyntax.order_free(self.places["ours"], kinds) or self._module_functions(keys)

    def _module_functions(self, keys: list[Key]) -> bool:
        """Functions of the module go in any order, as members of a class do, when the
        patch's read nothing of the module when they are defined (a decorator, a default or
        an annotation naming something defined further down fails on import) and the patch
        removes none (other modules may call it)."""
        if self.places["ours"].owner is not None:
            return False
        functions = (ast.FunctionDef, ast.AsyncFunctionDef)
        if not all(isinstance(self.version(key).node, functions) for key in keys):
            return False
        imported = {
            name
            for node in self.sides["ours"].tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for name in pysyntax.bound_by(node)
        }
        for key in self._semantic("theirs"):
            mine = self.keyed["theirs"].get(key)
            if mine is None or pysyntax.definition_time_names(mine.node) - imported:
                return False
        return True

    def _edits_moved(self, keys: list[Key]) -> bool:
        """Whether every item the patch changes is one upstream moved away or reformatted."""
        moved = self._moved("ours")
        return all(key in self.keyed["theirs"] and key in moved for key in keys)

    def _moved(self, side: str) -> set[Key]:
        """The items `side` moved away from the hunk or only reformatted."""
        mine, base = self.keyed[side], self.keyed["base"]
        return {
            key
            for key, change in self.changes.items()
            if key in mine
            and key in base
            and (
                change[side] == "format" or not pysyntax.overlaps(mine[key], self.sides[side].span)
            )
        }

    def _lost_words(self) -> Optional[str]:
        """Taking one side's version of an item loses the other side's formatting: fine for
        upstream's reformatting, never for a comment of either side, nor for the patch's own
        reformatting (that would be its change, lost)."""
        for key, change in self.changes.items():
            if change["theirs"] == "format" and change["ours"] == "semantic":
                return f"the patch only reformats or comments {label(key)}, which upstream changed"
            if change["ours"] == "format" and change["theirs"] == "semantic":
                base = self.keyed["base"][key].text()
                ours = self.keyed["ours"][key].text()
                if pysyntax.comments(ours) != pysyntax.comments(base):
                    return f"upstream changes the comments of {label(key)}, which the patch edits"
        return None

    def _same_code(self, key: Key) -> bool:
        ours, theirs = self.keyed["ours"].get(key), self.keyed["theirs"].get(key)
        return (ours is None) == (theirs is None) and (ours is None or ours.same_code(theirs))

    def version(self, key: Key) -> Child:
        for side in ("theirs", "ours", "base"):
            if key in self.keyed[side]:
                return self.keyed[side][key]
        raise KeyError(key)

    # -- what the merged list must not do ---------------------------------------------------

    def _problem(self, items: list[_Item], facts: Facts) -> Optional[str]:
        if pysyntax.is_enum(self.places["ours"]) and all(
            any(key not in self.keyed["base"] for key in self.keyed[side]) for side in WHO
        ):  # values both chose may be one (an alias), auto() numbers by order
            return "both sides add members to an enum"
        problem = self._defined_twice([item.key for item in items]) or self._imported_twice(items)
        if problem:
            return problem
        if pysyntax.is_dataclass(self.places["ours"]):
            problem = pysyntax.field_order_problem([item.child.node for item in items])
            if problem:
                return problem
        used: set[str] = set()
        for item in items:
            if item.side == "theirs" and self._changed_by_patch(item):
                used |= pysyntax.used_names(item.child.node)
        if bad := sorted(used & facts.deleted):
            return f"the patch's code uses {', '.join(bad)}, which upstream deleted"
        return None

    def _changed_by_patch(self, item: _Item) -> bool:
        base = self.keyed["base"]
        return item.key not in base or not item.child.same_code(base[item.key])

    def _defined_twice(self, keys: list[Key]) -> Optional[str]:
        """A name (or flag) the merged list defines more often than either side did."""
        merged = _counts(keys)
        ours, theirs = _counts(self.keyed["ours"]), _counts(self.keyed["theirs"])
        for name, count in merged.items():
            if count > max(ours.get(name, 0), theirs.get(name, 0)):
                return f"the result would define {label(name)} twice"
        return None

    def _imported_twice(self, items: list[_Item]) -> Optional[str]:
        """A name the merged imports bind more often than either side's imports did."""
        merged = _imported(item.child for item in items)
        ours = _imported(self.keyed["ours"].values())
        theirs = _imported(self.keyed["theirs"].values())
        twice = sorted(n for n, c in merged.items() if c > max(ours.get(n, 0), theirs.get(n, 0)))
        return f"the result would import {', '.join(twice[:3])} twice" if twice else None

    # -- the reason -------------------------------------------------------------------------

    def _reason(self) -> str:
        """One line: what each side did here."""
        base = self.keyed["base"]
        added = {side: [k for k in self._semantic(side) if k not in base] for side in WHO}
        if added["ours"] and added["theirs"]:
            keys = added["ours"] + added["theirs"]
            kinds = sorted({pysyntax.kind_of(self.version(k).node) for k in keys})
            where = self.places["ours"].describe(self.sides["ours"].offset)
            return (
                f"both sides add {'/'.join(kinds)}s to {where}: upstream's "
                f"{self.names(added['ours'])} first, then the patch's {self.names(added['theirs'])}"
            )
        ours, theirs = self._semantic("ours"), self._semantic("theirs")
        if ours and theirs and not self._edits_moved(theirs):
            where = self.places["ours"].describe(self.sides["ours"].offset)
            return (
                f"the sides change different items of {where}, where order does not matter: "
                f"upstream's {self.names(ours)}, the patch's {self.names(theirs)}"
            )
        editor = "theirs" if self._semantic("theirs") else "ours"
        other = "ours" if editor == "theirs" else "theirs"
        edits = self._semantic(editor)
        changed = [key for key in edits if key in self.keyed[editor]] or edits
        return f"{WHO[other]} {self._quiet(other)}; {WHO[editor]}'s change to {self.names(changed)} applied"

    def _quiet(self, side: str) -> str:
        """What a side that changed no meaning here did: moved the items (where to) or
        reformatted them."""
        mine, base = self.keyed[side], self.keyed["base"]
        moved = [
            key
            for key in self.changes
            if key in mine
            and key in base
            and pysyntax.overlaps(base[key], self.sides["base"].span)
            and not pysyntax.overlaps(mine[key], self.sides[side].span)
        ]
        if moved:
            line = mine[moved[0]].node.lineno + self.sides[side].offset
            return f"moved {self.names(moved)} (now at line {line})"
        quiet = [k for k, c in self.changes.items() if c[side] == "format"]
        return f"only reformatted {self.names(quiet)}"

    def names(self, keys: list[Key]) -> str:
        shown = []
        for key in keys[:4]:
            if key[0] in ("name", "flag"):
                shown.append(label(key))
            else:
                code = ast.unparse(self.version(key).node).splitlines()[0]
                shown.append(f"`{code[:60]}`")
        return ", ".join(shown) + (", ..." if len(keys) > 4 else "")


def label(key: Key) -> str:
    kind, name = key[0], key[1]
    shown = {"name": name, "names": name.replace(",", ", "), "flag": f"flag {name}"}
    return shown.get(kind, "the same statement")


def _counts(keys: Iterable[Key]) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for key in keys:
        if key[0] == "names":  # an assignment of several names defines each of them
            counted = [("name", name) for name in key[1].split(",")]
        elif key[0] in ("name", "flag"):
            counted = [(key[0], key[1])]
        else:
            counted = []
        for name in counted:
            found[name] = found.get(name, 0) + 1
    return found


def _imported(children: Iterable[Child]) -> dict[str, int]:
    found: dict[str, int] = {}
    for child in children:
        if isinstance(child.node, (ast.Import, ast.ImportFrom)):
            for name in pysyntax.bound_by(child.node):
                found[name] = found.get(name, 0) + 1
    return found


# -- the order -----------------------------------------------------------------------------


def _order(base: Keyed, ours: Keyed, theirs: Keyed) -> Union[str, list[Optional[_Item]]]:
    """The merged list: upstream's order, the patch's additions after the item they follow
    on its side (after upstream's own additions there); None where an item went."""
    if [key for key in theirs if key in base] != [key for key in base if key in theirs]:
        return "the patch moves code here"
    items: list[Optional[_Item]] = []
    for key, child in ours.items():
        item = _upstreams_item(key, child, base, theirs)
        if isinstance(item, str):
            return item
        items.append(item)
    for key in theirs:
        if key in base and key not in ours and not theirs[key].same_code(base[key]):
            return f"upstream deleted {label(key)}, which the patch changes"
    return _insert_theirs(items, base, ours, theirs)


def _upstreams_item(key: Key, child: Child, base: Keyed, theirs: Keyed) -> Union[None, str, _Item]:
    """One of upstream's items in the merge: the patch's version when only the patch
    changed it; None when the patch removed it (and put something in its place)."""
    if key in base and key not in theirs:
        if not child.same_code(base[key]):
            return f"the patch deletes {label(key)}, which upstream changed"
        if not _replaced(key, base, theirs):  # upstream's code may still need it
            return f"the patch removes {label(key)}, next to upstream's changes"
        return None
    if key in theirs and key not in base and not theirs[key].same_code(child):
        return f"both sides add {label(key)}, differently"
    if key in base and key in theirs and child.same_code(base[key]):
        mine, before = theirs[key].text(), base[key].text()
        if not base[key].same_code(theirs[key]):
            return _Item(key, theirs[key], "theirs")
        if mine != before and child.text() == before:  # a comment, a layout: the patch's
            return _Item(key, theirs[key], "theirs")
        if mine != before and pysyntax.comments(mine) != pysyntax.comments(child.text()):
            return f"both sides reformat {label(key)}, and the patch comments it"
    return _Item(key, child, "ours")


def _replaced(key: Key, base: Keyed, theirs: Keyed) -> bool:
    """Whether the patch put something in place of an item it removed (an edit of a
    statement known by its code is a removal and an addition at one place)."""
    order = list(base)
    position = order.index(key)
    before = next((k for k in reversed(order[:position]) if k in theirs), None)
    after = next((k for k in order[position + 1 :] if k in theirs), None)
    mine = list(theirs)
    low = mine.index(before) + 1 if before is not None else 0
    high = mine.index(after) if after is not None else len(mine)
    return any(k not in base for k in mine[low:high])


def _insert_theirs(
    items: list[Optional[_Item]], base: Keyed, ours: Keyed, theirs: Keyed
) -> list[Optional[_Item]]:
    """The patch's new items, each after the item it follows on the patch's side."""
    keys = [item.key if item is not None else None for item in items]
    old = iter(items)
    return [
        next(old) if key is None or key in keys else _Item(key, theirs[key], "theirs")
        for key in pysyntax.with_additions(keys, base, ours, list(theirs))
    ]
