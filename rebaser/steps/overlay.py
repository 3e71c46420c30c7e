"""The first step of an apply: lay the overlay's new files and commit them."""

from __future__ import annotations

from rebaser.series.confinement import write_new_file
from rebaser.series.patches import SERIES_TRAILER
from rebaser.repo.git import Git
from rebaser.steps.records import StepResult, StepRow, StepStatus, Stop, StopPhase
from rebaser.steps.step import StepContext
from rebaser.repo import refs
from rebaser.repo.git import commit_tree
from rebaser.wording import counted

OVERLAY_STEP = "overlay"


class OverlayStep:
    """Copy the overlay in and commit it. The commit is made even with no files: it marks
    where the series starts on the branch (a ref names it; refresh and the overlay tests
    look for it)."""

    name = OVERLAY_STEP
    patch = None

    def run(self, context: StepContext) -> StepResult:
        series, worktree = context.series, context.worktree
        files = series.overlay_files()
        clashes = _in_tree(worktree, files)
        if clashes:
            detail = (
                "upstream now has files at overlay paths (compare them with the overlay's, "
                "merge by hand and commit): " + ", ".join(clashes)
            )
            row = StepRow(OVERLAY_STEP, StepStatus.FAILED, detail, clashes)
            return StepResult(row, context.head, Stop(StopPhase.APPLY, OVERLAY_STEP, detail))
        for path in files:
            write_new_file(worktree.path, path, (series.overlay_dir / path).read_bytes())  # type: ignore[operator]
        if files:
            worktree.run("add", "--", *files)
        source = (
            f"New files from {series.overlay_dir.name}/" if series.overlay_dir else "No overlay"
        )
        subject = f"{refs.OVERLAY_SUBJECT} ({len(files)} files)"
        message = (
            f"{subject}\n\n{source}, laid by dsa-forkkit.\n\n{SERIES_TRAILER}: {series.name}\n"
        )
        # The commit `git commit` would make, in two processes fewer: the index's tree (the
        # base's, with no overlay), and the branch moved with the series-start ref beside it.
        tree = worktree.out("write-tree") if files else "HEAD^{tree}"
        first = series.patches[0]  # its author and date: the same series gives the same commit
        sha = commit_tree(worktree, tree, ["HEAD"], message, author=first.person, date=first.date)
        refs.start_series(worktree, context.branch, sha, f"commit: {subject}")
        return StepResult(
            StepRow(OVERLAY_STEP, StepStatus.LAID, counted(len(files), "file"), files), sha
        )


def _in_tree(worktree: Git, paths: list[str]) -> list[str]:
    """The paths HEAD's tree has (a file or a folder): asked of git, as the worktree's files
    may not be written yet."""
    if not paths:
        return []
    listing = worktree.run(
        "ls-tree", "-z", "--name-only", "HEAD", "--", *paths, env={"GIT_LITERAL_PATHSPECS": "1"}
    ).stdout
    return sorted(set(filter(None, listing.split("\0"))) & set(paths))
