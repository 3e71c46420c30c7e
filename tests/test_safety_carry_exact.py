"""Issue 18: what a fork's commits hold is carried exactly. import -> apply -> refresh keeps
file bytes (non-UTF-8 text and binary files too), commit messages and identities byte for
byte, whatever the user's git configuration says; what cannot be carried is refused by name."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from synthetic import CALC, commit_verbatim, edit, git

from rebaser.errors import ExitCode
from rebaser.repo.git import Git
from rebaser.series.patches import load_series
from rebaser.steps.checks import verify

LATIN_1 = "café naïve\nsecond line\n".encode("latin-1")
LATIN_1_AFTER = "café naïve\nsecond line, changed: ü\n".encode("latin-1")
BINARY = bytes(range(256)) * 4
NAME, EMAIL = "José Núñez", "jose@example.com"
MESSAGES = [
    "naïve café — subject\n\nA body.\n---\nText after a dashed line.\n# a hash line\n",
    # Ends like format-patch's diffstat: text rebaser's own exports (--no-stat) still keep.
    "latin: change the Latin-1 file\n\nand the binary one, in a table:\n---\n file | kind\n"
    " 2 files changed, as the log said\n",
    "calc: a long subject that git folds over several header lines — ünïcode and all, "
    "more words\n\nBody.\n\nCo-authored-by: Zoë <zoe@example.com>\n",
]


def commit_as(repo: Path, message: str, files: dict[str, bytes], date: str) -> str:
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    git(repo, "add", "--all")
    return commit_verbatim(repo, message, author=f"{NAME} <{EMAIL}>", date=date)


@pytest.fixture
def fork(upstream):
    """Branch `fork` on v1: a Latin-1 text file and a binary file added, then changed, and
    messages and an author that are not ASCII."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    files = [
        {"pkg/latin.txt": LATIN_1, "pkg/blob.bin": BINARY},
        {"pkg/latin.txt": LATIN_1_AFTER, "pkg/blob.bin": BINARY[::-1]},
        {"pkg/calc.py": edit(CALC, "a * b", "a * b  # ×").encode()},
    ]
    for number, (message, changed) in enumerate(zip(MESSAGES, files)):
        commit_as(upstream.path, message, changed, f"2026-11-0{number + 2}T10:00:00+0130")
    git(upstream.path, "checkout", "-q", "main")
    return upstream


def imported(rebaser, tmp_path: Path, fork) -> Path:
    target = tmp_path / "series"
    result = rebaser("import", "--repo", fork.path, "--range", "v1..fork", "--series-dir", target)
    assert result.code == ExitCode.OK, result.err
    return target / "series"


def applied_worktree(rebaser, tmp_path: Path, fork, series: Path, *extra: str) -> Path:
    report = tmp_path / "report.json"
    args = ["apply", "--series", series, "--repo", fork.path, "--base", "v1", "--test", "none"]
    result = rebaser(*args, "--json", report, "--force", *extra)
    assert result.code == ExitCode.OK, result.out + result.err
    return Path(json.loads(report.read_text())["worktree"])


def identities(repo: Path, revs: str) -> list[tuple[str, str]]:
    """Each commit's author line and message (without rebaser's identity trailer)."""
    out = git(repo, "log", "--reverse", "--format=%an <%ae> %ad%x00%B%x01", "--date=raw", revs)
    commits = []
    for entry in filter(None, (part.strip("\n") for part in out.split("\x01"))):
        author, message = entry.split("\0")
        kept = [line for line in message.splitlines() if not line.startswith("Forkkit-Patch:")]
        commits.append((author, "\n".join(kept).strip("\n")))
    return commits


@pytest.mark.parametrize("lane", ["fast lane", "--no-fast-lane"])
def test_import_apply_refresh_carries_bytes_and_messages_exactly(rebaser, tmp_path, fork, lane):
    """Cases 2 and 3: a Latin-1 file, a binary file, RFC 2047 subjects and authors, text
    after a `---` line; import -> apply -> refresh round-trips all of them."""
    series = imported(rebaser, tmp_path, fork)
    patches = {p.name: p.read_bytes() for p in series.parent.glob("*.patch")}
    for text in patches.values():
        text.decode("utf-8")  # a series is UTF-8 text, whatever the files it carries hold
    extra = ["--no-fast-lane"] if lane != "fast lane" else []
    worktree = applied_worktree(rebaser, tmp_path, fork, series, *extra)
    assert git(worktree, "rev-parse", "HEAD^{tree}") == git(fork.path, "rev-parse", "fork^{tree}")
    assert (worktree / "pkg/latin.txt").read_bytes() == LATIN_1_AFTER
    start = git(
        fork.path,
        "rev-parse",
        f"refs/forkkit/series-start/{git(worktree, 'branch', '--show-current')}",
    )
    assert identities(worktree, f"{start}..HEAD") == identities(fork.path, "v1..fork")

    check = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert check.code == ExitCode.OK, check.out + check.err
    assert rebaser("refresh", "--series", series, "--repo", worktree).code == ExitCode.OK
    assert {p.name: p.read_bytes() for p in series.parent.glob("*.patch")} == patches


@pytest.mark.parametrize("body", ["body: caf\xe9\n", ""], ids=["subject and body", "subject"])
def test_a_message_git_cannot_spell_as_utf8_is_refused_by_name(rebaser, tmp_path, fork, body):
    """Case 2: what truly cannot be carried (a message in Latin-1 bytes with no encoding
    header: git cannot re-encode it) is refused with the commit named, exit 2."""
    git(fork.path, "checkout", "-q", "fork")
    fork.commit({"pkg/more.py": "M = 1\n"}, "more: a module")
    # git's own commit commands re-encode such bytes; an object written as is keeps them.
    raw = git(fork.path, "cat-file", "commit", "HEAD").split("\n\n", 1)[0].encode()
    raw += f"\n\nbad: caf\xe9 in Latin-1\n\n{body}".encode("latin-1")
    made = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
        cwd=fork.path,
        input=raw,
        capture_output=True,
        check=True,
    )
    git(fork.path, "update-ref", "refs/heads/fork", made.stdout.decode().strip())
    git(fork.path, "checkout", "-q", "main")
    target = tmp_path / "refused"
    result = rebaser("import", "--repo", fork.path, "--range", "v1..fork", "--series-dir", target)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "is not UTF-8" in result.err and "bad: caf" in result.err, result.err
    assert not target.exists()


def test_a_gitattributes_text_diff_on_a_latin1_file_is_refused_by_name(rebaser, tmp_path, fork):
    """Case 2: the fork's checkout may have a .gitattributes that forces a text diff of a
    non-UTF-8 file; that cannot be written into a UTF-8 series: refused, naming the file,
    exit 2."""
    (fork.path / ".gitattributes").write_text("*.txt diff\n")
    target = tmp_path / "refused"
    result = rebaser("import", "--repo", fork.path, "--range", "v1..fork", "--series-dir", target)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "pkg/latin.txt" in result.err and "not UTF-8" in result.err, result.err
    assert not target.exists()


def test_refresh_keeps_an_overlay_file_that_is_not_utf8(rebaser, tmp_path, fork):
    """Case 2: refresh writes the overlay back byte for byte (it read it as text)."""
    series = imported(rebaser, tmp_path, fork)
    overlay = tmp_path / "overlay"
    (overlay / "pkg").mkdir(parents=True)
    (overlay / "pkg" / "legacy.txt").write_bytes(LATIN_1)
    (overlay / "pkg" / "table.bin").write_bytes(BINARY)
    text = series.read_text().replace("@base", "@overlay ../overlay\n@base", 1)
    series.write_text(text)
    worktree = applied_worktree(rebaser, tmp_path, fork, series)
    check = rebaser("refresh", "--series", series, "--repo", worktree, "--check")
    assert check.code == ExitCode.OK, check.out + check.err
    (worktree / "pkg" / "legacy.txt").write_bytes(LATIN_1_AFTER)
    git(worktree, "commit", "-qam", "legacy: changed on the branch")
    assert rebaser("refresh", "--series", series, "--repo", worktree).code == ExitCode.OK
    assert (overlay / "pkg" / "legacy.txt").read_bytes() == LATIN_1_AFTER
    assert (overlay / "pkg" / "table.bin").read_bytes() == BINARY


def test_a_file_with_crlf_line_ends_is_carried_and_verified(rebaser, tmp_path, upstream):
    """A fork file with Windows line ends (a .bat, say) is carried byte for byte; the
    `git diff --check` verification does not call its CRs trailing whitespace (exit 4)."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    windows = b"@echo off\r\nrem carried as is\r\n"
    commit_as(
        upstream.path,
        "tools: a Windows script\n",
        {"tools/run.bat": windows},
        "2026-11-02T10:00:00+0130",
    )
    git(upstream.path, "checkout", "-q", "main")
    series = imported(rebaser, tmp_path, upstream)
    worktree = applied_worktree(rebaser, tmp_path, upstream, series)
    assert (worktree / "tools/run.bat").read_bytes() == windows


def test_whitespace_the_fork_itself_added_does_not_fail_verification(rebaser, tmp_path, upstream):
    """A fork commit with trailing whitespace failed verification (exit 4) when carried byte
    for byte onto its own base (a review, on the real fork): whitespace the patches add is
    the fork's, kept as it is; only whitespace the carry brings fails the check."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    commit_as(
        upstream.path,
        "pkg: a constant, with a trailing blank\n",
        {
            "pkg/const.py": b"ANSWER = 42   \nNAME = 'x'\n",
            # and a review's harder cases: a colon and a non-ASCII letter in a name, a CRLF
            # line with trailing spaces, a blank line at the end
            "pkg/a:b.txt": b"colon  \n",
            "pkg/caf\xc3\xa9.txt": b"accent  \n",
            "tools/run.bat": b"echo one  \r\n",
            "pkg/last.txt": b"last\n\n",
        },
        "2026-11-02T10:00:00+0100",
    )
    git(upstream.path, "checkout", "-q", "main")
    series = imported(rebaser, tmp_path, upstream)
    worktree = applied_worktree(rebaser, tmp_path, upstream, series)
    report = json.loads((tmp_path / "report.json").read_text())
    (whitespace,) = [c for c in report["checks"] if c["name"] == "git diff --check"]
    assert whitespace["ok"], whitespace
    assert whitespace["detail"] == "no whitespace errors but the patches' own (5)", whitespace

    # Trailing whitespace on the branch that no patch has fails it, and only that is named.
    (worktree / "pkg/const.py").write_bytes(b"ANSWER = 42   \nNAME = 'x'  \n")
    git(worktree, "commit", "-qam", "pkg: whitespace no patch has")
    checks = verify(Git(worktree), git(upstream.path, "rev-parse", "v1"), load_series(series))
    (whitespace,) = [c for c in checks if c.name == "git diff --check"]
    assert not whitespace.ok and whitespace.problems == ["pkg/const.py:2: trailing whitespace."]
