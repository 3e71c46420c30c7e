"""A series' own codemods: loaded by path from its codemods folder, run in declared order.

The folder is named by the series' `@codemods DIR`, else `codemods/` beside the series file
is used when it exists. Every `*.py` in it (not starting with `_`) is imported by path; each
`PatchCodemod` subclass it defines is one codemod, known by its NAME. A series without a
folder simply has no codemods.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Optional, Sequence

from rebaser.codemods.anchors import AnchorNotFound
from rebaser.errors import RebaserError

if TYPE_CHECKING:  # LibCST is imported when a codemod is loaded or run, not before
    import libcst as cst

    from rebaser.codemods.base import PatchCodemod


@dataclass(frozen=True)
class Codemods:
    """The codemods a series can name in its Forkkit-Codemod trailers."""

    by_name: dict[str, type[PatchCodemod]]
    folder: Optional[Path] = None

    @property
    def names(self) -> list[str]:
        return self.ordered(sorted(self.by_name))

    def lookup(self, name: str) -> type[PatchCodemod]:
        try:
            return self.by_name[name]
        except KeyError:
            known = ", ".join(sorted(self.by_name))
            raise RebaserError(
                f"unknown codemod {name!r}",
                where=str(self.folder or "the series has no codemods folder"),
                next_step=(
                    f"name one of: {known} in the Forkkit-Codemod trailer"
                    if known
                    else "add a codemods/ folder beside the series (or @codemods DIR), "
                    "or drop the Forkkit-Codemod trailer"
                ),
            ) from None

    def ordered(self, names: Sequence[str]) -> list[str]:
        """`names` with every codemod after those it REQUIRES (given order otherwise kept)."""
        done: list[str] = []

        def visit(name: str, chain: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in chain:
                raise RebaserError(
                    f"codemods require each other in a cycle: {' -> '.join([*chain, name])}",
                    where=str(self.folder),
                )
            for required in self.lookup(name).REQUIRES:
                if required in names:
                    visit(required, (*chain, name))
            done.append(name)

        for name in names:
            visit(name, ())
        return done

    def transform_sources(self, names: Sequence[str], sources: dict[str, str]) -> dict[str, str]:
        """Apply the named codemods to in-memory sources (path -> text); parse each file once.

        A codemod whose requirement is not among `names` needs that requirement's change to
        be in the source already (an earlier patch made it); otherwise it stops, saying so.
        """
        order = self.ordered(names)
        results = dict(sources)
        if not order:
            return results
        import libcst as cst

        for path in dict.fromkeys(self.lookup(name).PATH for name in order):
            tree = cst.parse_module(sources[path])
            for name in order:
                codemod = self.lookup(name)
                if codemod.PATH != path:
                    continue
                for required in codemod.REQUIRES:
                    if required not in order and self._lacks(required, path, tree):
                        raise AnchorNotFound(
                            name, path, f"the change of {required}, which {name} builds on"
                        )
                tree = _instance(codemod).transform_module(tree)
            results[path] = tree.code
        return results

    def run(self, names: Sequence[str], root: Path, *, write: bool) -> list[str]:
        """Run codemods on the files under `root`; return the paths they change (and write them)."""
        paths = list(dict.fromkeys(self.lookup(name).PATH for name in names))
        for name in names:
            path = self.lookup(name).PATH
            if not (root / path).exists():
                raise AnchorNotFound(name, path, f"the file {path} (moved or renamed upstream?)")
        sources = {path: (root / path).read_text(encoding="utf-8") for path in paths}
        results = self.transform_sources(names, sources)
        changed = [path for path in paths if results[path] != sources[path]]
        if write:
            for path in changed:
                (root / path).write_text(results[path], encoding="utf-8")
        return changed

    def _lacks(self, required: str, path: str, tree: cst.Module) -> bool:
        """Whether `tree` (the file at `path`) still lacks the change of `required`."""
        codemod = self.lookup(required)
        if codemod.PATH != path:
            return False  # another file: not seen here, its own codemod run checks it
        return not _instance(codemod).transform_module(tree).deep_equals(tree)


def load_codemods(folder: Optional[Path]) -> Codemods:
    """Import every codemod module in `folder` by path (None: no codemods)."""
    if folder is None:
        return Codemods({})
    if not folder.is_dir():
        raise RebaserError(f"codemods folder {folder} does not exist")
    by_name: dict[str, type[PatchCodemod]] = {}
    for file in sorted(folder.glob("*.py")):
        if file.name.startswith("_"):
            continue
        for codemod in _codemods_in(_import(file, folder)):
            if codemod.NAME in by_name:
                raise RebaserError(
                    f"two codemods are named {codemod.NAME!r}",
                    where=f"{file} and {inspect.getfile(by_name[codemod.NAME])}",
                )
            by_name[codemod.NAME] = codemod
    codemods = Codemods(by_name, folder)
    for codemod in by_name.values():
        for required in codemod.REQUIRES:
            if required not in by_name:
                raise RebaserError(
                    f"codemod {codemod.NAME} requires {required!r}, which {folder} does not have",
                    where=inspect.getfile(codemod),
                )
    codemods.ordered(list(by_name))  # refuse cycles now, not halfway through an apply
    return codemods


def _import(file: Path, folder: Path) -> ModuleType:
    # A package name per folder keeps two series' modules of the same name apart.
    package = "forkkit_codemods_" + hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:12]
    name = f"{package}.{file.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise RebaserError(
            f"cannot load codemod module {file.name}: {type(exc).__name__}: {exc}",
            where=str(file),
            next_step="fix the module (it must import with rebaser installed)",
        ) from exc
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def _codemods_in(module: ModuleType) -> list[type[PatchCodemod]]:
    from rebaser.codemods.base import PatchCodemod

    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, PatchCodemod)
        and value.__module__ == module.__name__
    ]


def _instance(codemod: type[PatchCodemod]) -> PatchCodemod:
    from libcst.codemod import CodemodContext

    return codemod(CodemodContext(filename=codemod.PATH))
