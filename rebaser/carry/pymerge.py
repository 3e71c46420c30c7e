"""A syntax-aware merge for Python: the hunks git's line merge leaves in conflict that are
mechanical, resolved by what the code means.

git merges lines: where both sides changed neighbouring lines it stops, even when both only
added an import, a method or a dataclass field, or when one side edited a function the other
only moved or reformatted. For each conflict hunk of `git merge-file --diff3` this module
finds the place in the syntax tree (the deepest statement list holding the hunk, or a dict,
set, call, `__all__` or `from ... import` inside one statement) and merges that place's items
by identity (a def, class, field or assignment by its name, an import by what it imports, a
flag by the flag, anything else by its code):

* both sides add distinct items where order does not matter (imports anywhere; the members
  and fields of a class; argparse flags; dict and set entries, keyword arguments, `__all__`,
  imported names): upstream's items first, then the patch's, each under its own parent;
* one side edits an item the other only moved (in the same list) or reformatted (the same
  `ast` as before): the edit is applied where the item now is.

It errs on the side of caution and keeps the conflict whenever both sides change the same
item, the patch moves code, both sides add statements where order matters, or the result
would define a name twice (a class member, a dataclass field, a dict key, an import, an
argparse flag), use or import a name upstream deleted, put a dataclass field without a
default after one with one, or not compile. Every resolved hunk gets a one-line reason, every
kept one the reason it was kept.

`ours` is upstream's side (the branch being built), `theirs` the patch's, as in a cherry-pick.
"""

from __future__ import annotations

import ast
import difflib
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from rebaser.carry import pysyntax
from rebaser.carry.pysyntax import Child, Key, Lines, Place

# An in-repository module's top-level names on upstream's side (None: not in the repository
# or unknowable), for "does the patch import a name upstream deleted?": given the module as
# written (`a.b`, or `.b` relative to the file) and the importing file's path.
ModuleNames = Callable[[str, str], Optional[set[str]]]


@dataclass
class Region:
    """One conflict hunk of a diff3 merge, with git's marker lines."""

    ours: Lines
    base: Lines
    theirs: Lines
    markers: tuple[str, str, str, str]  # <<<<<<< ours, ||||||| base, =======, >>>>>>> theirs


Segment = Union[str, Region]


@dataclass
class Merged:
    text: str  # the file: resolved hunks as code, the others as conflict markers
    resolved: list[str] = field(default_factory=list)  # "line N: reason", one per hunk
    kept: list[str] = field(default_factory=list)  # "line N: why it stays a conflict"

    @property
    def clean(self) -> bool:
        return not self.kept


def parse_diff3(text: str, marker_size: int = 7) -> list[Segment]:
    """The lines and conflict hunks of `git merge-file --diff3` output."""
    signs = {"<": 0, "|": 1, "=": 2, ">": 3}
    segments: list[Segment] = []
    sections: Optional[list[Lines]] = None
    markers: list[str] = []
    for line in text.splitlines(keepends=True):
        sign = _marker(line, marker_size)
        if sign is not None and (
            signs[sign] == len(markers) if sections is not None else sign == "<"
        ):
            markers.append(line)
            if sign == "<":
                sections = [[], [], []]
            elif sign == ">":
                ours, base, theirs = sections  # type: ignore[misc]
                segments.append(Region(ours, base, theirs, tuple(markers)))  # type: ignore[arg-type]
                sections, markers = None, []
            continue
        if sections is None:
            segments.append(line)
        else:
            sections[len(markers) - 1].append(line)
    if sections is not None:  # an unfinished hunk: not git's output; keep it as text
        raise ValueError("unterminated conflict hunk")
    return segments


def _marker(line: str, size: int) -> Optional[str]:
    sign = line[:1]
    if sign in "<|=>" and line[:size] == sign * size and line[size : size + 1] in ("", " ", "\n"):
        if sign == "=" and line.rstrip("\n") != "=" * size:
            return None
        return sign
    return None


def merge(
    base: str,
    ours: str,
    theirs: str,
    diff3: str,
    *,
    marker_size: int = 7,
    modules: Optional[ModuleNames] = None,
    path: str = "",
) -> Merged:
    """Resolve what can be resolved of the hunks in `diff3` (git merge-file --diff3 of the
    three files); the others stay, as diff3 hunks."""
    segments = parse_diff3(diff3, marker_size)
    facts = _Facts(base, ours, theirs, modules, path)
    resolved, kept = [], []
    whole: Optional[_Whole] = None
    done: set[int] = set()
    while (region := _next_region(segments, done)) is not None:
        done.add(id(region))
        line = _line_of(segments, region)
        whole = whole or _Whole(segments)
        outcome = _resolve(segments, region, facts, whole)
        if outcome == _UNPARSABLE and (joined := _join_next(segments, region)) is not None:
            segments = joined  # the hunk with the next one, tried again
            continue
        if isinstance(outcome, str):
            kept.append(f"line {line}: {outcome.lstrip(chr(0))}")
        else:
            segments, reason = outcome
            resolved.append(f"line {line}: {reason}")
            whole = None  # the file changed
    if resolved and not kept:
        problem = _whole_file(_render(segments), ours)
        if problem:
            return Merged(diff3, [], [f"every hunk resolved, but {problem}"])
    return Merged(_render(segments), resolved, kept)


_UNPARSABLE = "\0a side does not parse with this hunk alone"


def _next_region(segments: list[Segment], done: set[int]) -> Optional[Region]:
    return next((s for s in segments if isinstance(s, Region) and id(s) not in done), None)


def _join_next(segments: list[Segment], region: Region) -> Optional[list[Segment]]:
    """The segments with this hunk and the next one (and the lines between them) made one
    hunk: a statement that two hunks cut through parses only whole. None when the next
    hunk is more than 20 lines away, or there is none."""
    at = next(n for n, s in enumerate(segments) if s is region)
    between: list[str] = []
    for later in segments[at + 1 :]:
        if isinstance(later, str):
            between.append(later)
            if len(between) > 20:
                return None
            continue
        joined = Region(
            region.ours + between + later.ours,
            region.base + between + later.base,
            region.theirs + between + later.theirs,
            region.markers,
        )
        return segments[:at] + [joined] + segments[at + 2 + len(between) :]
    return None


def _whole_file(text: str, ours: str) -> Optional[str]:
    """What the fully resolved file must not do that no single hunk showed."""
    problem = pysyntax.parses(text)
    if problem:
        return f"the merged file would not compile ({problem})"
    lost = sorted(pysyntax.unbound(ast.parse(text)) - pysyntax.unbound(ast.parse(ours)))
    if lost:
        return f"the merged file would use {', '.join(lost[:3])} without defining or importing it"
    return None


class _Facts:
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
        before, after = _names(self._texts[0]), _names(self._texts[1])
        return (before - after) if before is not None and after is not None else set()

    @functools.cached_property
    def patch_binds(self) -> set[str]:
        """Every name the patch's version of the file binds somewhere."""
        try:
            return pysyntax.all_bound(ast.parse(self._texts[2]))
        except (SyntaxError, ValueError):
            return set()


def _names(text: str) -> Optional[set[str]]:
    try:
        return pysyntax.module_names(ast.parse(text))
    except (SyntaxError, ValueError):
        return None


def _line_of(segments: list[Segment], region: Region) -> int:
    line = 1
    for segment in segments:
        if segment is region:
            return line
        line += 1 if isinstance(segment, str) else len(segment.ours)
    return line


# -- one hunk ------------------------------------------------------------------------------


@dataclass
class _Side:
    """The file with this hunk as one side wrote it (the other hunks as upstream's)."""

    name: str
    lines: Lines
    tree: ast.Module
    span: tuple[int, int]  # the hunk's lines
    offset: int = 0  # where these lines start in the file (a class or function parsed alone)


class _Whole:
    """The file with every hunk as upstream wrote it, parsed once while no hunk changes."""

    def __init__(self, segments: list[Segment]) -> None:
        self.lines = [
            line
            for segment in segments
            for line in ([segment] if isinstance(segment, str) else segment.ours)
        ]
        try:
            self.tree: Optional[ast.Module] = ast.parse("".join(self.lines))
        except (SyntaxError, ValueError):
            self.tree = None

    @functools.cached_property
    def flags(self) -> dict[str, int]:
        return pysyntax.flag_counts(self.tree) if self.tree else {}


def _window(whole: _Whole, span: tuple[int, int]) -> tuple[int, int]:
    """The lines of the top-level class or function whose body holds the hunk (parsed
    alone, it costs a fraction of the file), else the whole file."""
    assert whole.tree is not None
    inner = pysyntax.place_of(whole.tree, whole.lines, span, depth=1)
    if not inner.path:
        return 0, len(whole.lines)
    statement = pysyntax.children(whole.lines, whole.tree.body, 0)[inner.path[0][0]]
    return statement.start, statement.end


def _resolve(
    segments: list[Segment], region: Region, facts: _Facts, whole: _Whole
) -> Union[str, tuple]:
    """(new segments, reason), or why the hunk stays a conflict."""
    _, span = _variant(segments, region, "ours")
    if whole.tree is None:
        return "upstream's side does not parse here"
    low, high = _window(whole, span)
    sides = {}
    for name in ("ours", "base", "theirs"):
        mine = getattr(region, name)
        lines = whole.lines[low : span[0]] + mine + whole.lines[span[1] : high]
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return _UNPARSABLE
        sides[name] = _Side(name, lines, tree, (span[0] - low, span[0] - low + len(mine)), low)
    places = _places(sides)
    if isinstance(places, str):
        return places
    merged = None
    if _one_statement(places, sides):
        from rebaser.carry import pyelements  # LibCST takes 0.4 s to load: only when needed

        merged = pyelements.merge(places, sides, facts)
    if merged is None:
        merged = _merge_statements(places, sides, facts)
    if isinstance(merged, str):
        return merged
    start, end, new_lines, reason = merged
    ours = sides["ours"]
    result = ours.lines[:start] + new_lines + ours.lines[end:]
    problem = _check(result, sides, facts, whole)
    if problem:
        return problem
    result = whole.lines[:low] + result + whole.lines[high:]
    mapped = _map_back(segments, region, whole.lines, result)
    return mapped if isinstance(mapped, str) else (mapped, reason)


_WHO = {"ours": "upstream", "theirs": "the patch"}


def _variant(segments: list[Segment], region: Region, side: str) -> tuple[Lines, tuple[int, int]]:
    lines: Lines = []
    span = (0, 0)
    for segment in segments:
        if isinstance(segment, str):
            lines.append(segment)
        elif segment is region:
            start = len(lines)
            lines.extend(getattr(region, side))
            span = (start, len(lines))
        else:
            lines.extend(segment.ours)
    return lines, span


def _places(sides: dict[str, _Side]) -> Union[str, dict[str, Place]]:
    """The same place in the three files (the shallowest of the three, when one side's
    hunk reaches further out)."""
    found = {n: pysyntax.place_of(s.tree, s.lines, s.span) for n, s in sides.items()}
    depth = min(len(place.path) for place in found.values())
    found = {n: pysyntax.place_of(s.tree, s.lines, s.span, depth) for n, s in sides.items()}
    if len({place.path for place in found.values()}) != 1:
        return "the sides put this hunk in different places of the code"
    if not all(place.children for place in found.values()):
        return "no statement holds this hunk"
    return found


def _one_statement(places: dict[str, Place], sides: dict[str, _Side]) -> bool:
    """Whether every side's hunk lies inside one and the same statement of the place."""
    numbers = set()
    for name, place in places.items():
        touched = [
            n
            for n, child in enumerate(place.children)
            if pysyntax.overlaps(child, sides[name].span)
        ]
        if len(touched) != 1:
            return False
        numbers.add(touched[0])
    return len(numbers) == 1


# -- a statement list ----------------------------------------------------------------------


@dataclass
class _Item:
    key: Key
    child: Child
    side: str


def _keyed(place: Place) -> dict[Key, Child]:
    seen: dict[Key, int] = {}
    keyed = {}
    for child in place.children:
        key = pysyntax.key_of(child.node)
        seen[key] = seen.get(key, 0) + 1
        keyed[(*key, str(seen[key]))] = child
    return keyed


def _merge_statements(
    places: dict[str, Place], sides: dict[str, _Side], facts: _Facts
) -> Union[str, tuple[int, int, Lines, str]]:
    """The place's statements merged: (first line, end, the new lines, reason) of upstream's
    file, or why not."""
    keyed = {name: _keyed(place) for name, place in places.items()}
    base, ours, theirs = keyed["base"], keyed["ours"], keyed["theirs"]
    touched = {
        key
        for name, place in places.items()
        for key, child in keyed[name].items()
        if pysyntax.overlaps(child, sides[name].span)
    }
    changes = {key: _changes(key, keyed, sides) for key in touched}
    refusal = _refusal(changes, places["ours"], keyed, sides) or _lost_words(changes, keyed, sides)
    if refusal:
        return refusal
    order = _order(base, ours, theirs)
    if isinstance(order, str):
        return order
    texts = "".join(item.child.text(sides[item.side].lines) for item in order if item is not None)
    new_lines = texts.splitlines(keepends=True)
    names = [item.key for item in order if item is not None]
    duplicate = _defined_twice(names, keyed) or _imported_twice(order, keyed)
    if duplicate:
        return duplicate
    if pysyntax.is_dataclass(places["ours"]):
        nodes = [item.child.node for item in order if item is not None]
        problem = pysyntax.field_order_problem(nodes)
        if problem:
            return problem
    used = _patch_uses(order, keyed)
    if bad := sorted(used & facts.deleted):
        return f"the patch's code uses {', '.join(bad)}, which upstream deleted"
    start, end = places["ours"].span
    return start, end, new_lines, _reason(changes, places, keyed, sides)


def _changes(
    key: Key, keyed: dict[str, dict[Key, Child]], sides: dict[str, "_Side"]
) -> dict[str, str]:
    """How each side changed one item against the base: none, format (the same code
    written differently, or moved), semantic (other code, added or removed)."""
    base = keyed["base"].get(key)
    found = {}
    for side in ("ours", "theirs"):
        mine = keyed[side].get(key)
        if base is None and mine is None:
            found[side] = "none"
        elif base is None or mine is None or mine.code != base.code:
            found[side] = "semantic"
        elif mine.text(sides[side].lines) == base.text(sides["base"].lines):
            found[side] = "none"
        else:
            found[side] = "format"
    return found


def _refusal(
    changes: dict[Key, dict[str, str]],
    place: Place,
    keyed: dict[str, dict[Key, Child]],
    sides: dict[str, _Side],
) -> Optional[str]:
    both = [
        key
        for key, change in changes.items()
        if set(change.values()) == {"semantic"} and not _same_code(key, keyed)
    ]
    if both and both[0] not in keyed["base"]:
        return f"both sides add {_label(both[0])}: the result would define it twice"
    if both:
        return f"both sides change {_label(both[0])}"
    semantic = {
        side: [key for key, change in changes.items() if change[side] == "semantic"]
        for side in ("ours", "theirs")
    }
    if semantic["ours"] and semantic["theirs"]:
        kinds = {
            pysyntax.kind_of(_version(key, keyed).node)
            for key in semantic["ours"] + semantic["theirs"]
        }
        moved = _moved_by_ours(changes, keyed, sides)
        edits_moved = all(
            key in keyed["base"] and key in keyed["theirs"] and key in moved
            for key in semantic["theirs"]
        )
        if not pysyntax.order_free(place, kinds) and not edits_moved:
            return f"both sides change code in {place.describe()}, where order matters"
    if not semantic["ours"] and not semantic["theirs"]:
        return "neither side changes what the code does here: a conflict of formatting only"
    return None


def _moved_by_ours(
    changes, keyed: dict[str, dict[Key, Child]], sides: dict[str, _Side]
) -> set[Key]:
    """The items upstream moved away from this hunk or only reformatted."""
    return {
        key
        for key, change in changes.items()
        if key in keyed["ours"]
        and key in keyed["base"]
        and (
            change["ours"] == "format"
            or not pysyntax.overlaps(keyed["ours"][key], sides["ours"].span)
        )
    }


def _lost_words(
    changes: dict[Key, dict[str, str]], keyed: dict[str, dict[Key, Child]], sides: dict[str, _Side]
) -> Optional[str]:
    """Taking one side's version of an item loses the other side's formatting: fine for
    upstream's reformatting, never for a comment of either side, nor for the patch's own
    reformatting (that would be its change, lost)."""
    for key, change in changes.items():
        if change["theirs"] == "format" and change["ours"] == "semantic":
            return f"the patch only reformats or comments {_label(key)}, which upstream changed"
        if change["ours"] == "format" and change["theirs"] == "semantic":
            base = keyed["base"][key].text(sides["base"].lines)
            if pysyntax.comments(keyed["ours"][key].text(sides["ours"].lines)) != pysyntax.comments(
                base
            ):
                return f"upstream changes the comments of {_label(key)}, which the patch edits"
    return None


def _same_code(key: Key, keyed: dict[str, dict[Key, Child]]) -> bool:
    ours, theirs = keyed["ours"].get(key), keyed["theirs"].get(key)
    return (ours is None) == (theirs is None) and (ours is None or ours.code == theirs.code)


def _version(key: Key, keyed: dict[str, dict[Key, Child]]) -> Child:
    for side in ("theirs", "ours", "base"):
        if key in keyed[side]:
            return keyed[side][key]
    raise KeyError(key)


def _label(key: Key) -> str:
    kind, name = key[0], key[1]
    return {"name": f"{name}", "flag": f"flag {name}"}.get(kind, "the same statement")


def _order(
    base: dict[Key, Child], ours: dict[Key, Child], theirs: dict[Key, Child]
) -> Union[str, list[Optional[_Item]]]:
    """The merged list: upstream's order, the patch's additions after the item they follow
    on its side (after upstream's own additions there); None where an item went."""
    common = [key for key in theirs if key in base]
    if common != [key for key in base if key in theirs]:
        return "the patch moves code here"
    items: list[Optional[_Item]] = []
    for key, child in ours.items():
        if key in base and key not in theirs:
            if child.code != base[key].code:
                return f"the patch deletes {_label(key)}, which upstream changed"
            if not _replaced(key, base, theirs):  # upstream's code may still need it
                return f"the patch removes {_label(key)}, next to upstream's changes"
            items.append(None)
            continue
        if key in theirs and key not in base and theirs[key].code != child.code:
            return f"both sides add {_label(key)}, differently"
        use_theirs = (
            key in base
            and key in theirs
            and child.code == base[key].code
            and theirs[key].code != base[key].code
        )
        items.append(
            _Item(key, theirs[key] if use_theirs else child, "theirs" if use_theirs else "ours")
        )
    for key in theirs:
        if key in base and key not in ours and theirs[key].code != base[key].code:
            return f"upstream deleted {_label(key)}, which the patch changes"
    return _insert_theirs(items, base, ours, theirs)


def _replaced(key: Key, base: dict[Key, Child], theirs: dict[Key, Child]) -> bool:
    """Whether the patch put something in place of an item it removed (an edit of a
    statement that is known by its code is a removal and an addition at one place)."""
    order = list(base)
    position = order.index(key)
    before = next((k for k in reversed(order[:position]) if k in theirs), None)
    after = next((k for k in order[position + 1 :] if k in theirs), None)
    mine = list(theirs)
    low = mine.index(before) + 1 if before is not None else 0
    high = mine.index(after) if after is not None else len(mine)
    return any(k not in base for k in mine[low:high])


def _insert_theirs(
    items: list[Optional[_Item]],
    base: dict[Key, Child],
    ours: dict[Key, Child],
    theirs: dict[Key, Child],
) -> list[Optional[_Item]]:
    def after(position: int) -> int:  # past upstream's own additions right there
        while position < len(items) and (
            items[position] is None or (items[position].key not in base and items[position].key not in theirs)  # type: ignore[union-attr]
        ):
            position += 1
        return position

    where = {item.key: n for n, item in enumerate(items) if item is not None}
    cursor = after(0)
    for key, child in theirs.items():
        if key in ours or key in base:
            if key in where:
                cursor = after(where[key] + 1)
            continue
        items.insert(cursor, _Item(key, child, "theirs"))
        where = {item.key: n for n, item in enumerate(items) if item is not None}
        cursor += 1
    return items


def _defined_twice(names: list[Key], keyed: dict[str, dict[Key, Child]]) -> Optional[str]:
    """A name (or flag) the merged list defines more often than either side did."""

    def counts(keys) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for key in keys:
            if key[0] in ("name", "flag"):
                found[key[:2]] = found.get(key[:2], 0) + 1
        return found

    merged = counts(names)
    ours, theirs = counts(keyed["ours"]), counts(keyed["theirs"])
    for name, count in merged.items():
        if count > max(ours.get(name, 0), theirs.get(name, 0)):
            return f"the result would define {_label(name)} twice"
    return None


def _imported_twice(
    order: list[Optional[_Item]], keyed: dict[str, dict[Key, Child]]
) -> Optional[str]:
    """A name the merged imports bind more often than either side's imports did."""

    def counts(children) -> dict[str, int]:
        found: dict[str, int] = {}
        for child in children:
            if isinstance(child.node, (ast.Import, ast.ImportFrom)):
                for name in pysyntax.bound_by(child.node):
                    found[name] = found.get(name, 0) + 1
        return found

    merged = counts(item.child for item in order if item is not None)
    ours, theirs = counts(keyed["ours"].values()), counts(keyed["theirs"].values())
    twice = sorted(n for n, c in merged.items() if c > max(ours.get(n, 0), theirs.get(n, 0)))
    return f"the result would import {', '.join(twice[:3])} twice" if twice else None


def _patch_uses(order: list[Optional[_Item]], keyed: dict[str, dict[Key, Child]]) -> set[str]:
    """The names read by the code the patch brings to this place."""
    base = keyed["base"]
    used: set[str] = set()
    for item in order:
        if item is not None and item.side == "theirs":
            if item.key not in base or item.child.code != base[item.key].code:
                used |= pysyntax.used_names(item.child.node)
    return used


def _reason(changes, places, keyed, sides) -> str:
    """One line: what each side did here."""
    added = {
        side: [
            key
            for key, change in changes.items()
            if change[side] == "semantic" and key not in keyed["base"]
        ]
        for side in ("ours", "theirs")
    }
    where = places["ours"].describe()
    if added["ours"] and added["theirs"]:
        kinds = sorted(
            {pysyntax.kind_of(_version(k, keyed).node) for k in added["ours"] + added["theirs"]}
        )
        return (
            f"both sides add {'/'.join(kinds)}s to {where}: upstream's "
            f"{_names_of(added['ours'], keyed)} first, then the patch's {_names_of(added['theirs'], keyed)}"
        )
    edits = {side: [k for k, c in changes.items() if c[side] == "semantic"] for side in _WHO}
    editor = "theirs" if edits["theirs"] else "ours"
    other = "ours" if editor == "theirs" else "theirs"
    moved = [
        key
        for key in changes
        if key in keyed[other]
        and key in keyed["base"]
        and pysyntax.overlaps(keyed["base"][key], sides["base"].span)
        and not pysyntax.overlaps(keyed[other][key], sides[other].span)
    ]
    quiet = [k for k, c in changes.items() if c[other] == "format"]
    if moved:
        line = keyed[other][moved[0]].node.lineno + sides[other].offset
        did = f"moved {_names_of(moved, keyed)} (now at line {line})"
    else:
        did = f"only reformatted {_names_of(quiet, keyed)}"
    changed = [key for key in edits[editor] if key in keyed[editor]] or edits[editor]
    return f"{_WHO[other]} {did}; {_WHO[editor]}'s change to {_names_of(changed, keyed)} applied"


def _names_of(keys: list[Key], keyed: dict[str, dict[Key, Child]]) -> str:
    shown = []
    for key in keys[:4]:
        if key[0] in ("name", "flag"):
            shown.append(_label(key))
        else:
            code = ast.unparse(_version(key, keyed).node).splitlines()[0]
            shown.append(f"`{code[:60]}`")
    return ", ".join(shown) + (", ..." if len(keys) > 4 else "")


# -- the whole file ------------------------------------------------------------------------


def _check(lines: Lines, sides: dict[str, _Side], facts: _Facts, whole: _Whole) -> Optional[str]:
    """What the code with this hunk resolved must not do."""
    text = "".join(lines)
    problem = pysyntax.parses(text)
    if problem:
        return f"the result would not compile ({problem})"
    tree = ast.parse(text)
    # A name the patch binds in another hunk of the file may still come: the whole file is
    # checked again once every hunk is resolved.
    lost = pysyntax.unbound(tree) - pysyntax.unbound(sides["ours"].tree)
    if lost and (lost := sorted(lost - facts.patch_binds)):
        return f"the result would use {', '.join(lost[:3])} without defining or importing it"
    if "add_argument" in text:
        flags = whole.flags
        here = pysyntax.flag_counts(sides["ours"].tree)
        for flag, count in pysyntax.flag_counts(tree).items():
            total = flags.get(flag, 0) - here.get(flag, 0) + count
            if total > 1 and total > flags.get(flag, 0):
                return f"the result would add argparse flag {flag} twice"
    return _imports_deleted(tree, sides, facts)


def _imports_deleted(tree: ast.Module, sides: dict[str, _Side], facts: _Facts) -> Optional[str]:
    """A name the patch's new imports take from a module of the repository that upstream's
    side does not have."""
    if facts.modules is None:
        return None
    before = {
        ast.dump(node) for node in ast.walk(sides["ours"].tree) if isinstance(node, ast.ImportFrom)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or ast.dump(node) in before:
            continue
        module = "." * node.level + (node.module or "")
        names = facts.modules(module, facts.path)
        if names is None:
            continue
        missing = [a.name for a in node.names if a.name != "*" and a.name not in names]
        if missing:
            return f"the patch imports {', '.join(missing)} from {module}, which upstream deleted"
    return None


def _map_back(
    segments: list[Segment], region: Region, before: Lines, after: Lines
) -> Union[str, list[Segment]]:
    """The segments with the hunk resolved: `after` is upstream's variant of the file with
    the hunk's resolution (and maybe other lines changed, e.g. a moved function edited at its
    new place); no other hunk's lines may change."""
    owner: list[Optional[int]] = []  # for each line of `before`: the segment it comes from
    for number, segment in enumerate(segments):
        if isinstance(segment, str):
            owner.append(number)
        else:
            owner.extend([number if segment is region else -1 - number] * len(segment.ours))
    result: list[Segment] = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        sources = owner[i1:i2]
        if tag != "equal" and any(source is not None and source < 0 for source in sources):
            return "the resolution would change another conflict hunk"
        if tag == "equal":
            result.extend(_copy(segments, region, sources, after[j1:j2]))
        else:
            result.extend(after[j1:j2])
    return result


def _copy(segments: list[Segment], region: Region, sources, lines: Lines) -> list[Segment]:
    """Lines that stay as they were: other hunks go back as hunks (once each)."""
    copied: list[Segment] = []
    for source, line in zip(sources, lines):
        if source >= 0:
            copied.append(line)
        elif not copied or copied[-1] is not segments[-1 - source]:
            copied.append(segments[-1 - source])
    return copied


def _render(segments: list[Segment]) -> str:
    out = []
    for segment in segments:
        if isinstance(segment, str):
            out.append(segment)
        else:
            first, middle, equals, last = segment.markers
            out += [first, *segment.ours, middle, *segment.base, equals, *segment.theirs, last]
    return "".join(out)


def as_style(segments_text: str, marker_size: int, diff3: bool) -> str:
    """A merge's text with its hunks in git's default style (no base section, the lines
    both sides share moved out of the hunk), unless `diff3`."""
    if diff3:
        return segments_text
    out = []
    for segment in parse_diff3(segments_text, marker_size):
        if isinstance(segment, str):
            out.append(segment)
            continue
        ours, theirs = segment.ours, segment.theirs
        head = 0
        while head < min(len(ours), len(theirs)) and ours[head] == theirs[head]:
            head += 1
        tail = 0
        while tail < min(len(ours), len(theirs)) - head and ours[-1 - tail] == theirs[-1 - tail]:
            tail += 1
        first, _, equals, last = segment.markers
        out += ours[:head]
        out += [
            first,
            *ours[head : len(ours) - tail],
            equals,
            *theirs[head : len(theirs) - tail],
            last,
        ]
        out += ours[len(ours) - tail :]
    return "".join(out)
