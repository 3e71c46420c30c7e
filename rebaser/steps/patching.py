"""Apply one patch: exactly (perhaps at an offset), else 3-way, else by its codemod.

Never with fuzz: a fuzzy apply can put a hunk in the wrong place and still "succeed".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rebaser.codemods import AnchorNotFound, Codemods
from rebaser.git import Git
from rebaser.records import StepStatus
from rebaser.series import Patch
from rebaser.steps.hunks import HunkReport, failing_hunks

_OFFSET_RE = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")


@dataclass
class PatchOutcome:
    status: StepStatus
    detail: str = ""
    offsets: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    hunks: list[HunkReport] = field(default_factory=list)
    anchor: Optional[AnchorNotFound] = None

    @property
    def applied(self) -> bool:
        return self.status != StepStatus.FAILED


def apply_patch(
    worktree: Git, patch: Patch, *, base_objects: Optional[Path], codemods: Codemods
) -> PatchOutcome:
    """Change the worktree's index and files as the patch says; nothing is committed here.

    `base_objects` is the object folder of the repository the series was exported from: it
    holds the patch's preimage blobs, which a 3-way apply needs.
    """
    patch_file = str(patch.path)
    check = worktree.run("apply", "--check", "--verbose", "--index", patch_file, check=False)
    if check.ok:
        worktree.run("apply", "--index", "--whitespace=nowarn", patch_file)
        offsets = [
            f"hunk {n} at line {line} (offset {delta:+d})"
            for n, line, delta in (
                (int(a), int(b), int(c)) for a, b, c in _OFFSET_RE.findall(check.stderr)
            )
        ]
        return PatchOutcome(
            StepStatus.OFFSET if offsets else StepStatus.CLEAN, "; ".join(offsets), offsets=offsets
        )

    env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(base_objects)} if base_objects else None
    merged = worktree.run(
        "apply", "--3way", "--index", "--whitespace=nowarn", patch_file, env=env, check=False
    )
    if merged.ok:
        return PatchOutcome(
            StepStatus.THREE_WAY, "context drifted; merged with the series' base blobs"
        )
    conflicts = worktree.unmerged_paths()
    _reset(worktree)
    reason = (
        "3-way merge conflicts in " + ", ".join(conflicts)
        if conflicts
        else _first_error(merged.stderr)
    )

    hunks = failing_hunks(worktree, patch.path, conflicts)
    if patch.codemod is None:
        _leave_for_user(worktree, patch_file, env, conflicts)
        return PatchOutcome(
            StepStatus.FAILED,
            f"{reason}; the patch names no codemod",
            conflicts=conflicts,
            hunks=hunks,
        )
    try:
        changed = codemods.run([patch.codemod], worktree.path, write=True)
    except AnchorNotFound as missing:
        _leave_for_user(worktree, patch_file, env, conflicts)
        return PatchOutcome(
            StepStatus.FAILED,
            f"{reason}; codemod {patch.codemod}: {missing}",
            conflicts=conflicts,
            hunks=hunks,
            anchor=missing,
        )
    if not changed:
        return PatchOutcome(
            StepStatus.IN_UPSTREAM,
            f"{reason}; codemod {patch.codemod} found the change already there",
        )
    worktree.run("add", "--", *changed)
    return PatchOutcome(
        StepStatus.CODEMOD, f"{reason}; codemod {patch.codemod} changed {', '.join(changed)}"
    )


def _reset(worktree: Git) -> None:
    # The worktree was clean before this patch (the engine checks), so this loses nothing.
    worktree.run("reset", "--quiet", "--hard", "HEAD")
    worktree.run("clean", "--quiet", "-d", "--force")


def _leave_for_user(
    worktree: Git, patch_file: str, env: Optional[dict], conflicts: list[str]
) -> None:
    """Leave the most useful partial state: conflict markers, else applied hunks + .rej files."""
    if conflicts:
        worktree.run(
            "apply", "--3way", "--index", "--whitespace=nowarn", patch_file, env=env, check=False
        )
    else:
        worktree.run("apply", "--reject", "--whitespace=nowarn", patch_file, check=False)


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith("error:"):
            return line[len("error:") :].strip()
    return stderr.strip().splitlines()[-1] if stderr.strip() else "git apply failed"
