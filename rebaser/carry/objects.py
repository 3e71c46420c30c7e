"""Many git objects read in one process: `git cat-file --batch`, parsed by size."""

from __future__ import annotations

from typing import Optional, Sequence

from rebaser.repo.git import Git


def read(git: Git, names: Sequence[str]) -> dict[str, Optional[bytes]]:
    """Each object name (`<sha>`, `<commit>:<path>`) -> its bytes when it is a blob, else
    None (missing, or not a blob)."""
    if not names:
        return {}
    unique = list(dict.fromkeys(names))
    out = git.output_bytes("cat-file", "--batch", stdin="".join(f"{n}\n" for n in unique).encode())
    found: dict[str, Optional[bytes]] = {}
    cursor = 0
    for name in unique:
        end = out.index(b"\n", cursor)
        header = out[cursor:end].split()
        cursor = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            found[name] = out[cursor : cursor + size]
            cursor += size + 1
        else:
            found[name] = None
            if len(header) == 3:  # another kind of object: its content follows too
                cursor += int(header[2]) + 1
    return found
