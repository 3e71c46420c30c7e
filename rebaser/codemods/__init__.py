"""One LibCST codemod per patch of the series, named in the patch's Forkkit-Codemod trailer.

`run_codemods` groups codemods by file, parses each file once, applies them in order and
writes back only what changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import libcst as cst

from rebaser.codemods.base import AnchorNotFound, PatchCodemod
from rebaser.codemods.config_fields import ConfigFields
from rebaser.codemods.config_validation import ConfigValidation
from rebaser.codemods.indexer_loss import IndexerLoss
from rebaser.codemods.topk_dispatch import TopkDispatch
from rebaser.errors import RebaserError

CODEMODS: dict[str, type[PatchCodemod]] = {
    codemod.NAME: codemod for codemod in (ConfigFields, ConfigValidation, TopkDispatch, IndexerLoss)
}


def lookup(name: str) -> type[PatchCodemod]:
    try:
        return CODEMODS[name]
    except KeyError:
        raise RebaserError(
            f"unknown codemod {name!r}",
            next_step=f"name one of: {', '.join(sorted(CODEMODS))} in the Forkkit-Codemod trailer",
        ) from None


def transform_sources(names: Sequence[str], sources: dict[str, str]) -> dict[str, str]:
    """Apply the named codemods to in-memory sources (path -> text); parse each file once."""
    results = dict(sources)
    for path in dict.fromkeys(lookup(name).PATH for name in names):
        tree = cst.parse_module(sources[path])
        for name in names:
            codemod = lookup(name)
            if codemod.PATH == path:
                tree = codemod().transform_module(tree)
        results[path] = tree.code
    return results


def run_codemods(names: Sequence[str], root: Path, *, write: bool) -> list[str]:
    """Run codemods on the files under `root`; return the paths they change (and write them)."""
    paths = list(dict.fromkeys(lookup(name).PATH for name in names))
    for name in names:
        path = lookup(name).PATH
        if not (root / path).exists():
            raise AnchorNotFound(name, path, f"the file {path} (moved or renamed upstream?)")
    sources = {path: (root / path).read_text(encoding="utf-8") for path in paths}
    results = transform_sources(names, sources)
    changed = [path for path in paths if results[path] != sources[path]]
    if write:
        for path in changed:
            (root / path).write_text(results[path], encoding="utf-8")
    return changed


__all__ = [
    "AnchorNotFound",
    "CODEMODS",
    "PatchCodemod",
    "lookup",
    "run_codemods",
    "transform_sources",
]
