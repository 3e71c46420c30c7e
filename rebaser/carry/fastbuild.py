"""The series' own commits in one `git fast-import`, when the repository has every blob.

A patch exported with full blob ids names its preimage and postimage blobs in its `index`
lines. When every postimage blob is already in the repository (a series imported from, or
refreshed against, a fork in it), each patch's commit is only a tree edit: no `git apply`,
no index, no `commit-tree` per patch. Two checks keep that honest:

- the preimage blob a patch names must be the one its recorded base holds (the tree is
  followed in Python from one `git ls-tree` of the base);
- the commits' own diffs (one `git diff-tree --stdin`) must be the patches' diffs byte for
  byte, so a hand-edited patch whose `index` line went stale is caught.

Where either fails the commits stop before that patch, and Replay builds the rest with
`git apply` as before. The commits are the same objects Replay's commit_tree would make.

A patch made on another base (`refresh` keeps one the branch left off as it was) gets a
commit from its blobs alone (from_blobs), as `git am -3` merges with them.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from typing import Optional

from rebaser.series.export import EXPORT_CONFIG, DIFF_FLAGS
from rebaser.repo.git import FORKKIT_IDENTITY, Git, commit_tree
from rebaser.series.patches import Patch
from rebaser.carry.rawdiff import ABSENT, FileDiff, diff_section, parse_diff

Tree = dict[str, tuple[str, str]]  # path -> (mode, blob id)


@dataclass(frozen=True)
class _Edit:
    patch: Patch
    identity: tuple[str, str]  # author, date (also the committer's date)
    files: list[FileDiff]
    modes: dict[str, str]  # the mode each created or changed path gets


def build_commits(repo: Git, base_sha: str, patches: list[Patch], refs: list[str]) -> list[str]:
    """Commits for the longest prefix of `patches` that can be built this way, the last one
    under its ref in `refs` (it keeps the chain below it); the rest is left to git apply."""
    edits = _edits(repo, base_sha, patches)
    if not edits:
        return []
    commits = _fast_import(repo, base_sha, edits, refs[len(edits) - 1])
    good = _matching_diffs(repo, commits, [edit.patch for edit in edits])
    if good < len(commits):  # the ref names the last good commit, or nothing
        moved = f"delete {refs[len(edits) - 1]}\n"
        if good:
            moved += f"update {refs[good - 1]} {commits[good - 1]}\n"
        repo.run("update-ref", "--stdin", stdin=f"start\n{moved}commit\n".encode())
    return commits[:good]


def _edits(repo: Git, base_sha: str, patches: list[Patch]) -> list[_Edit]:
    """The patches, in order, whose preimages match the tree they apply to."""
    listing = repo.run("ls-tree", "-r", "-z", "--full-tree", base_sha).stdout
    tree: Tree = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, sha = meta.split()
        tree[path] = (mode, sha)
    edits = []
    for patch in patches:
        files = parse_diff(patch.raw)
        identity = _identity(patch)
        if files is None or identity is None:
            break
        modes = _follow(tree, files)
        if modes is None:
            break
        edits.append(_Edit(patch, identity, files, modes))
    wanted = {diff.new_blob for edit in edits for diff in edit.files if not diff.deleted}
    present = blobs_present(repo, wanted)
    for position, edit in enumerate(edits):
        if any(not diff.deleted and diff.new_blob not in present for diff in edit.files):
            return edits[:position]
    return edits


def _follow(tree: Tree, files: list[FileDiff]) -> Optional[dict[str, str]]:
    """Apply the patch's blob changes to `tree`; None (tree untouched) when a preimage
    is not what the tree holds."""
    for diff in files:
        held = tree.get(diff.path)
        if (held is None) != diff.created or (held and held[1] != diff.old_blob):
            return None
    modes = {}
    for diff in files:
        if diff.deleted:
            del tree[diff.path]
            continue
        mode = diff.new_mode or tree[diff.path][0]
        if mode not in ("100644", "100755"):
            return None  # symlinks and submodules: left to git apply (tree not yet changed)
        modes[diff.path] = mode
    for diff in files:
        if not diff.deleted:
            tree[diff.path] = (modes[diff.path], diff.new_blob)
    return modes


def from_blobs(repo: Git, base_sha: str, patch: Patch, index: dict[str, str]) -> Optional[str]:
    """A commit whose diff is the patch's, for a patch whose preimages the base does not
    hold: its parent is the base's tree with the preimage blobs the patch names over it,
    so a cherry-pick merges each file with its preimage as the merge base. None where the
    repository lacks a blob it names or its diff comes out otherwise (a mode change, a
    stale `index` line). `index`: the environment naming a private index file."""
    files = parse_diff(patch.raw)
    named = {blob for diff in files or [] for blob in (diff.old_blob, diff.new_blob)} - {ABSENT}
    if not files or blobs_present(repo, named) != named:
        return None
    if not repo.run("read-tree", base_sha, env=index, check=False).ok:
        return None
    trees = []
    for before in (True, False):
        entries = _index_info(files, before)
        if not repo.run(
            "update-index", "-z", "--index-info", stdin=entries, env=index, check=False
        ).ok:
            return None  # e.g. a file where the base has a folder
        trees.append(repo.out("write-tree", env=index))
    person, date = patch.person, patch.date
    message = f"recorded base of {patch.name}\n"
    parent = commit_tree(repo, trees[0], [base_sha], message, author=person, date=date)
    commit = commit_tree(repo, trees[1], [parent], patch.message, author=person, date=date)
    return commit if _matching_diffs(repo, [commit], [patch]) == 1 else None


def _index_info(files: list[FileDiff], before: bool) -> bytes:
    """The patch's files before or after it, as `update-index -z --index-info` sets them
    (mode 0 removes one)."""
    entries = []
    for diff in files:
        blob = diff.old_blob if before else diff.new_blob
        if blob == ABSENT:
            entries.append(f"0 {'0' * 40}\t{diff.path}\0")
        else:
            entries.append(f"{diff.new_mode or '100644'} {blob}\t{diff.path}\0")
    return "".join(entries).encode()


def blobs_present(repo: Git, shas: set[str]) -> set[str]:
    if not shas:
        return set()
    query = "".join(f"{sha}\n" for sha in sorted(shas)).encode()
    answer = repo.run("cat-file", "--batch-check", stdin=query).stdout
    return {line.split()[0] for line in answer.splitlines() if line.split()[1:2] == ["blob"]}


def _identity(patch: Patch) -> Optional[tuple[str, str]]:
    """The author as fast-import wants it (`Name <email>`, raw date `<epoch> <zone>`), or
    None when the patch's From: or Date: cannot be written so."""
    name, address = patch.person
    parsed = email.utils.parsedate_tz(patch.date) if patch.date else None
    if parsed is None or parsed[9] is None or any(c in name + address for c in "<>\n"):
        return None
    offset = parsed[9]
    zone = f"{'-' if offset < 0 else '+'}{abs(offset) // 3600:02d}{abs(offset) % 3600 // 60:02d}"
    return f"{name or address} <{address}>", f"{email.utils.mktime_tz(parsed)} {zone}"


def _fast_import(repo: Git, base_sha: str, edits: list[_Edit], ref: str) -> list[str]:
    """The commits, in one fast-import that writes one ref (`ref`, the last commit) and says
    each commit's id on its output (`get-mark`): no file per commit beside the objects."""
    committer_name, committer_email = FORKKIT_IDENTITY
    stream = bytearray()
    for mark, edit in enumerate(edits, start=1):
        author, date = edit.identity
        message = edit.patch.message.encode()
        stream += f"commit {ref}\nmark :{mark}\nauthor {author} {date}\n".encode()
        stream += f"committer {committer_name} <{committer_email}> {date}\n".encode()
        stream += f"data {len(message)}\n".encode() + message + b"\n"
        stream += f"from {base_sha if mark == 1 else f':{mark - 1}'}\n".encode()
        for diff in edit.files:
            path = diff.path.encode()
            if diff.deleted:
                stream += b"D " + path + b"\n"
            else:
                stream += f"M {edit.modes[diff.path]} {diff.new_blob} ".encode() + path + b"\n"
        stream += b"\n"
    stream += "".join(f"get-mark :{mark}\n" for mark in range(1, len(edits) + 1)).encode()
    stream += b"done\n"
    # A pack as written: by default fast-import explodes a pack of under 100 objects into
    # loose ones in a child process, which took most of its time.
    out = repo.run(
        "-c",
        "fastimport.unpackLimit=0",
        "fast-import",
        "--quiet",
        "--done",
        "--force",
        stdin=bytes(stream),
    ).stdout
    return out.split()


def _matching_diffs(repo: Git, commits: list[str], patches: list[Patch]) -> int:
    """How many commits, from the first, have exactly their patch's diff."""
    query = "".join(f"{sha}\n" for sha in commits).encode()
    output = repo.output_bytes(
        *EXPORT_CONFIG, "diff-tree", "--stdin", "-p", *DIFF_FLAGS, stdin=query
    )
    starts = []
    cursor = 0
    for sha in commits:
        cursor = output.find(f"{sha}\n".encode(), cursor)
        starts.append(cursor)
    ends = [*starts[1:], len(output)]
    for position, (patch, start, end) in enumerate(zip(patches, starts, ends)):
        own = output[start + len(commits[position]) + 1 : end]
        if start < 0 or own != diff_section(patch.raw):
            return position
    return len(commits)
