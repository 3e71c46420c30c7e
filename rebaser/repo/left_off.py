"""The patches an apply left off its branch (dropped, blocked, skipped), recorded beside the
branch as a ref to a small blob, so that `refresh` keeps them in the series (they still need
work) while a patch that is `in upstream` leaves it."""

from __future__ import annotations

from rebaser.repo.git import Git

PREFIX = "refs/forkkit/left-off"


def ref_name(branch: str) -> str:
    return f"{PREFIX}/{branch}"


def record(git: Git, branch: str, patches: dict[str, str]) -> None:
    """`patches`: file name → status, for every patch the branch lacks and still needs."""
    ref = ref_name(branch)
    if not patches:
        git.run("update-ref", "-d", ref, check=False)
        return
    text = "".join(f"{name}\t{status}\n" for name, status in patches.items())
    blob = git.run("hash-object", "-w", "--stdin", stdin=text.encode()).stdout.strip()
    git.run("update-ref", ref, blob)


def read(git: Git, branch: str) -> dict[str, str]:
    shown = git.run("cat-file", "blob", ref_name(branch), check=False)
    if not shown.ok:
        return {}
    return dict(line.split("\t", 1) for line in shown.stdout.splitlines() if "\t" in line)
