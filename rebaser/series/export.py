"""The stable patch export shared by `refresh` and `import`.

The export is stable and minimal, as Electron's patch tooling does it: no commit hashes
(zero-commit), no diffstat, no signature, no numbering, full blob ids (3-way merges need
them) and fixed diff options whatever the user's git config says. The author date travels
with each patch through apply, so re-exporting an unchanged series is byte-identical and a
changed one differs only where it changed.

A patch's identity (its file name) travels in a `Forkkit-Patch:` trailer on the commit an
apply makes; the exported file never carries it (the file name is the identity there).

A series is UTF-8 text, and what it carries is carried byte for byte: a file whose content
is not UTF-8 (Latin-1 text, say, which git would write raw into the diff) is exported as a
binary patch, which git applies exactly. What still cannot be written as UTF-8 (a message
git cannot re-encode, a text diff the repository's own attributes insist on) is refused
with the commit and file named, never replaced by U+FFFD.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Callable, Iterator

from rebaser.errors import RebaserError
from rebaser.repo import tempdirs
from rebaser.repo.git import Git, commit_tree
from rebaser.series.patches import PATCH_TRAILER, readable_header, strip_identity, unquote_path

# The diff itself (also how fastbuild compares a commit with its patch)...
DIFF_FLAGS = (
    "--full-index",
    "--binary",
    "--no-renames",
    "--no-color",
    "--diff-algorithm=myers",
    "--unified=3",
)
# ... and the mail around it.
_EXPORT_FLAGS = (
    "--stdout",
    "--zero-commit",
    "--no-signature",
    "--no-stat",
    "--keep-subject",
    "--no-numbered",
    "--no-thread",
    "--encoding=UTF-8",
    # what format.to/cc/headers/attach add, config cannot take back: the flags do
    "--no-to",
    "--no-cc",
    "--no-add-header",
    "--no-attach",
    *DIFF_FLAGS,
)
_FROM_LINE_RE = re.compile(r"^From 0{40} Mon Sep 17 00:00:00 2001\nFrom: ", re.MULTILINE)
EXPORT_CONFIG = ("-c", "format.signOff=false", "-c", "core.quotePath=true")


def export_patch(git: Git, sha: str) -> str:
    """One commit as a stable git-format patch, without its `Forkkit-Patch:` trailer."""
    raw = git.output_bytes("log", "-1", "--format=%B", sha)
    check_message(raw.decode("utf-8", "replace"), sha[:12])
    if f"{PATCH_TRAILER}:".encode() in raw:
        message = _utf8(raw, lambda: (f"the message of commit {sha[:12]}", _REWORD))
        sha = _without_identity(git, sha, strip_identity(message))
    return _format_patch(git, "-1", sha)


def export_range(git: Git, base: str, tip: str) -> str:
    """Every non-empty commit of base..tip exported as export_patch would, in one call
    (trailers left in: the caller re-exports the commits that carry one)."""
    return _format_patch(git, f"{base}..{tip}")


# What `git apply` takes for the start of a diff wherever it stands, the message included.
_DIFF_START_RE = re.compile(r"^(diff --git |--- .*\n\+\+\+ .*\n@@ -)", re.MULTILINE)


def check_message(message: str, commit: str) -> None:
    """Refuse (exit 2, naming the commit) a message that quotes a diff: in a patch file it
    cannot be told from the patch's own (`git apply` applies the quoted one too, `git am`
    cuts the message there)."""
    if (found := _DIFF_START_RE.search(message)) is not None:
        subject = message.split("\n", 1)[0]
        raise RebaserError(
            f"the message of commit {commit} ({subject!r}) quotes a diff (the line "
            f"{found.group(0).splitlines()[0]!r}), which a patch file cannot hold apart from "
            "the patch's own diff",
            next_step="indent the quoted diff in that message (git commit --amend, git rebase "
            "-i), then run again",
        )


_SECTION_RE = re.compile(rb"^(?=diff --git |From 0{40} )", re.MULTILINE)


def _format_patch(git: Git, *revs: str) -> str:
    """format-patch's output as text; the files that are not UTF-8 as binary patches."""
    command = (*EXPORT_CONFIG, "format-patch", *revs, *_EXPORT_FLAGS)
    out = git.output_bytes(*command)
    sections = _SECTION_RE.split(out)
    not_utf8 = [_path_of(part) for part in sections if part.startswith(b"diff") and _bad(part)]
    if not_utf8:
        with _binary_attributes(not_utf8) as attributes:
            out = git.output_bytes("-c", f"core.attributesFile={attributes}", *command)
    return _utf8(out, lambda: _what_is_not_utf8(out))


def _bad(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _path_of(section: bytes) -> bytes:
    """The path a `diff --git a/P b/P` section is about (no renames: both sides name it)."""
    header = section.split(b"\n", 1)[0][len(b"diff --git ") :].decode("ascii", "replace")
    if header.startswith('"'):  # git's C quoting (core.quotePath): up to the closing quote
        end = re.match(r'"(?:[^"\\]|\\.)*"', header)
        return unquote_path(header[1 : end.end() - 1] if end else header[1:])[2:]
    return header[2 : 2 + (len(header) - 5) // 2].encode()


@contextlib.contextmanager
def _binary_attributes(paths: list[bytes]) -> Iterator[Path]:
    """An attributes file that makes git diff these paths as binary (each anchored at the
    top, glob characters escaped, C-quoted as git reads a quoted pattern)."""
    lines = b"".join(b'"/' + _quoted(_glob_escaped(path)) + b'" -diff\n' for path in paths)
    with tempdirs.owned("forkkit-attributes-") as folder:
        (folder / "attributes").write_bytes(lines)
        yield folder / "attributes"


def _glob_escaped(path: bytes) -> bytes:
    return re.sub(rb"([*?\[\\])", rb"\\\1", path)


def _quoted(path: bytes) -> bytes:
    out = bytearray()
    for byte in path:
        if byte in b'"\\':
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte >= 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out)


def _what_is_not_utf8(out: bytes) -> tuple[str, str]:
    """The part of an export that is not UTF-8 (a file of a patch, or its message), and
    what to do about it."""
    subject = "?"
    for part in _SECTION_RE.split(out):
        if part.startswith(b"From "):
            found = re.search(rb"^Subject: (.*(?:\n .*)*)", part, re.MULTILINE)
            subject = readable_header(found.group(1).decode("ascii", "replace")) if found else "?"
        if not _bad(part):
            continue
        if part.startswith(b"diff"):
            file = _path_of(part).decode("utf-8", "backslashreplace")
            return (
                f"the diff of {file} in the commit {subject!r}",
                "the repository's attributes force a text diff of that file: drop that "
                ".gitattributes rule (or mark the file `-diff`), then run again",
            )
        return f"the message of the commit {subject!r}", _REWORD
    return "the export", _REWORD


_REWORD = (
    "reword that commit's message in UTF-8 (git commit --amend, git rebase -i), then run again"
)


def _utf8(data: bytes, what: Callable[[], tuple[str, str]]) -> str:
    """`data` as text, or a refusal naming what is not UTF-8 (exit 2)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        part, next_step = what()
        raise RebaserError(
            f"{part} is not UTF-8; a series is UTF-8 text, and rebaser carries bytes exactly "
            "or not at all",
            next_step=next_step,
        ) from None


def split_patches(stream: str) -> list[str]:
    """format-patch --stdout output, one text per patch (each starts with its From line);
    the blank line git puts between two patches belongs to neither."""
    starts = [match.start() for match in _FROM_LINE_RE.finditer(stream)]
    ends = [start - 1 for start in starts[1:]] + [len(stream)]
    return [stream[a:b] for a, b in zip(starts, ends)]


def patch_file_name(number: int, subject: str) -> str:
    """`NNNN-<slug of the subject>.patch`, the subject's `area:` prefix left out."""
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower().split(":", 1)[-1]).strip("-")[:48]
    return f"{number:04d}-{slug or 'patch'}.patch"


def _without_identity(git: Git, sha: str, message: str) -> str:
    """The same commit (tree, parents, author) with `message`."""
    fields = git.out("log", "-1", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%P", sha)
    name, email, date, parents = fields.split("\0")
    # "@": git reads a raw date under 10^8 seconds (before 1973-03-03) as no date without it
    return commit_tree(
        git, f"{sha}^{{tree}}", parents.split(), message, author=(name, email), date=f"@{date}"
    )
