"""The patch series: `patches/series` (a quilt-style list) and its git-format patches.

Series file syntax, one item a line, `#` starts a comment:

    @name dsa-topk                          the series' name (branch names use it)
    @base pypi:megatron-core==0.19.2        the upstream the patches were exported against
    @overlay ../megatron_overlay            new files laid before the patches (mirrors upstream)
    @codemods codemods                      the series' codemods (default: codemods/ if present)
    @upstream-test tests/unit_tests/...     an upstream test file to run (when the base has it)
    @fork-test tests/unit_tests/...         a test file of the fork's own (its commits added or
                                            changed it; `rebaser import` lists them): run in
                                            the patched tree, judged against the fork's branch
    @test-requires torch                    a module the tests import (checked before applying)
    0001-config-fields.patch                a patch, applied in file order

Each patch is `git format-patch` output. Its message may carry trailers:

    Forkkit-Codemod: config_fields          the codemod that makes the same change by meaning
    Forkkit-Symbol: path::Qual.name         a symbol that must exist after the series
    Forkkit-Symbol: path::func(param)       ... a function that must take `param`
    Forkkit-Symbol: path::Qual.func->callee ... a function that must call `callee`
    Forkkit-Symbol: A | B                   ... one of several shapes (upstream generations)

The commit an apply makes for a patch carries `Forkkit-Patch: <file name>`, its identity:
`refresh` writes each commit back to the file it came from, whatever was skipped or dropped.
"""

from __future__ import annotations

import email.errors
import email.header
import email.parser
import email.utils
import io
import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Optional

import unidiff

from rebaser.codemods import Codemods, load_codemods
from rebaser.series.confinement import check_inside, check_records, overlay_files
from rebaser.errors import RebaserError
from rebaser.upstream import RecordedBase

_DIRECTIVES = (
    "name",
    "base",
    "overlay",
    "codemods",
    "upstream-test",
    "fork-test",
    "test-requires",
)
_LISTS = ("upstream-test", "fork-test", "test-requires")  # may be given several times
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PATCH_TRAILER = "Forkkit-Patch"
SERIES_TRAILER = "Forkkit-Series"  # on the overlay commit: the series a branch is made from
# How rebaser's exports begin (--zero-commit): their subjects and messages are kept as they
# are (they have no [PATCH] prefix and no diffstat, --keep-subject --no-stat).
_OWN_EXPORT = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
_TRAILER_LINE_RE = re.compile(r"^[A-Za-z0-9-]+: ")
# @name becomes part of a branch name: one path component git accepts.
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SYMBOL_RE = re.compile(
    r"^(?P<path>[^:\s]+)::(?P<qualname>[A-Za-z_][\w.]*)"
    r"(?:\((?P<param>[A-Za-z_]\w*)\)|->(?P<calls>[A-Za-z_][\w.]*))?$"
)


@dataclass(frozen=True)
class SymbolSpec:
    """A symbol a patch promises: a name, a parameter of a function, or a call it makes.

    `A | B`: the symbol takes one of several shapes, one per upstream generation the series
    serves (a hook that sits in different functions); one of them must exist.
    """

    path: str
    qualname: str
    param: Optional[str] = None
    calls: Optional[str] = None
    alternatives: tuple["SymbolSpec", ...] = ()

    @classmethod
    def parse(cls, text: str, *, where: str) -> "SymbolSpec":
        first, *others = [cls._parse_shape(part, where) for part in text.split("|")]
        return replace(first, alternatives=tuple(others))

    @classmethod
    def _parse_shape(cls, text: str, where: str) -> "SymbolSpec":
        match = _SYMBOL_RE.match(text.strip())
        if not match:
            raise RebaserError(
                f"malformed Forkkit-Symbol {text.strip()!r}",
                where=where,
                next_step="write it as path::Qual.name, path::func(param) or path::func->callee"
                " (alternatives separated by ' | ')",
            )
        return cls(**match.groupdict())

    @property
    def shapes(self) -> tuple["SymbolSpec", ...]:
        return (replace(self, alternatives=()), *self.alternatives)

    def __str__(self) -> str:
        if self.alternatives:
            return " | ".join(str(shape) for shape in self.shapes)
        tail = f"({self.param})" if self.param else f"->{self.calls}" if self.calls else ""
        return f"{self.path}::{self.qualname}{tail}"


@dataclass(frozen=True)
class FileChange:
    path: str
    hunks: int


@dataclass
class Patch:
    """One git-format patch of the series."""

    name: str
    path: Path
    subject: str
    body: str
    author: str
    date: str
    files: list[FileChange]
    codemod: Optional[str] = None
    symbols: list[SymbolSpec] = field(default_factory=list)
    entry: str = ""  # its line in the series (a path from the series' folder); else `name`

    @property
    def message(self) -> str:
        """The commit message: the patch's own, plus its identity trailer."""
        own = f"{self.subject}\n\n{self.body}\n" if self.body else f"{self.subject}\n"
        return with_identity(own, self.name)

    @cached_property
    def raw(self) -> bytes:
        """The patch file's bytes, read once (an apply reads them several times)."""
        return self.path.read_bytes()

    @property
    def person(self) -> tuple[str, str]:
        """The author as git takes it: name (the address when none is given), email."""
        name, _, address = self.author.rpartition(" <")
        address = address.removesuffix(">")
        return name or address, address

    @property
    def touched_paths(self) -> list[str]:
        return [change.path for change in self.files]

    @property
    def number(self) -> str:
        """`0011` for 0011-fix-things.patch: how people name patches of a series."""
        return number_of(self.name)

    @classmethod
    def load(cls, path: Path, entry: Optional[str] = None) -> "Patch":
        where = str(path)
        try:  # lines end at "\n" only: a diff's lines may hold a "\r" of their file's
            exact = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RebaserError(
                f"the patch is not UTF-8 (byte {exc.start}: {exc.reason})",
                where=where,
                next_step="re-export it as UTF-8 (`rebaser refresh` writes UTF-8)",
            ) from exc
        text = exact.replace("\r\n", "\n").replace("\r", "\n")  # the message: as read_text
        header, _, rest = text.partition("\n\n")
        diff_at = rest.find("diff --git ")
        if not header.startswith("From ") or diff_at < 0:
            raise RebaserError(
                "not a git-format patch (no 'From ' header or no 'diff --git' section)",
                where=where,
                next_step="export patches with `rebaser refresh` (git format-patch format)",
            )
        # The default policy is compat32: headers as written, nothing decoded.
        headers = email.parser.Parser().parsestr(header + "\n")
        if not headers.get("From") or not headers.get("Subject"):
            raise RebaserError("patch has no From: or Subject: header", where=where)
        subject = _header(headers["Subject"], where)
        body = rest[:diff_at]
        if not header.startswith(_OWN_EXPORT):  # format-patch's prefix and diffstat
            subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
            body = _message_of(body)
        body = body.strip("\n")
        try:
            patch_set = parsed_diff(exact, hunks_only=True)
        except unidiff.UnidiffParseError as exc:
            raise RebaserError(f"cannot parse the diff: {exc}", where=where) from exc
        files = [
            FileChange(
                path=_strip_prefix(
                    patched.source_file if patched.is_removed_file else patched.target_file
                ),
                hunks=len(patched),
            )
            for patched in patch_set
        ]
        if not files:
            raise RebaserError("patch changes no file", where=where)
        codemods = _trailers(body, "Forkkit-Codemod")
        if len(codemods) > 1:
            raise RebaserError("patch names more than one Forkkit-Codemod", where=where)
        return cls(
            name=path.name,
            path=path,
            subject=subject,
            body=body,
            author=_author(headers["From"], where),
            date=_header(headers.get("Date", ""), where),
            files=files,
            codemod=codemods[0] if codemods else None,
            symbols=[
                SymbolSpec.parse(spec, where=where) for spec in _trailers(body, "Forkkit-Symbol")
            ],
            entry=entry or path.name,
        )


def parsed_diff(text: str, hunks_only: bool = False) -> unidiff.PatchSet:
    """unidiff's reading of a patch, its lines ending at "\n" only (unidiff splits a string
    at every line end Python knows, "\r" included, which a file's own lines may hold).
    `hunks_only`: each hunk's header checked against its lines, but no line kept (a third
    of the time: every command loads the whole series)."""
    return unidiff.PatchSet(io.StringIO(text, newline="\n"), metadata_only=hunks_only)


@dataclass
class Series:
    """The ordered patches plus the series-level settings."""

    file: Path
    name: str
    base: Optional[RecordedBase]
    overlay_dir: Optional[Path]
    upstream_tests: list[str]
    patches: list[Patch]
    test_requires: list[str] = field(default_factory=list)
    codemods_dir: Optional[Path] = None
    fork_tests: list[str] = field(default_factory=list)

    @cached_property
    def codemods(self) -> Codemods:
        """The codemods the patches may name, loaded from `codemods_dir` on first use."""
        return load_codemods(self.codemods_dir)

    @property
    def patches_dir(self) -> Path:
        return self.file.parent

    def overlay_files(self) -> list[str]:
        """Overlay paths relative to the upstream root, sorted."""
        return overlay_files(self.overlay_dir) if self.overlay_dir else []

    def overlay_tests(self) -> list[str]:
        return [path for path in self.overlay_files() if Path(path).name.startswith("test_")]

    @classmethod
    def load(cls, file: Path) -> "Series":
        if file.is_dir() and (file / "series").is_file():
            raise RebaserError(
                f"{file} is a folder", next_step=f"pass its series file: --series {file / 'series'}"
            )
        if not file.is_file():
            raise RebaserError(
                f"series file not found: {file}",
                next_step="pass --series PATH to a patches/series file",
            )
        listing = _Listing.read(file)
        overlay_dir = _folder(file, listing.settings, "overlay")
        codemods_dir = _folder(file, listing.settings, "codemods")
        if codemods_dir is None and (file.parent / "codemods").is_dir():
            codemods_dir = (file.parent / "codemods").resolve()
        if overlay_dir is not None:
            overlay_files(overlay_dir)  # refuses symlinks and .git entries before any work
        # and records that are not plain files (a patch's records go by its file's name)
        check_records(file.parent, [Path(name).name for name in listing.names])
        return cls(
            file=file.resolve(),
            name=valid_series_name(listing.settings.get("name", file.parent.name), str(file)),
            base=listing.base,
            overlay_dir=overlay_dir,
            upstream_tests=listing.lists["upstream-test"],
            patches=[Patch.load(file.parent / name, name) for name in listing.names],
            test_requires=listing.lists["test-requires"],
            codemods_dir=codemods_dir,
            fork_tests=listing.lists["fork-test"],
        )


@dataclass
class _Listing:
    """What a series file says: its directives, and its patch files in order."""

    folder: Path
    settings: dict[str, str] = field(default_factory=dict)
    lists: dict[str, list[str]] = field(default_factory=lambda: {key: [] for key in _LISTS})
    names: list[str] = field(default_factory=list)
    base: Optional[RecordedBase] = None

    @classmethod
    def read(cls, file: Path) -> "_Listing":
        listing = cls(file.parent)
        for number, raw in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if line.startswith("@"):
                listing._directive(line, where=f"{file}:{number}")
            elif line:
                listing._patch(line, where=f"{file}:{number}")
        if not listing.names:
            raise RebaserError("the series lists no patches", where=str(file))
        return listing

    def _directive(self, line: str, *, where: str) -> None:
        key, _, value = line[1:].partition(" ")
        value = value.strip()
        if key not in _DIRECTIVES:
            raise RebaserError(
                f"unknown series directive @{key}",
                where=where,
                next_step=f"use one of: {', '.join('@' + d for d in _DIRECTIVES)}",
            )
        if not value:
            raise RebaserError(f"@{key} needs a value", where=where)
        if self.names:
            raise RebaserError(
                f"@{key} after the first patch",
                where=where,
                next_step="put directives at the top of the series file",
            )
        if key in ("upstream-test", "fork-test") and not _inside_tree(value):
            raise RebaserError(
                f"@{key} names a path outside the tree: {value!r}",
                where=where,
                next_step="write it relative to the tree's root, without '..'",
            )
        if key == "test-requires" and not _MODULE_RE.match(value):
            raise RebaserError(
                f"@test-requires takes one importable module name; got {value!r}", where=where
            )
        if key in self.lists:
            self.lists[key].append(value)
            return
        if key in self.settings:
            raise RebaserError(f"@{key} given twice", where=where)
        self.settings[key] = value
        if key == "base":
            self.base = RecordedBase.parse(value)
            if self.base is None:
                raise RebaserError(
                    f"@base {value} is neither a commit nor a release",
                    where=where,
                    next_step="write it as git:<sha> or pypi:megatron-core==X",
                )

    def _patch(self, line: str, *, where: str) -> None:
        if len(line.split()) != 1:
            raise RebaserError(
                f"unexpected text in series line: {line!r}",
                where=where,
                next_step="list one patch file name per line (options are not supported)",
            )
        check_inside(self.folder, line, what="patch entry", where=where)
        name = os.path.normpath(line)
        if name in self.names:
            raise RebaserError(f"patch {name} listed twice", where=where)
        # A patch's file name is its identity (trailers, records, steps): one patch each.
        if (twin := _same_file_name(self.names, name)) is not None:
            raise RebaserError(
                f"patches {twin} and {name} have the same file name; a patch is known by its "
                "file name (its commit's trailer, its resolution records)",
                where=where,
                next_step="rename one of them",
            )
        if not (self.folder / name).is_file():
            raise RebaserError(
                f"patch file {name} not found next to the series file",
                where=where,
                next_step="fix the name or add the patch file",
            )
        self.names.append(name)


def number_of(name: str) -> str:
    """`0011` for the file name 0011-fix-things.patch (the name itself if it has none)."""
    head = name.split("-", 1)[0]
    return head if head.isdigit() else name


def _inside_tree(path: str) -> bool:
    return not path.startswith("/") and ".." not in Path(path).parts


def is_test_file(path: str) -> bool:
    """A file pytest collects by default (test_*.py or *_test.py)."""
    name = Path(path).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _same_file_name(names: list[str], name: str) -> Optional[str]:
    """The listed patch whose file name is `name`'s, if any."""
    return next((other for other in names if Path(other).name == Path(name).name), None)


# A branch name's component, a ref file's name and a worktree folder's name: well under
# the 255 bytes a file name may have, with room for what rebaser puts around it.
NAME_LIMIT = 100


def valid_series_name(name: str, where: str) -> str:
    """@name becomes part of a branch name: refuse what git (or the file system) would not
    take, before anything is made."""
    if len(name) > NAME_LIMIT:
        raise RebaserError(
            f"series name {name[:20]}... is too long ({len(name)} characters; at most "
            f"{NAME_LIMIT}): it names branches, refs and folders",
            where=where,
            next_step="give the series a shorter @name",
        )
    if not _NAME_RE.match(name) or ".." in name or name.endswith((".", ".lock")):
        raise RebaserError(
            f"series name {name!r} cannot be part of a branch name",
            where=where,
            next_step="use letters, digits, '-', '_' and single dots in @name",
        )
    return name


def _folder(file: Path, settings: dict[str, str], key: str) -> Optional[Path]:
    """The folder a directive names, relative to the series file (None when not given)."""
    if key not in settings:
        return None
    folder = (file.parent / settings[key]).resolve()
    if not folder.is_dir():
        raise RebaserError(f"@{key} folder {folder} does not exist", where=str(file))
    return folder


def _header(value: str, where: str) -> str:
    """A mail header as git format-patch writes it, as it was in the commit: unfolded (git
    folds before a space, which stays) and its RFC 2047 encoded words decoded."""
    unfolded = re.sub(r"\r?\n(?=[ \t])", "", str(value)).strip()
    try:
        return "".join(
            part.decode(charset or "ascii") if isinstance(part, bytes) else part
            for part, charset in email.header.decode_header(unfolded)
        )
    except UnicodeDecodeError as exc:
        raise RebaserError(
            f"the patch's header {unfolded[:60]!r} is not {exc.encoding.upper()} once decoded",
            where=where,
            next_step="re-export the patch (`rebaser refresh` writes UTF-8)",
        ) from None
    except (LookupError, email.errors.HeaderParseError) as exc:
        raise RebaserError(
            f"the patch's header {unfolded[:60]!r} cannot be decoded: {exc}",
            where=where,
            next_step="re-export the patch (`rebaser refresh` writes UTF-8)",
        ) from None


def readable_header(value: str) -> str:
    """A header for a message: decoded as far as it can be (U+FFFD for what cannot)."""
    unfolded = re.sub(r"\r?\n(?=[ \t])", "", value).strip()
    try:
        parts = email.header.decode_header(unfolded)
    except email.errors.HeaderParseError:
        return unfolded
    return "".join(
        part.decode("utf-8", "replace") if isinstance(part, bytes) else part for part, _ in parts
    )


def _author(value: str, where: str) -> str:
    """`Name <email>` from a From: header (an RFC 822 quoted or RFC 2047 encoded name)."""
    name, address = email.utils.parseaddr(re.sub(r"\r?\n(?=[ \t])", "", str(value)))
    if not address:
        raise RebaserError(f"the patch's From: {value!r} names no address", where=where)
    return f"{_header(name, where)} <{address}>"


# What git format-patch writes between the message and the diff, unless --no-stat (rebaser's
# exports): a `---` line, then the diffstat.
_STAT_LINE_RE = re.compile(
    r"^( .* \| .*| \d+ files? changed.*| (create|delete) mode .*| rename .*| mode change .*"
    r"| copy .*|)$"
)


_SUMMARY_RE = re.compile(r"^ \d+ files? changed")


def _message_of(part: str) -> str:
    """The commit message in the text between a patch's headers and its diff: all of it,
    `---` lines included, unless it ends with a `---` line followed by a diffstat."""
    head, separator, stat = ("\n" + part).rpartition("\n---\n")
    lines = stat.strip("\n").splitlines()
    if (
        separator
        and lines
        and any(_SUMMARY_RE.match(line) for line in lines)
        and all(_STAT_LINE_RE.match(line) for line in lines)
    ):
        return head[1:]
    return part


def _strip_prefix(path: str) -> str:
    """A path as a diff header names it, without git's quoting and its a/ or b/ prefix."""
    if len(path) > 1 and path.startswith('"') and path.endswith('"'):
        path = unquote_path(path[1:-1]).decode("utf-8", errors="surrogateescape")
    return path[2:] if path.startswith(("a/", "b/")) else path


_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}


def unquote_path(text: str) -> bytes:
    """git's C-style quoting undone: `caf\\303\\251.py` is café.py (octal escapes are bytes)."""
    raw = bytearray()
    position = 0
    while position < len(text):
        char = text[position]
        escaped = text[position + 1 : position + 2]
        if char == "\\" and escaped.isdigit():
            raw.append(int(text[position + 1 : position + 4], 8))
            position += 4
        elif char == "\\" and escaped in _ESCAPES:
            raw.append(_ESCAPES[escaped])
            position += 2
        else:
            raw += char.encode()
            position += 1
    return bytes(raw)


def _trailers(body: str, key: str) -> list[str]:
    prefix = f"{key}:"
    return [line[len(prefix) :].strip() for line in body.splitlines() if line.startswith(prefix)]


def with_identity(message: str, name: str) -> str:
    """`message` with one `Forkkit-Patch: <name>` trailer, in its trailer block if it has one."""
    message = strip_identity(message)
    paragraphs = message.rstrip("\n").split("\n\n")
    last = paragraphs[-1].splitlines()
    in_block = len(paragraphs) > 1 and all(_TRAILER_LINE_RE.match(line) for line in last)
    return message.rstrip("\n") + ("\n" if in_block else "\n\n") + f"{PATCH_TRAILER}: {name}\n"


def strip_identity(message: str) -> str:
    """The inverse of with_identity: `message` without its `Forkkit-Patch:` trailers."""
    lines = message.splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(f"{PATCH_TRAILER}:")]
    if len(kept) == len(lines):
        return message
    return "".join(kept).rstrip("\n") + "\n"


def identity(message: str) -> Optional[str]:
    """The patch file a commit was made from (its `Forkkit-Patch:` trailer), if it says."""
    names = _trailers(message, PATCH_TRAILER)
    return names[-1] if names else None


def series_named(message: str) -> Optional[str]:
    """The series an overlay commit was laid for (its `Forkkit-Series:` trailer), if it says."""
    names = _trailers(message, SERIES_TRAILER)
    return names[-1] if names else None


def load_series(file: Path) -> Series:
    """Load and validate a series; malformed input raises a RebaserError (exit code 2)."""
    try:
        return Series.load(file)
    except UnicodeDecodeError as exc:
        raise RebaserError(f"series or patch is not UTF-8: {exc}", where=str(file)) from exc
