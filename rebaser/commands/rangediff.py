"""What a refresh changed in the series, as `git range-diff` shows it (and as Markdown).

The new series is the branch's commits. The old one is rebuilt from the patch files before
refresh overwrites them: each patch's own commit on the series' `@base`, as an apply builds
them (carry/replay.py: one fast-import, or `git apply --cached` in a temporary index; no
worktree). A PyPI base is read from the release cache through alternates, never downloaded
here; those commits are then left unreferenced, for git's gc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from rebaser.errors import RebaserError
from rebaser.repo.git import Git
from rebaser.series.patches import Series
from rebaser.carry.replay import Replay
from rebaser.upstream import RecordedBase, pypi_cache

_PAIR_RE = re.compile(r"^\s*(\d+|-):\s+(?:[0-9a-f]+|-+) ([=!<>]) \s*(\d+|-):\s+(?:[0-9a-f]+|-+) ")
_STATUS = {"=": "unchanged", "!": "changed", "<": "removed", ">": "added"}


@dataclass(frozen=True)
class PairRow:
    old: Optional[str]  # patch file name in the old series
    new: Optional[str]  # ... in the new one
    status: str  # unchanged | changed | removed | added


@dataclass
class RangeDiff:
    rows: list[PairRow] = field(default_factory=list)
    text: str = ""  # git range-diff's own output
    note: str = ""  # why there is no range-diff, when there is none

    @property
    def changed(self) -> bool:
        return any(row.status != "unchanged" for row in self.rows)


def range_diff(git: Git, old: Series, new: list[tuple[str, str]], start: str) -> RangeDiff:
    """`new` is the branch's (sha, patch file name) after the series start commit `start`."""
    if old.base is None:
        return RangeDiff(note="no range-diff: the series names no @base to rebuild it on")
    base = _old_base(git, old.base)
    if base is None:
        return RangeDiff(note=f"no range-diff: the series' @base {old.base} is not available here")
    if not new:  # git range-diff refuses an empty range, with its usage text
        return RangeDiff(note="no range-diff: the branch holds none of the patches")
    base_sha, env = base
    new_tip = new[-1][0]
    try:
        old_tip = _commit_series(git, old, base_sha, env)
        result = git.run(
            "range-diff", "--no-color", f"{base_sha}..{old_tip}", f"{start}..{new_tip}", env=env
        )
    except _DoesNotApply as failed:
        return RangeDiff(note=f"no range-diff: {failed} does not apply exactly on @base {old.base}")
    except RebaserError as error:  # the summary is extra: refresh itself goes on
        return RangeDiff(note=f"no range-diff: {error.what.splitlines()[0]}")
    old_names = [patch.name for patch in old.patches]
    new_names = [name for _, name in new]
    rows = []
    for line in result.stdout.splitlines():
        if match := _PAIR_RE.match(line):
            before, sign, after = match.groups()
            rows.append(
                PairRow(
                    old_names[int(before) - 1] if before != "-" else None,
                    new_names[int(after) - 1] if after != "-" else None,
                    _STATUS[sign],
                )
            )
    return RangeDiff(_paired_by_name(rows), result.stdout)


def _paired_by_name(rows: list[PairRow]) -> list[PairRow]:
    """git pairs commits by how alike their diffs are, so a patch reworked at its stop can
    read removed, then added, or be paired with another patch. A patch file of the same
    name on both sides is the same patch (its Forkkit-Patch trailer): paired with itself
    first, where the new series has it; git's pairing stands for the rest (a renamed patch)."""
    both = {row.old for row in rows} & {row.new for row in rows} - {None}
    paired = []
    for row in rows:
        if row.new in both:
            same = row.old == row.new and row.status == "unchanged"
            paired.append(PairRow(row.new, row.new, "unchanged" if same else "changed"))
        elif row.new is not None and row.old in both:
            paired.append(PairRow(None, row.new, "added"))
        elif row.old not in both:
            paired.append(row)
        if row.new in both and row.old not in both | {None}:  # git paired it with another
            paired.append(PairRow(row.old, None, "removed"))
    return paired


def to_markdown(diff: RangeDiff, title: str) -> str:
    """A pull-request description: one row per patch, then git range-diff's output."""
    lines = [f"### {title}", ""]
    if diff.note:
        return "\n".join([*lines, diff.note, ""])
    counts = {status: sum(r.status == status for r in diff.rows) for status in _STATUS.values()}
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items() if n) + ".")
    lines += ["", "| old patch | new patch | |", "|---|---|---|"]
    lines += [f"| {r.old or '—'} | {r.new or '—'} | {r.status} |" for r in diff.rows]
    if diff.changed:
        lines += ["", "<details><summary>git range-diff</summary>", "", "```diff"]
        lines += [diff.text.rstrip("\n"), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


class _DoesNotApply(Exception):
    pass


def _old_base(git: Git, base: RecordedBase) -> Optional[tuple[str, Optional[dict[str, str]]]]:
    """The @base commit and, for a PyPI release, the environment that lets git read it."""
    if base.commit is not None:
        sha = git.rev_parse(base.commit)
        return (sha, None) if sha else None
    spec = base.release
    if spec is None or spec.version is None:
        return None
    cache = pypi_cache(spec.package)
    release = cache.cached(spec.version)
    if release is None:
        return None
    if git.rev_parse(release.sha):
        return release.sha, None  # the branch lives in the cache repository itself
    return release.sha, {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(cache.repo_dir / "objects")}


def _commit_series(git: Git, series: Series, base: str, env: Optional[dict[str, str]]) -> str:
    """The old series as commits on `base` (Replay, as an apply builds them); the last one.
    Remembered under refs/forkkit/replay/ unless its objects come through alternates."""
    replay = Replay(Git(git.path, env=env), base, series.patches, remember=env is None)
    commits = [replay.commit_of(patch) for patch in series.patches]
    if None in commits:
        raise _DoesNotApply(series.patches[commits.index(None)].name)
    return commits[-1]  # type: ignore[return-value]
