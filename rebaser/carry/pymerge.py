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
import collections
import functools
import re
from dataclasses import dataclass, field
from typing import Optional, Union

from rebaser.carry import linematch, pycontainers, pycounts, pyelements, pysyntax
from rebaser.carry.pystatements import StatementMerge
from rebaser.carry.pysyntax import Facts, Lines, ModuleNames, Place, Side


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
    for line in pysyntax.source_lines(text):
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
    hunks: Optional[int] = None,
) -> Merged:
    """Resolve what can be resolved of the hunks in `diff3` (git merge-file --diff3 of the
    three files); the others stay, as diff3 hunks. `hunks`: how many git counted (its exit
    status): a file whose own lines look like markers (a fixture in a string) reads as
    more, and is left as git made it."""
    segments = parse_diff3(diff3, marker_size)
    if hunks is not None and sum(isinstance(s, Region) for s in segments) != hunks:
        return Merged(diff3, [], ["the file holds lines that look like conflict markers"])
    facts = Facts(base, ours, theirs, modules, path)
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
        problem = _whole_file(_render(segments), base, ours, theirs)
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


def _whole_file(text: str, base: str, ours: str, theirs: str) -> Optional[str]:
    """What the fully resolved file must not do that no single hunk showed."""
    problem = pysyntax.parses(text)
    if problem:
        return f"the merged file would not compile ({problem})"
    counted = pycounts.excess(text, base, ours, theirs)
    if counted:
        return counted
    # Hunks resolved one by one: a def of upstream's in one and the patch's import of the
    # same name in another would shadow each other.
    merged, sides = _defined_at_top(text), [_defined_at_top(ours), _defined_at_top(theirs)]
    twice = sorted(n for n, c in merged.items() if c > max(side.get(n, 0) for side in sides))
    if twice:
        return f"the merged file would define or import {', '.join(twice[:3])} twice"
    lost = sorted(pysyntax.unbound(text) - pysyntax.unbound(ours))
    if lost:
        return f"the merged file would use {', '.join(lost[:3])} without defining or importing it"
    return None


def _defined_at_top(text: str) -> collections.Counter:
    """How often the module's own statements (not those in if/try blocks) def, class or
    import each name; nothing for a text that does not parse."""
    try:
        tree = pysyntax.parse(text)
    except (SyntaxError, ValueError):
        return collections.Counter()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return collections.Counter(
        name for node in tree.body if isinstance(node, kinds) for name in pysyntax.bound_by(node)
    )


def _line_of(segments: list[Segment], region: Region) -> int:
    line = 1
    for segment in segments:
        if segment is region:
            return line
        line += 1 if isinstance(segment, str) else len(segment.ours)
    return line


# -- one hunk ------------------------------------------------------------------------------


class _Whole:
    """The file with every hunk as upstream wrote it, parsed once while no hunk changes."""

    def __init__(self, segments: list[Segment]) -> None:
        self.lines = [
            line
            for segment in segments
            for line in ([segment] if isinstance(segment, str) else segment.ours)
        ]
        try:
            self.tree: Optional[ast.Module] = pysyntax.parse("".join(self.lines))
        except (SyntaxError, ValueError):
            self.tree = None
        self._reads: dict[int, list[str]] = {}

    @functools.cached_property
    def flags(self) -> dict[str, int]:
        return pysyntax.flag_counts(self.tree) if self.tree else {}

    def reads(self, node: ast.stmt) -> list[str]:
        """The names a def or class reads and does not bind (pysyntax.used_names), kept
        while the file does not change."""
        if id(node) not in self._reads:
            self._reads[id(node)] = sorted(pysyntax.used_names(node))
        return self._reads[id(node)]


@dataclass(frozen=True)
class _Hollow:
    """Lines of the file a window leaves out, `first` to `last`, with `stub` in their place
    (as many lines)."""

    first: int
    last: int
    stub: tuple[str, ...]


# Names the stub of a left-out body starts with: no code of the file holds them.
_STUB = "__forkkit_hollow_"


@dataclass(frozen=True)
class _Window:
    """The lines of the file a hunk is parsed in: `low` to `high`, less its `hollows`
    (outside the hunk). A narrowed window ends with the method that holds the hunk, the
    class's members before it blank lines (`depth` 2: the hunk's place must lie in the
    method): parsed, the rest of a 3,000-line class cost most of a hunk's time. A hunk among
    a module's (or a class's) statements is first parsed with the bodies of the defs and
    classes beside it left out, each a stub that reads the names it read."""

    low: int
    high: int
    hollows: tuple[_Hollow, ...] = ()
    depth: int = 0

    def lines(self, file: Lines, span: tuple[int, int], mine: Lines) -> Lines:
        """The window with `mine` in place of the file's lines `span`."""
        return self._cut(file, self.low, span[0]) + mine + self._cut(file, span[1], self.high)

    def _cut(self, file: Lines, start: int, stop: int) -> Lines:
        out: Lines = []
        for hollow in (h for h in self.hollows if start <= h.first < stop):
            out += file[start : hollow.first] + list(hollow.stub)
            start = hollow.last
        return out + file[start:stop]

    def restored(self, file: Lines, result: Lines, span: tuple[int, int]) -> Optional[Lines]:
        """The file with the window's `result` (upstream's side with `span` merged) in
        place; None when the result changed a stub or holds one elsewhere."""
        stubs = {line for hollow in self.hollows for line in hollow.stub if _STUB in line}
        if sum(1 for line in result if line in stubs) != len(stubs):
            return None  # a stub moved, copied or dropped
        shift = len(result) - (self.high - self.low)
        restored: Lines = []
        at = 0
        for hollow in self.hollows:
            first = hollow.first - self.low + (shift if hollow.first >= span[1] else 0)
            last = first + hollow.last - hollow.first
            if first < at or result[first:last] != list(hollow.stub):
                return None
            restored += result[at:first] + file[hollow.first : hollow.last]
            at = last
        return file[: self.low] + restored + result[at:] + file[self.high :]


def _windows(whole: _Whole, span: tuple[int, int], region: Region) -> list[_Window]:
    """Where to parse the hunk, the narrowest first: the top-level class or function whose
    body holds the hunk (parsed alone, it costs a fraction of the file), else the whole
    file; in a method of a top-level class, first the class with only that method; among a
    module's or a class's own statements, first without the bodies of the others."""
    assert whole.tree is not None
    inner = pysyntax.place_of(whole.tree, whole.lines, span, depth=2)
    if not inner.path:
        return _hollowed(whole, _Window(0, len(whole.lines)), whole.tree.body, span, region)
    top = pysyntax.children(whole.lines, whole.tree.body, 0)[inner.path[0][0]]
    wide = _Window(top.start, top.end)
    if not isinstance(top.node, ast.ClassDef):
        return [wide]
    if len(inner.path) < 2:
        return _hollowed(whole, wide, top.node.body, span, region)
    members = pysyntax.place_of(whole.tree, whole.lines, span, depth=1).children
    method = members[inner.path[1][0]]
    blank = _Hollow(members[0].start, method.start, ("\n",) * (method.start - members[0].start))
    return [_Window(top.start, method.end, (blank,), depth=2), wide]


# A body shorter than this stays: its stub would save little parsing.
_HOLLOW_LINES = 8
# A line that starts a def or class, and the name it defines.
_DEFINES = re.compile(r"\s*(?:async\s+def|def|class)\s+(\w+)")


def _hollowed(
    whole: _Whole,
    window: _Window,
    statements: list[ast.stmt],
    span: tuple[int, int],
    region: Region,
) -> list[_Window]:
    """`window` with the bodies of the defs and classes among `statements` left out where
    they lie away from the hunk and no side's hunk defines their name (a def one side moved
    must stay the same code as its other copy), then `window` itself; or `window` alone
    where none is."""
    named = {
        match.group(1)
        for line in region.ours + region.base + region.theirs
        if (match := _DEFINES.match(line))
    }
    hollows = []
    for node in statements:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name in named:
            continue
        first, last = pysyntax.first_line(node.body[0]), node.end_lineno or node.lineno
        if not pysyntax.body_starts_a_line(whole.lines, node) or last - first < _HOLLOW_LINES:
            continue
        if span[0] <= last and first <= span[1]:
            continue
        line = whole.lines[first]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        reads = ", ".join([f"{_STUB}{first}__", *whole.reads(node)])
        stub = ("\n",) * (last - first - 1) + (f"{indent}[{reads}]\n",)
        hollows.append(_Hollow(first, last, stub))
    if not hollows:
        return [window]
    return [_Window(window.low, window.high, tuple(hollows)), window]


def _resolve(
    segments: list[Segment], region: Region, facts: Facts, whole: _Whole
) -> Union[str, tuple]:
    """(new segments, reason), or why the hunk stays a conflict."""
    _, span = _variant(segments, region, "ours")
    if whole.tree is None:
        return "upstream's side does not parse here"
    for window in _windows(whole, span, region):
        outcome = _resolve_in(window, span, segments, region, facts, whole)
        if outcome != _WIDER:
            break
    return outcome


# What a narrowed window cannot tell (the hunk reaches out of its method, a side does not
# parse without the class's other members, the result changed a stub, or a check failed
# where a left-out body might have decided it): the wider window is tried.
_WIDER = "\0the hunk reaches out of its window"


def _resolve_in(
    window: _Window,
    span: tuple[int, int],
    segments: list[Segment],
    region: Region,
    facts: Facts,
    whole: _Whole,
) -> Union[str, tuple]:
    narrowed = bool(window.hollows)
    sides = {}
    for name in ("ours", "base", "theirs"):
        mine = getattr(region, name)
        lines = window.lines(whole.lines, span, mine)
        try:
            tree = pysyntax.parse("".join(lines))
        except (SyntaxError, ValueError):
            return _WIDER if narrowed else _UNPARSABLE
        start = span[0] - window.low
        sides[name] = Side(name, lines, tree, (start, start + len(mine)), window.low)
    places = _places(sides)
    if narrowed and (isinstance(places, str) or len(places["ours"].path) < window.depth):
        return _WIDER
    if isinstance(places, str):
        return places
    merged = None
    if _one_statement(places, sides) and (held := pycontainers.held(places, sides)):
        merged = pyelements.merge(held, sides, facts)
    if merged is None:
        merged = StatementMerge(places, sides).merge(facts)
    if isinstance(merged, str):
        return merged
    start, end, new_lines, reason = merged
    ours = sides["ours"]
    result = ours.lines[:start] + new_lines + ours.lines[end:]
    problem = _check(result, sides, facts, whole)
    if problem:
        # What a body left out may hold (a name bound there only) can decide a check.
        return _WIDER if window.hollows and not window.depth else problem
    restored = window.restored(whole.lines, result, span)
    if restored is None:
        return _WIDER
    mapped = _map_back(segments, region, whole.lines, restored)
    return mapped if isinstance(mapped, str) else (mapped, reason)


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


def _places(sides: dict[str, Side]) -> Union[str, dict[str, Place]]:
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


def _one_statement(places: dict[str, Place], sides: dict[str, Side]) -> bool:
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


# -- the whole file ------------------------------------------------------------------------


def _check(lines: Lines, sides: dict[str, Side], facts: Facts, whole: _Whole) -> Optional[str]:
    """What the code with this hunk resolved must not do."""
    text = "".join(lines)
    lost = _lost_comment(text, sides)
    if lost:
        return f"the result would lose the comment {lost!r}"
    misplaced = _misplaced_comment(lines, sides)
    if misplaced:
        return misplaced
    problem = pysyntax.parses(text)
    if problem:
        return f"the result would not compile ({problem})"
    tree = pysyntax.parse(text)
    # A name the patch binds in another hunk of the file may still come: the whole file is
    # checked again once every hunk is resolved.
    lost = pysyntax.unbound(text) - pysyntax.unbound("".join(sides["ours"].lines))
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


def _lost_comment(text: str, sides: dict[str, Side]) -> Optional[str]:
    """A comment a side adds in the hunk that the result lacks (one after the last statement
    of a place, or on an item the merge rewrote, belongs to none of the items merged)."""
    before = collections.Counter(_comment_parts(sides["base"]))
    for name in ("ours", "theirs"):
        added = collections.Counter(_comment_parts(sides[name])) - before
        for part, count in added.items():
            if text.count(part) < count:
                return part
    return None


def _misplaced_comment(lines: Lines, sides: dict[str, Side]) -> Optional[str]:
    """A comment the result writes more often than either side (copied), or beside code no
    side writes it beside (moved): the item merge, reusing LibCST's commas, once carried
    comments to items nobody wrote them on; any merge's result is checked for it."""
    placed = [pysyntax.placed_comments(side.lines) for side in sides.values()]
    counts = [collections.Counter(comment for comment, _ in found) for found in placed]
    result = pysyntax.placed_comments(lines)
    for comment, count in collections.Counter(comment for comment, _ in result).items():
        if count > max(side[comment] for side in counts):
            return f"the result would write the comment {comment!r} {count} times"
    anchored = {pair for found in placed for pair in found}
    for comment, beside in result:
        if (comment, beside) not in anchored:
            return f"the result would move the comment {comment!r} beside {beside or 'nothing'}"
    return None


def _comment_parts(side: Side) -> list[str]:
    """From each `#` to its line's end, in the side's hunk: a `#` in a string too, which is
    then found in the result as well."""
    lines = side.lines[side.span[0] : side.span[1]]
    return [comment for comment, _ in pysyntax.placed_comments(lines)]


def _imports_deleted(tree: ast.Module, sides: dict[str, Side], facts: Facts) -> Optional[str]:
    """A name the patch's new imports take from a module of the repository that upstream's
    side does not have."""
    if facts.modules is None:
        return None
    before = {
        ast.dump(node)
        for node in pysyntax.statements(sides["ours"].tree)
        if isinstance(node, ast.ImportFrom)
    }
    for node in pysyntax.statements(tree):
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
    # Another hunk with no lines on upstream's side (upstream deleted what the patch edits)
    # has none in `before`: it stays where it was, between the same two lines.
    empty: dict[int, list[Segment]] = {}
    for number, segment in enumerate(segments):
        if isinstance(segment, str):
            owner.append(number)
        elif segment is not region and not segment.ours:
            empty.setdefault(len(owner), []).append(segment)
        else:
            owner.extend([number if segment is region else -1 - number] * len(segment.ours))
    result: list[Segment] = []
    for tag, i1, i2, j1, j2 in linematch.opcodes(before, after):
        sources = owner[i1:i2]
        touched = tag != "equal" and any(i1 <= at <= i2 for at in empty)
        if touched or (
            tag != "equal" and any(source is not None and source < 0 for source in sources)
        ):
            return "the resolution would change another conflict hunk"
        if tag == "equal":
            result.extend(_copy(segments, region, sources, after[j1:j2], empty, i1))
        else:
            result.extend(after[j1:j2])
    result.extend(empty.pop(len(before), []))
    return result


def _copy(
    segments: list[Segment],
    region: Region,
    sources,
    lines: Lines,
    empty: dict[int, list[Segment]],
    first: int,
) -> list[Segment]:
    """Lines that stay as they were: other hunks go back as hunks (once each), the empty
    ones (`empty`, by the line of `before` they precede) before their line."""
    copied: list[Segment] = []
    for at, (source, line) in enumerate(zip(sources, lines), start=first):
        copied.extend(empty.pop(at, []))
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
