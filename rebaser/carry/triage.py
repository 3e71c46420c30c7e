"""A keep/drop proposal for every patch of a run that stopped, with a one-line reason, as a
fork's maintainer would decide when carrying the series by hand.

Drop a patch when
* upstream has it (`in upstream`);
* it is superseded: upstream, between the series' base and the target, added the same
  identifiers the patch adds (functions, classes, config fields, CLI flags, environment
  variables, test names); for a patch that stops, also when upstream already has most of
  the lines it adds, or an upstream commit touching its files names the same feature
  (subjects sharing words rare in upstream's history: "int4 qat", "tms cpu backup");
* it only follows up a patch proposed for drop: it is blocked on it, it is a fixup or
  revert of it, it names its pull request (#51), or it shares its topic ("dsv4: ...") and
  its files;
* it needs a path only a dropped patch creates (it packages a folder nobody else makes).

Keep it otherwise: applied as it is, merged (by git or the structured merge), or stopped on
a real conflict, named with the upstream commit it collides with (carry/collision.py) and
what that commit did, so the maintainer knows where to resolve it.
"""

from __future__ import annotations

import collections
import hashlib
import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Optional, Sequence


from rebaser.carry.collision import Bisector, touching
from rebaser.carry.difflines import file_lines, present_lines
from rebaser.carry.in_upstream import Memo
from rebaser.repo.git import Git, nameable
from rebaser.repo.history import RangeHistory
from rebaser.series.patches import Patch

KEEP, DROP, REVIEW = "keep", "drop", "review"

# kind -> (what a line must hold to define one: a cheap test before the expression, which
# most of a patch's lines fail; the expression).
_IDENTIFIERS = {
    "function": (("def",), re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")),
    "class": (("class",), re.compile(r"^\s*class\s+(\w+)")),
    "field": ((":",), re.compile(r"^ {4}(\w+)\s*:\s*[^=\n]+?(?:=|$)")),
    "flag": (("--",), re.compile(r"""['"](--[a-z0-9][a-z0-9-]+)['"]""")),
    "env var": (
        ("environ", "getenv"),
        re.compile(
            r"""(?:environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]|getenv\s*\()\s*['"]([A-Z][A-Z0-9_]+)['"]"""
        ),
    ),
}
# Words of a subject that say nothing about which feature it is.
_COMMON = frozenset(
    """a an the and or of for in on to from with by at as is be into onto via vs when not no
    don t use add adds added support supports fix fixes fixed feat feature init enable enables
    re apply reapply port migrate restore handle keep make new dev main core update bump
    chore refactor misc compat ci lint""".split()
)
_TYPES = frozenset(
    "feat fix docs style refactor perf test tests build ci chore revert compat packaging deps wip".split()
)
# Shared subject words must be rarer together than 1 in 100,000 of upstream's subjects: the
# sum of their log(N / (1 + df)) over upstream's whole history.
_RARE_ENOUGH = math.log(100_000)
_MOST_LINES = 2 / 3


@dataclass(frozen=True)
class Row:
    """What the triage needs of a patch's row."""

    patch: Patch
    status: str  # a StepStatus value
    detail: str
    conflicts: list[str] = field(default_factory=list)
    needs: Optional[str] = None  # a blocked patch: the number of the patch it needs

    def read(self) -> tuple:
        """What a verdict reads of the row (the detail only where it is the reason: a patch
        upstream has, _in_upstream)."""
        detail = self.detail if self.status == "in upstream" else ""
        return (self.patch.name, self.status, detail, tuple(self.conflicts), self.needs)


@dataclass
class Verdict:
    proposal: str
    reason: str
    collision: Optional[tuple[str, str, str]] = None  # sha, subject, what
    own_conflicts: list[str] = field(default_factory=list)  # a blocked patch's own


APPLIED = frozenset(
    {
        "clean",
        "offset",
        "3-way",
        "cherry-pick",
        "structured merge",
        "codemod",
        "resolution replayed",
        "manual",
    }
)
STOPPED = frozenset({"dropped", "blocked", "skipped", "failed"})


MemoFor = Callable[..., Memo]  # memo_for(kind, *key): an entry of the repository's memo


def remembered(
    memo_for: Optional[MemoFor],
    kind: str,
    key: Sequence[str],
    compute: Callable[[], Any],
    keep: Callable[[Any], bool] = lambda _: True,
) -> Any:
    """compute()'s answer (JSON), from the memo when an earlier command found it: `key`
    names everything it depends on (commit ids, file names, a patch's bytes' hash). An
    answer `keep` refuses (a failure) is asked again next time."""
    if memo_for is None:
        return compute()
    entry = memo_for(kind, *key)
    known = entry.load()
    if known is not None and set(known) == {"value"}:
        return known["value"]
    value = compute()
    if keep(value):
        entry.save({"value": value})
    return value


def history_of(repo: Git) -> str:
    """How much of its history a repository holds, for the memo's keys: answers about a
    range of a shallow clone (no ancestry, no commits before its boundary) change when it
    is deepened, so its boundary is part of what they depend on."""
    try:
        boundary = (repo.common_dir() / "shallow").read_bytes()
    except FileNotFoundError:
        return "full"
    return "shallow " + hashlib.sha1(boundary).hexdigest()


class Upstream:
    """What upstream did between the series' recorded base and the target, read from git
    once per triage: names defined on either side, subjects, the target's files.
    `base` and `target` are commit ids (`memo_for` keys answers by them and `history`);
    `threads`: each grep's, where work runs beside it (0: git's own choice, a thread a
    core, which on two cores costs a fifth more CPU than one)."""

    def __init__(
        self,
        repo: Git,
        base: str,
        target: str,
        memo_for: Optional[MemoFor] = None,
        threads: int = 0,
    ) -> None:
        self.repo, self.base, self.target, self.threads = repo, base, target, threads
        self.history = history_of(repo)
        # Upstream's history between them (PyPI releases are unrelated root commits: then
        # there is no commit to bisect to, nor commits that re-made a feature). A git error
        # (status 128) counts as unrelated, and is asked again next time.
        status = remembered(
            memo_for,
            "related",
            [base, target, self.history],
            lambda: repo.run("merge-base", "--is-ancestor", base, target, check=False).status,
            keep=lambda status: status in (0, 1),
        )
        self.related: bool = status == 0
        self.log = RangeHistory(repo, base, target)  # shared with the bisections

    def defined(
        self, rev: str, names: Sequence[str], paths: Optional[Collection[str]] = None
    ) -> Optional[dict[str, list[str]]]:
        """For each name, the files of `rev` (of `paths` only, if given) where it appears as
        a word; None when git cannot tell (its grep failed: no answer, not "none of them").
        One regular expression: git grep tries several -e patterns one by one on every line
        (minutes on Megatron-LM for 200 names), an alternation in one pass (a second)."""
        if not names or (paths is not None and not paths):  # no pathspec would be all files
            return {}
        pattern = "(" + "|".join(re.escape(name) for name in sorted(set(names))) + ")"
        threads = [f"--threads={self.threads}"] if self.threads else []
        grep = self.repo.run(
            "--literal-pathspecs", "grep", "-o", "-w", "-E", "-I", "-z", "--no-color", *threads,
            "-e", pattern, rev, "--", *sorted(paths or ()),
            check=False,
        )  # fmt: skip
        if grep.status not in (0, 1):  # 1: no match
            return None
        out = grep.stdout
        # A match a record, `<rev>:<file>\0<name>\n` (77,000 for a fork's names in
        # Megatron-LM): each (file, name) once. A name holds no newline; a file name may
        # hold any character but NUL, so a record is cut at NULs and its name's newline.
        found: dict[str, dict[str, None]] = {}
        fields = out.split("\0")
        where = fields[0]
        for part in fields[1:]:
            word, _, after = part.partition("\n")
            found.setdefault(word, {})[where.removeprefix(f"{rev}:")] = None
            where = after
        return {word: list(paths) for word, paths in found.items()}

    def changed(self) -> Optional[list[str]]:
        """The files upstream added, deleted or changed from the base to the target (a
        rename is a deletion and an addition); None when git cannot tell, or when a
        command line cannot name them (repo/git.py's nameable)."""
        listed = self.repo.run(
            "diff", "--name-only", "--no-renames", "-z", self.base, self.target, check=False
        )
        return nameable(listed.stdout) if listed.ok else None

    def adding(self, name: str, paths: Sequence[str]) -> Optional[tuple[str, str]]:
        """The first-parent upstream commit that added `name` to one of `paths`."""
        if not self.related:
            return None
        out = self.repo.run(
            "--literal-pathspecs",
            "log",
            "--first-parent",
            "--diff-merges=first-parent",
            "--reverse",
            "--format=%H%x09%s",
            f"-S{name}",
            f"{self.base}..{self.target}",
            "--",
            *paths,
            check=False,
        ).stdout.splitlines()
        return tuple(out[0].split("\t", 1)) if out else None  # type: ignore[return-value]

    def subjects_touching(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(sha, subject) of the upstream commits in range (merges left out) touching any."""
        return self.log.touching(paths) if self.related else []

    def word_rarity(self) -> tuple[collections.Counter, int]:
        """How many subjects of upstream's whole history hold each word."""
        subjects = self.repo.out("log", "--format=%s", self.target).splitlines()
        counts = collections.Counter(word for subject in subjects for word in set(words(subject)))
        return counts, max(len(subjects), 1)

    def texts(self, paths: Sequence[str]) -> dict[str, Optional[str]]:
        """The target's version of each file (None: it has none)."""
        found = self.repo.blobs([f"{self.target}:{path}" for path in paths])
        return {
            path: (
                data.decode("utf-8", "replace")
                if (data := found[f"{self.target}:{path}"])
                else None
            )
            for path in paths
        }


def words(subject: str) -> list[str]:
    """A subject's words that can name a feature: no PR numbers, tags or commit type."""
    text = re.sub(r"\(#\d+(?:,\s*#\d+)*\)|#\d+|\[[^\]]*\]", " ", subject.lower())
    text = re.sub(r"^[\w-]+(\([^)]*\))?!?:\s", " ", text)
    found = re.findall(r"[a-z0-9]+", text.replace("_", " "))
    return [word for word in found if word not in _COMMON and len(word) > 1]


def identifiers(patch: Patch) -> dict[str, str]:
    """The names the patch's added lines define (and its removed lines do not): name ->
    kind. Test functions count as tests. Read from the raw diff in one pass."""
    added: dict[str, str] = {}
    removed: set[str] = set()
    python = False
    for line in patch.raw.decode("utf-8", "replace").splitlines():
        if line.startswith("diff --git "):
            python = line.endswith(".py")
        elif line[:1] in ("+", "-") and line[:4] not in ("+++ ", "--- "):
            for name, kind in _defined(line[1:], python):
                if line[0] == "-":
                    removed.add(name)
                else:
                    added.setdefault(name, kind)
    return {
        name: kind
        for name, kind in added.items()
        if name not in removed and not name.startswith("__") and len(name.strip("-_")) >= 4
    }


def _defined(line: str, python: bool) -> list[tuple[str, str]]:
    """(name, kind) of what one line of code defines."""
    found = []
    for kind, (needles, pattern) in _IDENTIFIERS.items():
        if kind in ("function", "class", "field") and not python:
            continue
        if not any(needle in line for needle in needles):
            continue
        for name in _matches(pattern, kind, line):
            shown = "test" if kind == "function" and name.startswith("test_") else kind
            found.append((name, shown))
    return found


def _matches(pattern: re.Pattern, kind: str, line: str) -> list[str]:
    if kind in ("flag", "env var"):
        return pattern.findall(line)
    found = pattern.match(line)
    return [found.group(1)] if found else []


# (the colliding commit: sha, subject, what it did), the patch's own conflicts, and whether
# it conflicts on the recorded base too (the patches left off before it are to blame).
Collided = tuple[Optional[tuple[str, str, str]], list[str], bool]


class Triage:
    """The proposals for one run's patches, in series order."""

    def __init__(
        self,
        upstream: Upstream,
        bisector: Optional[Bisector],
        memo_for: Optional[MemoFor] = None,
        elsewhere: Collection[str] = (),
    ) -> None:
        """`memo_for(kind, *key)`: where a result named by everything it depends on is kept
        between commands (each `skip`, `continue` or `retry` triages the run again);
        `elsewhere`: the patches whose diff does not apply on the series' recorded base
        (made on another base), whose history upstream's range does not hold."""
        self.upstream, self.bisector, self.memo_for = upstream, bisector, memo_for
        self.elsewhere = set(elsewhere)
        self._range = [upstream.base, upstream.target, upstream.history]
        self._rarity: Optional[tuple[collections.Counter, int]] = None
        self._lines: dict[str, dict] = {}
        self._common_topics: set[str] = set()

    def _lines_of(self, patch: Patch) -> dict:
        """difflines.file_lines of a patch, parsed once."""
        if patch.name not in self._lines:
            self._lines[patch.name] = file_lines(patch)
        return self._lines[patch.name]

    def judge(
        self,
        rows: list[Row],
        bisect: Optional[Collection[str]] = None,
        later: Sequence[Patch] = (),
    ) -> dict[str, Verdict]:
        """The proposals, by patch name. The git work (the names upstream added, each stopped
        patch's bisection) runs two at a time: it is processes, and they are independent.
        `bisect`: the stopped patches whose colliding commit is asked (None: all); `later`:
        patches with no row yet whose names are asked too, for the memo (a grep of the
        whole tree for a few names costs nearly what one for all of them does, and each
        stop of an apply would ask again)."""
        topics = collections.Counter(_topic(row.patch.subject) for row in rows)
        # A topic more than a third of the series shares ("fork:") names no feature.
        self._common_topics = {t for t, n in topics.items() if t and n * 3 > len(rows)}
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="forkkit-triage") as pool:
            names = pool.submit(self._added_upstream, rows, later)
            collisions = {
                row.patch.name: pool.submit(self._collide_once, row, rows[:position])
                for position, row in enumerate(rows)
                if row.status in STOPPED
                and (bisect is None or row.patch.name in bisect)
                and row.patch.name not in self.elsewhere
            }
            new, at_base, at_target = names.result()
            found = {name: future.result() for name, future in collisions.items()}
        verdicts: dict[str, Verdict] = {}
        for position, row in enumerate(rows):
            fresh = {
                name: kind for name, kind in new[row.patch.name].items() if name not in at_base
            }
            collided = found.get(row.patch.name, (None, [], False))
            verdicts[row.patch.name] = self._judge(
                row, rows[:position], verdicts, fresh, at_target, collided
            )
        return verdicts

    def ask_names(self, patches: Sequence[Patch]) -> None:
        """Ask upstream what judge() will ask for these patches' names, for the memo."""
        self._added_upstream([], patches)

    def ask_stopped(self, row: Row, earlier: list[Row]) -> None:
        """Ask upstream what judge() will ask about a stopped patch, for the memo: the
        commit it collides with, whether upstream has its lines or its feature."""
        self._collide_once(row, earlier)
        if not self._same_lines(row):  # _superseded asks for the feature only then
            self._same_feature(row)

    def _added_upstream(self, rows: list[Row], later: Sequence[Patch]):  # type: ignore[no-untyped-def]
        """(each row's patch's new names, where each is on the base, where on the target
        among those upstream added): asked on the target first, then on the base for those
        found. The names of `later` patches are asked too (for the memo)."""
        named = self._identifiers([row.patch for row in rows], later)
        new = {row.patch.name: named[row.patch.name] for row in rows}
        asked = [n for names in named.values() for n in names]
        found = self._defined(self.upstream.target, asked)
        at_base = self._at_base(found)
        return new, at_base, {name: paths for name, paths in found.items() if name not in at_base}

    def _identifiers(self, patches: Sequence[Patch], later: Sequence[Patch]) -> dict:
        """identifiers() of `patches` and of the `later` patches not among them, by patch
        name: kept in the memo by the patches' bytes (every command of an apply asks for
        the whole series' names: 26 ms of each on the real fork's 11,000 lines of diff)."""
        names = {patch.name for patch in patches}
        asked = [*patches, *(patch for patch in later if patch.name not in names)]
        key = [f"{patch.name}:{hashlib.sha1(patch.raw).hexdigest()}" for patch in asked]
        return self._remembered(
            "identifiers", key, lambda: {patch.name: identifiers(patch) for patch in asked}
        )

    def _at_base(self, found: dict[str, list[str]]) -> set[str]:
        """Which of the names found on the target the base has too. One in a file upstream
        left as it was is there (the same blob); the others are looked for in the base's
        version of the files upstream changed only (on the real fork, a grep of the whole
        base for them all read 66 MB, for names three in five of which such a file holds)."""
        changed = remembered(
            self.memo_for,
            "changed",
            [self.upstream.base, self.upstream.target],
            self.upstream.changed,
            keep=lambda listed: listed is not None,  # git failed: asked again next time
        )
        if changed is None:
            return set(self._defined(self.upstream.base, list(found)))
        upstreams = set(changed)
        there = {name for name, paths in found.items() if not upstreams.issuperset(paths)}
        rest = sorted(set(found) - there)
        return there | set(self._defined(self.upstream.base, rest, changed))

    def _defined(
        self, rev: str, names: Sequence[str], paths: Optional[list[str]] = None
    ) -> dict[str, list[str]]:
        """Upstream.defined, asked only for the names no earlier command asked about at
        `rev` in `paths` (None: all files; a grep of Megatron-LM for a fork's 350 names
        takes about a second; each stop adds a patch's few); where git cannot tell, none
        found this time."""
        if self.memo_for is None:
            return self.upstream.defined(rev, names, paths) or {}
        where = [] if paths is None else [hashlib.sha1("\0".join(paths).encode()).hexdigest()]
        entry = self.memo_for("defined", rev, *where)
        known = entry.load() or {}
        asked, found = set(known.get("asked", [])), dict(known.get("found", {}))
        if fresh := sorted(set(names) - asked):
            answer = self.upstream.defined(rev, fresh, paths)
            if answer is not None:  # a failed grep is asked again next time
                found.update(answer)
                entry.save({"asked": sorted(asked | set(fresh)), "found": found})
        return {name: found[name] for name in names if name in found}

    def _judge(
        self,
        row: Row,
        earlier: list[Row],
        verdicts: dict[str, Verdict],
        fresh: dict[str, str],
        at_target: dict[str, list[str]],
        collided: Collided,
    ) -> Verdict:
        collision, own, left_off = collided
        dropped = [r for r in earlier if verdicts[r.patch.name].proposal == DROP]
        reason = (
            _in_upstream(row)
            or _follows(row, dropped, self._common_topics)
            or _needs_path(row, dropped, self.upstream, self._lines_of)
            or self._superseded(row, fresh, at_target)
        )
        if reason:
            return Verdict(DROP, reason, collision, own)
        if row.status in STOPPED and row.patch.name in self.elsewhere:
            return Verdict(REVIEW, made_elsewhere(row.patch))
        reason = keep_reason(row, collision, own, left_off)
        return Verdict(KEEP, reason, collision, own)

    # -- the colliding commit --------------------------------------------------------------

    def _remembered(self, kind: str, key: Sequence[str], compute: Callable[[], Any]) -> Any:
        return remembered(self.memo_for, kind, key, compute)

    def _collide_once(self, row: Row, earlier: list[Row]) -> Collided:
        """_collide's answer. It depends only on the commits of the patch and of those merged
        before it, whether it is blocked, its conflicts, the files left off before it, the
        base and the target."""
        if self.bisector is None:
            return self._collide(row, earlier)
        applied, theirs = _earlier(row, earlier)
        commits = [self.bisector.commit_of(patch) for patch in (row.patch, *applied)]
        if None in commits:
            return self._collide(row, earlier)
        key = [
            *self._range,
            str(row.status == "blocked"),
            *_counted(commits),  # type: ignore[arg-type]
            *_counted(sorted(row.conflicts)),
            *_counted(sorted(theirs)),
        ]
        collision, own, left_off = self._remembered(
            "collision", key, lambda: self._collide(row, earlier)
        )
        return (tuple(collision) if collision else None), own, left_off

    def _collide(self, row: Row, earlier: list[Row]) -> Collided:
        """The colliding upstream commit and the files the patch conflicts in on its own;
        no commit when it conflicts on the recorded base too, without the patches left off
        before it (their doing, not upstream's: the last value says so)."""
        if self.bisector is None or not self.upstream.related:
            return None, [], False
        applied, theirs = _earlier(row, earlier)
        # A blocked patch's own conflicts are in files the patches it lacks never touch;
        # a dropped one needs none of them (carry/knockon.py): all its conflicts are its own.
        mine = self._conflicts(row, applied)
        own = [path for path in mine if path not in theirs] if row.status == "blocked" else mine
        if (
            own
            and theirs & set(row.patch.touched_paths)
            and self._conflicts_on_base(row, applied, own)
        ):
            return None, own, True
        found = self.bisector.first_colliding(row.patch, applied, own) if own else None
        return ((found.sha, found.subject, found.what) if found else None), own, False

    def _conflicts(self, row: Row, applied: list[Patch]) -> list[str]:
        """The files the patch conflicts in on the target (a blocked one: tried alone)."""
        assert self.bisector is not None
        if row.conflicts and row.status != "blocked":
            return sorted(row.conflicts)
        return sorted(self.bisector.conflicts(row.patch, applied) or [])

    def _conflicts_on_base(self, row: Row, applied: list[Patch], own: list[str]) -> bool:
        assert self.bisector is not None
        before = touching(applied, set(own))
        at_base = self.bisector.conflicts(row.patch, before, self.upstream.base, own)
        return at_base is None or bool(set(at_base) & set(own))

    # -- superseded ------------------------------------------------------------------------

    def _superseded(
        self,
        row: Row,
        fresh: dict[str, str],
        at_target: dict[str, list[str]],
    ) -> Optional[str]:
        return (
            self._same_identifiers(row, fresh, at_target)
            or (row.status in STOPPED and (self._same_lines(row) or self._same_feature(row)))
            or None
        )

    def _same_identifiers(
        self, row: Row, fresh: dict[str, str], at_target: dict[str, list[str]]
    ) -> Optional[str]:
        """Upstream added at least half the names the patch adds (in the patch's own files,
        or three names or more anywhere)."""
        found = [name for name in fresh if name in at_target]
        if not found or len(found) * 2 < len(fresh):
            return None
        own_files = set(row.patch.touched_paths)
        same_file = [name for name in found if own_files & set(at_target[name])]
        if not same_file and len(found) < 3:
            return None
        name = (same_file or found)[0]
        paths = at_target[name]
        added_by = self._remembered(  # a `git log -S` over upstream's range: at every stop
            "adding", [*self._range, name, *paths], lambda: self.upstream.adding(name, paths)
        )
        named = (same_file or found)[:3]  # those in the patch's own files first
        shown = ", ".join(f"{fresh[n]} {n}" for n in named)
        more = f" and {len(found) - len(named)} more" if len(found) > len(named) else ""
        where = f"{added_by[0][:12]} ({added_by[1]})" if added_by else "upstream"
        return (
            f"superseded: {where} adds the same names: {shown}{more} ({len(found)} of {len(fresh)})"
        )

    def _same_lines(self, row: Row) -> Optional[str]:
        """Upstream already has most of the lines the patch adds. It depends on the patch's
        bytes and the target alone, and each stop judges every stopped patch again: kept
        in the memo (the target's files read, the patch parsed, once)."""
        digest = hashlib.sha1(row.patch.raw).hexdigest()
        return self._remembered(
            "same-lines", [self.upstream.target, digest], lambda: self._lines_there(row)
        )

    def _lines_there(self, row: Row) -> Optional[str]:
        lines = {
            path: found.added
            for path, found in self._lines_of(row.patch).items()
            if not found.created
        }
        total = sum(len(added) for added in lines.values())
        if total < 3:
            return None
        texts = self.upstream.texts(sorted(lines))
        there = sum(len(added & present_lines(texts.get(path))) for path, added in lines.items())
        if there < _MOST_LINES * total:
            return None
        return f"superseded: upstream already has {there} of the {total} lines it adds"

    def _same_feature(self, row: Row) -> Optional[str]:
        """An upstream commit touching the patch's files whose subject shares words with the
        patch's that are rare in upstream's history: upstream made the same feature."""
        mine = set(words(row.patch.subject))
        if len(mine) < 2:
            return None
        if self._rarity is None:
            counts, total = self._remembered(
                "word-rarity", [self.upstream.target], self.upstream.word_rarity
            )
            self._rarity = collections.Counter(counts), total
        counts, total = self._rarity
        best: Optional[tuple[float, str, str, list[str]]] = None
        paths = sorted(row.patch.touched_paths)
        touching = self._remembered(
            "subjects", [*self._range, *paths], lambda: self.upstream.subjects_touching(paths)
        )
        for sha, subject in touching:
            shared = sorted(mine & set(words(subject)))
            weight = sum(math.log(total / (1 + counts[word])) for word in shared)
            if len(shared) >= 2 and weight >= _RARE_ENOUGH and (best is None or weight > best[0]):
                best = (weight, sha, subject, shared)
        if best is None:
            return None
        _, sha, subject, shared = best
        return f"superseded: upstream {sha[:12]} ({subject}) makes the same feature ({', '.join(shared)})"


# -- the follow-up rules -------------------------------------------------------------------


def _counted(items: Sequence[str]) -> list[str]:
    """A list's length, then its items: lists laid end to end in a key stay apart."""
    return [str(len(items)), *items]


def _earlier(row: Row, earlier: list[Row]) -> tuple[list[Patch], set[str]]:
    """The patches before this one that applied and touch its files (merged first in a
    probe), and the files of those left off."""
    paths = set(row.patch.touched_paths)
    applied = [
        r.patch for r in earlier if r.status in APPLIED and paths & set(r.patch.touched_paths)
    ]
    missing = {path for r in earlier if r.status in STOPPED for path in r.patch.touched_paths}
    return applied, missing


def _in_upstream(row: Row) -> Optional[str]:
    return f"in upstream: {row.detail}" if row.status == "in upstream" else None


def _follows(row: Row, dropped: list[Row], common: set[str]) -> Optional[str]:
    """It only follows up a patch proposed for drop (`common`: topics too many patches of
    the series share to say anything)."""
    if row.needs is not None and any(r.patch.number == row.needs for r in dropped):
        return f"builds on {row.needs}, proposed for drop"
    for earlier in reversed(dropped):
        if row.status in APPLIED and earlier.status == "in upstream":
            continue  # upstream has that one as it is: a change applied on top still counts
        link = _link(row.patch, earlier.patch, common)
        if link:
            return f"{link}, proposed for drop"
    return None


def _link(patch: Patch, earlier: Patch, common: set[str]) -> Optional[str]:
    """How a patch follows up an earlier one: a fixup or revert of it, naming its pull
    request, or sharing its topic and a file."""
    subject, mine = earlier.subject, patch.message
    fixup = rf"^(fixup|squash|amend)! {re.escape(subject)}|^Revert \"{re.escape(subject)}\""
    if re.search(fixup, mine):
        return f"a fixup or revert of {earlier.number}"
    for pr in _own_pull_requests(subject):
        if pr not in _own_pull_requests(patch.subject) and re.search(rf"#{pr}\b", mine):
            return f"follows up {earlier.number} (#{pr})"
    topic = _topic(subject)
    shared = set(patch.touched_paths) & set(earlier.touched_paths)
    if topic and topic not in common and topic == _topic(patch.subject) and shared:
        return f"follows up {earlier.number} ({topic}:, the same files)"
    return None


def _needs_path(
    row: Row, dropped: list[Row], upstream: Upstream, lines_of: Callable[[Patch], dict]
) -> Optional[str]:
    """Its added lines name a folder or module that only a dropped patch creates."""
    created = {
        path.split("/")[0]: r
        for r in dropped
        for path, found in lines_of(r.patch).items()
        if found.created
    }
    for name in upstream_paths(upstream, sorted(created)):
        created.pop(name.split("/")[0], None)
    if not created:
        return None
    added = "\n".join(
        line[1:]
        for line in row.patch.raw.decode("utf-8", "replace").splitlines()
        if line[:1] == "+" and line[:4] != "+++ "
    )
    for name, owner in sorted(created.items()):
        if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", added):
            return f"needs {name}, which only {owner.patch.number} (proposed for drop) creates"
    return None


def upstream_paths(upstream: Upstream, names: Sequence[str]) -> list[str]:
    """Which of these top-level paths the target has."""
    if not names:
        return []
    out = upstream.repo.run(
        "ls-tree", "--name-only", upstream.target, "--", *names, check=False
    ).stdout
    return out.splitlines()


def _own_pull_requests(subject: str) -> list[str]:
    """The pull requests a subject ends with: "... (#17, #18)"."""
    found = re.search(r"\(((?:#\d+(?:,\s*)?)+)\)\s*$", subject)
    return re.findall(r"#(\d+)", found.group(1)) if found else []


def _topic(subject: str) -> Optional[str]:
    """`dsv4` of "dsv4: ...": a topic, unless it is a commit type (fix, feat, ...)."""
    found = re.match(r"^([\w][\w.-]*):\s", subject)
    if not found or found.group(1).lower() in _TYPES:
        return None
    return found.group(1).lower()


def _short(reason: str) -> str:
    return reason if len(reason) <= 80 else reason[:77] + "..."


def made_elsewhere(patch: Patch) -> str:
    """Why a stopped patch whose diff does not apply on the series' recorded base is up for
    review: keep or drop cannot be told."""
    return (
        "made on another base: its diff does not apply on the series' @base (`rebaser "
        "refresh` keeps a patch the branch left off as it was), so the upstream commit it "
        f"collides with, or whether upstream has it, cannot be told; `rebaser retry "
        f"{patch.number}` brings it onto the branch with its conflict"
    )


def keep_reason(
    row: Row, collision: Optional[tuple[str, str, str]], own: list[str], left_off: bool = False
) -> str:
    """Why keep it: applied (how), blocked (on what, and its own conflicts), a conflict
    with upstream (the commit) or with the patches left off before it (`left_off`)."""
    if row.status in APPLIED:
        return {
            "clean": "applied as it is",
            "offset": "applied as it is (at an offset)",
            "structured merge": "applied: its conflicts were mechanical (structured merge)",
            "resolution replayed": "applied with its recorded resolution",
            "manual": "resolved by hand",
        }.get(row.status, f"applied ({row.status})")
    if row.status == "blocked":
        needs = row.needs or "a patch left off before it"  # not named after a retry's
        if own:
            also = f"; on its own it also conflicts in {', '.join(own)}"
            return f"needs {needs} first{also}" + (
                f" ({_collided(collision)})" if collision else ""
            )
        return f"needs {needs} first; nothing of its own conflicts"
    if left_off:
        return "a conflict with the patches left off before it, not upstream's: resolve after them"
    if collision is None:
        return "a real conflict: resolve by hand"
    _, _, what = collision
    if "moved" in what or "renamed" in what:
        return f"upstream moved the code ({what}): carry the change to its new place"
    return f"a real conflict with {_collided(collision)}: resolve by hand"


def _collided(collision: tuple[str, str, str]) -> str:
    sha, subject, _ = collision
    return f"{sha[:12]} ({subject})"
